"""The relay against the PyPI relay `nostr-relay` 1.14 (SQLite), same machine, same run, same
signed events, same client code.

    uv run python bench/relay.py                  # prints the figures; about a minute
    uv run python bench/relay.py --parts fanout   # one part (writes, fanout, memory)

1. Writes: single events over WebSocket, 16 un-acknowledged per connection, from C=16 and C=1
   connections: events/s (target at C=16: at least 2x nostr-relay's) and the acknowledgement's
   p50 at C=1 (target <= 2 ms).
2. Live fan-out (TMS only: nostr-relay has no collections or members): 100 subscribers on one
   collection, 1,000 claims published half over MCP batches and half over the relay: delivery
   latency from commit p50 (target <= 20 ms) and p99 (<= 100 ms), and whether any subscriber
   missed one or got one twice. The subscribers run in client processes of their own
   (`--procs`, 4), so that what is measured is the server, not one Python process reading 100
   sockets on the server's cores. An event's commit is when PostgreSQL notifies a listener of
   this bench's own on the channel the server's feed listens to (`tms.ledger.write.writes.CHANNEL`:
   sent at commit); arrival times are `time.monotonic()`, the same clock in every process.
   Also printed: latency from the acknowledgement and from sending.
3. Memory: 1,000 idle authenticated connections with one subscription each (target <= 200 MB).
4. Workers (`--parts workers`, TMS only): the C=16 write run against `tms serve --workers 1` and
   `--workers 2` (`--workers 1,2`), each on a fresh data directory, both running for the whole
   part and taking turns (`--rounds`, the order turned each round), so that the load of the
   moment is common to both: events/s of each, and the CPU per event of each process (the
   server's workers and its supervisor, PostgreSQL, this client), from /proc. From those: the
   events/s that N cores would carry (N = 2, 8, 16; target >= 20,000 durable events/s at 16),
   were the server's workers and PostgreSQL (the client elsewhere, as clients are) given all N
   and scaling with them. `--collections K` spreads the 16 connections over K collections
   (connection c writes to collection c mod K): one collection's writes are one lane, its
   groups committed one after another under the collection's lock, whichever worker runs them.

nostr-relay runs in a virtual environment of its own (`uv venv` + `uv pip install
nostr-relay==1.14`, made once under ~/.cache/tms-bench), under gunicorn with one worker, as its
default configuration does. TMS runs `tms serve --workers 1` (parts 1 to 3; part 4 sets the
workers) with TMS_EMBED=off (nostr-relay embeds nothing either) on a fresh embedded PostgreSQL.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from contextlib import suppress
from pathlib import Path
from typing import Any, Final

import asyncpg
import httpx
from profiling import CpuClock, PgPerf, Spy
from serving import Server, Signer, call, free_port
from websockets.asyncio.client import ClientConnection, connect

from tms.ledger.write.writes import CHANNEL
from tms.nostr.events import SecretKey
from tms.store.database import embedded_url, start_embedded

WINDOW: Final = 16  # un-acknowledged events per connection
COMPETITOR: Final = "nostr-relay==1.14"
VENV: Final = Path.home() / ".cache" / "tms-bench" / "nostr-relay-1.14"


def load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def pct(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def ms(values: Sequence[float], q: float) -> str:
    return f"{pct(values, q) * 1e3:.2f} ms"


# --- the same client code for both relays ----------------------------------------------------


async def writer(
    url: str, events: list[dict[str, Any]], acks: list[float], window: int = WINDOW
) -> int:
    """Send `events` keeping `window` un-acknowledged; each OK's latency into `acks`."""
    async with connect(url, max_size=None) as ws:
        sent: dict[str, float] = {}
        pending = iter(events)
        accepted = 0

        async def send_next() -> bool:
            event = next(pending, None)
            if event is None:
                return False
            sent[event["id"]] = time.perf_counter()
            await ws.send(json.dumps(["EVENT", event]))
            return True

        for _ in range(window):
            if not await send_next():
                break
        while sent:
            message = json.loads(await ws.recv())
            if message[0] != "OK":
                continue
            acks.append(time.perf_counter() - sent.pop(message[1]))
            accepted += bool(message[2])
            await send_next()
        return accepted


