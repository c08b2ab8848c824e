"""Publishing against the real PostgreSQL: what needs the database.

The rules themselves are judged without one in tests/rules/test_judge.py. Here: the snapshot the
ledger reads for the judge (exactly, and at least once per rule family through `publish`), the
transaction (a refused batch writes nothing, an accepted one everything, in batch order), stored
events skipped, member lists made current, races, and the append-only tables.

Every refused batch is checked three ways (see `publishing.refused`): the message holds SPEC's
words, it names the failing event by position and id prefix, and no table gained or lost a row.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import asyncpg
import pytest
from factories import (
    APPROVED,
    MEMBER,
    MEMBER2,
    NOW,
    OWNER,
    OWNER2,
    STRANGER,
    T0,
    TERMS,
    EventDict,
    claim,
    compact,
    contradiction,
    evidence,
    ids,
    link,
    members,
    profile,
    signed,
    terms,
)
from hypothesis import HealthCheck, given, settings
from junk import junk_strategies
from publishing import LEDGER_TABLES, counts, join, open_collection, publish, refused

from tms.ledger.access import Access
from tms.ledger.log.tree import STATE_SQL
from tms.ledger.service import Ledger
from tms.ledger.write.snapshots import quotes
from tms.ledger.write.snapshots import snapshot as read_snapshot
from tms.rules.admission import OPERATOR
from tms.rules.anchors import Anchor
from tms.rules.publish import MAX_BATCH, PublishError, Ref, Snapshot, parse_events

pytestmark = pytest.mark.anyio

DOC = (
    "Histamine intolerance is thought to result from reduced diamine oxidase (DAO) activity. "
    "Serum DAO levels, however, correlate poorly with symptoms."
)
MISSING = "f" * 64  # an event id nobody stored


async def owner_of(ledger: Ledger, slug: str) -> str | None:
    return await ledger.pool.fetchval("SELECT owner FROM collections WHERE slug = $1", slug)


async def stored_ids(ledger: Ledger) -> list[str]:
    rows = await ledger.pool.fetch("SELECT id FROM events ORDER BY seq")
    return [row["id"] for row in rows]


async def run_here(function: Any, *args: Any) -> Any:
    return function(*args)


# --- the snapshot the judge gets ----------------------------------------------------------------


async def test_the_snapshot_holds_what_the_batch_touches(ledger: Ledger) -> None:
    """What the ledger reads for the judge, inside the transaction: the stored facts the batch
    touches, and only those (the rules tests build such snapshots by hand)."""
    await ledger.approve([OWNER.pubkey, OWNER2.pubkey, APPROVED.pubkey])
    doc = evidence(OWNER, "lab", DOC)
    c1 = claim(OWNER, "lab", "DAO explains HIT.")
    listed = members(OWNER, "lab", [MEMBER.pubkey], created_at=T0 + 5)
    older = members(OWNER, "lab", [MEMBER2.pubkey])  # stored, but never current
    me = profile(OWNER, "owner")
    elsewhere = evidence(OWNER2, "other", DOC)
    await publish(ledger, terms(OWNER), me, doc, c1, listed, older, claim(OWNER, "mine", "x"))
    await publish(ledger, terms(OWNER2), elsewhere, terms(MEMBER), terms(APPROVED))
    batch = [
        doc,  # re-sent
        claim(MEMBER, "lab", "New."),
        link(MEMBER, "lab", doc["id"], c1["id"], "DAO"),
        link(MEMBER, "lab", elsewhere["id"], me["id"], "DAO"),
        contradiction(MEMBER, "lab", [c1["id"], MISSING]),
        claim(STRANGER, "fresh", "A collection nobody made yet."),
    ]
    async with ledger.pool.acquire() as conn, conn.transaction():
        parsed = parse_events(batch, NOW)
        snapshot, read = await read_snapshot(conn, parsed, {"log": STATE_SQL})
        found = await quotes(conn, parsed, run_here)
    # What the log reads in the same round trip: the trees of the batch's collections only
    # (`fresh` has none yet; `mine` and `other` are not the batch's).
    assert {row[0] for row in read["log"]} == {"lab"}
    assert snapshot == Snapshot(
        stored_ids={doc["id"]},
        approved={OWNER.pubkey},  # of the batch's signers: OWNER, MEMBER, STRANGER
        terms_signed={OWNER.pubkey, MEMBER.pubkey},
        belongs_to={OWNER.pubkey: {"lab", "mine"}, MEMBER.pubkey: {"lab"}},
        owners={"lab": OWNER.pubkey},  # of the batch's collections: lab, fresh
        members={"lab": {MEMBER.pubkey}},
        heads={"lab": (T0 + 5, listed["id"])},
        # What the batch cites in its own collections: an id stored elsewhere (`elsewhere` in
        # `other`, the profile `me`) is read as missing, which the rules refuse in the same
        # words ("does not exist in collection 'lab'"); MISSING is nowhere.
        refs={doc["id"]: Ref(4701, "lab"), c1["id"]: Ref(4702, "lab")},
        profiles={OWNER.pubkey: (T0, me["id"])},  # the signers' current profiles
    )
    # Every link's quote, looked for in its evidence (the stored ones read one at a time, from
    # the batch's collections only), and anchored in it: the first "DAO" of the text, which
    # holds it twice. The link quoting `elsewhere` finds no text: it is refused for citing it.
    start = DOC.index("DAO")
    around = DOC[max(0, start - 300) : start], DOC[start + 3 : start + 303]
    dao = Anchor(
        start, start + 3, "DAO", DOC[start - 32 : start], DOC[start + 3 : start + 35], 2, *around
    )
    assert found == {batch[2]["id"]: dao}


# --- the result ------------------------------------------------------------------------------


async def test_result_shape_order_and_retry(ledger: Ledger) -> None:
    await ledger.approve([OWNER.pubkey])
    doc = evidence(OWNER, "beta", DOC, title="HIT review", url="https://example.org/hit")
    hit = claim(OWNER, "beta", "Histamine intolerance results from reduced DAO activity.")
    supports = link(OWNER, "beta", doc["id"], hit["id"], "reduced diamine oxidase (DAO) activity")
    other = claim(OWNER, "alpha", "A claim in a second collection.")
    batch = [terms(OWNER), profile(OWNER, "owner"), doc, hit, supports, other]

    result = await publish(ledger, *batch)
    assert set(result) == {"accepted", "skipped", "collections", "embedded", "checkpoints"}
    assert result["accepted"] == ids(batch)  # in batch order
    # One signed checkpoint per collection written (tests/ledger/test_tlog.py says more).
    assert [(c["collection"], c["size"]) for c in result["checkpoints"]] == [
        ("alpha", 1),
        ("beta", 3),
    ]
    assert result["skipped"] == []
    assert result["collections"] == ["alpha", "beta"]  # the slugs written, sorted
    assert result["embedded"] == 0  # this ledger has no embedder
    assert await stored_ids(ledger) == ids(batch)  # stored in batch order: "oldest first"

    # The first event naming a collection created it; its signer owns it.
    rows = await ledger.pool.fetch("SELECT slug, owner, created_by FROM collections ORDER BY slug")
    assert [tuple(r) for r in rows] == [
        ("alpha", OWNER.pubkey, other["id"]),
        ("beta", OWNER.pubkey, doc["id"]),
    ]

    # Retrying is safe: what is stored is skipped (in batch order), the rest goes in.
    extra = claim(OWNER, "alpha", "One more claim.")
    again = await publish(ledger, *batch[:3], extra, *batch[3:])
    assert again["accepted"] == [extra["id"]]
    assert again["skipped"] == ids(batch)
    assert again["collections"] == ["alpha"]
    assert await stored_ids(ledger) == [*ids(batch), extra["id"]]

    # Everything already stored: nothing accepted, nothing written, no collections.
    before = await counts(ledger)
    third = await publish(ledger, *batch)
    assert (third["accepted"], third["skipped"], third["collections"]) == ([], ids(batch), [])
    assert await counts(ledger) == before


async def test_typed_rows_are_written_with_the_events(ledger: Ledger) -> None:
    await open_collection(ledger, OWNER, "lab", [MEMBER])
    await join(ledger, MEMBER)
    doc = evidence(MEMBER, "lab", DOC, source="Example journal")
    c1 = claim(MEMBER, "lab", "DAO activity explains HIT.")
    c2 = claim(MEMBER, "lab", "DAO activity does not explain HIT.")
    supports = link(MEMBER, "lab", doc["id"], c1["id"], "reduced diamine oxidase")
    both = contradiction(MEMBER, "lab", [c1["id"], c2["id"]])
    await publish(ledger, profile(MEMBER, "bot", about="agent"), doc, c1, c2, supports, both)
    got = await counts(ledger)
    assert {t: got[t] for t in LEDGER_TABLES} == {
        "events": 9,  # owner: terms, members; member: terms, profile + 5 in "lab"
        "collections": 1,
        "evidence": 1,
        "claims": 2,
        "links": 1,
        "contradictions": 1,
        "contradiction_claims": 2,
        "member_lists": 1,
        "profiles": 1,
        "terms_signatures": 2,
        "tlog_leaves": 6,  # the 6 events of "lab": members, then the member's 5
        "tlog_nodes": 0,  # the log stores subtrees of 16, 256, ... entries: none yet
        "tlog_checkpoints": 2,  # one per publish that wrote in "lab"
    }
    row = await ledger.pool.fetchrow("SELECT from_id, to_id, relation, quote FROM links")
    assert tuple(row) == (doc["id"], c1["id"], "SUPPORTS", "reduced diamine oxidase")


# --- the batch as a whole ----------------------------------------------------------------------


@pytest.mark.parametrize(("raw", "words"), [({"events": []}, "must be a list"), ([], "is empty")])
async def test_batch_must_be_a_non_empty_list(ledger: Ledger, raw: object, words: str) -> None:
    await refused(ledger, raw, words)


async def test_1000_events_are_stored_in_one_batch(ledger: Ledger) -> None:
    await ledger.approve([OWNER.pubkey])
    batch = [terms(OWNER)] + [claim(OWNER, "big", f"claim {i}") for i in range(MAX_BATCH - 1)]
    result = await publish(ledger, *batch)
    assert len(result["accepted"]) == MAX_BATCH
    assert (await counts(ledger))["events"] == MAX_BATCH


async def test_duplicate_event_in_one_batch_is_stored_once(ledger: Ledger) -> None:
    await ledger.approve([OWNER.pubkey])
    c = claim(OWNER, "lab", "Said twice.")
    t = terms(OWNER)
    result = await publish(ledger, t, c, dict(c), t)
    assert result["accepted"] == [t["id"], c["id"]]
    assert result["skipped"] == [c["id"], t["id"]]
    assert await stored_ids(ledger) == [t["id"], c["id"]]


# --- envelopes and content schemas (SPEC "Common errors") --------------------------------------


@pytest.mark.parametrize(
    ("content", "words"),
    [
        pytest.param(
            {"collection": "lab", "text": "A claim.", "score": 1},
            ["unknown fields", "'score'"],
            id="unknown-field",
        ),
        # JSON escapes that decode to NUL or half a surrogate pair, which no text column holds:
        # a PublishError naming the field, not a database error.
        pytest.param(
            '{"collection":"lab","text":"a\\u0000b"}',
            ["field 'text' is invalid", "U+0000"],
            id="nul",
        ),
        pytest.param(
            '{"collection":"lab","text":"a\\ud800b"}',
            ["field 'text' is invalid", "lone UTF-16 surrogate"],
            id="lone-surrogate",
        ),
    ],
)
async def test_a_malformed_event_refuses_the_whole_batch(
    ledger: Ledger, content: dict[str, Any] | str, words: list[str]
) -> None:
    """The bad event comes third, after two good ones: none of the three is stored."""
    await ledger.approve([OWNER.pubkey])
    bad = signed(OWNER, 4702, content)
    batch = [terms(OWNER), claim(OWNER, "lab", "A good claim.", created_at=T0 + 1), bad]
    await refused(ledger, batch, *words, position=2)
    spoiled = {**batch[1], "sig": batch[0]["sig"]}
    await refused(ledger, [batch[0], spoiled], "signature does not verify", position=1)


async def test_created_at_is_judged_against_the_ledgers_clock(ledger: Ledger) -> None:
    await ledger.approve([OWNER.pubkey])
    await publish(ledger, terms(OWNER))
    too_far = claim(OWNER, "lab", "From the future.", created_at=NOW + 901)
    await refused(ledger, [too_far], "901 s ahead of server time", position=0, now=NOW)
    assert (await publish(ledger, too_far, now=NOW + 1))["accepted"] == [too_far["id"]]


async def test_content_of_two_million_characters_is_stored(ledger: Ledger) -> None:
    await ledger.approve([OWNER.pubkey])
    shell = compact({"collection": "lab", "text": ""})
    text = "y" * (2_000_000 - len(shell))
    doc = evidence(OWNER, "lab", text)
    assert len(doc["content"]) == 2_000_000
    assert (await publish(ledger, terms(OWNER), doc))["accepted"][1] == doc["id"]


# --- who may write -----------------------------------------------------------------------------


async def test_unknown_key_is_turned_away(ledger: Ledger) -> None:
    words = f"pubkey {STRANGER.pubkey} is not approved and is not a member of any collection"
    await refused(ledger, [terms(STRANGER)], words, position=0)
    await refused(ledger, [terms(STRANGER), profile(STRANGER, "x")], words, position=0)
    # A member list naming it elsewhere, in the same batch, comes first and lets it in.
    await ledger.approve([OWNER.pubkey])
    batch = [terms(OWNER), members(OWNER, "lab", [STRANGER.pubkey]), terms(STRANGER)]
    assert (await publish(ledger, *batch))["accepted"] == ids(batch)


async def test_terms_must_be_signed_before_the_first_write(ledger: Ledger) -> None:
    await ledger.approve([OWNER.pubkey, OWNER2.pubkey])
    words = ["sign the current terms first", TERMS["sha256"]]
    await refused(ledger, [claim(OWNER, "lab", "No terms yet.")], *words, position=0)
    # Another key's terms, stored before, do not count.
    await publish(ledger, terms(OWNER2))
    await refused(ledger, [claim(OWNER, "lab", "Whose terms?")], *words, position=0)


async def test_terms_earlier_in_the_batch_or_before_it_count(ledger: Ledger) -> None:
    await ledger.approve([OWNER.pubkey, OWNER2.pubkey])
    same_batch = [terms(OWNER), profile(OWNER, "owner"), claim(OWNER, "lab", "Fine.")]
    assert (await publish(ledger, *same_batch))["accepted"] == ids(same_batch)
    await publish(ledger, terms(OWNER2))
    later = claim(OWNER2, "lab2", "Terms from an earlier batch count.")
    assert (await publish(ledger, later))["accepted"] == [later["id"]]


async def test_collection_is_owned_forever_by_its_creator(ledger: Ledger) -> None:
    await ledger.approve([OWNER.pubkey, APPROVED.pubkey])
    first = claim(OWNER, "lab", "The first event naming lab.")
    await publish(ledger, terms(OWNER), first, terms(APPROVED))
    assert await owner_of(ledger, "lab") == OWNER.pubkey

    # An approved key is no member of someone else's collection ...
    await refused(
        ledger,
        [claim(APPROVED, "lab", "Let me in.")],
        f"pubkey {APPROVED.pubkey} is not a member of collection 'lab'",
        position=0,
    )
    # ... nor can it take the member list over, even naming itself.
    await refused(
        ledger,
        [members(APPROVED, "lab", [APPROVED.pubkey])],
        "only the owner of collection 'lab' changes its members",
        position=0,
    )
    # Once added, it writes, but the list stays the owner's, and so does the collection.
    await publish(ledger, members(OWNER, "lab", [APPROVED.pubkey]))
    await publish(ledger, claim(APPROVED, "lab", "Now a member."))
    await refused(
        ledger,
        [members(APPROVED, "lab", [APPROVED.pubkey], created_at=T0 + 5)],
        "only the owner of collection 'lab' changes its members",
        position=0,
    )
    assert await owner_of(ledger, "lab") == OWNER.pubkey


async def test_member_list_can_create_the_collection(ledger: Ledger) -> None:
    result = await open_collection(ledger, OWNER, "lab", [MEMBER])
    assert result["collections"] == ["lab"]
    assert await owner_of(ledger, "lab") == OWNER.pubkey
    assert await Access(ledger.pool).can_read(OWNER.pubkey, "lab")
    assert await Access(ledger.pool).can_read(MEMBER.pubkey, "lab")


async def test_member_writes_without_approval_but_cannot_create(ledger: Ledger) -> None:
    await open_collection(ledger, OWNER, "lab", [MEMBER])
    doc = evidence(MEMBER, "lab", DOC)
    c = claim(MEMBER, "lab", "Reduced DAO activity causes HIT.")
    batch = [
        terms(MEMBER),
        profile(MEMBER, "bot"),
        doc,
        c,
        link(MEMBER, "lab", doc["id"], c["id"], "DAO"),
    ]
    assert (await publish(ledger, *batch))["accepted"] == ids(batch)
    assert [pubkey for pubkey, _ in await ledger.approved()] == [OWNER.pubkey]  # MEMBER is not

    await refused(
        ledger,
        [claim(MEMBER, "lab-2", "A new collection?")],
        f"pubkey {MEMBER.pubkey} is not a member of collection 'lab-2' (or no such collection: "
        "check the slug for typos, or ask its owner to add your key); only approved pubkeys "
        "create collections",
        position=0,
    )
    await refused(
        ledger,
        [members(MEMBER, "lab-2", [])],
        "only approved pubkeys create collections",
        position=0,
    )
    await refused(
        ledger,
        [members(MEMBER, "lab", [MEMBER.pubkey, MEMBER2.pubkey])],
        "only the owner of collection 'lab' changes its members",
        position=0,
    )


async def test_member_of_one_collection_is_no_member_of_another(ledger: Ledger) -> None:
    await open_collection(ledger, OWNER, "lab", [MEMBER])
    await open_collection(ledger, OWNER2, "other", [MEMBER2])
    await join(ledger, MEMBER)
    await refused(
        ledger,
        [claim(MEMBER, "other", "Wrong room.")],
        f"pubkey {MEMBER.pubkey} is not a member of collection 'other'",
        position=0,
    )


# --- member lists ------------------------------------------------------------------------------


async def test_later_list_replaces_the_whole_list(ledger: Ledger) -> None:
    await open_collection(ledger, OWNER, "lab", [MEMBER, MEMBER2])
    await publish(ledger, terms(MEMBER), terms(MEMBER2), claim(MEMBER, "lab", "In."))
    await publish(ledger, members(OWNER, "lab", [MEMBER2.pubkey], created_at=T0 + 10))

    # Removed from its only collection, MEMBER is now nobody at all.
    for gone in (claim(MEMBER, "lab", "Still in?"), profile(MEMBER, "gone")):
        await refused(
            ledger, [gone], "is not approved and is not a member of any collection", position=0
        )
    still = claim(MEMBER2, "lab", "Still in.")
    assert (await publish(ledger, still))["accepted"] == [still["id"]]
    assert not await Access(ledger.pool).can_read(MEMBER.pubkey, "lab")
    assert await Access(ledger.pool).can_read(MEMBER2.pubkey, "lab")
    rows = await ledger.pool.fetch("SELECT pubkey FROM memberships")
    assert [r["pubkey"] for r in rows] == [MEMBER2.pubkey]


async def test_older_list_is_stored_but_does_not_replace_a_newer_one(ledger: Ledger) -> None:
    await ledger.approve([OWNER.pubkey])
    newer = members(OWNER, "lab", [MEMBER.pubkey], created_at=T0 + 100)
    older = members(OWNER, "lab", [MEMBER2.pubkey], created_at=T0 + 50)
    oldest = members(OWNER, "lab", [MEMBER2.pubkey, MEMBER.pubkey], created_at=T0 + 10)
    await publish(ledger, terms(OWNER), newer)
    result = await publish(ledger, older, terms(MEMBER))  # older stored; MEMBER still in
    assert result["accepted"] == [older["id"], terms(MEMBER)["id"]]
    await publish(ledger, oldest)
    assert await ledger.pool.fetchval("SELECT list_id FROM current_member_lists") == newer["id"]
    assert await ledger.pool.fetchval("SELECT count(*) FROM member_lists") == 3
    assert await Access(ledger.pool).can_read(MEMBER.pubkey, "lab")
    assert not await Access(ledger.pool).can_read(MEMBER2.pubkey, "lab")
    still = claim(MEMBER, "lab", "Still a member.")
    assert (await publish(ledger, still))["accepted"] == [still["id"]]
    # MEMBER2 was named only by lists that never became current: nobody.
    await refused(
        ledger,
        [terms(MEMBER2)],
        "is not approved and is not a member of any collection",
        position=0,
    )


def _tied_lists(slug: str) -> tuple[EventDict, EventDict]:
    """Two lists signed at the same second: (the one with the lower id, the other)."""
    one = members(OWNER, slug, [MEMBER.pubkey], created_at=T0 + 10)
    two = members(OWNER, slug, [MEMBER2.pubkey], created_at=T0 + 10)
    low, high = sorted([one, two], key=lambda e: e["id"])
    return low, high


@pytest.mark.parametrize("order", ["low-first", "high-first"])
async def test_tied_member_lists_go_to_the_lowest_id(ledger: Ledger, order: str) -> None:
    """In two batches: the stored list's key comes back from the database to be compared."""
    await ledger.approve([OWNER.pubkey])
    await publish(ledger, terms(OWNER), claim(OWNER, "lab", "Creates lab."))
    low, high = _tied_lists("lab")
    for event in (low, high) if order == "low-first" else (high, low):
        await publish(ledger, event)
    assert await ledger.pool.fetchval("SELECT list_id FROM current_member_lists") == low["id"]
    winner = json.loads(low["content"])["members"]
    loser = json.loads(high["content"])["members"]
    assert await Access(ledger.pool).can_read(winner[0], "lab")
    assert not await Access(ledger.pool).can_read(loser[0], "lab")
    rows = await ledger.pool.fetch("SELECT pubkey FROM memberships")
    assert [r["pubkey"] for r in rows] == winner


