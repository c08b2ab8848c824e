"""pgvector in SQL text: vector literals, the per-model HNSW index, and a search's settings.

Vectors live in one dimensionless `embedding` column. The server creates one partial HNSW index
per model over `embedding::vector(<dims>)` (`ensure_vector_index`), and the search SQL repeats
that exact expression and names the model as a literal, because a partial index is only usable
when the planner can prove its predicate from constants in the query (a bound model name gave a
sequential scan of 150-220 ms at 100,000 claims).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from typing import Final

from tms.store.database import Connection, Pool

HNSW_MAX_DIMS: Final = 2000  # pgvector's HNSW limit for the `vector` type
# Candidates an HNSW search keeps (pgvector defaults to 40): at 100,000 claims, recall@10 went
# from 0.92 at 40 to 0.97 at 200 for under a millisecond more.
HNSW_EF_SEARCH: Final = 200
_INDEX_LOCK_SEED: Final = 8  # advisory-lock key space apart from the ledger's (seed 7)


def sql_literal(value: str) -> str:
    """A string as an SQL literal, for the model name the partial index's predicate names.

    Quotes are doubled; control characters and backslashes are refused rather than escaped, so
    the literal means the same whatever `standard_conforming_strings` says."""
    if not value or any(ord(ch) < 0x20 or ch in "\\\x7f" for ch in value):
        raise ValueError(f"model name {value!r} is empty or holds control characters")
    return "'" + value.replace("'", "''") + "'"


def check_dims(dims: int) -> None:
    if isinstance(dims, bool) or not isinstance(dims, int) or not 1 <= dims <= HNSW_MAX_DIMS:
        raise ValueError(f"dims must be an integer from 1 to {HNSW_MAX_DIMS}, not {dims!r}")


def vector_index_name(model: str, dims: int) -> str:
    """A short, stable index name: model ids are long and hold characters names cannot."""
    digest = hashlib.sha256(model.encode("utf-8")).hexdigest()[:16]
    return f"embeddings_hnsw_{digest}_{dims}"


def vector_literal(vector: Sequence[float], dims: int) -> str:
    """pgvector's text form, bound as a text parameter, so the pool needs no per-connection
    codec. The SQL casts it inside a scalar subquery, `(SELECT $2::text::vector)`: evaluated
    once per statement, where a bare cast in a generic plan would re-parse the text for every
    row compared (tens of microseconds each). `repr` keeps every float exactly."""
    check_dims(dims)
    if len(vector) != dims:
        raise ValueError(f"query vector has {len(vector)} dimensions, not {dims}")
    values = [float(x) for x in vector]
    if not all(math.isfinite(x) for x in values):
        raise ValueError("query vector holds NaN or infinity")
    return "[" + ",".join(repr(x) for x in values) + "]"


async def ensure_vector_index(pool: Pool, model: str, dims: int) -> None:
    """Create the model's partial HNSW index unless it exists (run at start-up).

    Under an advisory lock, so two servers starting at once do not race on the name. The build
    holds a SHARE lock on `embeddings` (writes to it wait; the ledger does not)."""
    check_dims(dims)
    name = vector_index_name(model, dims)
    sql = (
        f"CREATE INDEX IF NOT EXISTS {name} ON embeddings "
        f"USING hnsw ((embedding::vector({dims})) vector_cosine_ops) "
        f"WHERE model = {sql_literal(model)}"
    )
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended($1, $2))", name, _INDEX_LOCK_SEED
        )
        await conn.execute(sql)


class HnswTuning:
    """Per-transaction HNSW settings for one search; learns once whether this pgvector has
    iterative scans (0.8 and later)."""

    def __init__(self) -> None:
        self._iterative_scan: bool | None = None

    async def apply(self, conn: Connection, limit: int) -> None:
        """Inside the caller's transaction: enough candidates for `limit`, and (pgvector ≥ 0.8)
        an iterative scan, so a filter on one collection does not starve the result."""
        if self._iterative_scan is None:
            # Load the extension's library first: until then any `hnsw.*` name is accepted as a
            # placeholder, and the check would prove nothing.
            await conn.execute("SELECT '[1]'::vector")
            setting = await conn.fetchval("SELECT current_setting('hnsw.iterative_scan', true)")
            self._iterative_scan = setting is not None
        ef_search = int(max(limit, HNSW_EF_SEARCH))  # an integer: written into the SQL
        # SET LOCAL statements, not set_config(): on Citus the search runs on a worker, and
        # `citus.propagate_set_commands = local` passes SET LOCAL (only) on to the workers the
        # transaction uses. Anywhere else that first setting is a name nothing reads.
        settings = [
            "SET LOCAL citus.propagate_set_commands = 'local'",
            f"SET LOCAL hnsw.ef_search = {ef_search}",
        ]
        if self._iterative_scan:
            settings.append("SET LOCAL hnsw.iterative_scan = relaxed_order")
        await conn.execute("; ".join(settings))