async def write_run(
    url: str | list[str], events: list[dict[str, Any]], connections: int, window: int = WINDOW
) -> tuple[float, list[float], int]:
    """`url`: one for every connection, or each connection's (its events are the n-th of
    every `connections`)."""
    shares = [events[n::connections] for n in range(connections)]
    urls = [url] * connections if isinstance(url, str) else url
    acks: list[float] = []
    started = time.perf_counter()
    runs = (writer(urls[n], share, acks, window) for n, share in enumerate(shares))
    accepted = sum(await asyncio.gather(*runs))
    return len(events) / (time.perf_counter() - started), acks, accepted


async def counted_write_run(
    database_url: str,
    url: str | list[str],
    events: list[dict[str, Any]],
    connections: int,
    window: int,
    collections: int = 1,
) -> tuple[float, list[float], int, int]:
    """`write_run`, and how many transactions committed the events (a notification each)."""
    async with Commits(database_url, collections) as commits:
        rate, acks, accepted = await write_run(url, events, connections, window)
        await asyncio.sleep(0.2)
    return rate, acks, accepted, len(commits.ranges)


# --- nostr-relay ---------------------------------------------------------------------------------


def competitor_venv() -> Path:
    python = VENV / "bin" / "python"
    if not python.exists():
        VENV.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["uv", "venv", "-q", "-p", "3.11", str(VENV)], check=True)
        subprocess.run(
            ["uv", "pip", "install", "-q", "--python", str(python), COMPETITOR], check=True
        )
    return VENV


class NostrRelay:
    def __init__(self, tmp: Path) -> None:
        self.port = free_port()
        self.url = f"ws://127.0.0.1:{self.port}"
        venv = competitor_venv()
        default = venv / "lib" / "python3.11" / "site-packages" / "nostr_relay" / "config.yaml"
        config = default.read_text()
        config = config.replace(
            "sqlite+aiosqlite:///nostr.sqlite3", f"sqlite+aiosqlite:///{tmp}/nr.sqlite3"
        )
        config = config.replace("bind: 127.0.0.1:6969", f"bind: 127.0.0.1:{self.port}")
        config = config.replace("loglevel: info", "loglevel: warning")
        self.config = tmp / "nostr-relay.yaml"
        self.config.write_text(config)
        self.log = (tmp / "nostr-relay.log").open("wb")
        self.proc = subprocess.Popen(
            [str(venv / "bin" / "nostr-relay"), "-c", str(self.config), "serve"],
            cwd=tmp,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 60
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"nostr-relay exited: {(tmp / 'nostr-relay.log').read_text()[-2000:]}"
                )
            with suppress(OSError, httpx.TransportError):
                if httpx.get(f"http://127.0.0.1:{self.port}/", timeout=2).status_code < 500:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError("nostr-relay did not start in 60 s")
            time.sleep(0.2)

    def stop(self) -> None:
        self.proc.terminate()
        with suppress(subprocess.TimeoutExpired):
            self.proc.wait(30)
        if self.proc.poll() is None:
            self.proc.kill()
        self.log.close()


# --- TMS-only parts ----------------------------------------------------------------------------


async def authenticated(url: str, signer: Signer, sub: dict[str, Any] | None) -> ClientConnection:
    ws = await connect(url, max_size=None)
    challenge = json.loads(await ws.recv())[1]
    event = signer.key.sign(22242, "", int(time.time()), [["relay", url], ["challenge", challenge]])
    await ws.send(json.dumps(["AUTH", event.to_dict()]))
    answer = json.loads(await ws.recv())
    if answer[2] is not True:
        raise RuntimeError(f"AUTH refused: {answer}")
    if sub is not None:
        await ws.send(json.dumps(["REQ", "live", sub]))
        while json.loads(await ws.recv())[0] != "EOSE":
            pass
    return ws


