"""Helpers for the publish and export tests: real keys, real signatures, real PostgreSQL."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Final

import pytest

from tms.ledger.service import Ledger
from tms.nostr.events import SecretKey
from tms.rules.publish import PublishError
from tms.rules.terms import current_terms

T0: Final = 1_790_000_000  # default created_at of every signed event here
NOW: Final = T0 + 3600  # the server clock every publish in these tests is judged against

TERMS: Final = current_terms()

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
)
STATE_TABLES: Final = ("current_member_lists", "memberships", "approvals")
ALL_TABLES: Final = LEDGER_TABLES + STATE_TABLES


def key(byte: int) -> SecretKey:
    """A fixed key, so failures are reproducible."""
    return SecretKey(bytes([byte]) * 32)


OWNER: Final = key(0x11)
OWNER2: Final = key(0x22)
MEMBER: Final = key(0x33)
MEMBER2: Final = key(0x44)
STRANGER: Final = key(0x55)  # neither approved nor a member of anything
APPROVED: Final = key(0x66)  # approved, but a member of nobody else's collection

Event = dict[str, Any]


def compact(content: dict[str, Any]) -> str:
    """Content the way JSON.stringify writes it: no whitespace, UTF-8 as is."""
    return json.dumps(content, separators=(",", ":"), ensure_ascii=False)


def signed(
    signer: SecretKey,
    kind: int,
    content: dict[str, Any] | str,
    *,
    created_at: int = T0,
    tags: list[list[str]] | None = None,
) -> Event:
    text = content if isinstance(content, str) else compact(content)
    return signer.sign(kind, text, created_at, tags or []).to_dict()


def terms(
    signer: SecretKey,
    *,
    version: str | None = None,
    sha256: str | None = None,
    created_at: int = T0,
) -> Event:
    content = {"version": version or TERMS["version"], "sha256": sha256 or TERMS["sha256"]}
    return signed(signer, 4706, content, created_at=created_at)


def profile(
    signer: SecretKey,
    name: str,
    *,
    tags: list[list[str]] | None = None,
    created_at: int = T0,
    **extra: Any,
) -> Event:
    return signed(signer, 0, {"name": name, **extra}, tags=tags, created_at=created_at)


def evidence(signer: SecretKey, collection: str, text: str, **extra: Any) -> Event:
    return signed(signer, 4701, {"collection": collection, "text": text, **extra})


def claim(signer: SecretKey, collection: str, text: str, *, created_at: int = T0) -> Event:
    return signed(signer, 4702, {"collection": collection, "text": text}, created_at=created_at)


def link(
    signer: SecretKey,
    collection: str,
    source: str,
    target: str,
    quote: str,
    *,
    relation: str = "SUPPORTS",
    reason: str = "the quote says so",
) -> Event:
    content = {
        "collection": collection,
        "from": source,
        "to": target,
        "relation": relation,
        "quote": quote,
        "reason": reason,
    }
    return signed(signer, 4703, content)


def contradiction(
    signer: SecretKey, collection: str, claims: list[str], reason: str = "both cannot hold"
) -> Event:
    return signed(signer, 4704, {"collection": collection, "claims": claims, "reason": reason})


def members(
    signer: SecretKey, collection: str, pubkeys: list[str], *, created_at: int = T0
) -> Event:
    content = {"collection": collection, "members": pubkeys}
    return signed(signer, 4705, content, created_at=created_at)


def ids(events: list[Event]) -> list[str]:
    return [event["id"] for event in events]


def where(position: int, event: Event) -> str:
    """How an error names the event that failed: its position and its id's prefix."""
    return f"events[{position}] ({event['id'][:12]}…)"


async def publish(ledger: Ledger, *events: Event, now: int = NOW) -> dict[str, Any]:
    return await ledger.publish(list(events), now=now)


async def counts(ledger: Ledger) -> dict[str, int]:
    """Rows in every table: a refused batch must leave every one of them unchanged."""
    async with ledger.pool.acquire() as conn:
        return {table: await conn.fetchval(f"SELECT count(*) FROM {table}") for table in ALL_TABLES}


async def refused(
    ledger: Ledger,
    batch: list[Event] | object,
    *fragments: str,
    position: int | None = None,
    now: int = NOW,
) -> str:
    """Publish `batch`, expect a PublishError whose message holds every fragment and names the
    event at `position` (with its id prefix), and check that nothing at all was written."""
    before = await counts(ledger)
    with pytest.raises(PublishError) as caught:
        await ledger.publish(batch, now=now)
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
