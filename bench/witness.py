"""Witnessing with two TMS witnesses: `uv run python bench/witness.py`.

Starts four `tms serve` on 127.0.0.1, each over a fresh embedded PostgreSQL of its own
(`TMS_EMBED=off`): W1 and W2 witness the logs of 127.0.0.1 (`TMS_WITNESS_LOGS`), and two log
servers sign with one log key: ON names W1 and W2 in its policy (quorum: both), OFF names none.

1. Latency: `--publishes` one-claim publishes to ON, one at a time; after each, ON's
   `/c/bench/checkpoint` (NIP-98) is read every 20 ms until it carries both cosignatures
   (`TMS-Quorum: met`) at the publish's size: publish to quorum-cosigned, p50 / p99 (target:
   within 10 s; the submitter looks every second).
2. Throughput: 16 clients publishing one-claim calls to one collection for `--seconds`, to OFF
   then to ON, `--rounds` times in turn: events/s of each, and ON against OFF (target: within
   5 %). After each ON run, how long until the quorum covers its last checkpoint.
3. Back-off: W2 stopped, one publish to ON: W2's failures and next try as ON records them
   (`tlog_witness_state`), doubling from 2 s; W2 started again: how long until the quorum.

Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Final

import asyncpg
import httpx
from publish import body, claim, pct, post
from serving import Server, Signer, call

from tms.nostr.events import Event
from tms.store.database import embedded_url, start_embedded
from tms.tlog.cosignature import CosignerKey
from tms.tlog.note import NoteSigner

SLUG: Final = "bench"
POLL: Final = 0.02  # seconds between checkpoint reads
CLIENTS: Final = 16


def nip98(signer: Signer, url: str) -> dict[str, str]:
    event: Event = signer.key.sign(27235, "", int(time.time()), [["u", url], ["method", "GET"]])
    return {"Authorization": "Nostr " + base64.b64encode(event.to_json().encode()).decode()}


def quorum_at(http: httpx.Client, server: Server, signer: Signer, size: int) -> bool:
    """Whether the checkpoint a member reads carries the quorum at `size` or later."""
    url = f"{server.url}/c/{SLUG}/checkpoint"
    answer = http.get(url, headers=nip98(signer, url))
    if answer.status_code != 200 or answer.headers.get("tms-quorum") != "met":
        return False
    return int(answer.text.split("\n")[1]) >= size


def wait_quorum(
    http: httpx.Client, server: Server, signer: Signer, size: int, limit: float
) -> float | None:
    """Seconds until the quorum covers `size` (None: not within `limit`)."""
    started = time.perf_counter()
    while time.perf_counter() - started < limit:
        if quorum_at(http, server, signer, size):
            return time.perf_counter() - started
        time.sleep(POLL)
    return None


def latency(server: Server, signer: Signer, publishes: int) -> None:
    took = []
    missed = 0
    with httpx.Client(timeout=30) as http:
        for _ in range(publishes):
            started = time.perf_counter()
            result = call(http, server.url, "publish", {"events": [claim(signer, SLUG)]})
            size = result["checkpoints"][0]["size"]
            waited = wait_quorum(http, server, signer, size, 30)
            if waited is None:
                missed += 1
                continue
            took.append(time.perf_counter() - started)
    print(
        f"1. publish to quorum-cosigned checkpoint (W1 and W2), {len(took)} publishes: "
        f"p50 {pct(took, 0.5):.2f} s, p99 {pct(took, 0.99):.2f} s, max {max(took):.2f} s; "
        f"{missed} not within 30 s   (target <= 10 s)",
        flush=True,
    )


async def clients(server: Server, signer: Signer, seconds: float) -> tuple[int, int]:
    """One-claim publishes from CLIENTS clients for `seconds`: (events, last size signed)."""
    last = 0
    count = 0

    async def client(until: float) -> None:
        nonlocal last, count
        async with httpx.AsyncClient(timeout=60) as http:
            while time.monotonic() < until:
                result = await post(http, server.url, body([claim(signer, SLUG)]))
                last = max(last, result["checkpoints"][0]["size"])
                count += 1

    until = time.monotonic() + seconds
    await asyncio.gather(*(client(until) for _ in range(CLIENTS)))
    return count, last


def throughput(on: Server, off: Server, signer: Signer, seconds: float, rounds: int) -> None:
    rates: dict[str, list[float]] = {"off": [], "on": []}
    for k in range(rounds):
        for name, server in (("off", off), ("on", on)):
            started = time.perf_counter()
            count, last = asyncio.run(clients(server, signer, seconds))
            rate = count / (time.perf_counter() - started)
            rates[name].append(rate)
            line = f"2. round {k + 1}, witnessing {name:>3}: {rate:,.0f} events/s"
            if name == "on":
                with httpx.Client(timeout=30) as http:
                    caught = wait_quorum(http, server, signer, last, 60)
                line += f"; the quorum covered its last checkpoint (size {last:,}) " + (
                    "not within 60 s" if caught is None else f"{caught:.2f} s after"
                )
            print(line, flush=True)
    off_rate, on_rate = statistics.median(rates["off"]), statistics.median(rates["on"])
    print(
        f"2. medians: off {off_rate:,.0f} events/s, on {on_rate:,.0f} events/s: "
        f"{(on_rate - off_rate) / off_rate * 100:+.1f} %   (target: within 5 %)",
        flush=True,
    )


async def standing(database_url: str) -> list[tuple[str, int, int, float]]:
    """Each witness's (key name, size, failures, seconds until its next try) on ON's log."""
    conn = await asyncpg.connect(database_url)
    try:
        rows = await conn.fetch(
            "SELECT witness, size, failures, extract(epoch FROM retry_at - now()) AS wait "
            "FROM tlog_witness_state WHERE collection = $1 ORDER BY witness",
            SLUG,
        )
    finally:
        await conn.close()
    return [(r["witness"].split("+")[0], r["size"], r["failures"], float(r["wait"])) for r in rows]


def backoff(on: Server, w2: Server, signer: Signer, on_url: str, down: float) -> None:
    w2.stop()
    with httpx.Client(timeout=30) as http:
        result = call(http, on.url, "publish", {"events": [claim(signer, SLUG)]})
        size = result["checkpoints"][0]["size"]
        started = time.perf_counter()
        seen = set()
        while time.perf_counter() - started < down:
            for name, _, failures, wait in asyncio.run(standing(on_url)):
                if failures and (name, failures) not in seen:
                    seen.add((name, failures))
                    print(
                        f"3. {time.perf_counter() - started:5.1f} s after the publish: {name} "
                        f"failed {failures} time(s) in a row, next try in {wait:.1f} s",
                        flush=True,
                    )
            time.sleep(0.2)
        w2.start()
        back = time.perf_counter()
        caught = wait_quorum(http, on, signer, size, 400)
        print(
            f"3. W2 back after {down:.0f} s down: quorum at size {size} "
            + (
                "not within 400 s"
                if caught is None
                else f"{time.perf_counter() - back:.1f} s later"
            ),
            flush=True,
        )


def run(ns: argparse.Namespace, tmp: Path) -> None:
    log_key = NoteSigner.generate("127.0.0.1")
    keys = [CosignerKey.generate(f"w{i}.bench/witness") for i in (1, 2)]
    (tmp / "logs").write_text(f"log 127.0.0.1/c/ {log_key.verifier().encode()}\n")
    base = {k: v for k, v in os.environ.items() if not k.startswith("TMS_")}
    base["TMS_EMBED"] = "off"
    witnesses = [
        Server(
            {
                **base,
                "TMS_DATA_DIR": str(tmp / f"w{i}"),
                "TMS_WITNESS_LOGS": str(tmp / "logs"),
                "TMS_WITNESS_KEY": key.encode(),
            },
            tmp / f"w{i}.log",
        )
        for i, key in ((1, keys[0]), (2, keys[1]))
    ]
    for w in witnesses:
        w.start()
    policy = tmp / "policy"
    policy.write_text(
        f"log {log_key.verifier().encode()}\n"
        + "".join(
            f"witness W{i} {key.verifier().encode()} {w.url}/witness\n"
            for i, (key, w) in enumerate(zip(keys, witnesses, strict=True), 1)
        )
        + "group both all W1 W2\nquorum both\n"
    )
    on = Server(
        {
            **base,
            "TMS_DATA_DIR": str(tmp / "on"),
            "TMS_LOG_KEY": log_key.encode(),
            "TMS_WITNESS_POLICY": str(policy),
        },
        tmp / "on.log",
    )
    off = Server(
        {**base, "TMS_DATA_DIR": str(tmp / "off"), "TMS_LOG_KEY": log_key.encode()},
        tmp / "off.log",
    )
    servers = [*witnesses, on, off]
    try:
        signer = Signer()
        for server in (on, off):
            server.start()
            server.approve(signer.key.pubkey)
            with httpx.Client(timeout=60) as http:
                terms = signer.sign(4706, server.agreement())
                call(http, server.url, "publish", {"events": [terms, claim(signer, SLUG)]})
        on_url = asyncio.run(_database_url(tmp / "on"))
        print(f"load average before: {os.getloadavg()[0]:.2f}", flush=True)
        latency(on, signer, ns.publishes)
        throughput(on, off, signer, ns.seconds, ns.rounds)
        backoff(on, witnesses[1], signer, on_url, ns.down)
        print(f"load average after: {os.getloadavg()[0]:.2f}", flush=True)
    except Exception:
        for server in servers:
            print(server.log_tail())
        raise
    finally:
        for server in servers:
            server.stop()


async def _database_url(data_dir: Path) -> str:
    return await embedded_url(await start_embedded(data_dir))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--publishes", type=int, default=50, help="publishes timed to quorum")
    parser.add_argument("--seconds", type=float, default=15.0, help="each throughput run")
    parser.add_argument("--rounds", type=int, default=3, help="throughput runs off then on")
    parser.add_argument("--down", type=float, default=30.0, help="seconds W2 stays down")
    ns = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tms-bench-witness-") as tmp:
        run(ns, Path(tmp))


if __name__ == "__main__":
    main()
