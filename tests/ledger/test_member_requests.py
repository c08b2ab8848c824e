"""NIP-43's invites, joins and leaves as membership records (tms/rules/membership.py): an
invite is a NIP-86 `createinvite` the owner signed, holding the SHA-256 of a single-use code;
a join (kind 28934) and a leave (kind 28936) are signed by the joining or leaving key and kept
with its NIP-42 AUTH event, which names the collection. Folded with the lists and changes,
exported, checked by what `tms verify-export` runs, published again to the same effect."""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from factories import (
    MEMBER,
    MEMBER2,
    NOW,
    OWNER,
    STRANGER,
    T0,
    EventDict,
    claim,
    compact,
    create_database,
    drop_database,
    member_change,
    signed,
    terms,
)
from publishing import open_collection, publish, readable, reader_of, refused

from tms.errors import PublishError
from tms.ledger.read.export import Exporter
from tms.ledger.read.reads import Reads
from tms.ledger.service import Ledger
from tms.nostr.events import SecretKey
from tms.rules.admission import OPERATOR
from tms.store.database import open_pool
from tms.tlog.export_lines import Line, read_line
from tms.tlog.replay import replay

pytestmark = pytest.mark.anyio

CODE = "a-random-single-use-code"


@pytest.fixture
async def second_ledger(pg_server_url: str, template_url: str) -> AsyncIterator[Ledger]:
    url = await create_database(pg_server_url, template_url, "tms_requests")
    pool = await open_pool(url, min_size=1, max_size=2)
    try:
        yield Ledger(pool)
    finally:
        await pool.close()
        await drop_database(pg_server_url, url)


def invite(collection: str, code: str = CODE, *, created_at: int = T0 + 1) -> EventDict:
    digest = hashlib.sha256(code.encode()).hexdigest()
    body = compact({"method": "createinvite", "params": [digest]})
    return member_change(
        OWNER, collection, "createinvite", digest, created_at=created_at, body=body
    )


def auth(signer: SecretKey, collection: str, *, created_at: int) -> str:
    tags = [["relay", f"ws://testserver/c/{collection}"], ["challenge", "c"]]
    return json.dumps(signed(signer, 22242, "", created_at=created_at, tags=tags))


def join(
    signer: SecretKey,
    collection: str,
    code: str = CODE,
    *,
    created_at: int = T0 + 2,
    auth_at: int | None = None,
) -> EventDict:
    event = signed(signer, 28934, "", created_at=created_at, tags=[["-"], ["claim", code]])
    body = auth(signer, collection, created_at=created_at if auth_at is None else auth_at)
    return {**event, "body": body}


def leave(signer: SecretKey, collection: str, *, created_at: int = T0 + 3) -> EventDict:
    event = signed(signer, 28936, "", created_at=created_at, tags=[["-"]])
    return {**event, "body": auth(signer, collection, created_at=created_at)}


async def member_keys(ledger: Ledger, slug: str) -> set[str]:
    rows = await ledger.pool.fetch("SELECT pubkey FROM memberships WHERE collection = $1", slug)
    return {row["pubkey"] for row in rows}


async def export(ledger: Ledger, slug: str) -> list[str]:
    exporter = Exporter(ledger.pool)
    return [line async for line in exporter.lines(await readable(exporter, slug))]


def problems(lines: list[str], slug: str) -> list[str]:
    read = [read_line(number, line.encode()) for number, line in enumerate(lines, start=1)]
    found = [f"{line.problem}" for line in read if isinstance(line, Line) and line.problem]
    entries = [line for line in read if isinstance(line, Line) and line.collection == slug]
    replay(entries, slug, lambda text, _: found.append(text))
    return found


