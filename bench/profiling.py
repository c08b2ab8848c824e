"""Where a server's time goes, from outside and without changing it: what the benchmarks use
when given `--profile DIR`.

- `CpuClock`: CPU seconds spent by the server process (and its children), by its PostgreSQL
  (the postmaster and every backend) and by the benchmark's own process, between two readings.
  Divided by the events a part handled, it is a cost that load on a shared machine barely
  changes, unlike a rate or a latency (another process's work takes the cores, not this one's
  CPU seconds), so figures of runs minutes apart can be compared.
- `Spy`: `py-spy record` attached to the server's pid for one part of a run (raw collapsed
  stacks, without idle threads: samples where a thread ran or waited on the GIL), and a
  summary of the file (`summary`, also `uv run python bench/profiling.py FILE`): the functions
  the samples were in (self), those on the stack (inclusive) and the packages the self time is
  in.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Final

TICKS: Final = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> list[str] | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def cpu_seconds(pid: int) -> float:
    """User and system CPU of a process and its waited-for children (0 if gone)."""
    fields = _stat(pid)
    if fields is None:
        return 0.0
    # after the command: state ppid ... utime(12) stime(13) cutime(14) cstime(15), 0-based - 2
    return sum(int(fields[n]) for n in (11, 12, 13, 14)) / TICKS


def system_seconds(pid: int) -> float:
    """System (kernel) CPU of a process and its waited-for children (0 if gone)."""
    fields = _stat(pid)
    if fields is None:
        return 0.0
    return sum(int(fields[n]) for n in (12, 14)) / TICKS


def children(pid: int) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            fields = _stat(int(name))
            if fields is not None and int(fields[1]) == pid:
                found.append(int(name))
    return found


def postmaster(data_dir: Path) -> int | None:
    """The embedded PostgreSQL's postmaster (`TMS_DATA_DIR/postgres/postmaster.pid`)."""
    with suppress(OSError, ValueError, IndexError):
        return int((data_dir / "postgres" / "postmaster.pid").read_text().split()[0])
    return None


@dataclass
class Reading:
    server: float
    postgres: float
    client: float
    at: float
    server_system: float = 0.0  # of `server`, in the kernel (system calls: sockets, mostly)


class CpuClock:
    """CPU seconds of the server (or with its children), its PostgreSQL (every process under the
    postmaster: backends that lived through the interval are counted whole, those that ended
    within it through the postmaster's waited-for children) and this process."""

    def __init__(self, server_pid: int, data_dir: Path, *, with_children: bool = False) -> None:
        """`with_children`: the server's child processes count as the server (nostr-relay's
        gunicorn worker, the workers of `tms serve --workers N` for N > 1); those of `tms
        serve --workers 1` are its extraction workers, idle here, whose start-up would be
        counted. (The embedded PostgreSQL's postmaster is not a child: it detaches.)"""
        self.server_pid = server_pid
        self.data_dir = data_dir
        self.with_children = with_children
        self._start = self._last = self.read()

    def read(self) -> Reading:
        pids = [self.server_pid]
        if self.with_children:
            pids += children(self.server_pid)
        server = sum(cpu_seconds(pid) for pid in pids)
        system = sum(system_seconds(pid) for pid in pids)
        master = postmaster(self.data_dir)
        postgres = 0.0
        if master is not None:
            postgres = cpu_seconds(master) + sum(cpu_seconds(pid) for pid in children(master))
        times = os.times()
        return Reading(server, postgres, times.user + times.system, time.perf_counter(), system)

    def restart(self) -> None:
        self._start = self._last = self.read()

    def spent(self) -> tuple[dict[str, float], float]:
        """The CPU seconds each spent since the last (re)start, and the wall-clock seconds."""
        now = self._last = self.read()
        start = self._start
        parts = {
            "server": now.server - start.server,
            "PostgreSQL": now.postgres - start.postgres,
            "client": now.client - start.client,
        }
        return parts, now.at - start.at

    def server_system(self) -> float:
        """The server's kernel CPU seconds between the last (re)start and the last reading."""
        return self._last.server_system - self._start.server_system

    def per(self, count: int, what: str = "event") -> str:
        """The CPU spent since the last (re)start, per `count` of `what`, in microseconds, and
        the share of the interval's two cores each took."""
        parts, wall = self.spent()
        system = self.server_system()
        each = ", ".join(f"{name} {spent / count * 1e6:,.0f}" for name, spent in parts.items())
        cores = ", ".join(f"{name} {spent / wall:.2f}" for name, spent in parts.items())
        kernel = f" (of the server's, {system / count * 1e6:,.0f} in the kernel)"
        return f"CPU per {what} (us): {each}{kernel}; cores busy: {cores} (of {os.cpu_count()})"