async def test_owner_is_always_a_member_even_when_left_out(ledger: Ledger) -> None:
    await open_collection(ledger, OWNER, "lab", [MEMBER])  # the list does not name the owner
    await publish(ledger, members(OWNER, "lab", [], created_at=T0 + 10))
    assert await Access(ledger.pool).can_read(OWNER.pubkey, "lab")
    assert not await Access(ledger.pool).can_read(MEMBER.pubkey, "lab")
    c = claim(OWNER, "lab", "The owner still writes.")
    assert (await publish(ledger, c))["accepted"] == [c["id"]]
    back = members(OWNER, "lab", [MEMBER.pubkey], created_at=T0 + 20)
    assert (await publish(ledger, back))["accepted"] == [back["id"]]
    assert await Access(ledger.pool).can_read(MEMBER.pubkey, "lab")


# --- references --------------------------------------------------------------------------------


async def test_references_to_every_allowed_target(ledger: Ledger) -> None:
    await ledger.approve([OWNER.pubkey])
    doc = evidence(OWNER, "lab", DOC)
    c1 = claim(OWNER, "lab", "DAO explains HIT.")
    c2 = claim(OWNER, "lab", "DAO does not explain HIT.")
    await publish(ledger, terms(OWNER), doc, c1)  # stored earlier
    l1 = link(OWNER, "lab", doc["id"], c1["id"], "reduced diamine oxidase")  # stored refs
    both = contradiction(OWNER, "lab", [c1["id"], c2["id"]])  # c2 is earlier in this batch
    q = "correlate poorly with symptoms"
    batch = [
        c2,
        l1,
        both,
        link(OWNER, "lab", doc["id"], l1["id"], q, relation="REBUTS"),  # onto a link
        link(OWNER, "lab", doc["id"], both["id"], q),  # onto a contradiction
        link(OWNER, "lab", doc["id"], doc["id"], q, relation="REBUTS"),  # onto evidence
        link(OWNER, "lab", doc["id"], c2["id"], q, relation="QUALIFIES"),  # QUALIFIES a claim
    ]
    assert (await publish(ledger, *batch))["accepted"] == ids(batch)