# --- live fan-out: subscribers in processes of their own ---------------------------------------


async def subscriber_main(url: str, count: int, events: int) -> None:
    """One subscriber process: `count` authenticated subscriptions to new claims; "ready" once
    all have their EOSE; then, once each has `events` events (or 60 s pass), one JSON line of
    every arrival, [[event id, time.monotonic()], ...] per socket. `time.monotonic()` is the
    machine's CLOCK_MONOTONIC, the same clock in every process."""
    signer = Signer()
    signer.key = SecretKey(bytes.fromhex(os.environ["BENCH_SECRET_HEX"]))
    sockets = [
        await authenticated(url, signer, {"kinds": [4702], "limit": 0}) for _ in range(count)
    ]
    arrivals: list[list[tuple[str, float]]] = [[] for _ in sockets]
    print("ready", flush=True)

    async def listen(n: int, ws: ClientConnection) -> None:
        got = arrivals[n]
        while len(got) < events:
            text = await ws.recv()
            now = time.monotonic()
            if isinstance(text, str) and text.startswith('["EVENT"'):
                at = text.find('"id":"')  # the event's first field: no need to parse the rest
                got.append((text[at + 6 : at + 70], now))

    listeners = [asyncio.create_task(listen(n, ws)) for n, ws in enumerate(sockets)]
    with suppress(TimeoutError):
        await asyncio.wait_for(asyncio.gather(*listeners), 60)
    sys.stdout.write(json.dumps(arrivals) + "\n")
    sys.stdout.flush()
    for ws in sockets:
        await ws.close()


class Commits:
    """When each bench event committed, as PostgreSQL tells a listener of its own (the channel
    the server's commit feed listens to: `tms.ledger.write.writes.CHANNEL`, a notification per
    transaction and collection, sent at commit)."""

    def __init__(self, database_url: str, collections: int = 1) -> None:
        """`collections`: "bench" and, beyond one, "bench-1" ... (`bench_slug`)."""
        self.url = database_url
        self.slugs = {bench_slug(n) for n in range(collections)}
        self.ranges: list[tuple[int, int, float]] = []  # (first seq, last seq, when heard)
        self.conn: asyncpg.Connection | None = None

    async def __aenter__(self) -> Commits:
        self.conn = await asyncpg.connect(self.url)
        await self.conn.add_listener(CHANNEL, self._heard)
        return self

    def _heard(self, conn: object, pid: int, channel: str, payload: object) -> None:
        now = time.monotonic()
        collection, first, last, _ = json.loads(str(payload))
        if collection in self.slugs:
            self.ranges.append((int(first), int(last), now))

    async def times(self) -> dict[str, float]:
        """Each event id's commit time."""
        assert self.conn is not None
        rows = await self.conn.fetch(
            "SELECT seq, id FROM events WHERE collection = 'bench' AND seq >= $1",
            min((r[0] for r in self.ranges), default=0),
        )
        ids = {row["seq"]: row["id"] for row in rows}
        return {
            ids[seq]: at for lo, hi, at in self.ranges for seq in range(lo, hi + 1) if seq in ids
        }

    async def __aexit__(self, *exc: object) -> None:
        assert self.conn is not None
        await self.conn.close()


