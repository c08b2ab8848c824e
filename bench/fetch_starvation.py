"""Does `fetch_url` starve publishing? `uv run python bench/fetch_starvation.py`.

Starts `tms serve` as a user does (a subprocess on a free port of 127.0.0.1, embedded PostgreSQL
in a fresh temporary `TMS_DATA_DIR`, `TMS_EMBED=off`) and a local web server of its own whose one
page is a 2 MB markup-heavy HTML document (tens of thousands of tiny elements: ten seconds of
trafilatura's time and half a gigabyte of memory); `TMS_FETCH_ALLOW` lets the server fetch it.
A key is approved with `tms approve NPUB` and signs the terms (as `GET /terms` gives them).
Then, through `POST /mcp` only, with signed requests as SPEC's snippets make them:

1. one-claim `publish` calls one after the other, alone: the baseline latency;
2. the same while 8 clients call `fetch_url` on the page in a loop, each calling again as soon
   as it has an answer, for `--seconds`: latency under load, and what the fetches got back;
3. the server's resident memory (its own process, and its extraction workers) before, at the
   peak during phase 2, and 10 s after the fetches stopped.

Target: phase 2's one-claim publish p99 under 100 ms. Latency is the HTTP round trip of a
publish whose events were signed beforehand. Prints figures; asserts nothing. Settings the
server should use (`TMS_FETCH_EXTRACT_SECONDS`, `TMS_FETCH_EXTRACT_MEMORY_MB`,
`TMS_FETCH_EXTRACT_WORKERS`) are passed on from this process's environment.
"""

from __future__ import annotations

import argparse
import collections
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Final

import httpx
from serving import Server, Signer, call

COLLECTION: Final = "bench"
TARGET_P99_MS: Final = 100.0
PASSED_ON: Final = (
    "TMS_FETCH_EXTRACT_SECONDS",
    "TMS_FETCH_EXTRACT_MEMORY_MB",
    "TMS_FETCH_EXTRACT_WORKERS",
)
UNIT: Final = (
    '<div class="c"><p><span>w</span><b>x</b><i>y</i><a href="#">z</a> lorem ipsum</p></div>\n'
)


def markup_page(size: int) -> bytes:
    """About `size` bytes of tiny elements: costly for trafilatura, whatever the text."""
    units = UNIT * (size // len(UNIT))
    head = "<!DOCTYPE html><html><head><title>Markup</title></head>"
    return f"{head}<body>{units}</body></html>".encode()


# --- the local web server ------------------------------------------------------------------------


class _Page(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    body = b""

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(self.body)))
        self.send_header("Connection", "close")
        self.end_headers()
        with suppress(OSError):
            self.wfile.write(self.body)
        self.close_connection = True

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextmanager
def web_page(body: bytes) -> Iterator[str]:
    """Serve `body` on 127.0.0.1 until the block ends; yields the page's URL."""
    handler = type("Page", (_Page,), {"body": body})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1})
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/page.html"
    finally:
        server.shutdown()
        thread.join()
        server.server_close()


# --- the TMS server ------------------------------------------------------------------------------


def timed_publishes(
    http: httpx.Client, url: str, signer: Signer, count: int | None, until: float | None
) -> list[float]:
    """One-claim publishes, one after another; milliseconds each (the round trip only)."""
    times: list[float] = []
    n = 0
    while (count is None or n < count) and (until is None or time.monotonic() < until):
        n += 1
        claim = signer.sign(4702, {"collection": COLLECTION, "text": f"Claim {n} at {time.time()}"})
        started = time.perf_counter()
        result = call(http, url, "publish", {"events": [claim]})
        times.append((time.perf_counter() - started) * 1000)
        if result.get("accepted") != [claim["id"]]:
            raise RuntimeError(f"publish did not accept the claim: {result}")
        time.sleep(0.02)
    return times


def pct(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered) + 0.5) - 1))]


def latency_line(label: str, ms: Sequence[float]) -> str:
    if not ms:
        return f"  {label}: no calls"
    return (
        f"  {label}: {len(ms)} calls, p50 {pct(ms, 50):.1f} ms, p95 {pct(ms, 95):.1f} ms, "
        f"p99 {pct(ms, 99):.1f} ms, max {max(ms):.1f} ms, mean {statistics.fmean(ms):.1f} ms"
    )


def mib(n: int) -> str:
    return f"{n / 1024 / 1024:,.0f} MiB"


