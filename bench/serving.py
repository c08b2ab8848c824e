"""What the benchmarks share: `tms serve` in a subprocess on 127.0.0.1 over a fresh embedded
PostgreSQL, its memory, and signed calls to `/mcp` made as SPEC's snippets make them."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from contextlib import suppress
from pathlib import Path
from typing import Any, Final

import httpx

from tms.nostr.events import SecretKey
from tms.nostr.nip19 import npub_encode

HEADERS: Final = {
    "Accept": "application/json, text/event-stream",
    "Content-Type": "application/json",
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def tms_command() -> list[str]:
    """The `tms` console script of this environment (what `uv run tms` runs)."""
    script = Path(sys.executable).parent / "tms"
    if script.exists():
        return [str(script)]
    found = shutil.which("tms")
    if found is None:
        raise SystemExit("bench: the `tms` command is not installed (run `uv sync`)")
    return [found]


# Benchmarks measure the server, not its rate limits: every client here is on 127.0.0.1, often
# with one key. A benchmark's own environment may still set them.
UNLIMITED: Final = {
    f"TMS_RATE_{budget}": "off" for budget in ("ADDRESS", "KEY", "FETCH", "LOGIN", "READ")
}


class Server:
    """`tms serve` in a subprocess, its output in a log file."""

    def approve(self, pubkey: str) -> None:
        """`tms approve` for a key (hex) on this server's database, as the operator runs it."""
        subprocess.run(
            [*tms_command(), "approve", npub_encode(pubkey)],
            env=self.env,
            check=True,
            capture_output=True,
        )

    def agreement(self) -> dict[str, str]:
        """The current terms' version and sha256, from `GET /terms`, as a client learns them."""
        terms = httpx.get(f"{self.url}/terms", timeout=60).json()
        return {"version": terms["version"], "sha256": terms["sha256"]}

    def __init__(self, env: dict[str, str], log_path: Path) -> None:
        # One process unless a benchmark asks for workers (`TMS_WORKERS`, default the
        # machine's cores): what the benchmarks time and profile is the server's pid.
        self.env = {**UNLIMITED, "TMS_WORKERS": "1", **env}
        self.log_path = log_path
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 300) -> float:
        started = time.perf_counter()
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [*tms_command(), "serve", "--host", "127.0.0.1", "--port", str(self.port)],
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + timeout
        with httpx.Client(timeout=5) as http:
            while True:
                self.check_alive()
                with suppress(httpx.TransportError):
                    if http.get(f"{self.url}/healthz").status_code == 200:
                        return time.perf_counter() - started
                if time.monotonic() > deadline:
                    raise RuntimeError(f"tms serve did not answer /healthz in {timeout:.0f} s")
                time.sleep(0.1)

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    @property
    def data_dir(self) -> Path:
        return Path(self.env["TMS_DATA_DIR"])

    def check_alive(self) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            raise RuntimeError(f"tms serve exited with code {self.proc.returncode}")

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def memory(self) -> tuple[int, int, int]:
        """Resident bytes of the server process and of its live child processes, and how many
        of those it has (the extraction workers)."""
        assert self.proc is not None
        own = _rss(self.proc.pid)
        children = [pid for pid in _pids() if _ppid(pid) == self.proc.pid]
        return own, sum(_rss(pid) for pid in children), len(children)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def _ppid(pid: int) -> int:
    """The parent of a live process (-1 for a zombie or a process gone)."""
    try:
        state, ppid = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[:2]
    except (OSError, ValueError, IndexError):
        return -1
    return -1 if state in ("Z", "X") else int(ppid)


def _rss(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


# --- calls ---------------------------------------------------------------------------------------


def compact(value: object) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


class Signer:
    def __init__(self) -> None:
        self.key = SecretKey.generate()

    def sign(self, kind: int, content: dict[str, Any]) -> dict[str, Any]:
        return self.key.sign(kind, compact(content), int(time.time())).to_dict()

    def request(self, tool: str, args: dict[str, Any]) -> dict[str, Any]:
        return self.sign(4707, {"tool": tool, "args": args})


def call(http: httpx.Client, url: str, tool: str, arguments: dict[str, Any]) -> Any:
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": tool, "arguments": arguments},
    }
    response = http.post(f"{url}/mcp", content=compact(body).encode(), headers=HEADERS)
    if response.status_code != 200:
        raise RuntimeError(f"/mcp answered {response.status_code}: {response.text[:300]}")
    result = response.json()["result"]
    if result.get("isError"):
        raise RuntimeError(result["content"][0]["text"])
    return result["structuredContent"]