async def fan_out(
    server: Server, signer: Signer, database_url: str, subscribers: int, events: int, procs: int
) -> None:
    url = server.url.replace("http", "ws") + "/c/bench"
    env = {**os.environ, "BENCH_SECRET_HEX": signer.key.secret.hex()}
    shares = [subscribers // procs + (n < subscribers % procs) for n in range(procs)]
    children = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            __file__,
            "--subscriber",
            url,
            str(share),
            str(events),
            stdout=asyncio.subprocess.PIPE,
            env=env,
            limit=2**28,
        )
        for share in shares
        if share
    ]
    for child in children:
        assert child.stdout is not None
        line = await asyncio.wait_for(child.stdout.readline(), 120)
        if line.strip() != b"ready":
            raise RuntimeError(f"a subscriber process did not get ready: {line[:300]!r}")
    claims = [
        signer.sign(4702, {"collection": "bench", "text": f"fan-out {n} {time.time_ns()}"})
        for n in range(events)
    ]
    sent_at: dict[str, float] = {}
    acked_at: dict[str, float] = {}
    half = events // 2
    async with Commits(database_url) as commits:
        # half over MCP, in batches of 50
        with httpx.Client(timeout=60) as http:
            for start in range(0, half, 50):
                batch = claims[start : start + 50]
                now = time.monotonic()
                for event in batch:
                    sent_at[event["id"]] = now
                await asyncio.to_thread(call, http, server.url, "publish", {"events": batch})
                done = time.monotonic()
                for event in batch:
                    acked_at[event["id"]] = done
                await asyncio.sleep(0.01)
        # half over the relay, one at a time, as a client would
        async with connect(url, max_size=None) as ws:
            await ws.recv()  # the AUTH challenge; writes need none
            for event in claims[half:]:
                sent_at[event["id"]] = time.monotonic()
                await ws.send(json.dumps(["EVENT", event]))
                answer = json.loads(await ws.recv())
                acked_at[answer[1]] = time.monotonic()
        arrivals: list[list[tuple[str, float]]] = []
        for child in children:
            assert child.stdout is not None
            arrivals += json.loads(await asyncio.wait_for(child.stdout.readline(), 120))
            await child.wait()
        await asyncio.sleep(0.5)  # the last notifications
        committed = await commits.times()
    mcp_ids = {event["id"] for event in claims[:half]}
    by_door: dict[str, list[float]] = {"MCP": [], "relay": []}
    for got in arrivals:
        for event_id, at in got:
            if event_id in committed:
                by_door["MCP" if event_id in mcp_ids else "relay"].append(at - committed[event_id])
    from_commit = by_door["MCP"] + by_door["relay"]
    from_ack = [at - acked_at[i] for got in arrivals for i, at in got if i in acked_at]
    from_sent = [at - sent_at[i] for got in arrivals for i, at in got if i in sent_at]
    missed = sum(events - len({i for i, _ in got}) for got in arrivals)
    twice = sum(len(got) - len({i for i, _ in got}) for got in arrivals)
    print(
        f"2. fan-out to {subscribers} subscribers in {len(children)} client processes, {events} "
        f"claims ({half} over MCP batches of 50, {events - half} over the relay one at a time): "
        f"delivery after commit p50 {ms(from_commit, 0.5)}, p99 {ms(from_commit, 0.99)} "
        f"(targets <= 20 / <= 100 ms; MCP batches p99 {ms(by_door['MCP'], 0.99)}, relay p99 "
        f"{ms(by_door['relay'], 0.99)}); after the acknowledgement p50 {ms(from_ack, 0.5)}, "
        f"p99 {ms(from_ack, 0.99)}; after sending p50 {ms(from_sent, 0.5)}, p99 "
        f"{ms(from_sent, 0.99)}; missed {missed}, delivered twice {twice}, commit times known "
        f"for {len(committed)} of {events}",
        flush=True,
    )


async def idle_memory(server: Server, signer: Signer, count: int) -> None:
    url = server.url.replace("http", "ws") + "/c/bench"
    before = server.memory()[0]
    held = []
    for _ in range(count):
        held.append(await authenticated(url, signer, {"kinds": [4703], "limit": 0}))
    await asyncio.sleep(2)
    after = server.memory()[0]
    print(
        f"3. {count} idle authenticated connections with one subscription each: server memory "
        f"{before / 2**20:.0f} MB -> {after / 2**20:.0f} MB, +{(after - before) / 2**20:.0f} MB "
        "(target <= 200 MB)",
        flush=True,
    )
    for ws in held:
        await ws.close()


# --- workers: tms serve --workers 1 against --workers 2 ----------------------------------------

