"""The refusal log as the database keeps it (sql/007_refusals.sql): written in batches, kept to
the newest `keep` rows, and read by the operator's `tms refusals`.

Not ledger: rows are pruned. The recorder that feeds it off the request path is
`tms.guard.refusals`; this module only writes and reads.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Final

from tms.store.database import Pool

_SQL_INSERT: Final = """
    INSERT INTO refusals (at, kind, tool, pubkey, address)
    SELECT * FROM unnest($1::timestamptz[], $2::text[], $3::text[], $4::text[], $5::text[])"""
# The newest `keep` rows stay; the rest go, oldest first, and are counted. Sequence numbers may
# skip (a write that failed), so this keeps at most `keep`.
_SQL_PRUNE: Final = """
    WITH gone AS (
        DELETE FROM refusals WHERE seq <= (SELECT max(seq) FROM refusals) - $1 RETURNING 1
    )
    UPDATE refusals_dropped SET dropped = dropped + $2 + (SELECT count(*) FROM gone)"""
_SQL_FILTER: Final = "WHERE at >= $1 AND ($2::text IS NULL OR pubkey = $2)"
_SQL_COUNTS: Final = f"""
    SELECT kind, count(*) AS n FROM refusals {_SQL_FILTER} GROUP BY kind ORDER BY n DESC, kind"""
_SQL_NEWEST: Final = f"""
    SELECT at, kind, tool, pubkey, address FROM refusals {_SQL_FILTER}
    ORDER BY seq DESC LIMIT $3"""
_SQL_DROPPED: Final = "SELECT dropped FROM refusals_dropped"


@dataclass(frozen=True, slots=True)
class Record:
    """One refusal: never what was sent, only who, where, when and what kind."""

    at: datetime
    kind: str
    tool: str
    pubkey: str | None
    address: str | None


class RefusalStore:
    def __init__(self, pool: Pool) -> None:
        self.pool = pool

    async def write(self, records: Sequence[Record], keep: int, lost: int = 0) -> None:
        """Add `records`, then keep only the newest `keep` rows; the rows deleted, and `lost`
        (records that never reached the database), are added to the count of drops."""
        async with self.pool.acquire() as conn, conn.transaction():
            if records:
                await conn.execute(
                    _SQL_INSERT,
                    [r.at for r in records],
                    [r.kind for r in records],
                    [r.tool for r in records],
                    [r.pubkey for r in records],
                    [r.address for r in records],
                )
            await conn.execute(_SQL_PRUNE, keep, lost)

    async def counts(self, since: datetime, pubkey: str | None = None) -> dict[str, int]:
        rows = await self.pool.fetch(_SQL_COUNTS, since, pubkey)
        return {row["kind"]: row["n"] for row in rows}

    async def newest(self, since: datetime, pubkey: str | None, limit: int) -> list[Record]:
        """The newest `limit` records from `since` on, oldest first."""
        rows = await self.pool.fetch(_SQL_NEWEST, since, pubkey, limit)
        return [Record(**dict(row)) for row in reversed(rows)]

    async def dropped(self) -> int:
        value: int = await self.pool.fetchval(_SQL_DROPPED)
        return value
