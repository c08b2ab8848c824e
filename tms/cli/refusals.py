"""`tms refusals`: what was refused (bad signatures, non-members, replays, rate limits,
SSRF...), read from the refusal log's table: counts by kind since a time, what the log has
dropped to keep its size, then the newest records."""

from __future__ import annotations

from datetime import datetime

from tms.cli.database import open_pool
from tms.cli.notation import utc
from tms.config import Settings
from tms.nostr import nip19
from tms.types import PubKey


async def refusals(since: datetime, pubkey: PubKey | None, limit: int) -> int:
    from tms.guard.refusal_store import RefusalStore

    settings = Settings.from_env()
    _, pool = await open_pool(settings, max_size=1)
    try:
        store = RefusalStore(pool)
        counts = await store.counts(since, pubkey)
        newest = await store.newest(since, pubkey, limit) if limit else []
        dropped = await store.dropped()
    finally:
        await pool.close()
    whose = f" by {nip19.npub_encode(pubkey)}" if pubkey else ""
    print(f"refusals{whose} since {utc(since)}: {sum(counts.values()):,}")
    width = max((len(kind) for kind in counts), default=0)
    for kind, count in counts.items():
        print(f"  {kind:<{width}}  {count:>9,}")
    print(
        f"dropped so far: {dropped:,} (each kind keeps its newest {settings.refusals_keep:,} "
        "rows; TMS_REFUSALS_KEEP)"
    )
    if newest:
        print(
            f"the newest {len(newest):,} rows, oldest first (time, kind, count, tool, address, "
            "key); a rate_limited row counts a minute's refusals of one route, address and key, "
            "from the minute's start:"
        )
    for record in newest:
        key = nip19.npub_encode(record.pubkey) if record.pubkey else "-"
        print(
            f"{utc(record.at)}  {record.kind}  {record.count:,}  {record.tool}  "
            f"{record.address or '-'}  {key}"
        )
    return 0
