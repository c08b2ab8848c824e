"""Export: every event of a collection, oldest first, exactly as signed, and re-publishable.

Each exported line is checked twice: with tms.nostr.events, and independently with nothing but
hashlib, json and coincurve, the way any Nostr library would.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from coincurve import PublicKeyXOnly
from factories import (
    MEMBER,
    MEMBER2,
    NOW,
    OWNER,
    OWNER2,
    T0,
    EventDict,
    claim,
    contradiction,
    create_database,
    drop_database,
    evidence,
    ids,
    link,
    members,
    profile,
    signed,
    terms,
)
from publishing import publish, readable

from tms.ledger.access import Access
from tms.ledger.read.export import Exporter
from tms.ledger.service import Ledger
from tms.nostr.events import Event as EnvelopeEvent
from tms.rules.publish import MAX_BATCH
from tms.store.database import open_pool

pytestmark = pytest.mark.anyio

UNICODE_TEXT = (
    "Ünïcödé évidence — «guillemets», “curly” and 'straight' quotes, \"escaped\" ones, a\\b.\n"
    "中文：组胺不耐受。العربية: عدم تحمل الهيستامين. עברית: אי סבילות להיסטמין.\n"  # noqa: RUF001
    "Emoji 🧪🧬 👩‍🔬 (ZWJ), combining e\u0301, ﬁ ligature, soft\u00adhyphen, nbsp\u00a0here,\t"
    "line\u2028separator, paragraph\u2029separator, NEL\u0085, DEL\u007f, US\u001f, "
    "BMP-edge \uffff."
)
PROFILE_TAGS = [
    ["t", "ünïcode 🧪"],
    ["p", MEMBER.pubkey, "wss://relay.example.org", "pét name"],
    ["alt", 'quote " backslash \\ newline \n tab \t nul \x00 end'],
    ["e"],
    [],
]


def verify_independently(line: str) -> dict[str, Any]:
    """NIP-01 with plain tools: recompute the id, check the BIP-340 signature."""
    obj = json.loads(line)
    assert set(obj) == {"id", "pubkey", "created_at", "kind", "tags", "content", "sig"}
    commitment = [0, obj["pubkey"], obj["created_at"], obj["kind"], obj["tags"], obj["content"]]
    data = json.dumps(commitment, separators=(",", ":"), ensure_ascii=False)
    assert hashlib.sha256(data.encode("utf-8")).hexdigest() == obj["id"]
    key = PublicKeyXOnly(bytes.fromhex(obj["pubkey"]))
    assert key.verify(bytes.fromhex(obj["sig"]), bytes.fromhex(obj["id"]))
    return obj


async def export(ledger: Ledger, slug: str) -> list[str]:
    return [
        line
        async for line in Exporter(ledger.pool).lines(await readable(Exporter(ledger.pool), slug))
    ]


def as_file(lines: list[str]) -> bytes:
    return "".join(f"{line}\n" for line in lines).encode("utf-8")


async def publish_in_chunks(ledger: Ledger, events: list[EventDict], size: int = MAX_BATCH) -> None:
    for start in range(0, len(events), size):
        chunk = events[start : start + size]
        result = await publish(ledger, *chunk)
        assert result["accepted"] == ids(chunk)
        assert result["skipped"] == []


async def build_lab(ledger: Ledger, bulk: int = 0) -> tuple[list[EventDict], list[EventDict]]:
    """Publish a collection "lab" (owner OWNER, writer MEMBER, silent member MEMBER2) among
    other collections' events. Returns every event in publish order, and the ones lab's export
    holds: lab's own, plus the terms and profiles of the keys that wrote in lab."""
    await ledger.approve([OWNER.pubkey, OWNER2.pubkey])
    owner_profile = profile(
        OWNER,
        "Ówner 🧪",
        tags=PROFILE_TAGS,
        about="human; 研究者\nsecond line",
        lud16="owner@example.org",
    )
    doc = evidence(
        MEMBER,
        "lab",
        UNICODE_TEXT,
        title="Ünïcode — a review",
        url="https://example.org/ü?q=1&r=2",
        source="Журнал",
    )
    c1 = claim(MEMBER, "lab", "Histamine intolerance … 组胺不耐受 🧬")
    # Signed as a client that escapes non-ASCII and puts spaces after separators: stored and
    # exported as that exact string, never re-serialized.
    c2 = signed(MEMBER, 4702, json.dumps({"collection": "lab", "text": "Ésćaped, spaced"}))
    batches = [
        [terms(OWNER), owner_profile, members(OWNER, "lab", [MEMBER.pubkey, MEMBER2.pubkey])],
        [terms(OWNER2), profile(OWNER2, "other owner"), claim(OWNER2, "other", "Not in lab.")],
        [terms(MEMBER), profile(MEMBER, "bot", about="agent"), terms(MEMBER2)],
        [profile(MEMBER2, "lurker"), claim(OWNER, "mine", "Owner, elsewhere.")],
        [
            doc,
            c1,
            c2,
            link(MEMBER, "lab", doc["id"], c1["id"], "“CURLY” and 'straight' quotes"),
            link(MEMBER, "lab", doc["id"], c1["id"], "组胺不耐受", relation="QUALIFIES"),
            contradiction(OWNER, "lab", [c1["id"], c2["id"]], reason="Они не могут обе быть 🤷"),  # noqa: RUF001
        ],
        [profile(OWNER, "Owner, renamed", created_at=T0 + 60)],
        [members(OWNER, "lab", [MEMBER.pubkey], created_at=T0 + 120)],
    ]
    batches.append([claim(OWNER, "lab", f"bulk claim {i} — №{i}") for i in range(bulk)])
    everything: list[EventDict] = []
    for batch in batches:
        if batch:
            await publish_in_chunks(ledger, batch)
            everything += batch
    writers = {OWNER.pubkey, MEMBER.pubkey}
    expected = [
        e
        for e in everything
        if _collection(e) == "lab" or (e["kind"] in (0, 4706) and e["pubkey"] in writers)
    ]
    return everything, expected


