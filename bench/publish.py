"""Benchmark of publishing and export: `uv run python bench/publish.py`.

Publishes through the ledger service into an embedded PostgreSQL in a temporary directory and
prints figures; asserts nothing. Targets (issue 3, on the 2-core dev machine):
- batches of 1,000 claims at >= 3,000 events/s end to end, and at most 4x the time of bare
  signature verification of the same events, measured in the same run;
- batches of 1,000 links quoting one 100,000-character evidence: events/s;
- export of 100,000 events: events/s, and peak memory that stays flat (compared with 10,000).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import resource
import tempfile
import time
from pathlib import Path

from coincurve import PublicKeyXOnly

from tms.config import Settings
from tms.ledger.export import Exporter
from tms.ledger.service import Ledger
from tms.nostr.events import Event, SecretKey
from tms.rules.terms import current_terms
from tms.store import database as db

WORDS = (
    "histamine intolerance diamine oxidase activity serum plasma mast cell review trial cohort "
    "patients reported symptoms reduced enzyme levels were measured in and again after weeks"
).split()


def sign(key: SecretKey, kind: int, content: dict[str, object], created_at: int) -> Event:
    text = json.dumps(content, separators=(",", ":"), ensure_ascii=False)
    return key.sign(kind, text, created_at)


def bare_verify(events: list[Event]) -> float:
    """Seconds to verify the batch's signatures with coincurve alone (key parsed per event)."""
    raw = [(bytes.fromhex(e.pubkey), bytes.fromhex(e.sig), bytes.fromhex(e.id)) for e in events]
    start = time.perf_counter()
    for pubkey, sig, msg in raw:
        assert PublicKeyXOnly(pubkey).verify(sig, msg)
    return time.perf_counter() - start


def rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


async def timed_publish(ledger: Ledger, batch: list[Event]) -> float:
    dicts = [e.to_dict() for e in batch]
    start = time.perf_counter()
    result = await ledger.publish(dicts)
    elapsed = time.perf_counter() - start
    assert len(result["accepted"]) == len(batch), result
    return elapsed


async def claims(ledger: Ledger, key: SecretKey, batches: int, size: int, now: int) -> None:
    rng = random.Random(1)
    publish_times, bare_times = [], []
    for b in range(batches):
        batch = [
            sign(
                key,
                4702,
                {"collection": "bench", "text": " ".join(rng.choices(WORDS, k=12))},
                now - b,
            )
            for _ in range(size)
        ]
        bare_times.append(bare_verify(batch))
        publish_times.append(await timed_publish(ledger, batch))
    total, bare = sum(publish_times), sum(bare_times)
    print(f"claims: {batches} batches of {size:,}")
    print(
        f"  publish end to end      {batches * size / total:10,.0f} events/s"
        f"   (median batch {sorted(publish_times)[batches // 2] * 1000:.0f} ms)"
    )
    print(f"  bare verification       {batches * size / bare:10,.0f} events/s")
    print(f"  publish / bare          {total / bare:10.2f}x")


async def links(ledger: Ledger, key: SecretKey, batches: int, size: int, now: int) -> None:
    rng = random.Random(2)
    text = " ".join(rng.choices(WORDS, k=20_000))[:100_000]
    evidence = sign(key, 4701, {"collection": "bench", "title": "Long", "text": text}, now)
    claim = sign(key, 4702, {"collection": "bench", "text": "Target claim."}, now)
    await ledger.publish([evidence.to_dict(), claim.to_dict()])
    times = []
    for b in range(batches):
        batch = []
        for i in range(size):
            start = rng.randrange(0, len(text) - 300)
            batch.append(
                sign(
                    key,
                    4703,
                    {
                        "collection": "bench",
                        "from": evidence.id,
                        "to": claim.id,
                        "relation": "SUPPORTS",
                        "quote": text[start : start + rng.randrange(30, 250)].strip(),
                        "reason": f"Reason {b}-{i}.",
                    },
                    now - b,
                )
            )
        times.append(await timed_publish(ledger, batch))
    print(f"links: {batches} batches of {size:,} quoting one {len(text):,}-character evidence")
    print(f"  publish end to end      {batches * size / sum(times):10,.0f} events/s")


async def export(ledger: Ledger, key: SecretKey, total: int, now: int) -> None:
    have = await ledger.pool.fetchval("SELECT count(*) FROM events WHERE collection = 'bench'")
    rng = random.Random(3)
    while have < total:
        size = min(1000, total - have)
        batch = [
            sign(
                key,
                4702,
                {"collection": "bench", "text": " ".join(rng.choices(WORDS, k=20))},
                now - 1000 - have // 1000,
            )
            for _ in range(size)
        ]
        await ledger.publish([e.to_dict() for e in batch])
        have += size

    for limit in (total // 10, total):
        peak = before = rss_mib()
        count = 0
        start = time.perf_counter()
        async for _line in Exporter(ledger.pool).lines("bench"):
            count += 1
            if count % 1000 == 0:
                peak = max(peak, rss_mib())
            if count >= limit:
                break
        elapsed = time.perf_counter() - start
        print(
            f"export: {count:,} events   {count / elapsed:10,.0f} events/s"
            f"   RSS {before:.0f} MiB before, peak {peak:.0f} MiB (+{peak - before:.1f})"
        )


async def main(ns: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings.from_env({"TMS_DATA_DIR": str(Path(tmp) / "data")})
        url = ns.database_url or await db.database_url(settings)
        pool = await db.open_pool(url, max_size=4)
        ledger = Ledger(pool)
        key = SecretKey.generate()
        now = int(time.time())
        await ledger.approve([key.pubkey])
        terms = current_terms()
        await ledger.publish(
            [
                sign(
                    key,
                    4706,
                    {"version": terms["version"], "sha256": terms["sha256"]},
                    now - 10_000,
                ).to_dict()
            ]
        )
        await claims(ledger, key, ns.batches, ns.size, now)
        await links(ledger, key, ns.batches, ns.size, now)
        await export(ledger, key, ns.export, now)
        await pool.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=10)
    parser.add_argument("--size", type=int, default=1000)
    parser.add_argument("--export", type=int, default=100_000)
    parser.add_argument("--database-url", help="use this (empty) database instead of embedded")
    asyncio.run(main(parser.parse_args()))
