"""The attacks of the defects issue, replayed against `tms serve`: `uv run python bench/attacks.py`.

Starts `tms serve` as a user does (a subprocess on 127.0.0.1, embedded PostgreSQL in a fresh
temporary data directory, `TMS_EMBED=off`), approves a key and signs its terms, then runs each
attack while a prober thread asks `/healthz` every 20 ms and a sampler reads the server's
resident memory (its own process and its children) every 50 ms. For each it prints what the
attacker got, the slowest `/healthz` during it (an upper bound on how long the event loop was
held) and the server's memory above what it used before. Targets from the issue are printed
beside the figures; nothing is asserted.

1. bodies: a 64 MiB body of `[],[],...` in `params` (about 22 million empty lists), once, then
   three at once (targets: 0.2 s of event-loop time and 300 MB of memory each; `/healthz` under
   100 ms with three at once);
2. quotes: a batch of 100 links quoting 100 stored evidence texts of 1.96 M characters each
   (targets: the loop never held over 50 ms, at most 200 MB more memory);
3. proofs: ten concurrent `check_proof` calls, each citing those 100 documents (`/healthz` must
   not report the database down);
4. slow connections: `--slow` connections sending half a request head, then nothing
   (`/healthz` must answer throughout; they must be closed);
5. the embedded PostgreSQL killed with SIGKILL: seconds until `/healthz` answers 200 again
   (target: 10 s), and what a tool call said meanwhile;
6. slow uploads: `--uploads` connections that send an upload's head, then a byte of its body a
   second, reopened as soon as the server closes one, for `--upload-seconds`: first all from
   one address (127.0.0.2), then spread over 20 (127.0.0.2 to 127.0.0.21), so that the server's
   whole connection limit is reached. `/healthz` is asked every 20 ms from 127.0.0.1 meanwhile,
   and `/terms` every 100 ms from 127.0.0.200: how many were served (target: all; the attack
   measured 5 of 34), and how many uploads the server held;
7. calls: `--uploads` concurrent `tools/list` from 127.0.0.2, repeated for `--upload-seconds`:
   `/healthz` and `/terms` from other addresses meanwhile (target: all served).

The relay door's attacks (issue 26) have a script each, each starting its own server:
`--relay subscriptions` (bench/attacks_subscriptions.py: removed members' reads, memory,
one big batch, the buffer behind a slow answer), `--relay sockets` (bench/attacks_sockets.py:
10,000 subscribed sockets, ping floods, endless fragments), `--relay reads`
(bench/attacks_reads.py: abandoned expensive REQs, contradiction search, COUNT floods). Their
figures are in bench/README.md ("Relay attacks: ...").
"""

from __future__ import annotations

import argparse
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Final

import httpx
import psutil
from serving import HEADERS, Server, Signer, call, compact

from tms.guard.rates import DEFAULT_ADDRESS, DEFAULT_KEY

COLLECTION: Final = "attacks"
ATTACKS: Final = ["bodies", "quotes", "proofs", "slow", "database", "uploads", "calls"]
RELAY_ATTACKS: Final = ["subscriptions", "sockets", "reads"]
MiB: Final = 1024 * 1024


# The prober runs in a process of its own: in this one, the threads sending attack bodies would
# hold the GIL and slow the prober down, and the server would be blamed for it.
PROBE: Final = """
import sys, time, httpx
url, stop = sys.argv[1], sys.argv[2]
with httpx.Client(timeout=30) as http:
    while True:
        started = time.perf_counter()
        try:
            status = http.get(url).status_code
        except httpx.HTTPError as exc:
            status = type(exc).__name__
        print(f"{(time.perf_counter() - started) * 1000:.2f} {status}", flush=True)
        try:
            open(stop).close()
            break
        except FileNotFoundError:
            time.sleep(0.02)
"""


