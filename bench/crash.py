"""Crashes during publishing: `uv run python bench/crash.py` (100 cycles; 5 in the tests).

Starts `tms serve` as a user does (a subprocess on 127.0.0.1, embedded PostgreSQL in a fresh
temporary data directory, `TMS_EMBED=off`, rate limits off), approves a key and signs its terms.
Then, each cycle:

1. two clients publish 1,000-event batches (an evidence document, claims, and links quoting the
   document), each batch new, one after another;
2. at a random moment (uniform in `--kill-window` seconds after they start), `tms serve` is
   killed with SIGKILL: no shutdown, no cleanup, requests cut off mid-flight;
3. `tms serve` is started again on the same data directory (the embedded PostgreSQL survives
   its parent; the new server takes it up), and every batch sent in the cycle is looked up in
   the database: its events and its typed rows (evidence, claims, links) must be all there or
   all absent, and every batch a client was told was accepted must be all there.

At the end every batch of every cycle is checked again. It prints, per cycle and in total, the
batches sent, acknowledged, present and absent, and exits 1 if any batch is partial or any
acknowledged event missing (the one invariant here, so it stands in the tests as well).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import asyncpg
import httpx
from serving import Server, Signer, call

COLLECTION: Final = "crash"
CLIENTS: Final = 2
TEXT_WORDS: Final = 2_000


@dataclass
class Batch:
    events: list[dict[str, Any]]
    kinds: dict[int, int]  # events of each kind
    acknowledged: bool = False

    @property
    def ids(self) -> list[str]:
        return [event["id"] for event in self.events]


@dataclass
class Cycle:
    batches: list[Batch] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    stop: threading.Event = field(default_factory=threading.Event)


def make_batch(signer: Signer, tag: str, size: int, rng: random.Random) -> Batch:
    """One evidence document, then claims and links quoting it, alternately: `size` events."""
    words = [f"w{rng.randrange(10_000)}" for _ in range(TEXT_WORDS)]
    text = f"Document {tag}. " + " ".join(words)
    doc = signer.sign(4701, {"collection": COLLECTION, "text": text, "title": f"doc {tag}"})
    events = [doc]
    while len(events) < size:
        n = len(events)
        claim = signer.sign(4702, {"collection": COLLECTION, "text": f"Claim {tag}/{n}."})
        events.append(claim)
        if len(events) < size:
            start = rng.randrange(TEXT_WORDS - 5)
            link = {
                "collection": COLLECTION,
                "from": doc["id"],
                "to": claim["id"],
                "relation": "SUPPORTS",
                "quote": " ".join(words[start : start + 5]),
                "reason": "quoted",
            }
            events.append(signer.sign(4703, link))
    kinds: dict[int, int] = {}
    for event in events:
        kinds[event["kind"]] = kinds.get(event["kind"], 0) + 1
    return Batch(events, kinds)


def sender(url: str, signer: Signer, cycle: Cycle, size: int, label: str, seed: int) -> None:
    rng = random.Random(seed)
    with httpx.Client(timeout=120) as http:
        n = 0
        while not cycle.stop.is_set():
            batch = make_batch(signer, f"{label}.{n}", size, rng)
            n += 1
            with cycle.lock:
                cycle.batches.append(batch)
            try:
                result = call(http, url, "publish", {"events": batch.events})
            except (httpx.HTTPError, RuntimeError, ValueError):
                return  # the server is gone: this batch's fate is for the check to find
            if sorted(result["accepted"]) == sorted(batch.ids):
                batch.acknowledged = True
            else:
                raise SystemExit(f"a batch was answered but not accepted whole: {result}")


async def check(database_url: str, batches: list[Batch]) -> tuple[int, int, list[str]]:
    """(present, absent, problems) for these batches, read from the database itself. A batch
    present but never acknowledged is fine: it was committed as the answer was cut off."""
    present = absent = 0
    problems: list[str] = []
    conn = await asyncpg.connect(database_url)
    try:
        for batch in batches:
            ids = batch.ids
            counts = await conn.fetchrow(
                """SELECT (SELECT count(*) FROM events WHERE id = ANY($1)) AS events,
                          (SELECT count(*) FROM evidence WHERE id = ANY($1)) AS evidence,
                          (SELECT count(*) FROM claims WHERE id = ANY($1)) AS claims,
                          (SELECT count(*) FROM links WHERE id = ANY($1)) AS links""",
                ids,
            )
            whole = (len(ids), batch.kinds.get(4701, 0), batch.kinds.get(4702, 0))
            whole += (batch.kinds.get(4703, 0),)
            found = (counts["events"], counts["evidence"], counts["claims"], counts["links"])
            if found == whole:
                present += 1
            elif found == (0, 0, 0, 0):
                absent += 1
                if batch.acknowledged:
                    problems.append(f"acknowledged batch {ids[0][:12]}… is missing")
            else:
                problems.append(f"batch {ids[0][:12]}… is partial: {found} of {whole}")
    finally:
        await conn.close()
    return present, absent, problems


def run(ns: argparse.Namespace, tmp: Path) -> int:
    data_dir = tmp / "data"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TMS_")}
    env.update(TMS_DATA_DIR=str(data_dir), TMS_EMBED="off")
    database_url = f"postgresql://postgres:@/tms?host={data_dir / 'postgres'}"
    server = Server(env, tmp / "server.log")
    signer = Signer()
    rng = random.Random(ns.seed)
    started = server.start()
    print(f"tms serve answered /healthz after {started:.1f} s", flush=True)
    server.approve(signer.key.pubkey)
    with httpx.Client(timeout=60) as http:
        agreed = server.agreement()
        call(http, server.url, "publish", {"events": [signer.sign(4706, agreed)]})
    everything: list[Batch] = []
    problems: list[str] = []
    restarts: list[float] = []
    low, high = ns.kill_window
    try:
        for number in range(1, ns.cycles + 1):
            cycle = Cycle()
            threads = [
                threading.Thread(
                    target=sender,
                    args=(server.url, signer, cycle, ns.batch, f"{number}.{c}", rng.random()),
                    daemon=True,
                )
                for c in range(CLIENTS)
            ]
            for thread in threads:
                thread.start()
            delay = rng.uniform(low, high)
            time.sleep(delay)
            assert server.proc is not None
            server.proc.kill()  # SIGKILL: no shutdown at all
            server.proc.wait()
            cycle.stop.set()
            for thread in threads:
                thread.join(60)
            restarts.append(server.start())
            present, absent, found = asyncio.run(check(database_url, cycle.batches))
            problems += found
            everything += cycle.batches
            acked = sum(b.acknowledged for b in cycle.batches)
            print(
                f"cycle {number:3}: killed after {delay:4.2f} s; {len(cycle.batches)} batches "
                f"sent, {acked} acknowledged; {present} present whole, {absent} absent, "
                f"{len(found)} problems; back in {restarts[-1]:.1f} s",
                flush=True,
            )
        present, absent, found = asyncio.run(check(database_url, everything))
        problems += found
    except Exception:
        print(server.log_tail())
        raise
    finally:
        server.stop()
    acked = sum(b.acknowledged for b in everything)
    events = sum(len(b.events) for b in everything if b.acknowledged)
    print(
        f"\n{ns.cycles} cycles: {len(everything)} batches of {ns.batch} events sent, {acked} "
        f"acknowledged ({events:,} events); at the end {present} present whole "
        f"({present - acked} of them committed as their answer was cut off), {absent} absent, "
        f"{len(problems)} partial or missing (target: 0)"
    )
    restarts.sort()
    print(
        f"restart to /healthz: median {restarts[len(restarts) // 2]:.1f} s, "
        f"slowest {restarts[-1]:.1f} s"
    )
    for problem in problems[:20]:
        print(f"  PROBLEM: {problem}")
    return 1 if problems else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=100)
    parser.add_argument("--batch", type=int, default=1000, help="events per batch (default 1000)")
    parser.add_argument(
        "--kill-window",
        type=float,
        nargs=2,
        default=(0.2, 4.0),
        metavar=("LOW", "HIGH"),
        help="kill at a random moment this many seconds after the clients start",
    )
    parser.add_argument("--seed", type=int, default=None)
    ns = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tms-crash-") as tmp:
        sys.exit(run(ns, Path(tmp)))


if __name__ == "__main__":
    main()
