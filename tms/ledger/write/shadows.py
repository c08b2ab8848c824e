"""What a batch an operator's write policy shadow-rejected is told: exactly what a publish that
stored it would say, while nothing is stored (`Ledger.submit`).

Its events are said accepted but for those already stored (said skipped, as any publish says
them), its collections are named, and each collection's latest signed checkpoint is returned as
a publish returns the one it signed (a collection with none yet has none). Two reads, outside
any lock: nothing is judged, so nothing needs to be serialized against other batches.
"""

from __future__ import annotations

import base64
from collections.abc import Collection, Sequence
from typing import Final

from tms.results import CheckpointInfo, PublishResult
from tms.rules.publish import Parsed
from tms.store.database import Pool
from tms.types import UNSCOPED, EventId, Slug

# As the snapshot looks stored events up: under the collections the batch's copies name.
_SQL_STORED: Final = """
    SELECT id FROM events WHERE collection = ANY($2::text[]) AND id = ANY($1::text[])"""
_SQL_LATEST: Final = """
    SELECT DISTINCT ON (collection) collection, size, root, note FROM tlog_checkpoints
    WHERE collection = ANY($1::text[]) ORDER BY collection, size DESC"""


async def shadow_result(
    pool: Pool, batch: Sequence[Parsed], embeds: Collection[int]
) -> PublishResult:
    """The answer a publish of `batch` would give, storing nothing; `embeds`: the kinds whose
    vectors it would say it computed (none when it would not wait for them)."""
    ids = list(dict.fromkeys(p.event.id for p in batch))
    filed = sorted({p.collection or UNSCOPED for p in batch})
    async with pool.acquire() as conn:
        stored = {row["id"] for row in await conn.fetch(_SQL_STORED, ids, filed)}
        accepted: list[Parsed] = []
        skipped: list[EventId] = []
        for item in batch:  # as the judge sorts them: stored before, or repeated in the batch
            if item.event.id in stored:
                skipped.append(item.event.id)
            else:
                stored.add(item.event.id)
                accepted.append(item)
        slugs: list[Slug] = sorted({p.collection for p in accepted if p.collection is not None})
        rows = await conn.fetch(_SQL_LATEST, slugs) if slugs else []
    checkpoints: list[CheckpointInfo] = [
        {
            "collection": row["collection"],
            "origin": row["note"].split("\n", 1)[0],
            "size": row["size"],
            "root": base64.b64encode(row["root"]).decode("ascii"),
            "note": row["note"],
        }
        for row in rows
    ]
    return {
        "accepted": [p.event.id for p in accepted],
        "skipped": skipped,
        "collections": slugs,
        "checkpoints": checkpoints,
        "embedded": sum(1 for p in accepted if p.event.kind in embeds),
    }