CORES: Final = (2, 8, 16)  # what the projection is computed for


def bench_slug(n: int) -> str:
    """The n-th collection the writes go to: "bench", then "bench-1", ..."""
    return "bench" if n == 0 else f"bench-{n}"


PROCESSES: Final = ("server", "PostgreSQL", "client")


def prepared(
    env: dict[str, str], tmp: Path, workers: int, collections: int
) -> tuple[Server, Signer, str]:
    """`tms serve --workers N` (`TMS_WORKERS`, the same setting) on a data directory of its own,
    a key approved and the collections started; and its database's URL."""
    data = tmp / f"data-w{workers}"
    server = Server(
        {**env, "TMS_DATA_DIR": str(data), "TMS_WORKERS": str(workers)},
        tmp / f"server-w{workers}.log",
    )
    server.start()
    signer = Signer()
    server.approve(signer.key.pubkey)
    with httpx.Client(timeout=60) as http:
        start = [signer.sign(4706, server.agreement())] + [
            signer.sign(4702, {"collection": bench_slug(n), "text": "Start."})
            for n in range(collections)
        ]
        call(http, server.url, "publish", {"events": start})
    return server, signer, asyncio.run(_database_url(data))


def workers_part(ns: argparse.Namespace, env: dict[str, str], tmp: Path) -> None:
    counts = [int(x) for x in ns.workers.split(",")]
    servers: dict[int, tuple[Server, Signer, str]] = {}
    # per workers: each round's events/s and CPU seconds per event by process
    rates: dict[int, list[float]] = {n: [] for n in counts}
    costs: dict[int, list[dict[str, float]]] = {n: [] for n in counts}
    try:
        for n in counts:
            servers[n] = prepared(env, tmp, n, ns.collections)
        for round_number in range(ns.rounds):
            for n in counts if round_number % 2 == 0 else counts[::-1]:
                server, signer, database_url = servers[n]
                # connection c (the c-th of every 16 events) writes to collection c % K
                slugs = [bench_slug(i % 16 % ns.collections) for i in range(ns.events)]
                events = [
                    signer.sign(
                        4702,
                        {"collection": slug, "text": f"workers {n} {i} {time.time_ns()}"},
                    )
                    for i, slug in enumerate(slugs)
                ]
                base = server.url.replace("http", "ws")
                urls = [f"{base}/c/{bench_slug(c % ns.collections)}" for c in range(16)]
                clock = CpuClock(server.pid, server.data_dir, with_children=n > 1)
                spied = None
                if ns.profile is not None:
                    spied = ns.profile / f"workers-{n}-round-{round_number}.txt"
                with Spy(server.pid, spied, subprocesses=n > 1):
                    clock.restart()
                    rate, acks, accepted, commits = asyncio.run(
                        counted_write_run(database_url, urls, events, 16, WINDOW, ns.collections)
                    )
                    spent, wall = clock.spent()
                per = {name: seconds / len(events) for name, seconds in spent.items()}
                kernel = clock.server_system() / len(events)
                rates[n].append(rate)
                costs[n].append(per)
                print(
                    f"4. round {round_number + 1}, tms serve --workers {n}: C=16 window 16, "
                    f"{ns.collections} collection{'s' if ns.collections > 1 else ''}: "
                    f"{rate:,.0f} events/s, ack p50 {ms(acks, 0.5)}, {accepted:,} of "
                    f"{len(events):,} accepted, {len(events) / max(commits, 1):.1f} events per "
                    f"transaction, load {load()}\n   CPU per event (us): "
                    + ", ".join(f"{k} {v * 1e6:,.0f}" for k, v in per.items())
                    + f" (of the server's, {kernel * 1e6:,.0f} in the kernel); cores busy: "
                    + ", ".join(f"{k} {v / wall:.2f}" for k, v in spent.items()),
                    flush=True,
                )
    except Exception:
        for server, _, _ in servers.values():
            print(server.log_tail(), file=sys.stderr)
        raise
    finally:
        for server, _, _ in servers.values():
            server.stop()
    print(workers_table(rates, costs), flush=True)


