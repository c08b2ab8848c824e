"""A collection's membership records, in log order, as `tms.rules.member_views` folds them into
what its relay says of its members (NIP-43): the owner, the event that made the collection, and
every member list (kind 4705), membership change (kind 27235: NIP-86's, and invites), join
and leave (kinds 28934, 28936) with its `seq`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from asyncpg import Record

from tms.rules.member_views import MemberRecord
from tms.rules.membership import ALLOW, INVITE, Op
from tms.store.database import Pool
from tms.types import EventId, PubKey, Slug

# The event that made the collection is filed under it (the first event naming it).
_SQL_ORIGIN: Final = """
    SELECT c.owner, c.created_by, e.created_at FROM collections c
    JOIN events e ON e.collection = c.slug AND e.id = c.created_by
    WHERE c.slug = $1"""
_SQL_RECORDS: Final = """
    SELECT id, seq, created_at, members, NULL AS method, NULL AS target, NULL AS claim
      FROM member_lists WHERE collection = $1
    UNION ALL
    SELECT id, seq, created_at, NULL, method, target, claim
      FROM member_changes WHERE collection = $1
    ORDER BY seq"""

_SQL_LAST: Final = """
    SELECT greatest(
        (SELECT max(seq) FROM member_lists WHERE collection = $1),
        (SELECT max(seq) FROM member_changes WHERE collection = $1))"""


@dataclass(frozen=True, slots=True)
class Membership:
    owner: PubKey
    origin: tuple[EventId, int]  # the event that made the collection, and its created_at
    records: tuple[MemberRecord, ...]  # in log order


async def membership(pool: Pool, slug: Slug) -> Membership | None:
    """The collection's membership records (None: no such collection), in one snapshot."""
    async with pool.acquire() as conn, conn.transaction(isolation="repeatable_read"):
        origin = await conn.fetchrow(_SQL_ORIGIN, slug)
        if origin is None:
            return None
        rows = await conn.fetch(_SQL_RECORDS, slug)
    records = tuple(
        MemberRecord(row["id"], row["seq"], row["created_at"], _op(row)) for row in rows
    )
    return Membership(origin["owner"], (origin["created_by"], origin["created_at"]), records)


async def last_record(pool: Pool, slug: Slug) -> int:
    """The `seq` of the collection's last membership record, 0 for none."""
    last = await pool.fetchval(_SQL_LAST, slug)
    return int(last or 0)


def _op(row: Record) -> Op:
    """What a record's row does: a list replaces the set, a change (or a join, a leave) adds or
    removes its key, an invite changes no member."""
    method = row["method"]
    if method is None:
        return Op("replace", frozenset(row["members"]))
    if method == INVITE:
        return Op("invite", frozenset((row["target"],)))
    added = method in (ALLOW, "join")
    return Op("add" if added else "remove", frozenset((row["target"],)), claim=row["claim"])
