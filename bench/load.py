"""Load: `uv run python bench/load.py` (32 clients for 5 minutes; `--clients`, `--seconds`).

Starts `tms serve` as a user does (a subprocess on 127.0.0.1, embedded PostgreSQL in a fresh
temporary data directory; `TMS_EMBED=off` unless `--embed on`; rate limits off, since every
client here comes from one address). An owner creates the collection `load` with every client's
key as a member; each client signs the terms. Then `--clients` clients, spread over
`--processes` processes, each run this mix for `--seconds`, one call after another (with
`--think` seconds between calls on average; none by default):

- publish a batch (an evidence document, 9 claims, 10 links quoting the document) or a single
  claim;
- signed reads: list_collections, list_claims (every sort), get_event, get_links,
  list_evidence;
- search_claims (keyword; vector too with `--embed on`);
- now and then an export of the whole collection (NIP-98, streamed and counted).

It prints the throughput, p50/p95/p99 per tool and for signed reads together, the errors, and
the load average before and after (the machine is shared: figures are noisy). Then it checks
that every event a publish acknowledged (accepted or skipped) is in the database. Targets, from
the issue: 32 clients for 5 minutes, 0 errors, 0 lost, p99 of a signed read under 250 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import os
import random
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import asyncpg
import httpx
from serving import HEADERS, Server, compact

from tms.nostr.events import SecretKey

COLLECTION: Final = "load"
READS: Final = ("list_collections", "list_claims", "get_event", "get_links", "list_evidence")
SORTS: Final = ("recent", "links", "unsupported", "unchallenged", "contested")
WORDS: Final = "dao histamine enzyme activity serum intake diet review trial mast cell".split()
# (what, weight): a client picks its next call with these odds
MIX: Final = [
    ("publish batch", 1.0),
    ("publish one", 3.0),
    ("read", 12.0),
    ("search", 3.0),
    ("export", 0.05),
]


@dataclass
class Tally:
    """What one process's clients saw."""

    latencies: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    errors: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    acknowledged: list[str] = field(default_factory=list)
    exported_lines: int = 0


def sign(key: SecretKey, kind: int, content: dict[str, Any], tags: Any = ()) -> dict[str, Any]:
    return key.sign(kind, compact(content), int(time.time()), tags).to_dict()