async def test_a_key_joins_with_an_invite_writes_and_leaves(
    ledger: Ledger, second_ledger: Ledger
) -> None:
    await open_collection(ledger, OWNER, "lab")
    made = invite("lab")
    await publish(ledger, made)
    stored = await ledger.pool.fetchrow("SELECT * FROM member_changes WHERE id = $1", made["id"])
    assert stored["target"] == hashlib.sha256(CODE.encode()).hexdigest()
    assert CODE not in json.dumps(dict(stored))  # the code itself is never stored
    assert await member_keys(ledger, "lab") == set()

    # STRANGER is neither approved nor a member of anything: the invite lets it in.
    joined = join(STRANGER, "lab")
    await publish(ledger, joined)
    assert await member_keys(ledger, "lab") == {STRANGER.pubkey}
    await publish(ledger, terms(STRANGER), claim(STRANGER, "lab", "Joined.", created_at=T0 + 2))

    reads = Reads(ledger.pool)
    shown = await reads.get_event(await reader_of(ledger, OWNER.pubkey), joined["id"])
    assert shown is not None and shown["content"] == {"collection": "lab", "method": "join"}

    left = leave(STRANGER, "lab")
    await publish(ledger, left)
    assert await member_keys(ledger, "lab") == set()
    await refused(ledger, [claim(STRANGER, "lab", "Gone.", created_at=T0 + 4)], "not a member")

    lines = await export(ledger, "lab")
    kept = {json.loads(text)["id"]: json.loads(text) for text in lines}
    assert kept[joined["id"]] == joined and kept[left["id"]] == left and kept[made["id"]] == made
    assert problems(lines, "lab") == []
    # Without the invite, the join has nothing behind it.
    dropped = [text for text in lines if json.loads(text)["id"] != made["id"]]
    assert any("a join whose code" in text for text in problems(dropped, "lab"))
    # The AUTH event altered: the line no longer verifies.
    forged = [text.replace("testserver/c/lab", "testserver/c/lob") for text in lines]
    assert any("AUTH event" in text for text in problems(forged, "lab"))

    # Published again as it is, the export makes the same membership and the same export.
    await second_ledger.approve([OWNER.pubkey])
    await publish(second_ledger, *(json.loads(text) for text in lines), now=NOW)
    assert await member_keys(second_ledger, "lab") == set()
    assert await export(second_ledger, "lab") == lines


async def test_a_code_is_used_once_and_only_in_its_collection(ledger: Ledger) -> None:
    await open_collection(ledger, OWNER, "lab")
    await open_collection(ledger, OWNER, "other")
    await publish(ledger, invite("lab"))
    await refused(ledger, [join(STRANGER, "lab", "wrong code")], "or it was used already")
    # The code of lab's invite, claimed on other (whose AUTH names other): no invite there.
    await refused(ledger, [join(STRANGER, "other")], "not one of collection 'other''s")
    await publish(ledger, join(STRANGER, "lab"))
    await refused(ledger, [join(MEMBER2, "lab")], "or it was used already")
    # A key that already belongs: not stored, its invite not used (NIP-43's `duplicate:`).
    await publish(ledger, invite("lab", "second", created_at=T0 + 5))
    again = join(STRANGER, "lab", "second", created_at=T0 + 6)
    result = await publish(ledger, again)
    assert result["skipped"] == [again["id"]] and not result["accepted"]
    await publish(ledger, join(MEMBER2, "lab", "second", created_at=T0 + 7))
    assert await member_keys(ledger, "lab") == {STRANGER.pubkey, MEMBER2.pubkey}


async def test_a_request_is_tied_to_the_collection_its_auth_names(ledger: Ledger) -> None:
    await open_collection(ledger, OWNER, "lab", [MEMBER])
    await open_collection(ledger, OWNER, "other", [MEMBER])
    left = leave(MEMBER, "lab")
    # Replayed on another collection's relay: refused, it names lab.
    with pytest.raises(PublishError, match="collection"):
        await ledger.submit([left], origin=OPERATOR, now=NOW, within="other")
    await publish(ledger, left)
    assert await member_keys(ledger, "lab") == set()
    assert await member_keys(ledger, "other") == {MEMBER.pubkey}
    unbound: dict[str, Any] = {k: v for k, v in leave(MEMBER, "other").items() if k != "body"}
    await refused(ledger, [unbound], "'body' is missing")
    theirs = {**leave(MEMBER, "other"), "body": auth(MEMBER2, "other", created_at=T0 + 3)}
    await refused(ledger, [theirs], "signed by the request's own key")
    late = join(STRANGER, "other", created_at=T0 + 2, auth_at=T0 + 2 + 601)
    await refused(ledger, [late], "more than 600 s")
    await refused(ledger, [leave(OWNER, "other")], "it cannot leave")
    await refused(ledger, [leave(STRANGER, "other")], "not a member")