class Spy:
    """`py-spy record` of one process for the length of a `with` block, into `path` (raw
    collapsed stacks); nothing when `path` is None."""

    def __init__(
        self, pid: int, path: Path | None, rate: int = 200, *, subprocesses: bool = False
    ) -> None:
        """`subprocesses`: its child processes too (the workers of `tms serve --workers N`)."""
        self.pid = pid
        self.path = path
        self.rate = rate
        self.subprocesses = subprocesses
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Spy:
        if self.path is None:
            return self
        binary = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            [
                *(binary, "record", "--nonblocking", "--gil", "--format", "raw"),
                *("--rate", str(self.rate)),
                *("--output", str(self.path), "--pid", str(self.pid)),
                *(["--subprocesses"] if self.subprocesses else []),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        time.sleep(0.5)  # attached before the part begins
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.proc is None:
            return
        self.proc.send_signal(signal.SIGINT)  # writes the file, then exits
        try:
            _, err = self.proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _, err = self.proc.communicate()
        if self.proc.returncode not in (0, -signal.SIGINT) and not self.path.exists():  # type: ignore[union-attr]
            print(f"py-spy: {err.decode(errors='replace')[-500:]}", file=sys.stderr)
        elif self.path is not None and self.path.exists():
            print(summary(self.path), flush=True)


class PgPerf:
    """`perf record` of the embedded PostgreSQL's processes (those under its postmaster when the
    block begins: the server's pools are open by then) for the length of a `with` block, into
    `path`; then the functions the samples were in (self) and those on the stack (inclusive).
    With `pid`, that process and its children instead (the server and its workers: their C
    functions, CPython's, asyncpg's, uvloop's, libsecp256k1's, where py-spy sees Python frames
    only). Nothing when `path` is
    None, or when `perf` is not installed."""

    def __init__(self, data_dir: Path, path: Path | None, pid: int | None = None) -> None:
        self.data_dir = data_dir
        self.path = path
        self.pid = pid
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> PgPerf:
        master = postmaster(self.data_dir) if self.pid is None else self.pid
        binary = shutil.which("perf")
        if self.path is None or master is None or binary is None:
            return self
        if self.pid is None:
            pids = ",".join(str(pid) for pid in [master, *children(master)])
        else:  # the server and its children: the workers of `tms serve --workers N`
            pids = ",".join(str(pid) for pid in [self.pid, *children(self.pid)])
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            [binary, "record", "-F", "499", "-g", "-p", pids, "-o", str(self.path)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(0.5)
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.proc is None or self.path is None:
            return
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        print(perf_summary(self.path), flush=True)


def perf_summary(path: Path, top: int = 20) -> str:
    """The top symbols of a `perf record` file: self, then inclusive (with children)."""
    lines = [f"{path} (perf):"]
    for title, flag in (("self", "--no-children"), ("inclusive", "--children")):
        command = ["perf", "report", "-i", str(path), flag, "--sort", "symbol", "--stdio"]
        done = subprocess.run([*command, "-g", "none"], capture_output=True, text=True, check=False)
        rows = [r.strip() for r in done.stdout.splitlines() if r.strip() and r[0] != "#"]
        if not rows:
            rows = [done.stderr.strip()[-300:]]
        lines.append(f" {title}:")
        lines += [f"   {row}" for row in rows[:top]]
    return "\n".join(lines)


_FRAME: Final = re.compile(r"^(?P<function>.*) \((?P<file>[^()]*?)(?::(?P<line>\d+))?\)$")


def _frames(stack: str) -> list[tuple[str, str]]:
    """(function, file) of each frame, outermost first."""
    frames = []
    for frame in stack.split(";"):
        match = _FRAME.match(frame)
        if match is None:
            frames.append((frame, ""))
        else:
            frames.append((match["function"], match["file"]))
    return frames


def _package(path: str) -> str:
    """The package a frame's file is in: `tms/ledger`, `asyncpg`, `asyncio`, `json`, ..."""
    parts = [p for p in path.replace("\\", "/").split("/") if p]
    if "site-packages" in parts:
        parts = parts[parts.index("site-packages") + 1 :]
    elif "python3.11" in parts:
        parts = parts[parts.index("python3.11") + 1 :]
    if not parts:
        return "?"
    if parts[0] == "tms" and len(parts) > 2:
        return "/".join(parts[:2])
    return parts[0].removesuffix(".py")


def summary(path: Path, top: int = 15) -> str:
    """The samples of a raw py-spy file: by function (self and inclusive) and by package."""
    own: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    packages: collections.Counter[str] = collections.Counter()
    total = 0
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        total += count
        frames = _frames(stack)
        function, file = frames[-1]
        own[f"{function} ({file})"] += count
        packages[_package(file)] += count
        for name in {f"{f} ({p})" for f, p in frames}:
            inclusive[name] += count
    if not total:
        return f"{path}: no samples"

    def share(n: int) -> str:
        return f"{100 * n / total:5.1f} %"

    lines = [f"{path}: {total:,} samples (threads that ran or waited for the GIL)"]
    lines.append(
        " self, by package: "
        + ", ".join(f"{p} {share(n).strip()}" for p, n in packages.most_common(top))
    )
    lines.append(" self, by function:")
    lines += [f"   {share(n)}  {name}" for name, n in own.most_common(top)]
    lines.append(" inclusive (on the stack), by function:")
    lines += [f"   {share(n)}  {name}" for name, n in inclusive.most_common(top * 2)]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description="Summarise a raw py-spy file")
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--top", type=int, default=15)
    ns = parser.parse_args()
    for file in ns.files:
        print(summary(file, ns.top))


if __name__ == "__main__":
    main()
