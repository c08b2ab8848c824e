"""Relay sockets under attack from outside, against `tms serve` with its default connection
limits: `uv run python bench/attacks_sockets.py`.

Starts `tms serve` as a user does (a subprocess on 127.0.0.1, embedded PostgreSQL in a fresh
temporary data directory, `TMS_EMBED=off`, rate limits off as in the other benchmarks: every
client here is on 127.0.0.x), makes an attacker's collection with `--keys` member keys, then
replays the defects issue's socket attacks while a prober process asks `/healthz` and makes a
signed MCP read (`list_collections`) from 127.0.0.1 every 100 ms, and a sampler reads the
server's resident memory every 200 ms. For each it prints the probes' success, the server's
memory above what it used before at the peak, and what the server closed:

1. crowd: `--sockets` sockets (10,000), each authenticated as one of the `--keys` keys (100) and
   subscribed to the collection, from `--addresses` addresses (1,000: 127.0.1.x and on), opened
   by four client processes, 32 at a time each, then held for `--hold` seconds (target:
   `/healthz` and the signed read always answer; before, 1,000 such sockets failed 30 probes of
   30);
2. pings: `--pingers` connections (4), no key, each sending pings of 125 bytes and never reading
   the pongs, until it has sent 256 MiB or is closed, for at most `--seconds` (before: +980 MB
   with four, held until they left);
3. fragments: `--fragmenters` connections (8), no key, each sending a 16 MiB message fragment
   that never ends, then a ping every second, answered, for at most `--seconds` (before: 16.6 MB
   each, held 120 s and more).

Nothing is asserted; the loops are bounded in count and time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Final

import httpx
from serving import Server, Signer, call
from websockets.asyncio.client import ClientConnection, connect
from websockets.frames import Frame, Opcode
from websockets.protocol import State

from tms.nostr.events import SecretKey

COLLECTION: Final = "crowd"
MiB: Final = 1024 * 1024
PARTS: Final = ["crowd", "pings", "fragments"]

# The prober runs in a process of its own, so that the attack's clients in this one do not slow
# it down and the server is not blamed for it. It prints one line a probe: kind, status, ms.
PROBE: Final = """
import json, sys, time, httpx
from tms.nostr.events import SecretKey
url, secret, stop = sys.argv[1], sys.argv[2], sys.argv[3]
key = SecretKey(bytes.fromhex(secret))
headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
def signed_read():
    content = json.dumps({"tool": "list_collections", "args": {}}, separators=(",", ":"))
    event = key.sign(4707, content, int(time.time())).to_dict()
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "list_collections", "arguments": {"request": event}}}
    answer = httpx.post(url + "/mcp", json=body, headers=headers, timeout=5)
    if answer.status_code != 200:
        return str(answer.status_code)
    return "200" if not answer.json()["result"].get("isError") else "error"
def health():
    return str(httpx.get(url + "/healthz", timeout=5).status_code)
while True:
    for kind, probe in (("healthz", health), ("mcp", signed_read)):
        started = time.perf_counter()
        try:
            status = probe()
        except Exception as exc:
            status = type(exc).__name__
        print(kind, status, f"{(time.perf_counter() - started) * 1000:.1f}", flush=True)
    try:
        open(stop).close()
        break
    except FileNotFoundError:
        time.sleep(0.1)
