"""One PostgreSQL against a Citus cluster, same machine, same run: `uv run python bench/citus.py`.

Needs a running Citus cluster (`.ci/citus` starts one: a coordinator and two workers on
127.0.0.1), named by `--citus` (default `$TMS_TEST_CITUS_URL`, else the `.ci/citus` address).
Two fresh databases are made on the coordinator's server:

- **plain**: a database without the citus extension, on the coordinator's own PostgreSQL 15
  (the same binary, settings and machine as the cluster: only distribution differs);
- **citus**: a database with the extension on all three nodes, the workers added, and the ledger
  distributed by `tms migrate --distribute` (Citus' default 32 shards a table).

On each, `tms serve` (a subprocess; `TMS_EMBED=off` while publishing, so the figures are the
ledger's, not the model's) is driven through `POST /mcp` as clients drive it:

1. publish throughput: `--clients` clients (16) publishing one-claim batches for `--seconds`,
   spread over 1, 4 and 16 collections: events/s, p50 and p99;
2. read latency, one client, one call after another (`--reads` calls each), on a collection of
   `--claims` claims and a quarter as many links, with vectors (the model on): `list_claims`
   sorted `recent` and `links`, `search_claims` by vector and by keyword: p50 and p99;
3. where the time goes: CPU seconds per published event in the TMS server, the coordinator
   and the workers (from /proc, while the 16-collection run lasts), and from them what N
   workers on N machines would carry.

Two cores shared by the clients, the server and three PostgreSQL servers cannot show a
scale-out speed-up: what they show is the cost Citus adds (the coordinator's planning and its
round trips to a worker) and how the work divides, which is what the estimate rests on.
Prints figures; asserts nothing. Runs as root or as the cluster's owner (to read each server's
CPU time; without that, step 3 is skipped).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import httpx
from serving import HEADERS, Server, Signer, call, compact, tms_command

DEFAULT_CITUS: Final = "postgresql://postgres@127.0.0.1:5721/tms"
WORDS: Final = (
    "histamine intolerance diamine oxidase activity serum plasma mast cell review trial cohort "
    "patients reported symptoms reduced enzyme levels were measured in and again after weeks"
).split()
DOC: Final = " ".join(WORDS) + "."
RNG: Final = random.Random(7)
TEST_SETTINGS: Final = (
    "TMS_TEST_"  # the suite's settings (a cluster for the tests): not the server's
)
TICKS: Final = os.sysconf("SC_CLK_TCK")


def text() -> str:
    return " ".join(RNG.choices(WORDS, k=12)) + f" {RNG.getrandbits(48):x}"


def pct(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# --- databases ------------------------------------------------------------------------------------


def with_database(url: str, database: str, port: int | None = None) -> str:
    parts = urlsplit(url)
    netloc = parts.netloc
    if port is not None:
        netloc = netloc.rsplit(":", 1)[0] + f":{port}"
    return urlunsplit((parts.scheme, netloc, f"/{database}", parts.query, ""))


async def _run(url: str, *sql: str) -> None:
    conn = await asyncpg.connect(url)
    try:
        for statement in sql:
            await conn.execute(statement)
    finally:
        await conn.close()


async def workers(citus: str) -> list[int]:
    conn = await asyncpg.connect(citus)
    try:
        rows = await conn.fetch(
            "SELECT nodeport FROM pg_dist_node WHERE groupid <> 0 AND noderole = 'primary'"
        )
    finally:
        await conn.close()
    return sorted(r["nodeport"] for r in rows)


async def make_database(citus: str, name: str, distributed: bool) -> str:
    """A fresh database on the coordinator's server (and on every worker when `distributed`,
    with the extensions and the workers added); returns its URL."""
    coordinator = urlsplit(citus).port or 5432
    ports = [coordinator, *(await workers(citus) if distributed else [])]
    await drop_database(citus, name)
    for port in ports:
        await _run(
            with_database(citus, "postgres", port),
            "SET citus.enable_create_database_propagation = off",
            f'CREATE DATABASE "{name}"',
        )
        if distributed:
            await _run(
                with_database(citus, name, port),
                "CREATE EXTENSION IF NOT EXISTS citus",
                "CREATE EXTENSION IF NOT EXISTS vector",
            )
    url = with_database(citus, name)
    if distributed:
        host = urlsplit(citus).hostname or "127.0.0.1"
        await _run(
            url,
            f"SELECT citus_set_coordinator_host('{host}', {coordinator})",
            *(f"SELECT citus_add_node('{host}', {port})" for port in ports[1:]),
        )
    return url


async def drop_database(citus: str, name: str) -> None:
    coordinator = urlsplit(citus).port or 5432
    for port in [coordinator, *await workers(citus)]:
        await _run(
            with_database(citus, "postgres", port),
            "SET citus.enable_create_database_propagation = off",
            f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)',
        )


async def postmasters(citus: str, distributed: bool) -> dict[str, int]:
    """Each server's postmaster pid, by role ('coordinator', 'worker'), from its data
    directory; empty when they cannot be read (not root, nor the cluster's owner)."""
    coordinator = urlsplit(citus).port or 5432
    ports = {"coordinator": [coordinator], "worker": await workers(citus) if distributed else []}
    found: dict[str, int] = {}
    for role, role_ports in ports.items():
        for n, port in enumerate(role_ports):
            conn = await asyncpg.connect(with_database(citus, "postgres", port))
            try:
                data = await conn.fetchval("SHOW data_directory")
            finally:
                await conn.close()
            try:
                pid = int((Path(data) / "postmaster.pid").read_text().split()[0])
            except (OSError, ValueError, IndexError):
                return {}
            found[f"{role}{n if role == 'worker' else ''}"] = pid
    return found


# --- CPU from /proc -------------------------------------------------------------------------------


def cpu_seconds(root: int) -> float:
    """CPU time of a process and all its children, living and (as far as the kernel counts
    them) reaped: utime + stime + cutime + cstime of each."""
    total = 0.0
    for pid in [root, *_children(root)]:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += sum(int(x) for x in fields[11:15]) / TICKS
    return total


def _children(root: int) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(stat[1]) == root:
            found.append(int(name))
    return found


# --- clients --------------------------------------------------------------------------------------


def publish_body(events: list[dict[str, Any]]) -> bytes:
    message = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "publish", "arguments": {"events": events}},
    }
    return compact(message).encode()


