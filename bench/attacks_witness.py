"""The witness flood of issue 33 (item 6), replayed against `tms serve`:
`uv run python bench/attacks_witness.py`.

Starts `tms serve` as a user does (a subprocess on 127.0.0.1, embedded PostgreSQL in a fresh
temporary data directory, `TMS_EMBED=off`) witnessing its own log (`TMS_WITNESS_LOGS` naming its
log key for `127.0.0.1/c/`), approves a key, signs its terms and publishes one claim. The
attack: the checkpoint that publish answered, its valid signature line copied to 100 lines,
POSTed to `/witness/add-checkpoint` back to back by `--clients` (16) clients, each from an
address of its own (127.0.0.2 to 127.0.0.17), for `--seconds` (10). The issue measured 11 ms of
CPU for each such request (100 signature verifications, then a database read and a 409), honest
relay reads 122 times slower and publishes 20 times slower meanwhile.

Printed, at rest and under the flood: an honest one-filter relay REQ every 200 ms from
127.0.0.1 (the time to EOSE) and an honest one-claim publish every 200 ms (the time to its
answer); under the flood, how many requests the attackers got answered, by status. Nothing is
asserted.

`--default-limits` keeps the default `TMS_RATE_ADDRESS` (benchmarks turn rate limits off), to
see what the price of add-checkpoint (`ADD_CHECKPOINT_UNITS`) leaves an attacker.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

import httpx
from publish import body, claim, post
from serving import Server, Signer
from websockets.asyncio.client import ClientConnection, connect

from tms.guard.rates import DEFAULT_ADDRESS
from tms.tlog.note import NoteSigner
from tms.tlog.witness import Submission

COLLECTION: Final = "bench"
COPIES: Final = 100
HONEST_EVERY: Final = 0.2
HONEST_REQ: Final = {"kinds": [4702], "limit": 20}


def ms(values: Sequence[float]) -> str:
    if not values:
        return "none"
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))]
    return (
        f"median {statistics.median(ordered) * 1000:.1f} ms, p95 {p95 * 1000:.1f} ms, "
        f"max {ordered[-1] * 1000:.0f} ms (n={len(ordered)})"
    )


async def relay(server: Server, signer: Signer) -> ClientConnection:
    url = f"ws://127.0.0.1:{server.port}/c/{COLLECTION}"
    ws = await connect(url, max_size=None, open_timeout=60)
    challenge = json.loads(await ws.recv())[1]
    event = signer.key.sign(22242, "", int(time.time()), [["relay", url], ["challenge", challenge]])
    await ws.send(json.dumps(["AUTH", event.to_dict()]))
    answer = json.loads(await ws.recv())
    if answer[2] is not True:
        raise RuntimeError(f"AUTH refused: {answer}")
    return ws


async def reads(ws: ClientConnection, until: float) -> list[float]:
    took = []
    n = 0
    while time.perf_counter() < until:
        n += 1
        started = time.perf_counter()
        await ws.send(json.dumps(["REQ", f"h{n}", HONEST_REQ]))
        while True:
            message = json.loads(await ws.recv())
            if message[0] in ("EOSE", "CLOSED") and message[1] == f"h{n}":
                break
        took.append(time.perf_counter() - started)
        await ws.send(json.dumps(["CLOSE", f"h{n}"]))
        await asyncio.sleep(HONEST_EVERY)
    return took


async def publishes(server: Server, signer: Signer, until: float) -> list[float]:
    took = []
    async with httpx.AsyncClient(timeout=120) as http:
        while time.perf_counter() < until:
            data = body([claim(signer, COLLECTION)])
            started = time.perf_counter()
            await post(http, server.url, data)
            took.append(time.perf_counter() - started)
            await asyncio.sleep(HONEST_EVERY)
    return took


async def attacker(server: Server, source: str, flood: bytes, until: float) -> Counter[int]:
    statuses: Counter[int] = Counter()
    transport = httpx.AsyncHTTPTransport(local_address=source)
    async with httpx.AsyncClient(transport=transport, timeout=60) as http:
        while time.perf_counter() < until:
            answer = await http.post(f"{server.url}/witness/add-checkpoint", content=flood)
            statuses[answer.status_code] += 1
    return statuses


async def honest(
    server: Server, signer: Signer, seconds: float, clients: int, flood: bytes | None
) -> None:
    ws = await relay(server, signer)
    try:
        until = time.perf_counter() + seconds
        attacks = [
            attacker(server, f"127.0.0.{2 + n}", flood, until)
            for n in range(clients if flood else 0)
        ]
        read, published, *counted = await asyncio.gather(
            reads(ws, until), publishes(server, signer, until), *attacks
        )
    finally:
        await ws.close()
    print(f"   relay REQ to EOSE: {ms(read)}")
    print(f"   publish:           {ms(published)}")
    if counted:
        total: Counter[int] = sum(counted, Counter())
        rate = sum(total.values()) / seconds
        by = ", ".join(f"{status}: {n:,}" for status, n in sorted(total.items()))
        print(f"   attackers: {rate:,.0f} requests/s answered ({by})")


async def attack(ns: argparse.Namespace, tmp: Path) -> None:
    log_key = NoteSigner.generate("127.0.0.1")
    logs = tmp / "witness-logs"
    logs.write_text(f"log 127.0.0.1/c/ {log_key.verifier().encode()}\n")
    env = {
        **os.environ,
        "TMS_DATA_DIR": str(tmp / "data"),
        "TMS_EMBED": "off",
        "TMS_LOG_KEY": log_key.encode(),
        "TMS_WITNESS_LOGS": str(logs),
    }
    server = Server(env, tmp / "server.log")
    if ns.default_limits:
        server.env["TMS_RATE_ADDRESS"] = DEFAULT_ADDRESS
    server.start()
    try:
        signer = Signer()
        server.approve(signer.key.pubkey)
        async with httpx.AsyncClient(timeout=120) as http:
            await post(http, server.url, body([signer.sign(4706, server.agreement())]))
            result: dict[str, Any] = await post(http, server.url, body([claim(signer, COLLECTION)]))
        note: str = result["checkpoints"][0]["note"]
        line = note.rsplit("\n", 2)[1] + "\n"
        flood = Submission(0, (), note + line * (COPIES - 1)).body()
        limits = f"TMS_RATE_ADDRESS={DEFAULT_ADDRESS}" if ns.default_limits else "rate limits off"
        print(
            f"tms serve on 127.0.0.1, {limits}; the flood: {ns.clients} clients, each from an "
            f"address of its own, posting add-checkpoint with a checkpoint whose signature line "
            f"is copied {COPIES} times ({len(flood):,} bytes), back to back"
        )
        print(f"at rest, {ns.seconds:g} s:")
        await honest(server, signer, ns.seconds, ns.clients, None)
        print(f"under the flood, {ns.seconds:g} s:")
        await honest(server, signer, ns.seconds, ns.clients, flood)
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--clients", type=int, default=16, help="attackers, one address each")
    parser.add_argument("--seconds", type=float, default=10.0, help="each phase's length")
    parser.add_argument(
        "--default-limits",
        action="store_true",
        help="keep the default TMS_RATE_ADDRESS (benchmarks turn rate limits off)",
    )
    ns = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tms-bench-witness-") as tmp:
        asyncio.run(attack(ns, Path(tmp)))


if __name__ == "__main__":
    main()
