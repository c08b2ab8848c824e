"""What the write policies cost a publish: `uv run python bench/plugins.py`.

In this process, no database: the plugins' `Admission` (tms.extension) asked about signed
1,000-claim batches and about one-claim batches, as the ledger's one path asks it, with

1. no plugin (the runner returns at once);
2. one in-process policy that accepts everything;
3. the example `allowlist` (it parses evidence content; claims pass on their kind);
4. the strfry adapter running a strfry-style script in Python that accepts everything (one
   long-lived process: JSON out, JSON back, matched by id).

Prints milliseconds per 1,000-event batch, microseconds per event, and the p50 of a one-event
batch. Target (issue 29): the in-process policy costs at most 10 % of a publish; a 1,000-claim
publish takes about 125 ms at the batches' 8,000 events/s target, a one-claim publish about
2.5 ms in the server (bench/README.md). Prints figures; asserts nothing.
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
from typing import Final

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=20, help="1,000-event batches per case")
    parser.add_argument("--singles", type=int, default=2000, help="one-event batches per case")
    args = parser.parse_args()
    asyncio.run(run(args.rounds, args.singles))


if __name__ == "__main__":
    main()