class Client:
    def __init__(self, url: str, key: SecretKey, http: httpx.AsyncClient, tally: Tally) -> None:
        self.url = url
        self.key = key
        self.http = http
        self.tally = tally
        self.rng = random.Random(key.pubkey)
        self.ids: list[str] = []  # this client's acknowledged claims, evidence and links
        self.evidence: list[str] = []
        self.n = 0

    async def call(self, tool: str, arguments: dict[str, Any], label: str) -> Any:
        body = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": tool, "arguments": arguments},
        }
        started = time.perf_counter()
        try:
            response = await self.http.post(
                f"{self.url}/mcp", content=compact(body).encode(), headers=HEADERS
            )
            elapsed = time.perf_counter() - started
            if response.status_code != 200:
                raise RuntimeError(f"HTTP {response.status_code}: {response.text[:200]}")
            result = response.json()["result"]
            if result.get("isError"):
                raise RuntimeError(result["content"][0]["text"][:200])
        except (httpx.HTTPError, RuntimeError, ValueError, KeyError) as exc:
            self.tally.errors[label].append(f"{type(exc).__name__}: {exc}"[:300])
            return None
        self.tally.latencies[label].append(elapsed)
        return result["structuredContent"]

    async def signed(self, tool: str, **args: Any) -> Any:
        request = sign(self.key, 4707, {"tool": tool, "args": args})
        return await self.call(tool, {"request": request}, tool)

    async def publish(self, events: list[dict[str, Any]], label: str) -> None:
        result = await self.call("publish", {"events": events}, label)
        if result is not None:
            self.tally.acknowledged += result["accepted"] + result["skipped"]
            self.ids += [e["id"] for e in events if e["kind"] != 4701]
            self.evidence += [e["id"] for e in events if e["kind"] == 4701]

    def text(self, words: int) -> str:
        return " ".join(self.rng.choice(WORDS) for _ in range(words))

    async def step(self) -> None:
        what = self.rng.choices([m for m, _ in MIX], [w for _, w in MIX])[0]
        self.n += 1
        if what == "publish batch":
            body = f"Document {self.key.pubkey[:8]}-{self.n}: {self.text(400)}"
            doc = sign(self.key, 4701, {"collection": COLLECTION, "text": body, "title": "doc"})
            events = [doc]
            for i in range(9):
                claim = sign(
                    self.key,
                    4702,
                    {"collection": COLLECTION, "text": f"{self.text(8)} ({self.n}.{i})"},
                )
                start = self.rng.randrange(len(body) - 40)
                quote = body[start : start + 30].strip() or body[:30]
                link = {
                    "collection": COLLECTION,
                    "from": doc["id"],
                    "to": claim["id"],
                    "relation": "SUPPORTS",
                    "quote": quote,
                    "reason": "the document says so",
                }
                events += [claim, sign(self.key, 4703, link)]
            await self.publish(events[:20], "publish (batch of 20)")
        elif what == "publish one":
            text = f"{self.text(10)} ({self.key.pubkey[:8]}-{self.n})"
            claim = sign(self.key, 4702, {"collection": COLLECTION, "text": text})
            await self.publish([claim], "publish (one event)")
        elif what == "read":
            tool = self.rng.choice(READS)
            if tool == "list_collections":
                await self.signed(tool)
            elif tool == "list_claims":
                await self.signed(tool, collection=COLLECTION, sort=self.rng.choice(SORTS))
            elif tool == "get_event":
                pool = self.ids or self.evidence
                if pool:
                    await self.signed(tool, id=self.rng.choice(pool))
                else:
                    await self.signed("list_collections")
            elif tool == "get_links":
                await self.signed(tool, collection=COLLECTION, limit=50)
            else:
                await self.signed(tool, collection=COLLECTION, limit=50)
        elif what == "search":
            method = self.rng.choice(self.methods)
            await self.signed(
                "search_claims", collection=COLLECTION, text=self.text(3), method=method
            )
        else:
            await self.export()

    methods: tuple[str, ...] = ("keyword",)

    async def export(self) -> None:
        url = f"{self.url}/c/{COLLECTION}/export.jsonl"
        auth = self.key.sign(27235, "", int(time.time()), [["u", url], ["method", "GET"]])
        header = "Nostr " + base64.b64encode(auth.to_json().encode()).decode()
        started = time.perf_counter()
        lines = 0
        try:
            async with self.http.stream("GET", url, headers={"Authorization": header}) as r:
                if r.status_code != 200:
                    raise RuntimeError(f"HTTP {r.status_code}")
                async for chunk in r.aiter_bytes():
                    lines += chunk.count(b"\n")
        except (httpx.HTTPError, RuntimeError) as exc:
            self.tally.errors["export"].append(f"{type(exc).__name__}: {exc}"[:300])
            return
        self.tally.latencies["export"].append(time.perf_counter() - started)
        self.tally.exported_lines += lines


async def run_clients(
    url: str, secrets: list[bytes], seconds: float, embed: bool, think: float
) -> Tally:
    tally = Tally()
    deadline = time.monotonic() + seconds
    limits = httpx.Limits(max_connections=len(secrets), max_keepalive_connections=len(secrets))
    async with httpx.AsyncClient(timeout=120, limits=limits) as http:
        clients = [Client(url, SecretKey(s), http, tally) for s in secrets]
        for client in clients:
            client.methods = ("keyword", "vector") if embed else ("keyword",)

        async def loop(client: Client) -> None:
            while time.monotonic() < deadline:
                await client.step()
                if think:
                    await asyncio.sleep(client.rng.uniform(0, 2 * think))

        await asyncio.gather(*(loop(c) for c in clients))
    return tally


def worker(url: str, secrets: list[bytes], seconds: float, embed: bool, think: float) -> Tally:
    tally = asyncio.run(run_clients(url, secrets, seconds, embed, think))
    tally.latencies = dict(tally.latencies)  # picklable
    tally.errors = dict(tally.errors)
    return tally


def setup(server: Server, keys: list[SecretKey]) -> None:
    owner = SecretKey.generate()
    server.approve(owner.pubkey)
    with httpx.Client(timeout=120) as http:
        agreed = server.agreement()
        members = {"collection": COLLECTION, "members": [k.pubkey for k in keys]}
        events = [sign(owner, 4706, agreed), sign(owner, 4705, members)]
        events += [sign(k, 4706, agreed) for k in keys]
        body = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "publish", "arguments": {"events": events}},
        }
        reply = http.post(f"{server.url}/mcp", content=compact(body).encode(), headers=HEADERS)
        result = reply.json()["result"]
        if result.get("isError"):
            raise SystemExit(f"setup failed: {result['content'][0]['text']}")


async def missing(database_url: str, ids: list[str]) -> int:
    conn = await asyncpg.connect(database_url)
    try:
        found = await conn.fetchval(
            "SELECT count(*) FROM events WHERE id = ANY($1::text[])", list(set(ids))
        )
    finally:
        await conn.close()
    return len(set(ids)) - int(found)


