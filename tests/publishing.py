"""Publishing through a real `Ledger`: the result as a dict, and refusals checked three ways
(SPEC's words, the failing event named by position and id prefix, not a row written)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import pytest
from factories import NOW, EventDict, members, terms, where

from tms.ledger.access import Access, ReadableCollection, Reader
from tms.ledger.log.tree import LogRows
from tms.ledger.service import Ledger
from tms.nostr.events import SecretKey
from tms.rules.admission import OPERATOR
from tms.rules.publish import PublishError

# Every table the append-only triggers guard, and the mutable state beside them.
LEDGER_TABLES: Final = (
    "events",
    "collections",
    "evidence",
    "claims",
    "links",
    "contradictions",
    "contradiction_claims",
    "member_lists",
    "profiles",
    "terms_signatures",
    "tlog_leaves",
    "tlog_nodes",
    "tlog_checkpoints",
)
STATE_TABLES: Final = (
    *("current_member_lists", "memberships", "approvals", "link_anchors"),
    "claim_keys",  # sql/013
)
ALL_TABLES: Final = LEDGER_TABLES + STATE_TABLES


async def publish(ledger: Ledger, *events: EventDict, now: int = NOW) -> dict[str, Any]:
    return await ledger.submit(list(events), now=now, origin=OPERATOR)


async def counts(ledger: Ledger) -> dict[str, int]:
    """Rows in every table: a refused batch must leave every one of them unchanged."""
    async with ledger.pool.acquire() as conn:
        return {table: await conn.fetchval(f"SELECT count(*) FROM {table}") for table in ALL_TABLES}


async def refused(
    ledger: Ledger,
    batch: list[EventDict] | object,
    *fragments: str,
    position: int | None = None,
    now: int = NOW,
) -> str:
    """Publish `batch`, expect a PublishError whose message holds every fragment and names the
    event at `position` (with its id prefix), and check that nothing at all was written."""
    before = await counts(ledger)
    with pytest.raises(PublishError) as caught:
        await ledger.submit(batch, now=now, origin=OPERATOR)
    message = str(caught.value)
    for fragment in fragments:
        assert fragment in message, (fragment, message)
    if position is not None:
        assert isinstance(batch, list)
        assert message.startswith(where(position, batch[position]) + ": "), message
    assert await counts(ledger) == before, "a refused batch wrote something"
    return message


async def open_collection(
    ledger: Ledger, owner: SecretKey, slug: str, member_keys: Sequence[SecretKey] = ()
) -> dict[str, Any]:
    """Approve `owner`, sign its terms and create `slug` with a member list (owner not named)."""
    await ledger.approve([owner.pubkey])
    listed = members(owner, slug, [k.pubkey for k in member_keys])
    return await publish(ledger, terms(owner), listed)


async def join(ledger: Ledger, signer: SecretKey) -> None:
    """A member (or approved key) signs the current terms."""
    await publish(ledger, terms(signer))


async def without_log(ledger: Ledger, *batches: list[EventDict]) -> None:
    """Publish as a server before the transparency log did: events stored, no log."""

    async def nothing(conn: object, accepted: object, state: object) -> LogRows:
        return LogRows()

    hook = ledger.log.prepare
    ledger.log.prepare = nothing  # type: ignore[method-assign]
    try:
        for batch in batches:
            await publish(ledger, *batch)
    finally:
        ledger.log.prepare = hook  # type: ignore[method-assign]


async def readable(holder: Any, slug: str, pubkey: str | None = None) -> ReadableCollection:
    """What a read of one collection takes (`tms.ledger.access`), over `holder`'s pool (a
    `Ledger`, `Reads`, `Search`, `LogReads`, `Exporter`): the key's, checked as a door checks
    it, or without a key the operator's (any collection, even one with no rows)."""
    access = Access(holder.pool)
    if pubkey is None:
        return access.unsafe_for_operator(slug)
    return await access.collection(pubkey, slug)


async def reader_of(holder: Any, pubkey: str) -> Reader:
    """What a read across a key's collections takes: its `Reader`, as a door makes it."""
    return await Access(holder.pool).reader(pubkey)