class Fetchers:
    """`count` clients calling fetch_url on `page` in a loop until stopped."""

    def __init__(self, server_url: str, page: str, signer: Signer, count: int) -> None:
        self.server_url, self.page, self.signer = server_url, page, signer
        self.stop = threading.Event()
        self.outcomes: collections.Counter[str] = collections.Counter()
        self.seconds: list[float] = []
        self._lock = threading.Lock()
        self._threads = [
            threading.Thread(target=self._loop, name=f"fetcher-{i}") for i in range(count)
        ]

    def __enter__(self) -> Fetchers:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for thread in self._threads:
            thread.join()

    def _loop(self) -> None:
        with httpx.Client(timeout=httpx.Timeout(600, connect=10)) as http:
            while not self.stop.is_set():
                request = self.signer.request("fetch_url", {"url": self.page})
                started = time.perf_counter()
                try:
                    result = call(http, self.server_url, "fetch_url", {"request": request})
                    outcome = f"ok ({result['chars']:,} characters)"
                except RuntimeError as exc:
                    outcome = str(exc).replace(self.page, "PAGE")  # alike errors count together
                except httpx.HTTPError as exc:
                    outcome = f"HTTP error: {type(exc).__name__}"
                with self._lock:
                    self.seconds.append(time.perf_counter() - started)
                    self.outcomes[outcome] += 1


# --- the run -------------------------------------------------------------------------------------


def run(ns: argparse.Namespace, tmp: Path) -> None:
    body = markup_page(int(ns.page_mb * 1024 * 1024))
    signer = Signer()
    print(
        f"bench/fetch_starvation.py: {ns.fetchers} fetchers of a {len(body) / 1e6:.1f} MB "
        f"markup-heavy page for {ns.seconds:.0f} s, {os.cpu_count()} CPUs",
        flush=True,
    )
    with web_page(body) as page:
        port = page.split(":")[2].split("/")[0]
        env = {k: v for k, v in os.environ.items() if not k.startswith("TMS_")}
        env.update(
            {
                "TMS_DATA_DIR": str(tmp / "data"),
                "TMS_EMBED": "off",
                "TMS_FETCH_ALLOW": f"127.0.0.1:{port}",
            }
        )
        for name in PASSED_ON:
            if name in os.environ:
                env[name] = os.environ[name]
                print(f"  {name}={os.environ[name]}")
        server = Server(env, tmp / "server.log")
        try:
            print(f"  tms serve answered /healthz after {server.start():.1f} s", flush=True)
            server.approve(signer.key.pubkey)
            with httpx.Client(timeout=httpx.Timeout(600, connect=10)) as http:
                accept = server.agreement()
                call(http, server.url, "publish", {"events": [signer.sign(4706, accept)]})
                timed_publishes(http, server.url, signer, 20, None)  # warm-up
                own, workers, count = server.memory()
                print(f"  memory before: server {mib(own)}, {count} child processes {mib(workers)}")

                print("\n1. one-claim publish, alone", flush=True)
                alone = timed_publishes(http, server.url, signer, ns.baseline, None)
                print(latency_line("publish", alone), flush=True)

                print(
                    f"\n2. one-claim publish while {ns.fetchers} clients fetch the page", flush=True
                )
                peak = [0, 0, 0]
                sampling = threading.Event()

                def sample() -> None:
                    while not sampling.wait(0.25):
                        own, workers, count = server.memory()
                        peak[0], peak[1] = max(peak[0], own), max(peak[1], workers)
                        peak[2] = max(peak[2], count)

                sampler = threading.Thread(target=sample)
                sampler.start()
                try:
                    with Fetchers(server.url, page, signer, ns.fetchers) as fetchers:
                        time.sleep(2)  # downloads done, extractions under way
                        until = time.monotonic() + ns.seconds
                        loaded = timed_publishes(http, server.url, signer, None, until)
                        print(latency_line("publish", loaded), flush=True)
                        print("  (waiting for the fetches in flight)", flush=True)
                finally:
                    sampling.set()
                    sampler.join()
                print(
                    f"  fetch_url: {len(fetchers.seconds)} answers, "
                    f"p50 {pct(fetchers.seconds, 50):.1f} s, max {max(fetchers.seconds):.1f} s"
                )
                for outcome, n in fetchers.outcomes.most_common():
                    print(f"    {n:4d} x {outcome}")
                print(
                    f"  memory at the peak: server {mib(peak[0])}, child processes "
                    f"{mib(peak[1])} (at most {peak[2]} at once)"
                )
                time.sleep(10)
                own, workers, count = server.memory()
                print(
                    f"\n3. memory 10 s after the fetches: server {mib(own)}, "
                    f"{count} child processes {mib(workers)}"
                )
                after = timed_publishes(http, server.url, signer, ns.baseline // 2, None)
                print(latency_line("publish, after", after))
            verdict = "met" if loaded and pct(loaded, 99) < TARGET_P99_MS else "NOT met"
            print(
                f"\ntarget: publish p99 under load < {TARGET_P99_MS:.0f} ms: {verdict} "
                f"({pct(loaded, 99) if loaded else float('nan'):.1f} ms; alone "
                f"{pct(alone, 99):.1f} ms)"
            )
        except BaseException:
            print(f"\nserver log (last lines):\n{server.log_tail()}", file=sys.stderr)
            raise
        finally:
            server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60, help="length of phase 2")
    parser.add_argument("--fetchers", type=int, default=8, help="concurrent fetch_url clients")
    parser.add_argument("--page-mb", type=float, default=2.0, help="size of the page, in MiB")
    parser.add_argument("--baseline", type=int, default=200, help="publishes timed alone")
    ns = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="tms-bench-fetch-"))
    try:
        run(ns, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
