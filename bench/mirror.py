"""`tms mirror` over a large collection, killed mid-sync: `uv run python bench/mirror.py`.

Starts `tms serve` over a fresh embedded PostgreSQL (`TMS_EMBED=off`), publishes `--events`
claims into one collection through `publish` (batches of 1,000: the log is the ledger's own),
then:

1. one uninterrupted `tms mirror --once` into an empty directory: wall time;
2. into another empty directory, `tms mirror --once` killed with SIGKILL `--kills` times, each
   time once `pending.jsonl` (the events fetched, not yet verified) has grown past the next
   share of the collection; after each kill the directory must open as a copy (its pending
   events checked again) and the next run resumes from it: the events each run fetched;
3. the resumed copy against the server's export (`/c/<slug>/export.jsonl`): equal byte for
   byte, and `tms verify-export` of it against its `state.json`: OK;
4. the server restarted with its default rate limits (`TMS_RATE_*` unset: a member's sync is
   not exempted from them): a first copy into an empty directory in one `--once` run, then
   `--pause` seconds later (the first run spent the minute's budgets; cron comes later) `--new`
   more claims published and a second run: wall time and exit code of each.

`--limits off` runs parts 1-3 only (the server unlimited, as before), `--limits default` part 4
only, `both` (the default) all four.

With `--push` (issue 33, item 2), instead: publishes `--events` claims into server A, copies
them with `tms mirror --once`, then restores a second server B (its own database, the same
`TMS_LOG_KEY`, the server's DEFAULT rate limits: `TMS_RATE_KEY` 20/second;600/minute,
`TMS_RATE_ADDRESS` 40/second;1200/minute) with `tms mirror --once --push`, SIGKILLed after
`--kills` random delays (up to `--kill-within` seconds each) and run again until it exits 0:
the events B holds after each kill, the wall time of the whole restore, and B's root against
A's.

Prints figures and any difference; asserts nothing.
"""

from __future__ import annotations

import argparse
import base64
import os
import random
import resource
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Final

import httpx
from publish import claim
from serving import Server, Signer, call, tms_command

from tms.guard.rates import DEFAULT_ADDRESS, DEFAULT_FETCH, DEFAULT_KEY, DEFAULT_LOGIN
from tms.mirror.copy import PENDING, Copy
from tms.nostr.events import Event
from tms.tlog.note import NoteSigner

SLUG: Final = "bench"
BATCH: Final = 1000
DEFAULT_LIMITS: Final = {
    "TMS_RATE_ADDRESS": DEFAULT_ADDRESS,
    "TMS_RATE_KEY": DEFAULT_KEY,
    "TMS_RATE_FETCH": DEFAULT_FETCH,
    "TMS_RATE_LOGIN": DEFAULT_LOGIN,
}


def nip98(signer: Signer, url: str) -> dict[str, str]:
    event: Event = signer.key.sign(27235, "", int(time.time()), [["u", url], ["method", "GET"]])
    return {"Authorization": "Nostr " + base64.b64encode(event.to_json().encode()).decode()}


