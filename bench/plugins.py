"""What the write policies cost a publish: `uv run python bench/plugins.py`.

Part A, in this process, no database: the plugins' `Admission` (tms.plugins) asked about signed
1,000-claim batches and about one-claim batches, as the ledger's one path asks it, with

1. no plugin (the runner returns at once);
2. one in-process policy that accepts everything;
3. the example `allowlist` (it parses evidence content; claims pass on their kind);
4. the strfry adapter running a strfry-style script in Python that accepts everything (one
   long-lived process: JSON out, JSON back, matched by id).

Prints milliseconds per 1,000-event batch, microseconds per event, and the p50 of a one-event
batch.

Part B, publishes through `tms serve` as clients make them (`POST /mcp`, events signed
beforehand): three servers over one embedded PostgreSQL (`TMS_EMBED=off`), started with no plugin,
with one in-process accepting policy (a plugin package this script installs for them alone, by
PYTHONPATH, enabled by TMS_PLUGINS), and with the strfry adapter (`TMS_PLUGINS=strfry`, the
accepting script), each publishing to a collection of its own. In each round, in an order that
turns, each gets a 1,000-claim batch, then `--served-singles` one-claim publishes go one to each
server in turn. The first round warms up and is not counted. Prints the median batch and
one-claim p50, and each one's overhead against no plugin as the median of the rounds' own ratios
(a round's figure against no plugin's in the same round, so the machine's load of the moment
drops out).

Target (issue 29): the in-process policy costs at most 10 % of a publish. Prints figures;
asserts nothing. `--part a` or `--part b` runs one part.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Final

import httpx
from serving import Server, Signer, call

from tms.extension import ACCEPT, Door, Event, Origin, Verdict
from tms.nostr.events import Event as CoreEvent
from tms.nostr.events import SecretKey
from tms.plugins.policies import EventPolicy, Judge, WritePolicies
from tms.plugins.strfry import StrfryPolicy

ORIGIN: Final = Origin(Door.MCP, None, "127.0.0.1")
SCRIPT: Final = """\
import json, sys
for line in sys.stdin:
    request = json.loads(line)
    print(json.dumps({"id": request["event"]["id"], "action": "accept"}), flush=True)
"""


async def accept(event: Event, origin: Origin) -> Verdict:
    return ACCEPT


def claims(count: int, key: SecretKey) -> list[CoreEvent]:
    content = '{{"collection":"bench","text":"Claim number {} of the benchmark, a sentence."}}'
    return [key.sign(4702, content.format(i), 1_790_000_000 + i) for i in range(count)]


async def timed(runner: WritePolicies, batches: list[list[CoreEvent]]) -> list[float]:
    seconds = []
    for batch in batches:
        started = time.perf_counter()
        decision = await runner.admit(batch, ORIGIN)
        seconds.append(time.perf_counter() - started)
        assert decision.action == "accept", decision
    return seconds


async def run(rounds: int, singles: int) -> None:
    key = SecretKey.generate()
    big = [claims(1000, key) for _ in range(rounds)]
    small = [[event] for event in claims(singles, key)]
    from tms_example_plugins.allowlist import EvidenceHosts

    with tempfile.TemporaryDirectory() as folder:
        script = Path(folder) / "accept.py"
        script.write_text(SCRIPT)
        strfry = StrfryPolicy("strfry", f"{sys.executable} {script}", 10, environ=os.environ)
        cases: list[tuple[str, list[Judge]]] = [
            ("no plugin", []),
            ("one in-process policy (accepts)", [EventPolicy("accept", accept, 5)]),
            ("allowlist (example)", [EventPolicy("allowlist", EvidenceHosts(frozenset({"a"})), 5)]),
            ("strfry adapter (Python script)", [strfry]),
        ]
        heads = ("policy", "ms / 1,000-event batch", "µs / event", "1-event p50 µs")
        print(f"{heads[0]:34} {heads[1]:>24} {heads[2]:>11} {heads[3]:>15}")
        try:
            for name, judges in cases:
                runner = WritePolicies(judges)
                await timed(runner, big[:1] + small[:10])  # warm-up (and the process's start)
                batch = statistics.median(await timed(runner, big))
                single = statistics.median(await timed(runner, small))
                print(
                    f"{name:34} {batch * 1e3:24.2f} {batch * 1e6 / 1000:11.2f} {single * 1e6:15.1f}"
                )
        finally:
            await strfry.close()
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


# --- part B: through `tms serve` -----------------------------------------------------------------

ACCEPTING_PLUGIN: Final = """\
from tms.extension import ACCEPT, Plugin


async def accept(event, origin):
    return ACCEPT


