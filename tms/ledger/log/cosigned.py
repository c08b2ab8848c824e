"""This server as a log: the cosignatures witnesses returned for its collections' checkpoints,
and where each witness stands on each log.

A checkpoint a member reads (`/c/<slug>/checkpoint`, `get_checkpoint`, an export's checkpoint
line) carries the log's signature and every cosignature stored for it: one C2SP signed note
with several signatures, which any note verifier opens with the keys it trusts. Which one is
served: the newest that meets the policy's quorum, else the newest that any witness cosigned,
else the newest signed (a log no witness has seen yet); `publish` keeps answering with the one
it has just signed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from tms.store.database import Pool
from tms.tlog.cosignature import Cosignature
from tms.tlog.policy import Policy
from tms.types import Slug

LOOK_BACK: Final = 16  # cosigned checkpoints looked through for the newest meeting the quorum

_SQL_COSIGNED: Final = """
    SELECT c.size, c.root, c.note, array_agg(s.line ORDER BY s.witness) AS lines
    FROM tlog_checkpoints c
    JOIN tlog_cosignatures s ON s.collection = c.collection AND s.size = c.size
    WHERE c.collection = $1
      AND c.size IN (SELECT DISTINCT size FROM tlog_cosignatures WHERE collection = $1
                     ORDER BY size DESC LIMIT $2)
    GROUP BY c.size, c.root, c.note
    ORDER BY c.size DESC"""
_SQL_RECORD: Final = """
    INSERT INTO tlog_cosignatures (collection, size, witness, signed_time, line)
    VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING"""
_SQL_STATE: Final = """
    SELECT witness, size, failures, retry_at <= now() AS due FROM tlog_witness_state
    WHERE collection = $1"""
# The times come in as values, never in DO UPDATE (Citus allows only immutable functions there).
_SQL_STOOD: Final = """
    INSERT INTO tlog_witness_state
        (collection, witness, size, failures, retry_at, last_error, updated_at)
    VALUES ($1, $2, $3, 0, now(), NULL, now())
    ON CONFLICT (collection, witness) DO UPDATE
    SET size = excluded.size, failures = 0, retry_at = excluded.retry_at, last_error = NULL,
        updated_at = excluded.updated_at"""
_SQL_FAILED: Final = """
    INSERT INTO tlog_witness_state
        (collection, witness, failures, retry_at, last_error, updated_at)
    VALUES ($1, $2, 1, now() + make_interval(secs => $3), $4, now())
    ON CONFLICT (collection, witness) DO UPDATE
    SET failures = tlog_witness_state.failures + 1, retry_at = excluded.retry_at,
        last_error = excluded.last_error, updated_at = excluded.updated_at"""
# Collections whose newest checkpoint a witness (not backing off) has not cosigned yet: one
# index look-up per collection (its counts row, then its newest checkpoint).
_SQL_BEHIND: Final = """
    SELECT n.collection, c.size FROM collection_counts n
    CROSS JOIN LATERAL (SELECT size FROM tlog_checkpoints t WHERE t.collection = n.collection
                        ORDER BY size DESC LIMIT 1) AS c
    WHERE EXISTS (
        SELECT 1 FROM unnest($1::text[]) AS k(witness)
        LEFT JOIN tlog_witness_state w ON w.collection = n.collection AND w.witness = k.witness
        WHERE coalesce(w.size, 0) < c.size AND coalesce(w.retry_at <= now(), true))
    ORDER BY n.collection"""


@dataclass(frozen=True, slots=True)
class Witnessed:
    """A checkpoint as a member is shown it."""

    size: int
    root: bytes
    note: str  # the log's signature and every stored cosignature
    witnessed_by: tuple[str, ...]  # the policy's names of the witnesses that cosigned it
    quorum: bool | None  # None: this server has no witness policy


@dataclass(frozen=True, slots=True)
class Standing:
    """Where one witness stands on one log."""

    size: int  # the size it last cosigned (sent as `old`)
    failures: int
    due: bool  # not backing off


class Cosigned:
    def __init__(self, pool: Pool, policy: Policy | None) -> None:
        self.pool = pool
        self.policy = policy

    async def best(self, slug: Slug) -> Witnessed | None:
        """The newest checkpoint meeting the quorum, else the newest cosigned; None when no
        witness has cosigned any (the caller serves the newest signed)."""
        if self.policy is None:
            return None
        rows = await self.pool.fetch(_SQL_COSIGNED, slug, LOOK_BACK)
        judged = [self._judge(r["size"], bytes(r["root"]), r["note"], r["lines"]) for r in rows]
        return next((w for w in judged if w.quorum), judged[0] if judged else None)

    def _judge(self, size: int, root: bytes, note: str, lines: Sequence[str]) -> Witnessed:
        cosigned = note + "".join(f"{line}\n" for line in lines)
        if self.policy is None:
            return Witnessed(size, root, cosigned, (), None)
        verdict = self.policy.judge(cosigned)  # stored lines were verified when they came
        names = self.policy.named(c.name for c in verdict.cosigned_by)
        return Witnessed(size, root, cosigned, tuple(names), verdict.quorum)

    # --- what the submitter keeps -----------------------------------------------------------

    async def behind(self, witnesses: Sequence[str]) -> list[tuple[Slug, int]]:
        """Collections whose newest checkpoint a due witness has not cosigned, and its size."""
        rows = await self.pool.fetch(_SQL_BEHIND, list(witnesses))
        return [(r["collection"], r["size"]) for r in rows]

    async def standing(self, slug: Slug) -> dict[str, Standing]:
        rows = await self.pool.fetch(_SQL_STATE, slug)
        return {r["witness"]: Standing(r["size"], r["failures"], r["due"]) for r in rows}

    async def record(self, slug: Slug, size: int, witness: str, cosignature: Cosignature) -> None:
        async with self.pool.acquire() as conn, conn.transaction():
            await conn.execute(
                _SQL_RECORD, slug, size, witness, cosignature.timestamp, cosignature.line
            )
            await conn.execute(_SQL_STOOD, slug, witness, size)

    async def stands_at(self, slug: Slug, witness: str, size: int) -> None:
        await self.pool.execute(_SQL_STOOD, slug, witness, size)

    async def failed(self, slug: Slug, witness: str, retry_seconds: float, why: str) -> None:
        await self.pool.execute(_SQL_FAILED, slug, witness, retry_seconds, why[:500])
