"""Membership changes (NIP-86 `allowpubkey` / `unallowpubkey`, kind 27235 with its body): kept
in the collection's log, folded with member lists in log order (`tms.rules.membership`), exported
with their body, and checked line by line and as a history by what `tms verify-export` runs."""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncIterator

import pytest
from factories import (
    MEMBER,
    MEMBER2,
    NOW,
    OWNER,
    T0,
    claim,
    compact,
    create_database,
    drop_database,
    member_change,
    members,
    terms,
)
from publishing import open_collection, publish, readable, reader_of, refused

from tms.errors import PublishError
from tms.ledger.access import Access
from tms.ledger.read.export import Exporter
from tms.ledger.read.reads import Reads
from tms.ledger.service import Ledger
from tms.nostr.events import Event
from tms.rules.admission import OPERATOR
from tms.rules.expected import APPLIES
from tms.store.database import open_pool
from tms.tlog.export_lines import Line, read_line
from tms.tlog.replay import replay

pytestmark = pytest.mark.anyio


@pytest.fixture
async def second_ledger(pg_server_url: str, template_url: str) -> AsyncIterator[Ledger]:
    """A second fresh database on the same server, to publish an export into."""
    url = await create_database(pg_server_url, template_url, "tms_changes")
    pool = await open_pool(url, min_size=1, max_size=2)
    try:
        yield Ledger(pool)
    finally:
        await pool.close()
        await drop_database(pg_server_url, url)


async def export(ledger: Ledger, slug: str) -> list[str]:
    exporter = Exporter(ledger.pool)
    return [line async for line in exporter.lines(await readable(exporter, slug))]


async def member_keys(ledger: Ledger, slug: str) -> set[str]:
    rows = await ledger.pool.fetch("SELECT pubkey FROM memberships WHERE collection = $1", slug)
    return {row["pubkey"] for row in rows}


def problems(lines: list[str], slug: str) -> list[str]:
    read = [read_line(number, line.encode()) for number, line in enumerate(lines, start=1)]
    found = [f"{line.problem}" for line in read if isinstance(line, Line) and line.problem]
    entries = [line for line in read if isinstance(line, Line) and line.collection == slug]
    replay(entries, slug, lambda text, _: found.append(text))
    return found


async def test_allow_and_unallow_change_who_may_write(ledger: Ledger) -> None:
    await open_collection(ledger, OWNER, "lab")
    allow = member_change(OWNER, "lab", "allowpubkey", MEMBER.pubkey, created_at=T0 + 1)
    result = await publish(ledger, allow, terms(MEMBER))
    assert result["accepted"][0] == allow["id"]
    assert await member_keys(ledger, "lab") == {MEMBER.pubkey}
    assert await Access(ledger.pool).can_read(MEMBER.pubkey, "lab")
    await publish(ledger, claim(MEMBER, "lab", "Written as a member."))
    stored = await ledger.pool.fetchrow("SELECT * FROM member_changes WHERE id = $1", allow["id"])
    assert (stored["method"], stored["target"], stored["body"]) == (
        "allowpubkey",
        MEMBER.pubkey,
        allow["body"],
    )

    unallow = member_change(OWNER, "lab", "unallowpubkey", MEMBER.pubkey, created_at=T0 + 2)
    await publish(ledger, unallow)
    assert await member_keys(ledger, "lab") == set()
    assert not await Access(ledger.pool).can_read(MEMBER.pubkey, "lab")
    await refused(ledger, [claim(MEMBER, "lab", "No longer.", created_at=T0 + 3)], "not a member")


async def test_only_the_owner_signs_a_change_and_only_over_its_body(ledger: Ledger) -> None:
    await open_collection(ledger, OWNER, "lab", [MEMBER])
    await publish(ledger, terms(MEMBER))
    await refused(
        ledger,
        [member_change(MEMBER, "lab", "allowpubkey", MEMBER2.pubkey)],
        "only the owner of collection 'lab' changes its members",
    )
    change = member_change(OWNER, "lab", "allowpubkey", MEMBER2.pubkey)
    await refused(
        ledger,
        [{**change, "body": compact({"method": "allowpubkey", "params": [MEMBER.pubkey]})}],
        "its SHA-256 is not the signed 'payload' tag",
    )
    await refused(ledger, [{k: v for k, v in change.items() if k != "body"}], "'body' is missing")
    await refused(
        ledger,
        [member_change(OWNER, "lab", "unallowpubkey", OWNER.pubkey)],
        "the owner of collection 'lab' always belongs to it",
    )
    await refused(
        ledger,
        [member_change(OWNER, "lab", "banpubkey", MEMBER2.pubkey)],
        "field 'body' is invalid",
    )
    # The body is only for kind 27235: every other kind still refuses unknown fields.
    await refused(ledger, [{**claim(OWNER, "lab", "x"), "body": "{}"}], "unknown fields")


async def test_the_collection_is_the_one_the_signed_url_names(ledger: Ledger) -> None:
    await open_collection(ledger, OWNER, "lab")
    await open_collection(ledger, OWNER, "other")
    change = member_change(OWNER, "other", "allowpubkey", MEMBER.pubkey, created_at=T0 + 1)
    await publish(ledger, change)
    assert await member_keys(ledger, "other") == {MEMBER.pubkey}
    assert await member_keys(ledger, "lab") == set()