plugin = Plugin("accept", write_policy=accept)
"""


def install_accepting(site: Path) -> None:
    """The in-process policy as an installed package: a distribution on the server's
    PYTHONPATH declaring it in `tms.plugins`."""
    info = site / "tms_bench_accept-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: tms-bench-accept\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[tms.plugins]\naccept = bench_accept:plugin\n")
    (site / "bench_accept.py").write_text(ACCEPTING_PLUGIN)


def served(rounds: int, singles: int, folder: Path) -> None:
    script = folder / "accept.py"
    script.write_text(SCRIPT)
    site = folder / "site"
    install_accepting(site)
    base = {k: v for k, v in os.environ.items() if not k.startswith("TMS_")}
    base.update(TMS_DATA_DIR=str(folder / "data"), TMS_EMBED="off")
    cases = {
        "no plugin": {},
        "one in-process policy (accepts)": {"TMS_PLUGINS": "accept", "PYTHONPATH": str(site)},
        "strfry adapter (Python script)": {
            "TMS_PLUGINS": "strfry",
            "TMS_STRFRY_COMMAND": f"{sys.executable} {script}",
        },
    }
    servers = {
        name: Server({**base, **extra}, folder / f"server-{n}.log")
        for n, (name, extra) in enumerate(cases.items())
    }
    signer = Signer()
    names = list(servers)
    batches: dict[str, list[float]] = {name: [] for name in names}
    ones: dict[str, list[float]] = {name: [] for name in names}
    # Each round's figure against no plugin's in the same round: the load of the moment is
    # common to both, and drops out of the ratio.
    batch_ratios: dict[str, list[float]] = {name: [] for name in names}
    one_ratios: dict[str, list[float]] = {name: [] for name in names}
    try:
        for server in servers.values():  # one after another: the first starts PostgreSQL
            server.start()
        first = servers[names[0]]
        first.approve(signer.key.pubkey)
        terms = signer.sign(4706, first.agreement())
        with httpx.Client(timeout=120) as http:
            call(http, first.url, "publish", {"events": [terms]})
            for n in range(rounds + 1):
                order = names[n % len(names) :] + names[: n % len(names)]
                batch = {name: _claims(signer, names.index(name), 1000) for name in names}
                single = {name: _claims(signer, names.index(name), singles) for name in names}
                took = {name: _timed(http, servers[name].url, batch[name]) for name in order}
                each: dict[str, list[float]] = {name: [] for name in names}
                for i in range(singles):  # one publish each in turn: paired in time
                    for name in order:
                        each[name].append(_timed(http, servers[name].url, [single[name][i]]))
                if not n:  # the first round warms up
                    continue
                for name in names:
                    batches[name].append(took[name])
                    ones[name].extend(each[name])
                    batch_ratios[name].append(took[name] / took[names[0]])
                    middle = statistics.median(each[name])
                    one_ratios[name].append(middle / statistics.median(each[names[0]]))
    finally:
        for server in servers.values():
            server.stop()
    print()
    print(
        f"B. through tms serve: {rounds} rounds, each a 1,000-claim batch to each server in turn, "
        f"then {singles} one-claim publishes, one to each server in turn"
    )
    heads = ("policy", "ms / 1,000 batch", "events/s", "+% paired", "1-claim p50 ms", "+% paired")
    widths = (34, 16, 9, 10, 15, 10)
    print(" ".join(f"{head:{'<' if n == 0 else '>'}{widths[n]}}" for n, head in enumerate(heads)))
    for name in names:
        batch_ms = statistics.median(batches[name]) * 1e3
        one_ms = statistics.median(ones[name]) * 1e3
        batch_plus = (statistics.median(batch_ratios[name]) - 1) * 100
        one_plus = (statistics.median(one_ratios[name]) - 1) * 100
        print(
            f"{name:34} {batch_ms:16.1f} {1e6 / batch_ms:9,.0f} {batch_plus:+10.1f} "
            f"{one_ms:15.2f} {one_plus:+10.1f}"
        )
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


def _claims(signer: Signer, server: int, count: int) -> list[dict[str, Any]]:
    return [_claim(signer, f"bench-{server}", i) for i in range(count)]


def _claim(signer: Signer, slug: str, n: int) -> dict[str, Any]:
    return signer.sign(4702, {"collection": slug, "text": f"Claim {n} {time.time_ns()}"})


def _timed(http: httpx.Client, url: str, events: list[dict[str, Any]]) -> float:
    started = time.perf_counter()
    result = call(http, url, "publish", {"events": events})
    seconds = time.perf_counter() - started
    assert len(result["accepted"]) == len(events), result
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--part", choices=("a", "b", "both"), default="both")
    parser.add_argument("--rounds", type=int, default=20, help="A: 1,000-event batches per case")
    parser.add_argument("--singles", type=int, default=2000, help="A: one-event batches per case")
    parser.add_argument("--served-rounds", type=int, default=10, help="B: rounds (plus a warm-up)")
    parser.add_argument(
        "--served-singles", type=int, default=100, help="B: one-claim publishes per round"
    )
    args = parser.parse_args()
    if args.part in ("a", "both"):
        asyncio.run(run(args.rounds, args.singles))
    if args.part in ("b", "both"):
        with tempfile.TemporaryDirectory(prefix="tms-bench-plugins-") as folder:
            served(args.served_rounds, args.served_singles, Path(folder))


if __name__ == "__main__":
    main()