"""


class Watch:
    """The prober (another process) and a memory sampler, for as long as the block runs."""

    def __init__(self, server: Server, secret: str) -> None:
        self.server = server
        self.secret = secret
        self.peak = 0
        self.probes: dict[str, dict[str, int]] = {"healthz": {}, "mcp": {}}
        self.slowest: dict[str, float] = {"healthz": 0.0, "mcp": 0.0}
        self._stop = threading.Event()
        self._sampler = threading.Thread(target=self._sample, daemon=True)
        self._stop_file = Path(tempfile.mktemp(prefix="tms-probe-"))
        self._prober: subprocess.Popen[str] | None = None

    def _sample(self) -> None:
        while not self._stop.is_set():
            own, children, _ = self.server.memory()
            self.peak = max(self.peak, own + children)
            time.sleep(0.2)

    def __enter__(self) -> Watch:
        self._prober = subprocess.Popen(
            [sys.executable, "-c", PROBE, self.server.url, self.secret, str(self._stop_file)],
            stdout=subprocess.PIPE,
            text=True,
        )
        self._sampler.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._sampler.join(30)
        self._stop_file.touch()
        assert self._prober is not None
        out, _ = self._prober.communicate(timeout=120)
        self._stop_file.unlink()
        for line in out.splitlines():
            kind, status, ms = line.split()
            counts = self.probes[kind]
            counts[status] = counts.get(status, 0) + 1
            self.slowest[kind] = max(self.slowest[kind], float(ms))

    def report(self, baseline: int) -> str:
        said = []
        for kind, name in (("healthz", "/healthz"), ("mcp", "signed MCP read")):
            counts = self.probes[kind]
            total = sum(counts.values())
            said.append(
                f"{name} {counts.get('200', 0)} of {total} answered 200 "
                f"(slowest {self.slowest[kind]:.0f} ms, {counts})"
            )
        return (
            "; ".join(said) + f"; memory above baseline at the peak: "
            f"{(self.peak - baseline) / MiB:+.0f} MiB"
        )


def memory(server: Server) -> int:
    own, children, _ = server.memory()
    return own + children


def more_files() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def address(n: int) -> str:
    """The n-th attacker address: 127.0.1.1 to 127.0.1.250, then 127.0.2.1..."""
    return f"127.0.{1 + n // 250}.{1 + n % 250}"


# --- 1. the crowd ------------------------------------------------------------------------------


async def subscribe(url: str, key: SecretKey, source: str) -> ClientConnection:
    ws = await connect(url, max_size=None, local_addr=(source, 0), open_timeout=30)
    try:
        challenge = json.loads(await asyncio.wait_for(ws.recv(), 30))[1]
        auth = key.sign(22242, "", int(time.time()), [["relay", url], ["challenge", challenge]])
        await ws.send(json.dumps(["AUTH", auth.to_dict()]))
        answer = json.loads(await asyncio.wait_for(ws.recv(), 30))
        if answer[2] is not True:
            raise RuntimeError(f"AUTH refused: {answer}")
        await ws.send(json.dumps(["REQ", "live", {"kinds": [4702], "limit": 0}]))
        while json.loads(await asyncio.wait_for(ws.recv(), 30))[0] != "EOSE":
            pass
    except BaseException:
        ws.transport.abort()
        raise
    return ws


async def crowd_share(
    url: str, keys: list[SecretKey], ns: list[int], addresses: int, hold: float
) -> dict[str, Any]:
    """One client process's share of the crowd: sockets `ns`, opened 32 at a time, held."""
    held: list[ClientConnection] = []
    failed: dict[str, int] = {}
    gate = asyncio.Semaphore(32)
    started = time.monotonic()

    async def one(n: int) -> None:
        async with gate:
            if time.monotonic() - started > 300:  # bounded: five minutes of opening at most
                failed["not tried (5 min)"] = failed.get("not tried (5 min)", 0) + 1
                return
            try:
                held.append(await subscribe(url, keys[n % len(keys)], address(n % addresses)))
            except Exception as exc:
                name = type(exc).__name__
                failed[name] = failed.get(name, 0) + 1

    await asyncio.gather(*(one(n) for n in ns))
    opened = time.monotonic() - started
    print(json.dumps({"subscribed": len(held), "failed": failed, "seconds": opened}), flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)  # "hold"
    await asyncio.sleep(hold)
    still = sum(ws.state is State.OPEN for ws in held)
    for ws in held:
        ws.transport.abort()
    return {"still": still}


def crowd_worker(spec: str) -> None:
    """`--crowd-worker '<json>'`: a share of the crowd in a process of its own, its figures as
    one JSON line (several processes: one Python process cannot open 10,000 sockets fast)."""
    job = json.loads(spec)
    keys = [SecretKey(bytes.fromhex(secret)) for secret in job["keys"]]
    figures = asyncio.run(crowd_share(job["url"], keys, job["ns"], job["addresses"], job["hold"]))
    print(json.dumps(figures), flush=True)