async def test_reference_errors(ledger: Ledger) -> None:
    await open_collection(ledger, OWNER, "lab")
    doc = evidence(OWNER, "lab", DOC)
    c1 = claim(OWNER, "lab", "DAO explains HIT.")
    c2 = claim(OWNER, "lab", "DAO does not explain HIT.")
    l1 = link(OWNER, "lab", doc["id"], c1["id"], "reduced diamine oxidase")
    both = contradiction(OWNER, "lab", [c1["id"], c2["id"]])
    listed = members(OWNER, "lab", [MEMBER.pubkey], created_at=T0 + 1)
    me = profile(OWNER, "owner")
    await publish(ledger, doc, c1, c2, l1, both, listed, me)
    q = "reduced diamine oxidase"

    def ln(source: str, target: str, relation: str = "SUPPORTS") -> EventDict:
        return link(OWNER, "lab", source, target, q, relation=relation)

    # One case per message, each citing stored events: their kinds and collections come from
    # the database (a profile's collection as none). Every case is judged in tests/rules.
    cases: list[tuple[EventDict, list[str]]] = [
        (ln(c1["id"], c2["id"]), [f"from must be an evidence event; {c1['id']} is a claim"]),
        (ln(MISSING, c1["id"]), [f"from {MISSING} does not exist in collection 'lab'"]),
        (ln(doc["id"], me["id"]), [f"to {me['id']} does not exist in collection 'lab'"]),
        (ln(doc["id"], listed["id"]), ["to must be a claim, link, contradiction or evidence"]),
        (ln(doc["id"], l1["id"], "QUALIFIES"), ["QUALIFIES may only target a claim", "link"]),
        (
            contradiction(OWNER, "lab", [both["id"], c1["id"]]),
            [f"{both['id']} is not a claim in collection 'lab'"],
        ),
        (
            contradiction(OWNER, "lab", [c1["id"], MISSING]),
            [f"claim {MISSING} does not exist in collection 'lab'"],
        ),
    ]
    for event, words in cases:
        await refused(ledger, [event], *words, position=0)


