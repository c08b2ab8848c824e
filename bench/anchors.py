"""Anchors on the publish path: `uv run python bench/anchors.py`.

Publishes through the ledger service (in process, no HTTP, so the figures are the publish
path's) into an embedded PostgreSQL in a temporary directory; prints figures, asserts nothing.
Every batch quotes one stored evidence of 1,999,900 characters (its content at the 2,000,000
limit), so each reads the text, normalizes it, and finds every quote, which since issue 11 also
anchors it (offsets, context, occurrences) and writes the anchors beside the links:

1. batches of one link: the cost of one quote against a 2,000,000-character evidence;
2. batches of 1,000 links: the cost of anchoring 1,000 quotes in one text;
3. a one-link batch refused for a quote with one word changed: the refusal with its nearest
   passage (issue 11's hint; the target for the hint alone is 50 ms, see bench/core.py).

Run it on a checkout before issue 11 for the cost anchoring adds: the script uses nothing newer
than `Ledger.submit`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import tempfile
import time
from pathlib import Path
from typing import Any, Final

from tms.config import Settings
from tms.errors import PublishError
from tms.ledger.service import Ledger
from tms.nostr.events import SecretKey
from tms.rules.admission import OPERATOR
from tms.rules.terms import current_terms
from tms.store import database

WORDS: Final = (
    "histamine intolerance diamine oxidase activity serum plasma mast cell review trial cohort "
    "patients reported symptoms “reduced” enzyme — levels were measured in 2019 and again"
).split()


class Bench:
    def __init__(self, ledger: Ledger, key: SecretKey, text: str, seed: int) -> None:
        self.ledger, self.key, self.text = ledger, key, text
        self.rng = random.Random(seed)
        self.now = int(time.time())
        self.serial = 0
        self.evidence = self.sign(4701, {"collection": "long", "title": "Long", "text": text})
        self.claim = self.sign(4702, {"collection": "long", "text": "Target claim."})

    def sign(self, kind: int, content: dict[str, Any]) -> dict[str, Any]:
        self.serial += 1
        text = json.dumps(content, separators=(",", ":"), ensure_ascii=False)
        return self.key.sign(kind, text, self.now - self.serial % 600).to_dict()

    def link(self, quote: str) -> dict[str, Any]:
        content = {
            "collection": "long",
            "from": self.evidence["id"],
            "to": self.claim["id"],
            "relation": "SUPPORTS",
            "quote": quote,
            "reason": f"Reason {self.serial}.",
        }
        return self.sign(4703, content)

    def quote(self) -> str:
        start = self.rng.randrange(0, len(self.text) - 300)
        return self.text[start : start + self.rng.randrange(40, 250)].strip()

    async def timed(self, batch: list[dict[str, Any]]) -> float:
        started = time.perf_counter()
        try:
            await self.ledger.submit(batch, origin=OPERATOR)
        except PublishError as exc:
            if "quote not found" not in str(exc):
                raise
        return time.perf_counter() - started


def spread(times: list[float]) -> str:
    ordered = sorted(times)
    return f"median {ordered[len(ordered) // 2] * 1000:7.1f} ms, best {ordered[0] * 1000:7.1f} ms"


async def run(ns: argparse.Namespace, tmp: Path) -> None:
    settings = Settings.from_env({"TMS_DATA_DIR": str(tmp / "data")})
    url = ns.database_url or await database.database_url(settings.database_url, settings.data_dir)
    pool = await database.open_pool(url, max_size=4)
    try:
        ledger = Ledger(pool)
        key = SecretKey.generate()
        await ledger.approve([key.pubkey])
        rng = random.Random(4)
        text = " ".join(rng.choices(WORDS, k=400_000))[: ns.chars]
        bench = Bench(ledger, key, text, seed=5)
        terms = current_terms()
        agreed = bench.sign(4706, {"version": terms["version"], "sha256": terms["sha256"]})
        await ledger.submit([agreed, bench.evidence, bench.claim], origin=OPERATOR)
        print(
            f"links quoting one stored {len(text):,}-character evidence, {ns.batches} batches each"
        )
        ones = [await bench.timed([bench.link(bench.quote())]) for _ in range(ns.batches)]
        print(f"1. batches of one link:        {spread(ones)}")
        thousands = []
        for _ in range(ns.batches):
            thousands.append(await bench.timed([bench.link(bench.quote()) for _ in range(1000)]))
        print(f"2. batches of 1,000 links:     {spread(thousands)}")
        refusals = []
        for _ in range(ns.batches):
            words = bench.quote().split(" ")
            words[len(words) // 2] = "changed"
            refusals.append(await bench.timed([bench.link(" ".join(words))]))
        print(f"3. one quote refused (a word changed): {spread(refusals)}")
    finally:
        await pool.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chars", type=int, default=1_999_900)  # the content holds the rest
    parser.add_argument("--batches", type=int, default=10)
    parser.add_argument("--database-url", help="use this (empty) database instead of embedded")
    ns = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tms-bench-anchors-") as tmp:
        asyncio.run(run(ns, Path(tmp)))


if __name__ == "__main__":
    main()