def crowd(server: Server, secret: str, keys: list[SecretKey], ns: argparse.Namespace) -> None:
    """The crowd opened by client processes of their own (one Python process cannot open
    10,000 sockets fast), probed while it opens, then again while it is held."""
    url = server.url.replace("http", "ws") + f"/c/{COLLECTION}"
    procs = min(4, max(1, ns.sockets // 500))
    secrets = [key.secret.hex() for key in keys]
    workers = []
    baseline = memory(server)
    with Watch(server, secret) as opening:
        for first in range(procs):
            job = {
                "url": url,
                "keys": secrets,
                "ns": list(range(first, ns.sockets, procs)),
                "addresses": ns.addresses,
                "hold": ns.hold,
            }
            workers.append(
                subprocess.Popen(
                    [sys.executable, __file__, "--crowd-worker", json.dumps(job)],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    text=True,
                )
            )
        subscribed, seconds, failed = 0, 0.0, {}
        for worker in workers:
            assert worker.stdout is not None
            figures = json.loads(worker.stdout.readline())
            subscribed += figures["subscribed"]
            seconds = max(seconds, figures["seconds"])
            for name, n in figures["failed"].items():
                failed[name] = failed.get(name, 0) + n
    print(
        f"   {subscribed:,} of {ns.sockets:,} subscribed in {seconds:.0f} s by {procs} client "
        f"processes (failed: {failed})"
    )
    print(f"   while they opened: {opening.report(baseline)}", flush=True)
    still = 0
    with Watch(server, secret) as holding:
        for worker in workers:
            assert worker.stdin is not None
            worker.stdin.write("hold\n")
            worker.stdin.flush()
        for worker in workers:
            out, _ = worker.communicate(timeout=ns.hold + 120)
            still += json.loads(out.strip().splitlines()[-1])["still"]
    print(
        f"   held {ns.hold:.0f} s: {still:,} still open (the server closed "
        f"{subscribed - still:,}); {holding.report(baseline)}",
        flush=True,
    )


# --- 2. pings, never read ----------------------------------------------------------------------


def upgraded(port: int, source: str) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10, source_address=(source, 0))
    sock.sendall(
        b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    )
    answer = b""
    while b"\r\n\r\n" not in answer:
        chunk = sock.recv(4096)
        if not chunk:
            raise ConnectionError("closed during the handshake")
        answer += chunk
    if not answer.startswith(b"HTTP/1.1 101"):
        raise ConnectionError(answer.split(b"\r\n", 1)[0].decode())
    return sock


def pinger(port: int, source: str, seconds: float, results: list[str]) -> None:
    pings = Frame(Opcode.PING, b"p" * 125).serialize(mask=True, extensions=[]) * 512
    sent, started = 0, time.monotonic()
    how = f"still open after {seconds:.0f} s"
    try:
        sock = upgraded(port, source)
    except OSError as exc:
        results.append(f"not upgraded: {exc}")
        return
    with sock:
        sock.settimeout(1)
        pending = memoryview(pings)
        while time.monotonic() - started < seconds and sent < 256 * MiB:
            try:
                n = sock.send(pending)
            except TimeoutError:  # the server no longer reads it
                continue
            except OSError as exc:
                how = f"closed ({type(exc).__name__}) after {time.monotonic() - started:.1f} s"
                break
            sent += n
            pending = pending[n:] or memoryview(pings)
        else:
            if sent >= 256 * MiB:
                how = "sent all 256 MiB"
    results.append(f"{sent / MiB:.0f} MiB of pings sent, {how}")


# --- 3. a fragment that never ends -------------------------------------------------------------


def fragmenter(port: int, source: str, seconds: float, results: list[str]) -> None:
    started = time.monotonic()
    try:
        sock = upgraded(port, source)
    except OSError as exc:
        results.append(f"not upgraded: {exc}")
        return
    how = f"still open after {seconds:.0f} s"
    sent = "not all"
    with sock:
        sock.settimeout(30)
        try:
            frame = Frame(Opcode.TEXT, b"x" * (16 * MiB - 64), fin=False)
            sock.sendall(frame.serialize(mask=True, extensions=[]))
            sent = f"all in {time.monotonic() - started:.1f} s"
            sock.settimeout(2)
            ping = Frame(Opcode.PING, b"still here").serialize(mask=True, extensions=[])
            while time.monotonic() - started < seconds:
                sock.sendall(ping)
                try:
                    if sock.recv(65536) == b"":
                        raise ConnectionResetError("EOF")
                except TimeoutError:
                    pass
                time.sleep(1)
        except OSError as exc:
            how = f"closed ({type(exc).__name__}) after {time.monotonic() - started:.1f} s"
    results.append(f"16 MiB fragment sent ({sent}), {how}")


def threads(target: Any, count: int, port: int, seconds: float, first: int) -> list[str]:
    results: list[str] = []
    running = [
        threading.Thread(target=target, args=(port, address(first + n), seconds, results))
        for n in range(count)
    ]
    for thread in running:
        thread.start()
    for thread in running:
        thread.join(seconds + 60)
    return results


# --- the run -----------------------------------------------------------------------------------


def setup(server: Server, owner: Signer, keys: list[SecretKey]) -> None:
    """The attacker's own collection, the keys its members: all it needs, no operator's help
    beyond approving its owner."""
    server.approve(owner.key.pubkey)
    terms = server.agreement()
    with httpx.Client(timeout=120) as http:
        call(
            http,
            server.url,
            "publish",
            {
                "events": [
                    owner.sign(4706, terms),
                    owner.sign(
                        4705, {"collection": COLLECTION, "members": [k.pubkey for k in keys]}
                    ),
                ]
            },
        )


def run(ns: argparse.Namespace, tmp: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TMS_")}
    env.update(TMS_DATA_DIR=str(tmp / "data"), TMS_EMBED="off")
    server = Server(env, tmp / "server.log")
    print(f"tms serve answered /healthz after {server.start():.1f} s", flush=True)
    port = int(server.url.rsplit(":", 1)[1])
    owner = Signer()
    keys = [SecretKey.generate() for _ in range(ns.keys)]
    prober = owner.key.secret.hex()  # the owner's reads are the probe's signed reads
    try:
        setup(server, owner, keys)
        print(f"server memory at rest: {memory(server) / MiB:.0f} MiB", flush=True)
        for part in ns.only or PARTS:
            baseline = memory(server)
            if part == "crowd":
                print(
                    f"1. {ns.sockets:,} subscribed sockets of {ns.keys} keys from "
                    f"{ns.addresses:,} addresses",
                    flush=True,
                )
                crowd(server, prober, keys, ns)
                time.sleep(2)
                continue
            if part == "pings":
                print(f"2. {ns.pingers} connections sending pings, never reading", flush=True)
                with Watch(server, prober) as watch:
                    results = threads(pinger, ns.pingers, port, ns.seconds, 3000)
                for line in results:
                    print(f"   {line}")
            else:
                print(f"3. {ns.fragmenters} connections sending a fragment that never ends")
                with Watch(server, prober) as watch:
                    results = threads(fragmenter, ns.fragmenters, port, ns.seconds, 3100)
                for line in results:
                    print(f"   {line}")
            print(f"   {watch.report(baseline)}", flush=True)
            time.sleep(2)  # what the server closed is gone before the next part
    except Exception:
        print(server.log_tail())
        raise
    finally:
        server.stop()


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--crowd-worker":
        more_files()
        crowd_worker(sys.argv[2])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sockets", type=int, default=10_000, help="the crowd (10,000)")
    parser.add_argument("--keys", type=int, default=100, help="its keys (100)")
    parser.add_argument("--addresses", type=int, default=1000, help="its addresses (1,000)")
    parser.add_argument("--hold", type=float, default=20, help="seconds it is held (20)")
    parser.add_argument("--pingers", type=int, default=4, help="ping flooders (4)")
    parser.add_argument("--fragmenters", type=int, default=8, help="endless fragments (8)")
    parser.add_argument(
        "--seconds", type=float, default=60, help="how long pings and fragments last at most (60)"
    )
    parser.add_argument("--only", nargs="*", choices=PARTS, help="these parts only, in order")
    ns = parser.parse_args()
    more_files()
    with tempfile.TemporaryDirectory(prefix="tms-attacks-sockets-") as tmp:
        run(ns, Path(tmp))


if __name__ == "__main__":
    main()