async def test_other_collections_events_read_exactly_like_missing_ones(ledger: Ledger) -> None:
    """A member of "lab" learns nothing about "secret" by citing its events."""
    await open_collection(ledger, OWNER, "lab", [MEMBER])
    await open_collection(ledger, OWNER2, "secret")
    secret_doc = evidence(OWNER2, "secret", DOC)
    secret_claim = claim(OWNER2, "secret", "A secret claim.")
    await publish(ledger, secret_doc, secret_claim)
    doc = evidence(MEMBER, "lab", DOC)
    mine = claim(MEMBER, "lab", "My claim.")
    await publish(ledger, terms(MEMBER), doc, mine)

    async def message(make: Any, cited: str) -> str:
        bad = make(cited)
        text = await refused(ledger, [bad], position=0)
        return text.replace(bad["id"][:12], "<event>").replace(cited, "<cited>")

    def as_target(cited: str) -> EventDict:
        return link(MEMBER, "lab", doc["id"], cited, "DAO")

    def as_source(cited: str) -> EventDict:
        return link(MEMBER, "lab", cited, mine["id"], "DAO")

    def as_claim(cited: str) -> EventDict:
        return contradiction(MEMBER, "lab", [mine["id"], cited])

    for make, cited in [
        (as_target, secret_claim["id"]),
        (as_source, secret_doc["id"]),
        (as_claim, secret_claim["id"]),
    ]:
        assert await message(make, cited) == await message(make, MISSING)