async def test_lists_and_changes_fold_in_log_order_by_time(ledger: Ledger) -> None:
    """A later second wins; a record older than the one in force changes nothing (so a change
    held back and appended later cannot undo what came after it)."""
    await open_collection(ledger, OWNER, "lab")
    listed = members(OWNER, "lab", [MEMBER.pubkey], created_at=T0 + 10)
    late = member_change(OWNER, "lab", "unallowpubkey", MEMBER.pubkey, created_at=T0 + 5)
    result = await publish(ledger, listed, late)
    assert result["superseded"] == [late["id"]]
    assert await member_keys(ledger, "lab") == {MEMBER.pubkey}
    # In the same second as the list, a change applies in log order.
    same = member_change(OWNER, "lab", "allowpubkey", MEMBER2.pubkey, created_at=T0 + 10)
    await publish(ledger, same)
    assert await member_keys(ledger, "lab") == {MEMBER.pubkey, MEMBER2.pubkey}
    # A list of a later second replaces all of it; the members page's head is the last record.
    head = await ledger.pool.fetchval(
        "SELECT list_id FROM current_member_lists WHERE collection = 'lab'"
    )
    assert head == same["id"]
    await publish(ledger, members(OWNER, "lab", [MEMBER2.pubkey], created_at=T0 + 11))
    assert await member_keys(ledger, "lab") == {MEMBER2.pubkey}


async def test_export_carries_the_body_and_verifies(ledger: Ledger, second_ledger: Ledger) -> None:
    await open_collection(ledger, OWNER, "lab")
    allow = member_change(OWNER, "lab", "allowpubkey", MEMBER.pubkey, created_at=T0 + 1)
    await publish(ledger, allow, terms(MEMBER), claim(MEMBER, "lab", "Hello.", created_at=T0 + 2))
    lines = await export(ledger, "lab")
    line = next(json.loads(text) for text in lines if json.loads(text)["kind"] == 27235)
    assert line == allow
    # Any Nostr library: the seven NIP-01 fields give the id, the signature verifies; the body
    # is what the signed payload tag hashes.
    nip01 = {k: v for k, v in line.items() if k != "body"}
    Event.from_dict(nip01).verify()
    payload = next(tag[1] for tag in line["tags"] if tag[0] == "payload")
    assert hashlib.sha256(line["body"].encode()).hexdigest() == payload
    assert problems(lines, "lab") == []

    # One byte of the body changed: the line no longer verifies.
    forged = [
        text.replace('"allowpubkey', '"unallowpubkey') if '"kind":27235' in text else text
        for text in lines
    ]
    assert any("payload" in text for text in problems(forged, "lab"))
    # Without the change, the member's claim has no member list behind it.
    dropped = [text for text in lines if '"kind":27235' not in text]
    assert any("neither the owner" in text for text in problems(dropped, "lab"))

    # Published again as it is, the export rebuilds the same membership.
    await second_ledger.approve([OWNER.pubkey])
    await publish(second_ledger, *(json.loads(text) for text in lines), now=NOW)
    assert await member_keys(second_ledger, "lab") == {MEMBER.pubkey}
    assert await export(second_ledger, "lab") == lines


async def test_a_change_asked_to_apply_is_refused_when_a_newer_record_is_in_force(
    ledger: Ledger,
) -> None:
    """NIP-86's door asks that the change take effect: behind a list signed with a clock ahead,
    it is refused and nothing is stored (published plainly, it would be stored to no effect)."""
    await open_collection(ledger, OWNER, "lab")
    await publish(ledger, members(OWNER, "lab", [MEMBER.pubkey], created_at=T0 + 600))
    change = member_change(OWNER, "lab", "unallowpubkey", MEMBER.pubkey, created_at=T0 + 1)
    with pytest.raises(PublishError, match="later than this change: it would not take effect"):
        await ledger.submit(
            [change], origin=OPERATOR, now=NOW, within="lab", expected={"lab": APPLIES}
        )
    assert await member_keys(ledger, "lab") == {MEMBER.pubkey}
    assert await ledger.pool.fetchval("SELECT count(*) FROM member_changes") == 0


async def test_get_event_shows_what_a_change_changes(ledger: Ledger) -> None:
    await open_collection(ledger, OWNER, "lab")
    change = member_change(OWNER, "lab", "allowpubkey", MEMBER.pubkey, created_at=T0 + 1)
    await publish(ledger, change)
    found = await Reads(ledger.pool).get_event(await reader_of(ledger, OWNER.pubkey), change["id"])
    assert found is not None
    assert (found["kind"], found["kind_name"]) == (27235, "membership")
    assert found["content"] == {
        "collection": "lab",
        "method": "allowpubkey",
        "params": [MEMBER.pubkey],
    }


async def test_a_members_page_opened_before_a_change_is_refused_when_saved(
    ledger: Ledger,
) -> None:
    """The members page sends the head it was opened with; a change since then is the head
    now, so saving the stale page would drop the key the change let in: refused."""
    await open_collection(ledger, OWNER, "lab")
    opened = await ledger.pool.fetchval(
        "SELECT list_id FROM current_member_lists WHERE collection = 'lab'"
    )
    allow = member_change(OWNER, "lab", "allowpubkey", MEMBER.pubkey, created_at=T0 + 1)
    await publish(ledger, allow)
    stale = members(OWNER, "lab", [MEMBER2.pubkey], created_at=T0 + 2)
    with pytest.raises(PublishError, match="changed since this page was loaded"):
        await ledger.submit([stale], origin=OPERATOR, now=NOW, expected={"lab": opened})
    # Opened after the change, the page saves.
    await ledger.submit([stale], origin=OPERATOR, now=NOW, expected={"lab": allow["id"]})
    assert await member_keys(ledger, "lab") == {MEMBER2.pubkey}
