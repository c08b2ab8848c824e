"""The refusal log as the database keeps it (sql/007_refusals.sql, sql/011_refusal_budgets.sql):
written in batches, each kind kept to its newest `keep` rows, and read by the operator's
`tms refusals`.

Rate-limit refusals come in floods (thousands a second from one address), so they are counted,
not listed: one row per minute, tool or route, address and key, whose `count` every refusal of
that minute adds to. Every other kind is one row per refusal, at its exact time. Each kind is
pruned on its own, so a flood of one kind can never push out the rare records of another (a bad
signature, a replay).

Not ledger: rows are pruned. The recorder that feeds it off the request path is
`tms.guard.refusals`; this module only writes and reads.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Final

from tms.errors import Refusal
from tms.store.database import Connection, Pool

COUNTED: Final = frozenset({str(Refusal.RATE_LIMITED)})  # kinds kept as a count a minute

_SQL_INSERT: Final = """
    INSERT INTO refusals (at, kind, tool, pubkey, address)
    SELECT * FROM unnest($1::timestamptz[], $2::text[], $3::text[], $4::text[], $5::text[])"""
# A minute's row is made by its first refusal and counts the rest; `xmax = 0` tells the rows
# made from those added to.
_SQL_COUNT: Final = """
    INSERT INTO refusals AS r (at, kind, tool, pubkey, address, count)
    SELECT at, 'rate_limited', tool, pubkey, address, n
    FROM unnest($1::timestamptz[], $2::text[], $3::text[], $4::text[], $5::bigint[])
        AS batch (at, tool, pubkey, address, n)
    ON CONFLICT (at, tool, address, pubkey) WHERE kind = 'rate_limited'
    DO UPDATE SET count = r.count + EXCLUDED.count
    RETURNING xmax = 0 AS made"""
# Each kind's rows, counted as they are made; the row is locked until the transaction ends, so
# writers of one kind prune one after another.
_SQL_KEPT: Final = """
    INSERT INTO refusals_kept AS k (kind, rows)
    SELECT * FROM unnest($1::text[], $2::bigint[])
    ON CONFLICT (kind) DO UPDATE SET rows = k.rows + EXCLUDED.rows
    RETURNING kind, rows"""
# A kind over its budget loses its oldest rows (by the index on kind and seq: the cost is the
# rows deleted); the refusals they held are counted as dropped.
_SQL_PRUNE: Final = """
    WITH gone AS (
        DELETE FROM refusals WHERE seq IN (
            SELECT seq FROM refusals WHERE kind = $1 ORDER BY seq LIMIT $2
        ) RETURNING count
    ), kept AS (
        UPDATE refusals_kept SET rows = rows - (SELECT count(*) FROM gone) WHERE kind = $1
    )
    UPDATE refusals_dropped SET dropped = dropped + (SELECT coalesce(sum(count), 0) FROM gone)"""
_SQL_LOST: Final = "UPDATE refusals_dropped SET dropped = dropped + $1"
_SQL_COUNTS: Final = """
    SELECT kind, sum(count)::bigint AS n FROM refusals WHERE at >= $1
    GROUP BY kind ORDER BY n DESC, kind"""
_SQL_COUNTS_OF_KEY: Final = """
    SELECT kind, sum(count)::bigint AS n FROM refusals WHERE pubkey = $2 AND at >= $1
    GROUP BY kind ORDER BY n DESC, kind"""
# Newest first by (at, seq), on the index of the same columns: the scan stops at the limit.
_SQL_NEWEST: Final = """
    SELECT at, kind, tool, pubkey, address, count FROM refusals WHERE at >= $1
    ORDER BY at DESC, seq DESC LIMIT $2"""
_SQL_NEWEST_OF_KEY: Final = """
    SELECT at, kind, tool, pubkey, address, count FROM refusals WHERE pubkey = $2 AND at >= $1
    ORDER BY at DESC, seq DESC LIMIT $3"""
_SQL_DROPPED: Final = "SELECT dropped FROM refusals_dropped"


@dataclass(frozen=True, slots=True)
class Record:
    """One refusal, or for a counted kind a minute's refusals of one tool, address and key
    (`count` of them, `at` the minute's start): never what was sent, only who, where, when and
    what kind."""

    at: datetime
    kind: str
    tool: str
    pubkey: str | None
    address: str | None
    count: int = 1

    @property
    def key(self) -> tuple[datetime, str, str, str | None, str | None]:
        """What a counted kind's row is one of."""
        return (self.at, self.kind, self.tool, self.pubkey, self.address)


def minute_of(at: datetime) -> datetime:
    """The start of `at`'s minute: a counted kind's rows are one a minute."""
    return at.replace(second=0, microsecond=0)


def counted(records: Iterable[Record]) -> list[Record]:
    """Records of counted kinds folded into one per minute, tool, address and key, their
    counts added up (the first of each keeps its place)."""
    totals: dict[tuple[datetime, str, str, str | None, str | None], Record] = {}
    for record in records:
        record = replace(record, at=minute_of(record.at))
        known = totals.get(record.key)
        totals[record.key] = (
            record if known is None else replace(known, count=known.count + record.count)
        )
    return list(totals.values())


class RefusalStore:
    def __init__(self, pool: Pool) -> None:
        self.pool = pool

    async def write(self, records: Sequence[Record], keep: int, lost: int = 0) -> None:
        """Add `records` (those of counted kinds to their minute's row), then keep only the
        newest `keep` rows of each kind written; the refusals in rows deleted, and `lost`
        (refusals that never reached the database), are added to the count of drops."""
        listed = [r for r in records if r.kind not in COUNTED]
        totals = counted(r for r in records if r.kind in COUNTED)
        made: Counter[str] = Counter(r.kind for r in listed)
        async with self.pool.acquire() as conn, conn.transaction():
            if listed:
                await conn.execute(
                    _SQL_INSERT,
                    [r.at for r in listed],
                    [r.kind for r in listed],
                    [r.tool for r in listed],
                    [r.pubkey for r in listed],
                    [r.address for r in listed],
                )
            if totals:
                rows = await conn.fetch(
                    _SQL_COUNT,
                    [r.at for r in totals],
                    [r.tool for r in totals],
                    [r.pubkey for r in totals],
                    [r.address for r in totals],
                    [r.count for r in totals],
                )
                made[str(Refusal.RATE_LIMITED)] += sum(row["made"] for row in rows)
            await _prune(conn, made, keep)
            if lost:
                await conn.execute(_SQL_LOST, lost)

    async def counts(self, since: datetime, pubkey: str | None = None) -> dict[str, int]:
        """Refusals by kind from `since` on (a counted kind's rows by their minute's start)."""
        if pubkey is None:
            rows = await self.pool.fetch(_SQL_COUNTS, since)
        else:
            rows = await self.pool.fetch(_SQL_COUNTS_OF_KEY, since, pubkey)
        return {row["kind"]: row["n"] for row in rows}

    async def newest(self, since: datetime, pubkey: str | None, limit: int) -> list[Record]:
        """The newest `limit` rows from `since` on, oldest first."""
        if pubkey is None:
            rows = await self.pool.fetch(_SQL_NEWEST, since, limit)
        else:
            rows = await self.pool.fetch(_SQL_NEWEST_OF_KEY, since, pubkey, limit)
        return [Record(**dict(row)) for row in reversed(rows)]

    async def dropped(self) -> int:
        value: int = await self.pool.fetchval(_SQL_DROPPED)
        return value


async def _prune(conn: Connection, made: Counter[str], keep: int) -> None:
    """Count the rows each kind gained, and bring every kind over `keep` back to it."""
    kinds = sorted(kind for kind, n in made.items() if n)
    if not kinds:
        return
    rows = await conn.fetch(_SQL_KEPT, kinds, [made[kind] for kind in kinds])
    for row in rows:
        if row["rows"] > keep:
            await conn.execute(_SQL_PRUNE, row["kind"], row["rows"] - keep)