def _collection(event: EventDict) -> str | None:
    return json.loads(event["content"]).get("collection")


@pytest.fixture
async def second_ledger(pg_server_url: str, template_url: str) -> AsyncIterator[Ledger]:
    """A second fresh database on the same server, copied from the session's template."""
    url = await create_database(pg_server_url, template_url, "tms_export")
    pool = await open_pool(url, min_size=1, max_size=2)
    try:
        yield Ledger(pool)
    finally:
        await pool.close()
        await drop_database(pg_server_url, url)


async def test_export_is_oldest_first_exactly_as_stored(ledger: Ledger) -> None:
    _, expected = await build_lab(ledger)
    lines = await export(ledger, "lab")
    assert [json.loads(line)["id"] for line in lines] == ids(expected)
    stored = {r["id"]: r for r in await ledger.pool.fetch("SELECT id, content, tags FROM events")}
    for line, event in zip(lines, expected, strict=True):
        assert "\n" not in line and "\r" not in line
        obj = json.loads(line)
        assert obj == event  # every field, the content string exactly as signed
        assert obj["content"] == stored[obj["id"]]["content"]
        assert line == json.dumps(event, separators=(",", ":"), ensure_ascii=False)
    # The escaped, spaced content went out as it came in.
    spaced = '{"collection": "lab", "text": "\\u00c9s\\u0107aped, spaced"}'
    assert spaced in [json.loads(line)["content"] for line in lines]
    # Authors' terms and profiles are in (all of them, old and new), nobody else's.
    unscoped = [(e["pubkey"], e["kind"]) for e in expected if e["kind"] in (0, 4706)]
    assert unscoped == [
        (OWNER.pubkey, 4706),
        (OWNER.pubkey, 0),
        (MEMBER.pubkey, 4706),
        (MEMBER.pubkey, 0),
        (OWNER.pubkey, 0),
    ]
    exported_keys = {json.loads(line)["pubkey"] for line in lines}
    assert exported_keys == {OWNER.pubkey, MEMBER.pubkey}  # not OWNER2, not silent MEMBER2


async def test_export_of_an_unknown_collection_is_empty(ledger: Ledger) -> None:
    await build_lab(ledger)
    assert await export(ledger, "nope") == []
    other = await export(ledger, "other")
    assert [json.loads(line)["pubkey"] for line in other] == [OWNER2.pubkey] * 3


async def test_every_exported_line_verifies_on_its_own(ledger: Ledger) -> None:
    _, expected = await build_lab(ledger)
    lines = await export(ledger, "lab")
    # A JSON Lines file splits on "\n" only (U+2028, U+0085 and friends stay inside lines).
    *split, last = as_file(lines).decode("utf-8").split("\n")
    assert last == ""  # the last line ends with "\n" too
    for line in split:
        EnvelopeEvent.from_json(line).verify()
    exported = [verify_independently(line) for line in split]
    assert exported == expected  # lab's events and its writers' terms and profiles, in order
    # the awkward ones among them came through whole
    assert [obj["tags"] for obj in exported if obj["tags"]] == [PROFILE_TAGS]
    texts = [json.loads(obj["content"])["text"] for obj in exported if obj["kind"] == 4701]
    assert texts == [UNICODE_TEXT]