# --- quotes ------------------------------------------------------------------------------------


QUOTED = (
    "The \u201cDAO\u201d enzyme \u2014 as Smith\u2019s\u00a0review notes \u2014 is\n\n"
    "\ufb01ne-tuned by diet, hista\u00admine and the  ATP\u2011ase."
)
FORGIVEN = [
    "The \u201cDAO\u201d enzyme",  # exactly
    'the "dao" ENZYME',  # straight quotes, case
    "is fine-tuned by diet",  # line breaks and the fi ligature
    "histamine and the ATP-ase",  # soft hyphen gone, two spaces, non-breaking hyphen
    "  \tThe \u201cDAO\u201d  ",  # surrounding whitespace
]


async def test_quotes_are_checked_against_stored_evidence_and_only_its_own(
    ledger: Ledger,
) -> None:
    await ledger.approve([OWNER.pubkey])
    doc = evidence(OWNER, "lab", QUOTED)
    other = evidence(OWNER, "lab", DOC)
    c = claim(OWNER, "lab", "Diet tunes DAO.")
    await publish(ledger, terms(OWNER), doc, other, c)
    # Found after normalization in the stored text, and stored as signed, not normalized.
    links = [link(OWNER, "lab", doc["id"], c["id"], quote) for quote in FORGIVEN]
    assert (await publish(ledger, *links))["accepted"] == ids(links)
    rows = await ledger.pool.fetch("SELECT quote FROM links ORDER BY seq")
    assert [r["quote"] for r in rows] == FORGIVEN
    # A quote from the other evidence is not in this one.
    bad = link(OWNER, "lab", doc["id"], c["id"], "correlate poorly with symptoms")
    await refused(ledger, [bad], f"quote not found verbatim in evidence {doc['id']}", position=0)