def percentile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=1000, method="inclusive")[int(q * 10) - 1] * 1000


def report(tallies: list[Tally], seconds: float) -> tuple[int, list[float]]:
    latencies: dict[str, list[float]] = defaultdict(list)
    errors: dict[str, list[str]] = defaultdict(list)
    for tally in tallies:
        for tool, values in tally.latencies.items():
            latencies[tool] += values
        for tool, messages in tally.errors.items():
            errors[tool] += messages
    calls = sum(len(v) for v in latencies.values())
    failed = sum(len(v) for v in errors.values())
    print(f"\n{calls + failed:,} calls in {seconds:.0f} s: {(calls + failed) / seconds:.1f}/s")
    heads = f"{'calls':>8}{'per s':>8}{'p50 ms':>9}{'p95 ms':>9}{'p99 ms':>9}{'errors':>8}"
    print(f"{'tool':<24}{heads}")
    reads = [v for tool in READS for v in latencies.get(tool, [])]
    rows = [*sorted(latencies.items()), ("signed reads (all)", reads)]
    for tool, values in rows:
        if len(values) < 2:
            continue
        print(
            f"{tool:<24}{len(values):>8,}{len(values) / seconds:>8.1f}"
            f"{percentile(values, 50):>9.1f}{percentile(values, 95):>9.1f}"
            f"{percentile(values, 99):>9.1f}{len(errors.get(tool, [])):>8}"
        )
    print(f"errors: {failed} (target: 0)")
    for tool, messages in errors.items():
        print(f"  {tool}: {len(messages)}, e.g. {messages[0]}")
    return failed, reads


def run(ns: argparse.Namespace, tmp: Path) -> int:
    data_dir = tmp / "data"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TMS_")}
    env.update(TMS_DATA_DIR=str(data_dir), TMS_EMBED="on" if ns.embed == "on" else "off")
    server = Server(env, tmp / "server.log")
    print(f"tms serve answered /healthz after {server.start():.1f} s", flush=True)
    keys = [SecretKey.generate() for _ in range(ns.clients)]
    try:
        setup(server, keys)
        if ns.embed == "on":
            with httpx.Client(timeout=5) as http:
                while http.get(f"{server.url}/healthz").json().get("vectors") != "ready":
                    time.sleep(0.5)
        load_before = os.getloadavg()
        print(
            f"{ns.clients} clients in {ns.processes} processes for {ns.seconds:.0f} s, "
            f"think time {ns.think:g} s on average, TMS_EMBED={env['TMS_EMBED']}; "
            "load average before: " + " ".join(f"{x:.2f}" for x in load_before),
            flush=True,
        )
        groups = [keys[i :: ns.processes] for i in range(ns.processes)]
        started = time.perf_counter()
        with ProcessPoolExecutor(ns.processes) as pool:
            futures = [
                pool.submit(
                    worker,
                    server.url,
                    [k.secret for k in group],
                    ns.seconds,
                    ns.embed == "on",
                    ns.think,
                )
                for group in groups
                if group
            ]
            tallies = [f.result() for f in futures]
        elapsed = time.perf_counter() - started
        load_after = os.getloadavg()
        failed, reads = report(tallies, elapsed)
        print("load average after: " + " ".join(f"{x:.2f}" for x in load_after))
        exported = sum(t.exported_lines for t in tallies)
        print(f"exports streamed {exported:,} lines in all")
        acknowledged = [i for t in tallies for i in t.acknowledged]
        database_url = f"postgresql://postgres:@/tms?host={data_dir / 'postgres'}"
        lost = asyncio.run(missing(database_url, acknowledged))
        print(f"acknowledged events: {len(set(acknowledged)):,}; lost: {lost} (target: 0)")
        p99 = percentile(reads, 99) if len(reads) > 1 else float("nan")
        print(f"p99 of a signed read: {p99:.1f} ms (target: under 250 ms)")
    except Exception:
        print(server.log_tail())
        raise
    finally:
        server.stop()
    return 0 if failed == 0 and lost == 0 else 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=300)
    parser.add_argument("--processes", type=int, default=2, help="client processes (default 2)")
    parser.add_argument("--embed", choices=("on", "off"), default="off")
    parser.add_argument(
        "--think",
        type=float,
        default=0.0,
        help="seconds a client pauses between calls, on average (default 0: as fast as it can)",
    )
    ns = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tms-load-") as tmp:
        sys.exit(run(ns, Path(tmp)))


if __name__ == "__main__":
    main()