def mirror(server: Server, signer: Signer, directory: Path, *extra: str) -> subprocess.Popen[str]:
    relay = server.url.replace("http", "ws") + f"/c/{SLUG}"
    env = {**os.environ, "TMS_NSEC": signer.key.secret.hex()}
    # As an installed `tms` runs: from compiled bytecode (kept in the bench's own directory,
    # written by the first run), not compiling every module at each start as it does where
    # PYTHONDONTWRITEBYTECODE is set (about 1 s of CPU a run, counted before as the mirror's).
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(directory.parent / "pycache")
    return subprocess.Popen(
        [*tms_command(), "mirror", relay, "--dir", str(directory), "--once", *extra],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def fetched(stdout: str) -> int:
    """`N events fetched` from the mirror's verified line."""
    for line in stdout.splitlines():
        if " events fetched" in line:
            return int(line.split(" events fetched")[0].rsplit(" ", 1)[1])
    return -1


def pending_events(directory: Path) -> int:
    path = directory / PENDING
    if not path.exists():
        return 0
    with open(path, "rb") as file:
        return sum(1 for _ in file)


def run(ns: argparse.Namespace, tmp: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TMS_")}
    env.update(TMS_DATA_DIR=str(tmp / "data"), TMS_EMBED="off")
    server = Server(env, tmp / "server.log")
    server.start()
    signer = Signer()
    try:
        server.approve(signer.key.pubkey)
        started = time.perf_counter()
        with httpx.Client(timeout=300) as http:
            call(http, server.url, "publish", {"events": [signer.sign(4706, server.agreement())]})
            for _ in range(ns.events // BATCH):
                events = [claim(signer, SLUG) for _ in range(BATCH)]
                call(http, server.url, "publish", {"events": events})
        print(
            f"{ns.events:,} claims published in {time.perf_counter() - started:.1f} s "
            f"(load average {os.getloadavg()[0]:.2f})",
            flush=True,
        )
        if ns.limits in ("off", "both"):
            unlimited(ns, server, signer, tmp)
        if ns.limits in ("default", "both"):
            server.stop()
            server = Server({**env, **DEFAULT_LIMITS}, tmp / "server.log")
            server.start()
            limited(ns, server, signer, tmp)
        print(f"load average after: {os.getloadavg()[0]:.2f}", flush=True)
    except Exception:
        print(server.log_tail())
        raise
    finally:
        server.stop()


def limited(ns: argparse.Namespace, server: Server, signer: Signer, tmp: Path) -> None:
    """Part 4: under the server's default rate limits."""
    directory = tmp / "limited"
    for run, label in ((1, "first copy"), (2, f"after {ns.new:,} new")):
        if run == 2:
            # The first run spent the server's budgets for the minute: a run from cron comes
            # later, and meets them whole.
            time.sleep(ns.pause)
            with httpx.Client(timeout=300) as http:
                events = [claim(signer, SLUG) for _ in range(ns.new)]
                for start in range(0, len(events), BATCH):
                    call(http, server.url, "publish", {"events": events[start : start + BATCH]})
        load = os.getloadavg()[0]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        proc = mirror(server, signer, directory)
        out, err = proc.communicate()
        took = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)  # the mirror's own CPU time
        cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
        print(
            f"4. default rate limits, {label}: exit {proc.returncode}, {took:.1f} s "
            f"({cpu:.1f} s of CPU), {fetched(out):,} events fetched (load average {load:.2f} at "
            f"the start) {err.strip()[-300:]}",
            flush=True,
        )


def unlimited(ns: argparse.Namespace, server: Server, signer: Signer, tmp: Path) -> None:
    """Parts 1-3: the server unlimited."""
    whole = tmp / "whole"
    started = time.perf_counter()
    proc = mirror(server, signer, whole)
    out, err = proc.communicate()
    took = time.perf_counter() - started
    print(
        f"1. uninterrupted: exit {proc.returncode}, {took:.1f} s, {fetched(out):,} events "
        f"fetched {err.strip()}",
        flush=True,
    )

    killed = tmp / "killed"
    total = ns.events + 1
    for k in range(1, ns.kills + 1):
        threshold = total * k // (ns.kills + 1)
        held = pending_events(killed)
        proc = mirror(server, signer, killed)
        started = time.perf_counter()
        while proc.poll() is None and pending_events(killed) < threshold:
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        out, _ = proc.communicate()
        code = proc.returncode
        opened = Copy.open(killed)  # raises if the kill left it unusable
        print(
            f"2. run {k}: killed after {time.perf_counter() - started:.1f} s (exit {code}); "
            f"it started holding {held:,} pending, the directory opens holding "
            f"{len(opened.pending):,} pending, {len(opened.entries):,} verified",
            flush=True,
        )
    started = time.perf_counter()
    proc = mirror(server, signer, killed)
    out, err = proc.communicate()
    print(
        f"2. resumed: exit {proc.returncode}, {time.perf_counter() - started:.1f} s, "
        f"{fetched(out):,} events fetched {err.strip()}",
        flush=True,
    )

    url = f"{server.url}/c/{SLUG}/export.jsonl"
    exported = httpx.get(url, headers=nip98(signer, url), timeout=300).content
    copy = (killed / "copy.jsonl").read_bytes()
    same = copy == exported and (whole / "copy.jsonl").read_bytes() == exported
    print(
        f"3. the copies against the export ({len(exported):,} bytes): "
        + ("equal byte for byte" if same else "DIFFERENT"),
        flush=True,
    )
    key = httpx.get(f"{server.url}/log-key", timeout=30).text.strip()
    started = time.perf_counter()
    checked = subprocess.run(
        [
            *tms_command(),
            "verify-export",
            str(killed / "copy.jsonl"),
            "--checkpoint",
            str(killed / "state.json"),
            "--key",
            key,
        ],
        capture_output=True,
        text=True,
    )
    last = (checked.stdout.strip().splitlines() or [""])[-1]
    print(
        f"3. tms verify-export of the resumed copy: exit {checked.returncode} in "
        f"{time.perf_counter() - started:.1f} s: {last} {checked.stderr.strip()}",
        flush=True,
    )


def checkpoint(server: Server, signer: Signer) -> tuple[int, str]:
    """(size, root) of the collection's latest signed checkpoint (0, "" while there is none)."""
    url = f"{server.url}/c/{SLUG}/checkpoint?witnessed=0"
    response = httpx.get(url, headers=nip98(signer, url), timeout=60)
    if response.status_code != 200:
        return 0, ""
    lines = response.text.splitlines()
    return int(lines[1]), lines[2]


def run_push(ns: argparse.Namespace, tmp: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TMS_")}
    env.update(TMS_EMBED="off", TMS_LOG_KEY=NoteSigner.generate("127.0.0.1").encode())
    source = Server({**env, "TMS_DATA_DIR": str(tmp / "a")}, tmp / "a.log")
    target = Server({**env, **DEFAULT_LIMITS, "TMS_DATA_DIR": str(tmp / "b")}, tmp / "b.log")
    source.start()
    target.start()
    signer = Signer()
    rng = random.Random(ns.seed)
    try:
        source.approve(signer.key.pubkey)
        target.approve(signer.key.pubkey)
        with httpx.Client(timeout=300) as http:
            call(http, source.url, "publish", {"events": [signer.sign(4706, source.agreement())]})
            for _ in range(ns.events // BATCH):
                events = [claim(signer, SLUG) for _ in range(BATCH)]
                call(http, source.url, "publish", {"events": events})
        copy = tmp / "copy"
        proc = mirror(source, signer, copy)
        out, err = proc.communicate()
        original = checkpoint(source, signer)
        lines = (copy / "copy.jsonl").read_bytes().count(b"\n")
        print(
            f"copied {lines:,} events (log size {original[0]:,}): exit {proc.returncode} "
            f"{err.strip()}",
            flush=True,
        )
        started = time.perf_counter()
        runs = 0
        for k in range(1, ns.kills + 1):
            delay = rng.uniform(1, ns.kill_within)
            proc = mirror(target, signer, copy, "--push")
            runs += 1
            try:
                proc.communicate(timeout=delay)
                print(f"push run {k}: ended before its kill, exit {proc.returncode}", flush=True)
            except subprocess.TimeoutExpired:
                proc.send_signal(signal.SIGKILL)
                proc.communicate()
                size, _ = checkpoint(target, signer)
                print(
                    f"push run {k}: SIGKILLed after {delay:.1f} s; B's log holds {size:,} "
                    f"entries ({time.perf_counter() - started:.1f} s into the restore)",
                    flush=True,
                )
        while True:
            proc = mirror(target, signer, copy, "--push")
            runs += 1
            out, err = proc.communicate()
            if proc.returncode == 0 or "rate-limited:" not in err or runs > ns.kills + 20:
                break
            print(f"a run stopped on a rate limit outside the push: {err.strip()}", flush=True)
            time.sleep(5)
        took = time.perf_counter() - started
        restored = checkpoint(target, signer)
        print(
            f"restore: {runs} runs, {took:.1f} s in all ({lines / took:.1f} events/s), last "
            f"exit {proc.returncode}: {out.strip()} {err.strip()}",
            flush=True,
        )
        print(
            f"B's root {'EQUALS' if restored == original else 'DIFFERS FROM'} A's "
            f"(size {restored[0]:,} root {restored[1]}; A: size {original[0]:,} root "
            f"{original[1]}); load average after: {os.getloadavg()[0]:.2f}",
            flush=True,
        )
    except Exception:
        print(source.log_tail())
        print(target.log_tail())
        raise
    finally:
        source.stop()
        target.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=100_000, help="claims in the collection")
    parser.add_argument("--kills", type=int, default=3, help="SIGKILLs before the run that ends")
    parser.add_argument(
        "--limits",
        choices=("off", "default", "both"),
        default="both",
        help="the server's rate limits: off (parts 1-3), default (part 4), both",
    )
    parser.add_argument("--new", type=int, default=1000, help="claims before part 4's rerun")
    parser.add_argument(
        "--pause", type=float, default=61, help="seconds between part 4's runs (a minute's budget)"
    )
    parser.add_argument("--push", action="store_true", help="restore a second server instead")
    parser.add_argument(
        "--kill-within", type=float, default=600.0, help="--push: longest delay before a kill (s)"
    )
    parser.add_argument("--seed", type=int, default=None, help="--push: the kills' delays")
    ns = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tms-bench-mirror-") as tmp:
        (run_push if ns.push else run)(ns, Path(tmp))


if __name__ == "__main__":
    main()