# --- concurrency -------------------------------------------------------------------------------


async def test_racing_creators_end_with_one_owner(ledger: Ledger) -> None:
    await ledger.approve([OWNER.pubkey, OWNER2.pubkey])
    for round_ in range(3):
        slug = f"race-{round_}"
        a = [terms(OWNER)] + [claim(OWNER, slug, f"a {i}") for i in range(40)]
        b = [terms(OWNER2)] + [claim(OWNER2, slug, f"b {i}") for i in range(40)]
        results = await asyncio.gather(
            ledger.submit(a, now=NOW, origin=OPERATOR),
            ledger.submit(b, now=NOW, origin=OPERATOR),
            return_exceptions=True,
        )
        errors = [r for r in results if isinstance(r, BaseException)]
        assert len(errors) == 1, results
        assert isinstance(errors[0], PublishError), errors[0]
        assert f"is not a member of collection '{slug}'" in str(errors[0])
        winner = OWNER if results[1] is errors[0] else OWNER2 if results[0] is errors[0] else None
        assert winner is not None
        assert await owner_of(ledger, slug) == winner.pubkey
        authors = await ledger.pool.fetch(
            "SELECT DISTINCT pubkey FROM events WHERE collection = $1", slug
        )
        assert [r["pubkey"] for r in authors] == [winner.pubkey]
        assert (
            await ledger.pool.fetchval("SELECT count(*) FROM claims WHERE collection = $1", slug)
            == 40
        )