def workers_table(rates: dict[int, list[float]], costs: dict[int, list[dict[str, float]]]) -> str:
    """The figures of each server, the medians of the rounds: events/s, CPU per event by
    process, and the events/s N cores would carry at that CPU per event (the server's and
    PostgreSQL's: the clients are elsewhere)."""

    def median(values: list[float]) -> float:
        ordered = sorted(values)
        middle = len(ordered) // 2
        return (ordered[middle] + ordered[~middle]) / 2

    head = (
        "| tms serve | events/s (rounds) | CPU per event, us: server / PostgreSQL / client | "
        + " | ".join(f"{c} cores, events/s" for c in CORES)
        + " |"
    )
    lines = ["", head, "|" + "---|" * (3 + len(CORES))]
    for n, runs in rates.items():
        each = {name: median([c[name] for c in costs[n]]) for name in PROCESSES}
        carried = each["server"] + each["PostgreSQL"]
        lines.append(
            f"| --workers {n} | {median(runs):,.0f} ({', '.join(f'{r:,.0f}' for r in runs)}) | "
            + " / ".join(f"{each[name] * 1e6:,.0f}" for name in PROCESSES)
            + " | "
            + " | ".join(f"{c / carried:,.0f}" for c in CORES)
            + " |"
        )
    if len(rates) > 1:
        first, *rest = rates
        for n in rest:
            ratios = [b / a for a, b in zip(rates[first], rates[n], strict=False)]
            lines.append(
                f"\n--workers {n} / --workers {first}, round by round: "
                + ", ".join(f"{r:.2f}x" for r in ratios)
            )
    lines.append(
        f"N cores carry N / (server + PostgreSQL CPU per event); target >= 20,000 events/s at "
        f"16 cores. Load {load()}."
    )
    return "\n".join(lines)


# --- the run -----------------------------------------------------------------------------------


