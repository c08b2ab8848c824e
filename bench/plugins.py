"""What the write policies cost a publish: `uv run python bench/plugins.py`.

Part A, in this process, no database: the plugins' `Admission` (tms.extension) asked about signed
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
accepting script); in each round, in an order that turns, each gets a 1,000-claim batch and then
`--served-singles` one-claim publishes, one after another, to a collection of its own. The first
round warms up and is not counted. Prints the median batch, the one-claim p50 and each one's
overhead against no plugin.

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
from tms.extension.policies import EventPolicy, Judge, WritePolicies
from tms.extension.strfry import StrfryPolicy
from tms.nostr.events import Event as CoreEvent
from tms.nostr.events import SecretKey

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
    batches: dict[str, list[float]] = {name: [] for name in servers}
    ones: dict[str, list[float]] = {name: [] for name in servers}
    try:
        for server in servers.values():  # one after another: the first starts PostgreSQL
            server.start()
        first = next(iter(servers.values()))
        first.approve(signer.key.pubkey)
        terms = signer.sign(4706, first.agreement())
        with httpx.Client(timeout=120) as http:
            call(http, first.url, "publish", {"events": [terms]})
            for n in range(rounds + 1):
                order = list(servers.items())
                order = order[n % len(order) :] + order[: n % len(order)]
                for name, server in order:
                    slug = f"bench-{list(servers).index(name)}"
                    batch = [_claim(signer, slug, i) for i in range(1000)]
                    single = [[_claim(signer, slug, i)] for i in range(singles)]
                    took = _timed(http, server.url, batch)
                    each = [_timed(http, server.url, events) for events in single]
                    if n:  # the first round warms up
                        batches[name].append(took)
                        ones[name].extend(each)
    finally:
        for server in servers.values():
            server.stop()
    print()
    print(
        f"B. through tms serve: {rounds} rounds, each a 1,000-claim batch and {singles} "
        "one-claim publishes per server, alternating"
    )
    heads = ("policy", "ms / 1,000-claim batch", "events/s", "+%", "1-claim p50 ms", "+%")
    print(f"{heads[0]:34} {heads[1]:>23} {heads[2]:>9} {heads[3]:>6} {heads[4]:>15} {heads[5]:>6}")
    none_batch = statistics.median(batches["no plugin"])
    none_one = statistics.median(ones["no plugin"])
    for name in servers:
        batch_ms = statistics.median(batches[name]) * 1e3
        one_ms = statistics.median(ones[name]) * 1e3
        print(
            f"{name:34} {batch_ms:23.1f} {1e6 / batch_ms:9,.0f} "
            f"{(batch_ms / (none_batch * 1e3) - 1) * 100:+6.1f} {one_ms:15.2f} "
            f"{(one_ms / (none_one * 1e3) - 1) * 100:+6.1f}"
        )
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


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