async def test_same_batch_sent_twice_at_once_is_stored_once(ledger: Ledger) -> None:
    await ledger.approve([OWNER.pubkey])
    for round_ in range(3):
        slug = f"twice-{round_}"
        doc = evidence(OWNER, slug, DOC)
        batch = [terms(OWNER), doc, members(OWNER, slug, [MEMBER.pubkey])]
        for i in range(40):  # 83 events: verified in several threads
            c = claim(OWNER, slug, f"claim {i}")
            batch += [c, link(OWNER, slug, doc["id"], c["id"], "DAO")]
        first, second = await asyncio.gather(
            ledger.submit(batch, now=NOW, origin=OPERATOR),
            ledger.submit(batch, now=NOW, origin=OPERATOR),
        )
        new = [e["id"] for e in batch if round_ == 0 or e["kind"] != 4706]
        outcomes = sorted(
            [(r["accepted"], r["skipped"]) for r in (first, second)], key=lambda o: -len(o[0])
        )
        assert outcomes[0][0] == new
        assert outcomes[1] == ([], ids(batch))
    rows = await counts(ledger)
    assert rows["events"] == 1 + 3 * 82
    assert rows["collections"] == 3
    assert rows["links"] == rows["claims"] == 120
    assert rows["member_lists"] == rows["current_member_lists"] == 3


# --- the database refuses edits ----------------------------------------------------------------


UPDATABLE = {
    "events": "content",
    "collections": "owner",
    "evidence": "text",
    "claims": "text",
    "links": "quote",
    "contradictions": "reason",
    "contradiction_claims": "collection",
    "member_lists": "members",
    "profiles": "name",
    "terms_signatures": "version",
    "tlog_leaves": "event_id",
    "tlog_nodes": "hash",
    "tlog_checkpoints": "note",
}


async def fill_every_ledger_table(ledger: Ledger) -> None:
    await open_collection(ledger, OWNER, "lab", [MEMBER])
    doc = evidence(OWNER, "lab", DOC)
    c1 = claim(OWNER, "lab", "DAO explains HIT.")
    c2 = claim(OWNER, "lab", "DAO does not explain HIT.")
    await publish(
        ledger,
        profile(OWNER, "owner"),
        doc,
        c1,
        c2,
        link(OWNER, "lab", doc["id"], c1["id"], "DAO"),
        contradiction(OWNER, "lab", [c1["id"], c2["id"]]),
        *(claim(OWNER, "lab", f"claim {i}") for i in range(10)),  # 16 entries: a stored subtree
    )
    got = await counts(ledger)
    assert all(got[table] > 0 for table in LEDGER_TABLES), got