async def test_round_trip_reproduces_the_export_byte_for_byte(
    ledger: Ledger, second_ledger: Ledger
) -> None:
    _, expected = await build_lab(ledger, bulk=MAX_BATCH + 50)
    first = as_file(await export(ledger, "lab"))
    events = [json.loads(line) for line in first.decode("utf-8").split("\n")[:-1]]
    assert len(events) == len(expected) > MAX_BATCH  # so it takes more than one batch

    await second_ledger.approve([OWNER.pubkey])  # the operator approves the owner, nobody else
    await publish_in_chunks(second_ledger, events)
    assert as_file(await export(second_ledger, "lab")) == first

    # Publishing the file again stores nothing new.
    again = await publish(second_ledger, *events[:MAX_BATCH])
    assert again["accepted"] == [] and again["skipped"] == ids(events[:MAX_BATCH])
    assert as_file(await export(second_ledger, "lab")) == first
    # The new database agrees on who may read lab.
    assert await Access(second_ledger.pool).can_read(MEMBER.pubkey, "lab")
    assert not await Access(second_ledger.pool).can_read(MEMBER2.pubkey, "lab")


async def test_round_trip_when_a_member_signed_terms_in_another_collection_first(
    ledger: Ledger, second_ledger: Ledger
) -> None:
    """MEMBER signed its terms and profile as a member of "other" only. In lab's export they
    come after the list that lets MEMBER into lab, right before its first event there, so the
    file publishes again with only the owner approved."""
    await ledger.approve([OWNER.pubkey, OWNER2.pubkey])
    await publish(ledger, terms(OWNER2), members(OWNER2, "other", [MEMBER.pubkey]))
    early = [terms(MEMBER), profile(MEMBER, "bot")]
    await publish(ledger, *early)
    opening = [terms(OWNER), members(OWNER, "lab", [MEMBER.pubkey])]
    await publish(ledger, *opening)
    first_write = claim(MEMBER, "lab", "Written in lab.")
    later_profile = profile(MEMBER, "bot, renamed", created_at=T0 + 60)
    await publish(ledger, first_write, later_profile)
    lines = await export(ledger, "lab")
    assert [json.loads(line)["id"] for line in lines] == ids(
        [*opening, *early, first_write, later_profile]
    )
    for line in lines:
        verify_independently(line)

    await second_ledger.approve([OWNER.pubkey])
    await publish_in_chunks(second_ledger, [json.loads(line) for line in lines])
    assert as_file(await export(second_ledger, "lab")) == as_file(lines)


async def test_round_trip_after_a_writer_was_removed_but_stayed_elsewhere(
    ledger: Ledger, second_ledger: Ledger
) -> None:
    await ledger.approve([OWNER.pubkey, OWNER2.pubkey])
    await publish(ledger, terms(OWNER2), members(OWNER2, "other", [MEMBER.pubkey]))
    await publish(ledger, terms(OWNER), members(OWNER, "lab", [MEMBER.pubkey]))
    await publish(ledger, terms(MEMBER), claim(MEMBER, "lab", "Written in lab."))
    await publish(ledger, members(OWNER, "lab", [], created_at=T0 + 10))
    late = profile(MEMBER, "bot, after lab", created_at=T0 + 20)  # accepted via "other"
    await publish(ledger, late)
    lines = await export(ledger, "lab")
    # Signed while MEMBER no longer belonged to lab: not part of lab's history.
    assert late["id"] not in {json.loads(line)["id"] for line in lines}

    await second_ledger.approve([OWNER.pubkey])
    await publish_in_chunks(second_ledger, [json.loads(line) for line in lines], size=1)
    assert as_file(await export(second_ledger, "lab")) == as_file(lines)


async def test_export_reads_one_snapshot(ledger: Ledger) -> None:
    """Events published while an export streams do not appear in it half way."""
    await build_lab(ledger)
    before = await export(ledger, "lab")
    stream = Exporter(ledger.pool).lines(await readable(Exporter(ledger.pool), "lab"))
    head = [await anext(stream)]
    late = claim(OWNER, "lab", "Published mid-export.", created_at=NOW - 1)
    await publish(ledger, late)
    rest = [line async for line in stream]
    assert head + rest == before
    assert (await export(ledger, "lab"))[-1] == json.dumps(
        late, separators=(",", ":"), ensure_ascii=False
    )


async def test_slow_exports_never_hold_up_publishing(ledger: Ledger, db_url: str) -> None:
    """Downloads that stall keep their connections; with a pool of their own (as the server
    runs), publishing goes on meanwhile."""
    await build_lab(ledger)
    export_pool = await open_pool(db_url, min_size=0, max_size=2)
    try:
        split = Exporter(export_pool)
        stalled = [split.lines(await readable(split, "lab")) for _ in range(2)]
        for stream in stalled:
            await anext(stream)  # each now holds an export connection, mid-download
        late = claim(OWNER, "lab", "Published while two exports stall.", created_at=NOW - 1)
        result = await asyncio.wait_for(publish(ledger, late), timeout=30)
        assert result["accepted"] == [late["id"]]
        for stream in stalled:
            await stream.aclose()
    finally:
        await export_pool.close()
