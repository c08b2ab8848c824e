"""Exports against publishing: `uv run python bench/exports.py`.

Starts `tms serve` as a user does (a subprocess on 127.0.0.1, embedded PostgreSQL in a fresh
temporary data directory, `TMS_EMBED=off`, the `TMS_RATE_*` budgets off since every client here
is on one address; the export limits stay as configured). A collection is filled with
`--events` events (claims in batches of 1,000). Then one publisher publishes a single claim at a
time, `--publishes` times, and its latency is measured:

1. alone;
2. while `--exporters` members, each with a key of its own and in a process of its own,
   download the whole collection over and over (NIP-98), as fast as they can read. An exporter
   told 429 or 503 waits for its `Retry-After`;
3. finally, two exports at once by one key: what each was answered.

Prints the publish p50 and p99 of 1 and 2 (the issue measured p50 8 ms alone and 184 ms with
five exporters, before exports were limited), the exports finished and the events per second
they streamed in all, and what the exporters were answered. Asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import multiprocessing
import os
import statistics
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any, Final

import httpx
from serving import Server, Signer, call, compact

from tms.nostr.events import SecretKey

COLLECTION: Final = "exports"


def nip98(key: SecretKey, url: str) -> dict[str, str]:
    event = key.sign(27235, "", int(time.time()), [["u", url], ["method", "GET"]])
    return {"Authorization": "Nostr " + base64.b64encode(event.to_json().encode()).decode()}


def exporter(url: str, secret: bytes, seconds: float) -> dict[str, int]:
    """Export again and again for `seconds`; what it was answered, and the lines it read."""
    key = SecretKey(secret)
    tally: dict[str, int] = {"lines": 0, "finished": 0}
    deadline = time.monotonic() + seconds
    with httpx.Client(timeout=600) as http:
        while time.monotonic() < deadline:
            with http.stream("GET", url, headers=nip98(key, url)) as response:
                status = str(response.status_code)
                tally[status] = tally.get(status, 0) + 1
                if response.status_code != 200:
                    response.read()
                    time.sleep(float(response.headers.get("Retry-After", "1")))
                    continue
                for chunk in response.iter_bytes():
                    tally["lines"] += chunk.count(b"\n")
                    if time.monotonic() > deadline:
                        break
                else:
                    tally["finished"] += 1
    return tally


def publish_latencies(url: str, signer: Signer, count: int) -> list[float]:
    times = []
    with httpx.Client(timeout=120) as http:
        for n in range(count):
            text = f"probe {n} at {time.time()}"
            claim = signer.sign(4702, {"collection": COLLECTION, "text": text})
            started = time.perf_counter()
            call(http, url, "publish", {"events": [claim]})
            times.append(time.perf_counter() - started)
            time.sleep(0.05)
    return times


def figures(times: list[float]) -> str:
    p99 = statistics.quantiles(times, n=100, method="inclusive")[98]
    return f"p50 {statistics.median(times) * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms"


def setup(server: Server, owner: Signer, exporters: list[SecretKey], total: int) -> None:
    server.approve(owner.key.pubkey)
    agreed = server.agreement()
    members = {"collection": COLLECTION, "members": [k.pubkey for k in exporters]}
    events: list[dict[str, Any]] = [owner.sign(4706, agreed), owner.sign(4705, members)]
    events += [k.sign(4706, compact(agreed), int(time.time())).to_dict() for k in exporters]
    with httpx.Client(timeout=300) as http:
        call(http, server.url, "publish", {"events": events})
        for first in range(0, total, 1000):
            batch = [
                owner.sign(4702, {"collection": COLLECTION, "text": f"claim {first + n} on DAO"})
                for n in range(min(1000, total - first))
            ]
            call(http, server.url, "publish", {"events": batch})


def run(ns: argparse.Namespace, tmp: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TMS_")}
    env.update(TMS_DATA_DIR=str(tmp / "data"), TMS_EMBED="off")
    env.update({k: v for k, v in os.environ.items() if k == "TMS_MAX_EXPORTS"})  # to compare
    server = Server(env, tmp / "server.log")
    print(f"tms serve answered /healthz after {server.start():.1f} s", flush=True)
    owner = Signer()
    keys = [SecretKey.generate() for _ in range(ns.exporters)]
    try:
        started = time.perf_counter()
        setup(server, owner, keys, ns.events)
        print(f"{ns.events:,} events published in {time.perf_counter() - started:.0f} s")
        url = f"{server.url}/c/{COLLECTION}/export.jsonl"
        alone = publish_latencies(server.url, owner, ns.publishes)
        print(f"1. publish alone: {figures(alone)}", flush=True)
        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(len(keys), mp_context=context) as pool:
            begun = time.monotonic()
            seconds = ns.publishes * 0.2 + 30
            running = [pool.submit(exporter, url, k.secret, seconds) for k in keys]
            time.sleep(2)  # the exports are under way
            loaded = publish_latencies(server.url, owner, ns.publishes)
            tallies = [future.result() for future in running]
            elapsed = time.monotonic() - begun
        lines = sum(t["lines"] for t in tallies)
        answers: dict[str, int] = {}
        for tally in tallies:
            for name, value in tally.items():
                if name not in ("lines", "finished"):
                    answers[name] = answers.get(name, 0) + value
        print(f"2. publish with {len(keys)} exporters: {figures(loaded)}")
        print(
            f"   exports finished: {sum(t['finished'] for t in tallies)}, "
            f"{lines / elapsed:,.0f} events/s streamed in all; answers {answers}"
        )
        asyncio.run(twice(url, keys[0]))
    except Exception:
        print(server.log_tail())
        raise
    finally:
        server.stop()


async def twice(url: str, key: SecretKey) -> None:
    async def one() -> str:
        async with (
            httpx.AsyncClient(timeout=600) as http,
            http.stream("GET", url, headers=nip98(key, url)) as response,
        ):
            if response.status_code != 200:
                text = (await response.aread()).decode()[:120]
                return f"{response.status_code} {text}"
            await response.aread()
            return "200"

    answers = await asyncio.gather(one(), one())
    print(f"3. two exports at once by one key: {answers}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=60_000, help="events to export (60000)")
    parser.add_argument("--exporters", type=int, default=5, help="exporters at once (5)")
    parser.add_argument("--publishes", type=int, default=100, help="publishes measured (100)")
    ns = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tms-exports-") as tmp:
        run(ns, Path(tmp))


if __name__ == "__main__":
    main()