def run(ns: argparse.Namespace, tmp: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TMS_")}
    env.update(
        TMS_DATA_DIR=str(tmp / "data"),
        TMS_EMBED="off",
        TMS_MAX_CONNECTIONS="3000",
        TMS_MAX_CONNECTIONS_PER_ADDRESS="3000",  # every client here is 127.0.0.1
    )
    parts = set(ns.parts.split(","))
    if "workers" in parts:
        workers_part(ns, env, tmp)
        if parts == {"workers"}:
            return
    server = Server(env, tmp / "server.log")
    server.start()
    competitor = NostrRelay(tmp) if "writes" in parts and not ns.tms_only else None
    signer = Signer()
    try:
        server.approve(signer.key.pubkey)
        with httpx.Client(timeout=60) as http:
            call(
                http,
                server.url,
                "publish",
                {
                    "events": [
                        signer.sign(4706, server.agreement()),
                        signer.sign(4702, {"collection": "bench", "text": "Start."}),
                    ]
                },
            )
        tms_url = server.url.replace("http", "ws") + "/c/bench"
        database_url = asyncio.run(_database_url(tmp / "data"))
        sizes = {(16, 16): ns.events, (1, 16): ns.events // 4, (1, 1): ns.events // 8}
        runs = []
        for run_name in ns.runs.split(","):
            c, w = (int(x) for x in run_name.split("x"))
            runs.append((c, sizes.get((c, w), ns.events // 4), w))
        for connections, count, window in runs if "writes" in parts else ():
            events = [
                signer.sign(
                    4702,
                    {"collection": "bench", "text": f"claim {connections} {n} {time.time_ns()}"},
                )
                for n in range(count)
            ]
            figures = []
            sides = [("TMS", tms_url, server.pid, tmp / "data")]
            if not ns.tms_only:
                sides.insert(0, ("nostr-relay", competitor.url, competitor.proc.pid, tmp / "none"))
            for name, url, pid, data in sides:
                clock = CpuClock(pid, data, with_children=name != "TMS")
                spied = perfed = native = None
                if ns.profile is not None and name == "TMS":
                    spied = ns.profile / f"relay-c{connections}-w{window}.txt"
                    perfed = ns.profile / f"relay-c{connections}-w{window}.perf"
                    native = ns.profile / f"relay-c{connections}-w{window}-server.perf"
                with Spy(pid, spied), PgPerf(data, perfed), PgPerf(data, native, pid):
                    clock.restart()
                    if name == "TMS":
                        rate, acks, accepted, commits = asyncio.run(
                            counted_write_run(database_url, url, events, connections, window)
                        )
                    else:
                        rate, acks, accepted = asyncio.run(
                            write_run(url, events, connections, window)
                        )
                        commits = 0
                    cpu = clock.per(len(events))
                if commits:
                    cpu += f"; {len(events) / commits:.1f} events per transaction"
                figures.append(rate)
                print(
                    f"1. C={connections:<2} window {window:<2} {name:<11}: {rate:,.0f} events/s, "
                    f"ack p50 {ms(acks, 0.5)}, p99 {ms(acks, 0.99)}, "
                    f"{accepted:,} of {len(events):,} accepted, load {load()}\n   {cpu}",
                    flush=True,
                )
            target = (
                "   (target >= 7x and >= 6,000 events/s)"
                if connections == 16
                else "   (target: TMS ack p50 <= nostr-relay's)"
            )
            if len(figures) == 2:
                print(f"   TMS / nostr-relay = {figures[1] / figures[0]:.2f}x{target}", flush=True)
        if "fanout" in parts:
            fanning = fan_out(server, signer, database_url, ns.subscribers, ns.fanout, ns.procs)
            asyncio.run(fanning)
        if "memory" in parts:
            asyncio.run(idle_memory(server, signer, ns.idle))
    except Exception:
        print(server.log_tail(), file=sys.stderr)
        raise
    finally:
        if competitor is not None:
            competitor.stop()
        server.stop()


async def _database_url(data_dir: Path) -> str:
    """The server's embedded PostgreSQL, joined (it stops when its last user leaves)."""
    return await embedded_url(await start_embedded(data_dir))


def main() -> None:
    if len(sys.argv) == 5 and sys.argv[1] == "--subscriber":
        asyncio.run(subscriber_main(sys.argv[2], int(sys.argv[3]), int(sys.argv[4])))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=8000, help="events of the C=16 run (8,000)")
    parser.add_argument("--subscribers", type=int, default=100)
    parser.add_argument(
        "--procs", type=int, default=4, help="client processes the subscribers run in (4)"
    )
    parser.add_argument("--fanout", type=int, default=1000, help="claims fanned out (1,000)")
    parser.add_argument("--idle", type=int, default=1000, help="idle connections (1,000)")
    parser.add_argument(
        "--parts",
        default="writes,fanout,memory",
        help="which parts to run: writes, fanout, memory, workers (the first three)",
    )
    parser.add_argument(
        "--workers", default="1,2", help="workers: the `tms serve --workers` counts (1,2)"
    )
    parser.add_argument(
        "--rounds", type=int, default=3, help="workers: C=16 runs of each server, in turn (3)"
    )
    parser.add_argument(
        "--collections",
        type=int,
        default=1,
        help="workers: the collections the 16 connections write to, connection c to c mod K (1)",
    )
    parser.add_argument(
        "--runs", default="16x16,1x16,1x1", help="the write runs, CxWINDOW (16x16,1x16,1x1)"
    )
    parser.add_argument(
        "--tms-only", action="store_true", help="writes: TMS alone, without nostr-relay"
    )
    parser.add_argument(
        "--profile",
        type=Path,
        default=None,
        help="record the server with py-spy during each TMS write run, into this directory",
    )
    ns = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tms-bench-relay-") as tmp:
        run(ns, Path(tmp))


if __name__ == "__main__":
    main()