async def publish_load(
    url: str, signer: Signer, collections: list[str], clients: int, seconds: float
) -> tuple[float, list[float]]:
    """Clients publishing one claim a call, round-robin over `collections`: events/s, times."""
    times: list[float] = []

    async def client(n: int, until: float) -> None:
        slug = collections[n % len(collections)]
        async with httpx.AsyncClient(timeout=120) as http:
            while time.monotonic() < until:
                data = publish_body([signer.sign(4702, {"collection": slug, "text": text()})])
                started = time.perf_counter()
                response = await http.post(f"{url}/mcp", content=data, headers=HEADERS)
                result = response.json()["result"]
                if result.get("isError"):
                    raise RuntimeError(result["content"][0]["text"])
                times.append((time.perf_counter() - started) * 1000)

    until = time.monotonic() + seconds
    started = time.perf_counter()
    await asyncio.gather(*(client(n, until) for n in range(clients)))
    return len(times) / (time.perf_counter() - started), times


def latency(calls: int, make: Callable[[], None]) -> tuple[float, float]:
    times = []
    for n in range(calls + calls // 10):
        started = time.perf_counter()
        make()
        if n >= calls // 10:  # the first tenth warms up
            times.append((time.perf_counter() - started) * 1000)
    return pct(times, 0.5), pct(times, 0.99)


# --- one backend ----------------------------------------------------------------------------------


class Figures:
    def __init__(self) -> None:
        self.publish: dict[int, tuple[float, float, float]] = {}  # collections: ev/s, p50, p99
        self.reads: dict[str, tuple[float, float]] = {}
        self.cpu: dict[str, float] = {}  # role: CPU seconds per event, 16 collections


def bench_backend(
    name: str, url: str, ns: argparse.Namespace, tmp: Path, pids: dict[str, int]
) -> Figures:
    figures = Figures()
    env = {**os.environ, "TMS_DATABASE_URL": url, "TMS_DATA_DIR": str(tmp / name)}
    env = {k: v for k, v in env.items() if not k.startswith(TEST_SETTINGS)}
    if name == "citus":
        done = subprocess.run(
            [*tms_command(), "migrate", "--distribute"], env=env, capture_output=True, text=True
        )
        if done.returncode != 0:
            raise SystemExit(f"tms migrate --distribute failed: {done.stderr}")
    signer = Signer()

    # Reads first, with the model on: a collection of claims, links and vectors.
    server = Server({**env, "TMS_EMBED": "on"}, tmp / f"{name}-reads.log")
    try:
        server.start()
        server.approve(signer.key.pubkey)
        agreement = server.agreement()
        with httpx.Client(timeout=300) as http:
            call(http, server.url, "publish", {"events": [signer.sign(4706, agreement)]})
            doc = signer.sign(4701, {"collection": "reads", "text": DOC})
            members = signer.sign(4705, {"collection": "reads", "members": []})
            call(http, server.url, "publish", {"events": [members, doc]})
            claims: list[str] = []
            for start in range(0, ns.claims, 250):
                batch = [
                    signer.sign(4702, {"collection": "reads", "text": text()})
                    for _ in range(min(250, ns.claims - start))
                ]
                call(http, server.url, "publish", {"events": batch})
                claims += [e["id"] for e in batch]
            links = [
                signer.sign(
                    4703,
                    {
                        "collection": "reads",
                        "from": doc["id"],
                        "to": RNG.choice(claims),
                        "relation": "SUPPORTS",
                        "quote": " ".join(WORDS[i : i + 3]),
                        "reason": "bench",
                    },
                )
                for i in (RNG.randrange(len(WORDS) - 3) for _ in range(ns.claims // 4))
            ]
            for start in range(0, len(links), 250):
                call(http, server.url, "publish", {"events": links[start : start + 250]})
            _wait_for_vectors(http, server.url, signer)

            def tool(tool_name: str, **args: Any) -> Callable[[], None]:
                def run() -> None:
                    call(http, server.url, tool_name, {"request": signer.request(tool_name, args)})

                return run

            for label, make in (
                ("list_claims recent", tool("list_claims", collection="reads", limit=20)),
                ("list_claims links", tool("list_claims", collection="reads", sort="links")),
                (
                    "search_claims vector",
                    tool("search_claims", collection="reads", text="enzyme levels", limit=10),
                ),
                (
                    "search_claims keyword",
                    tool(
                        "search_claims",
                        collection="reads",
                        text="diamine oxidase",
                        method="keyword",
                        limit=10,
                    ),
                ),
            ):
                figures.reads[label] = latency(ns.reads, make)
    finally:
        server.stop()

    # Publishing, the model off.
    server = Server({**env, "TMS_EMBED": "off"}, tmp / f"{name}-publish.log")
    try:
        server.start()
        slugs = [f"p{n}" for n in range(16)]
        with httpx.Client(timeout=300) as http:
            batch = [signer.sign(4705, {"collection": s, "members": []}) for s in slugs]
            call(http, server.url, "publish", {"events": batch})
        for count in (1, 4, 16):
            asyncio.run(publish_load(server.url, signer, slugs[:count], ns.clients, 1.0))  # warm
            assert server.proc is not None
            before = {role: cpu_seconds(pid) for role, pid in pids.items()}
            before["tms serve"] = cpu_seconds(server.proc.pid)
            rate, times = asyncio.run(
                publish_load(server.url, signer, slugs[:count], ns.clients, ns.seconds)
            )
            if count == 16 and pids:
                events = rate * ns.seconds
                after = {role: cpu_seconds(pid) for role, pid in pids.items()}
                after["tms serve"] = cpu_seconds(server.proc.pid)
                figures.cpu = {role: (after[role] - before[role]) / events for role in after}
            figures.publish[count] = (rate, pct(times, 0.5), pct(times, 0.99))
    finally:
        server.stop()
    return figures


def _wait_for_vectors(http: httpx.Client, url: str, signer: Signer, timeout: float = 900) -> None:
    """Until the model is up and the collection's claims all have vectors: `search_claims` then
    answers by vector, with no note (of a model loading, or of claims still waiting)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        args = {"collection": "reads", "text": "enzyme", "limit": 1}
        found = call(http, url, "search_claims", {"request": signer.request("search_claims", args)})
        if found["method"] == "vector" and found["note"] is None:
            return
        time.sleep(1)
    raise RuntimeError("vectors did not catch up")


# --- the report -----------------------------------------------------------------------------------


def report(plain: Figures, citus: Figures, ns: argparse.Namespace, nworkers: int) -> None:
    print(
        f"\nTMS on one PostgreSQL 15 vs Citus 13 (coordinator + {nworkers} workers), one "
        f"machine ({os.cpu_count()} cores shared by everything), {ns.clients} clients, "
        f"{ns.seconds:g} s a run"
    )
    print(f"{'':26}{'plain PostgreSQL':>28}{'Citus':>28}")
    for count in (1, 4, 16):
        row = [plain.publish[count], citus.publish[count]]
        cells = [f"{r:6,.0f} ev/s {p50:5.1f}/{p99:5.1f} ms" for r, p50, p99 in row]
        label = f"publish, {count:2} collection{'s' if count > 1 else ''}"
        print(f"{label:26}{cells[0]:>28}{cells[1]:>28}")
    print("  (events/s, then p50/p99 of a one-claim publish)")
    for label in plain.reads:
        cells = [
            f"p50 {f.reads[label][0]:5.1f} p99 {f.reads[label][1]:6.1f} ms" for f in (plain, citus)
        ]
        print(f"{label:26}{cells[0]:>28}{cells[1]:>28}")
    if not citus.cpu:
        print("\n(CPU per event not measured: run as root or as the cluster's owner)")
        return
    print("\nCPU per published event (16 collections), ms:")
    for role in sorted(set(plain.cpu) | set(citus.cpu)):
        cells = [f"{f.cpu[role] * 1000:.2f}" if role in f.cpu else "-" for f in (plain, citus)]
        print(f"  {role:22}{cells[0]:>10}{cells[1]:>10}")
    estimate(citus, nworkers)


def estimate(citus: Figures, nworkers: int) -> None:
    """What N workers on N machines would carry, from the CPU each part spent per event here.
    The workers' part divides among them (each holds its share of the collections); the
    coordinator's does not (every statement passes through it: TMS servers must talk to the
    coordinator, whose sequence gives the ledger its order), so its cores set a bound of their
    own; the TMS servers' part divides among as many as are started."""
    app = citus.cpu.get("tms serve", 0.0)
    coordinator = citus.cpu.get("coordinator", 0.0)
    worker = sum(v for k, v in citus.cpu.items() if k.startswith("worker"))
    print(
        f"\nPer published event: TMS {app * 1000:.2f} ms of CPU, the coordinator "
        f"{coordinator * 1000:.2f} ms, the workers {worker * 1000:.2f} ms in all. Estimate for "
        "many collections spread evenly, 2-core workers, events/s (the smaller of the workers' "
        "and the coordinator's bound):"
    )
    cores = (2, 8, 16, 32)
    print(f"  {'workers':>8}" + "".join(f"{f'coordinator {k} cores':>24}" for k in cores))
    for n in (1, 2, 4, 8, 16, 32):
        cells = []
        for k in cores:
            workers_cap = n * 2 / worker if worker else float("inf")
            coordinator_cap = k / coordinator if coordinator else float("inf")
            bound = min(workers_cap, coordinator_cap)
            which = "w" if workers_cap <= coordinator_cap else "c"
            cells.append(f"{bound:>14,.0f} ({which}) ")
        print(f"  {n:>8}" + "".join(f"{cell:>24}" for cell in cells))
    print(
        f"  (w: bounded by the workers, c: by the coordinator; each 1,000 events/s also takes "
        f"~{app * 1000 / 2:.1f} two-core TMS servers)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--citus",
        default=os.environ.get("TMS_TEST_CITUS_URL", DEFAULT_CITUS),
        help="the cluster's coordinator (a database on it that lists the workers)",
    )
    parser.add_argument("--seconds", type=float, default=10.0, help="per publish run")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument(
        "--claims", type=int, default=2000, help="in the read benchmark's collection"
    )
    parser.add_argument("--reads", type=int, default=200, help="calls per read measured")
    ns = parser.parse_args()
    nworkers = len(asyncio.run(workers(ns.citus)))
    results: dict[str, Figures] = {}
    with tempfile.TemporaryDirectory(prefix="tms-bench-citus-") as tmp:
        for name in ("plain", "citus"):
            database = f"tms_bench_{name}"
            url = asyncio.run(make_database(ns.citus, database, name == "citus"))
            pids = asyncio.run(postmasters(ns.citus, name == "citus"))
            try:
                print(f"# {name}: {url}", flush=True)
                results[name] = bench_backend(name, url, ns, Path(tmp), pids)
            finally:
                asyncio.run(drop_database(ns.citus, database))
    report(results["plain"], results["citus"], ns, nworkers)


if __name__ == "__main__":
    main()