@pytest.mark.parametrize("verb", ["UPDATE", "DELETE", "TRUNCATE"])
async def test_raw_sql_cannot_change_the_ledger(ledger: Ledger, verb: str) -> None:
    await fill_every_ledger_table(ledger)
    before = await counts(ledger)
    assert set(UPDATABLE) == set(LEDGER_TABLES)
    for table, column in UPDATABLE.items():
        statements = {
            "UPDATE": [f"UPDATE {table} SET {column} = {column}"],
            "DELETE": [f"DELETE FROM {table}"],
            "TRUNCATE": [f"TRUNCATE {table} CASCADE", f"TRUNCATE {table}"],
        }[verb]
        for statement in statements:
            with pytest.raises(asyncpg.PostgresError) as caught:
                await ledger.pool.execute(statement)
            if not statement.endswith(f"TRUNCATE {table}"):
                assert "append-only" in str(caught.value), (statement, caught.value)
    with pytest.raises(asyncpg.PostgresError, match="append-only"):
        await ledger.pool.execute(f"TRUNCATE {', '.join(LEDGER_TABLES)} CASCADE")
    assert await counts(ledger) == before


async def test_plain_truncate_names_the_append_only_rule_where_nothing_references(
    ledger: Ledger,
) -> None:
    """Tables nothing references reach the trigger even without CASCADE."""
    await fill_every_ledger_table(ledger)
    for table in ("links", "contradiction_claims", "profiles", "terms_signatures"):
        with pytest.raises(asyncpg.PostgresError, match="append-only"):
            await ledger.pool.execute(f"TRUNCATE {table}")


# --- regressions: re-sent events, unstorable strings, positions in big batches -----------------


async def test_resent_stored_event_can_be_referenced(ledger: Ledger) -> None:
    """A client retrying a larger batch re-sends events it already stored; the new events
    after them may cite them (and quote the re-sent evidence)."""
    await ledger.approve([OWNER.pubkey])
    doc = evidence(OWNER, "lab", DOC)
    c1 = claim(OWNER, "lab", "DAO explains HIT.")
    await publish(ledger, terms(OWNER), doc, c1)
    c2 = claim(OWNER, "lab", "DAO does not explain HIT.")
    supports = link(OWNER, "lab", doc["id"], c2["id"], "reduced diamine oxidase")
    both = contradiction(OWNER, "lab", [c1["id"], c2["id"]])
    result = await publish(ledger, terms(OWNER), doc, c1, c2, supports, both)
    assert result["skipped"] == [terms(OWNER)["id"], doc["id"], c1["id"]]
    assert result["accepted"] == [c2["id"], supports["id"], both["id"]]
    # The quote is still checked against the re-sent evidence's text.
    bad = link(OWNER, "lab", doc["id"], c1["id"], "increased diamine oxidase")
    await refused(ledger, [doc, bad], "quote not found verbatim in evidence", position=1)


async def test_a_surrogate_pair_escape_is_fine(ledger: Ledger) -> None:
    await ledger.approve([OWNER.pubkey])
    c = signed(OWNER, 4702, '{"collection":"lab","text":"\\ud83e\\uddea test tube"}')
    assert (await publish(ledger, terms(OWNER), c))["accepted"][1] == c["id"]
    text = await ledger.pool.fetchval("SELECT text FROM claims")
    assert text == "\U0001f9ea test tube"


async def test_positions_are_exact_in_big_batches(ledger: Ledger) -> None:
    """Big batches are verified in several threads; the error still names the earliest bad
    event by its position in the whole batch."""
    await ledger.approve([OWNER.pubkey])
    doc = evidence(OWNER, "lab", DOC)
    good = [terms(OWNER), doc] + [claim(OWNER, "lab", f"claim {i}") for i in range(298)]

    def spoiled(position: int) -> EventDict:
        return {**good[position], "sig": good[position - 1]["sig"]}

    for positions in ([150], [299], [63, 64, 250], [2, 299]):
        batch = list(good)
        for position in positions:
            batch[position] = spoiled(position)
        await refused(ledger, batch, "signature does not verify", position=min(positions))
    # The same for a rule broken deep in the batch, judged after parsing.
    batch = list(good)
    batch[277] = link(OWNER, "lab", doc["id"], good[276]["id"], "no such words")
    await refused(ledger, batch, "quote not found verbatim in evidence", position=277)
    assert len((await publish(ledger, *good))["accepted"]) == len(good)


# --- junk never raises anything but PublishError -----------------------------------------------

SETUP = [
    terms(OWNER),
    evidence(OWNER, "lab", DOC),
    claim(OWNER, "lab", "DAO explains HIT."),
]


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(raw=junk_strategies(ids(SETUP)))
async def test_publish_raises_only_publish_error(ledger: Ledger, raw: object) -> None:
    """Whatever comes, a PublishError and nothing written, or a result for every event: never
    a database error (see tests/rules/test_judge.py for many more examples, judged alone)."""
    await ledger.approve([OWNER.pubkey])
    await publish(ledger, *SETUP)
    before = await counts(ledger)
    try:
        result = await ledger.submit(raw, now=NOW, origin=OPERATOR)
    except PublishError as exc:
        assert str(exc).startswith("events"), exc
        assert await counts(ledger) == before
    else:
        assert isinstance(raw, list)
        assert len(result.accepted) + len(result.skipped) == len(raw)