class Watch:
    """`/healthz` every 20 ms (from another process) and the server's memory every 50 ms, for
    as long as it runs."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.latencies: list[float] = []
        self.statuses: dict[int | str, int] = {}
        self.peak = 0
        self._stop = threading.Event()
        self._sampler = threading.Thread(target=self._sample, daemon=True)
        self._stop_file = Path(tempfile.mktemp(prefix="tms-probe-"))
        self._prober: subprocess.Popen[str] | None = None

    def _sample(self) -> None:
        while not self._stop.is_set():
            own, children, _ = self.server.memory()
            self.peak = max(self.peak, own + children)
            time.sleep(0.05)

    def __enter__(self) -> Watch:
        self._prober = subprocess.Popen(
            [sys.executable, "-c", PROBE, f"{self.server.url}/healthz", str(self._stop_file)],
            stdout=subprocess.PIPE,
            text=True,
        )
        self._sampler.start()
        time.sleep(0.2)  # the prober is up before the attack starts
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._sampler.join(30)
        self._stop_file.touch()
        assert self._prober is not None
        out, _ = self._prober.communicate(timeout=60)
        self._stop_file.unlink()
        for line in out.splitlines():
            ms, status = line.split()
            self.latencies.append(float(ms))
            key: int | str = int(status) if status.isdigit() else status
            self.statuses[key] = self.statuses.get(key, 0) + 1

    def report(self, baseline: int) -> str:
        worst = max(self.latencies, default=0.0)
        p99 = (
            statistics.quantiles(self.latencies, n=100, method="inclusive")[98]
            if len(self.latencies) > 2
            else worst
        )
        return (
            f"/healthz: {len(self.latencies)} probes, slowest {worst:.0f} ms, p99 {p99:.0f} ms, "
            f"statuses {self.statuses}; memory above baseline at the peak: "
            f"{(self.peak - baseline) / MiB:+.0f} MiB"
        )


def memory(server: Server) -> int:
    own, children, _ = server.memory()
    return own + children


def post_raw(url: str, body: bytes) -> tuple[int, str, float]:
    started = time.perf_counter()
    with httpx.Client(timeout=120) as http:
        response = http.post(f"{url}/mcp", content=body, headers=HEADERS)
    return response.status_code, response.text[:160], time.perf_counter() - started


def attack_bodies(server: Server) -> None:
    print("1. 64 MiB bodies", flush=True)
    head = b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":'
    size = 64 * MiB - 200
    stranger = Signer()  # neither approved nor a member: its batch is read, then refused
    text = "Histamine intolerance is thought to result from reduced DAO activity. " * 28_000
    docs = [stranger.sign(4701, {"collection": COLLECTION, "text": text}) for _ in range(32)]
    publish = {"name": "publish", "arguments": {"events": docs}}
    bodies = {
        "empty lists": head + b"[" + b"[]," * (size // 3) + b"[]]}",
        "numbers": head + b"[" + b"1," * (size // 2) + b"1]}",
        "nesting": head + b"[" * size + b"]}",
        "a full-size batch (32 evidence documents)": head + compact(publish).encode() + b"}",
    }
    for name, body in bodies.items():
        for clients in (1, 3):
            baseline = memory(server)
            with Watch(server) as watch, ThreadPoolExecutor(clients) as pool:
                answers = list(pool.map(lambda _, b=body: post_raw(server.url, b), range(clients)))
            status, text, _ = answers[0]
            slowest = max(seconds for _, _, seconds in answers)
            print(
                f"   {name}, {len(body) / MiB:.0f} MiB, {clients} at once: {status} "
                f"(slowest answer {slowest:.2f} s): {text[:110]}"
            )
            print(f"      {watch.report(baseline)}")
    print(
        "   targets: the loop held at most 0.2 s, at most 300 MiB more, and /healthz under "
        "100 ms with three at once"
    )


def attack_quotes(server: Server, signer: Signer) -> list[str]:
    print("2. 100 links quoting 100 evidence texts of 1.96 M characters", flush=True)
    word = "histamine diamine oxidase activity intolerance "
    docs = []
    for n in range(100):
        text = f"Document {n}. " + word * (1_960_000 // len(word))
        docs.append(
            signer.sign(4701, {"collection": COLLECTION, "title": f"Doc {n}", "text": text})
        )
    claim = signer.sign(4702, {"collection": COLLECTION, "text": "DAO activity matters."})
    with httpx.Client(timeout=600) as http:
        for first in range(0, 100, 25):  # 25 documents a batch: about 50 MB
            call(http, server.url, "publish", {"events": docs[first : first + 25]})
        call(http, server.url, "publish", {"events": [claim]})
        links = [
            signer.sign(
                4703,
                {
                    "collection": COLLECTION,
                    "from": doc["id"],
                    "to": claim["id"],
                    "relation": "SUPPORTS",
                    "quote": "diamine oxidase activity intolerance histamine",
                    "reason": "It says so.",
                },
            )
            for doc in docs
        ]
        baseline = memory(server)
        with Watch(server) as watch:
            started = time.perf_counter()
            result = call(http, server.url, "publish", {"events": links})
            seconds = time.perf_counter() - started
    print(f"   accepted {len(result['accepted'])} links in {seconds:.2f} s")
    print(f"   {watch.report(baseline)}   (targets: loop held < 50 ms, < 200 MiB)")
    return [doc["id"] for doc in docs]


def attack_proofs(server: Server, signer: Signer, doc_ids: list[str]) -> None:
    print("3. ten concurrent check_proof calls, each citing 100 large documents", flush=True)
    proof = {
        "question": "q",
        "steps": [{"id": "root", "say": "All of them.", "from": doc_ids}],
    }

    def check(_: int) -> float:
        started = time.perf_counter()
        with httpx.Client(timeout=120) as http:
            result = call(
                http,
                server.url,
                "check_proof",
                {
                    "request": signer.request(
                        "check_proof", {"collection": COLLECTION, "proof": proof}
                    )
                },
            )
        assert result["ok"], result["problems"]
        return time.perf_counter() - started

    baseline = memory(server)
    with Watch(server) as watch, ThreadPoolExecutor(10) as pool:
        started = time.perf_counter()
        times = list(pool.map(check, range(10)))
        total = time.perf_counter() - started
    print(f"   10 proofs in {total:.2f} s (slowest {max(times):.2f} s)")
    print(f"   {watch.report(baseline)}   (target: no 503)")


@contextmanager
def more_files(count: int) -> Iterator[None]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, count + 1000), hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def attack_slow(server: Server, count: int) -> None:
    print(f"4. {count:,} connections sending half a request head, then nothing", flush=True)
    host, port = "127.0.0.1", int(server.url.rsplit(":", 1)[1])
    baseline = memory(server)
    sockets: list[socket.socket] = []
    with more_files(count), Watch(server) as watch:
        for _ in range(count):
            with suppress(OSError):
                s = socket.create_connection((host, port), timeout=5)
                s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
                sockets.append(s)
        opened = len(sockets)
        time.sleep(12)  # longer than TMS_HEAD_SECONDS
        still = 0
        for s in sockets:
            s.setblocking(False)
            try:
                if s.recv(1):
                    still += 1
            except BlockingIOError:
                still += 1
            except OSError:
                pass
            s.close()
    print(f"   opened {opened:,}; still open after 12 s: {still:,}")
    print(f"   {watch.report(baseline)}")


UPLOAD_HEAD: Final = (
    b"POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    b"Accept: application/json, text/event-stream\r\nContent-Length: 10000000\r\n\r\n{"
)


class Probe:
    """A plain request from an address of its own every `every` seconds, in a thread: how
    many were answered 200, and what the others got."""

    def __init__(self, url: str, source: str, every: float) -> None:
        self.url, self.source, self.every = url, source, every
        self.answers: dict[int | str, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        transport = httpx.HTTPTransport(local_address=self.source)
        with httpx.Client(transport=transport, timeout=10) as http:
            while not self._stop.is_set():
                try:
                    status: int | str = http.get(self.url).status_code
                except httpx.HTTPError as exc:
                    status = type(exc).__name__
                self.answers[status] = self.answers.get(status, 0) + 1
                time.sleep(self.every)

    def __enter__(self) -> Probe:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)

    def report(self) -> str:
        total = sum(self.answers.values())
        return f"{self.answers.get(200, 0)} of {total} served ({self.answers})"


def server_connections(server: Server, port: int) -> int:
    """The TCP connections the server process holds on its port (accepted, not closed)."""
    assert server.proc is not None
    try:
        held = psutil.Process(server.proc.pid).net_connections(kind="tcp")
    except psutil.Error:
        return 0
    return sum(c.laddr.port == port and c.status == psutil.CONN_ESTABLISHED for c in held)


def open_upload(port: int, source: str) -> socket.socket | None:
    """A connection from `source` that sent an upload's head and its body's first byte."""
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=5, source_address=(source, 0))
    except OSError:
        return None
    try:
        s.sendall(UPLOAD_HEAD)
        s.setblocking(False)
    except OSError:
        s.close()
        return None
    return s


def attack_uploads(server: Server, count: int, seconds: float) -> None:
    port = int(server.url.rsplit(":", 1)[1])
    for addresses in (1, 20):
        print(
            f"6. {count:,} slow uploads (a byte a second, reopened when closed) from "
            f"{addresses} address{'es' if addresses > 1 else ''}, for {seconds:.0f} s",
            flush=True,
        )
        sources = [f"127.0.0.{2 + n % addresses}" for n in range(count)]
        baseline = memory(server)
        opened = held_most = 0
        with (
            more_files(count * 2),
            Watch(server) as watch,
            Probe(f"{server.url}/terms", "127.0.0.200", 0.1) as other,
        ):
            uploads = [open_upload(port, source) for source in sources]
            opened = sum(s is not None for s in uploads)
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline:
                for n, s in enumerate(uploads):
                    if s is not None:
                        try:
                            if s.recv(1) == b"":
                                raise ConnectionResetError
                        except BlockingIOError:
                            with suppress(OSError):
                                s.send(b" ")
                                continue
                        except OSError:
                            pass
                        s.close()
                    uploads[n] = open_upload(port, sources[n])  # straight back
                    opened += uploads[n] is not None
                held_most = max(held_most, server_connections(server, port))
                time.sleep(1.0)
            for s in uploads:
                if s is not None:
                    s.close()
        print(
            f"   connections opened {opened:,}; the server held at most {held_most:,} "
            "connections at once"
        )
        print(f"   /terms from 127.0.0.200: {other.report()}")
        print(f"   {watch.report(baseline)}")


def attack_calls(server: Server, count: int, seconds: float) -> None:
    print(
        f"7. {count:,} concurrent tools/list from 127.0.0.2, again and again for {seconds:.0f} s",
        flush=True,
    )
    body = compact({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).encode()
    answers: dict[int | str, int] = {}
    lock = threading.Lock()
    deadline = time.monotonic() + seconds

    def caller(_: int) -> None:
        transport = httpx.HTTPTransport(local_address="127.0.0.2")
        with httpx.Client(transport=transport, timeout=30) as http:
            while time.monotonic() < deadline:
                try:
                    status: int | str = http.post(
                        f"{server.url}/mcp", content=body, headers=HEADERS
                    ).status_code
                except httpx.HTTPError as exc:
                    status = type(exc).__name__
                with lock:
                    answers[status] = answers.get(status, 0) + 1

    baseline = memory(server)
    with (
        more_files(count * 2),
        Watch(server) as watch,
        Probe(f"{server.url}/terms", "127.0.0.200", 0.1) as other,
        ThreadPoolExecutor(count) as pool,
    ):
        list(pool.map(caller, range(count)))
    print(f"   the callers got {answers}")
    print(f"   /terms from 127.0.0.200: {other.report()}")
    print(f"   {watch.report(baseline)}")


def attack_database(server: Server, signer: Signer, data_dir: Path) -> None:
    print("5. the embedded PostgreSQL killed with SIGKILL", flush=True)
    pid = int((data_dir / "postgres" / "postmaster.pid").read_text().split()[0])
    psutil.Process(pid).kill()
    killed = time.perf_counter()
    said: dict[str, int] = {}
    with httpx.Client(timeout=30) as http:
        while http.get(f"{server.url}/healthz").status_code != 200:
            try:
                call(
                    http,
                    server.url,
                    "list_collections",
                    {"request": signer.request("list_collections", {})},
                )
                said["answered"] = said.get("answered", 0) + 1
            except RuntimeError as exc:
                said[str(exc)] = said.get(str(exc), 0) + 1
            time.sleep(0.05)
    back = time.perf_counter() - killed
    print(f"   /healthz answered 200 again {back:.1f} s after the kill (target: 10 s)")
    print(f"   list_collections meanwhile: {said}")


def run(ns: argparse.Namespace, tmp: Path) -> None:
    data_dir = tmp / "data"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TMS_")}
    env.update(TMS_DATA_DIR=str(data_dir), TMS_EMBED="off")
    if ns.default_limits:  # the rate limits a server has unless told otherwise
        env.update(TMS_RATE_ADDRESS=DEFAULT_ADDRESS, TMS_RATE_KEY=DEFAULT_KEY)
    server = Server(env, tmp / "server.log")
    signer = Signer()
    print(f"tms serve answered /healthz after {server.start():.1f} s", flush=True)
    try:
        server.approve(signer.key.pubkey)
        with httpx.Client(timeout=60) as http:
            terms = http.get(f"{server.url}/terms").json()
            call(
                http,
                server.url,
                "publish",
                {
                    "events": [
                        signer.sign(4706, {"version": terms["version"], "sha256": terms["sha256"]})
                    ]
                },
            )
        print(f"server memory at rest: {memory(server) / MiB:.0f} MiB")
        doc_ids: list[str] = []
        for name in ns.only or ATTACKS:
            if name == "bodies":
                attack_bodies(server)
            elif name == "quotes":
                doc_ids = attack_quotes(server, signer)
            elif name == "proofs":
                attack_proofs(server, signer, doc_ids or attack_quotes(server, signer))
            elif name == "slow":
                attack_slow(server, ns.slow)
            elif name == "database":
                attack_database(server, signer, data_dir)
            elif name == "uploads":
                attack_uploads(server, ns.uploads, ns.upload_seconds)
            elif name == "calls":
                attack_calls(server, ns.uploads, ns.upload_seconds)
    except Exception:
        print(server.log_tail())
        raise
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slow", type=int, default=5000, help="slow connections (default 5000)")
    parser.add_argument(
        "--uploads", type=int, default=1000, help="slow uploads, and calls (default 1000)"
    )
    parser.add_argument(
        "--upload-seconds", type=float, default=30, help="how long they last (default 30)"
    )
    parser.add_argument(
        "--default-limits",
        action="store_true",
        help="keep the default TMS_RATE_ADDRESS and TMS_RATE_KEY (benchmarks turn them off)",
    )
    parser.add_argument(
        "--only",
        nargs="*",
        choices=ATTACKS,
        help="run only these attacks, in this order",
    )
    parser.add_argument(
        "--relay",
        nargs="+",
        choices=RELAY_ATTACKS,
        help="run the relay door's attacks instead, with each script's defaults",
    )
    ns = parser.parse_args()
    if ns.relay:
        for name in ns.relay:
            script = Path(__file__).parent / f"attacks_{name}.py"
            subprocess.run([sys.executable, str(script)], check=True)
        return
    with tempfile.TemporaryDirectory(prefix="tms-attacks-") as tmp:
        run(ns, Path(tmp))


if __name__ == "__main__":
    main()
