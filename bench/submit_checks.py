"""The submit page's checks (issue 19): `uv run python bench/submit_checks.py`.

In process, over an embedded PostgreSQL in a temporary directory; prints figures, asserts
nothing. A collection of `--documents` evidence texts of 1,999,900 characters and `--claims`
claims, then:

1. what sql/013 adds to publishing: one 2,000,000-character evidence with the index over the
   texts' sha256, and without it (dropped for the comparison); a 1,000-claim batch with each
   claim's normalized key written, and without (the key step left out);
2. the look-ups a page makes before signing: evidence by the sha256 of its text, by URL,
   20 claims by their keys, a pasted id whole and by its first 8 hex digits;
3. the nearest passage of a wrong quote in a 2,000,000-character text: the first call (the
   text sent: hashed and normalized once) and the next ones (the text kept).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import random
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Final

from tms.config import Settings
from tms.ledger.access import Access
from tms.ledger.read.lookups import Lookups
from tms.ledger.service import Ledger
from tms.ledger.statement import Rows
from tms.ledger.write import claim_keys
from tms.nostr.events import SecretKey
from tms.pages.submit_checks import Texts
from tms.rules.admission import OPERATOR
from tms.rules.quotes import claim_key
from tms.rules.references import Reference
from tms.rules.terms import current_terms
from tms.store import database

WORDS: Final = (
    "histamine intolerance diamine oxidase activity serum plasma mast cell review trial cohort "
    "patients reported symptoms “reduced” enzyme — levels were measured in 2019 and again"
).split()
SLUG: Final = "bench"


def spread(times: list[float]) -> str:
    ordered = sorted(times)
    return f"median {ordered[len(ordered) // 2] * 1000:8.2f} ms, best {ordered[0] * 1000:8.2f} ms"


async def timed(runs: int, work: Callable[[], Awaitable[Any]]) -> list[float]:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        await work()
        times.append(time.perf_counter() - started)
    return times


class Signer:
    def __init__(self) -> None:
        self.key = SecretKey.generate()
        self.serial = 0
        self.now = int(time.time())

    def sign(self, kind: int, content: dict[str, Any]) -> dict[str, Any]:
        self.serial += 1
        text = json.dumps(content, separators=(",", ":"), ensure_ascii=False)
        return self.key.sign(kind, text, self.now - self.serial % 600).to_dict()


def document(rng: random.Random, chars: int) -> str:
    return " ".join(rng.choices(WORDS, k=chars // 5))[:chars]


async def run(ns: argparse.Namespace, tmp: Path) -> None:
    settings = Settings.from_env({"TMS_DATA_DIR": str(tmp / "data")})
    url = ns.database_url or await database.database_url(settings.database_url, settings.data_dir)
    pool = await database.open_pool(url, max_size=4)
    try:
        ledger = Ledger(pool)
        me = Signer()
        await ledger.approve([me.key.pubkey])
        terms = current_terms()
        await ledger.submit(
            [me.sign(4706, {"version": terms["version"], "sha256": terms["sha256"]})],
            origin=OPERATOR,
        )
        rng = random.Random(19)
        texts = [document(rng, ns.chars) for _ in range(ns.documents)]
        for i, text in enumerate(texts):
            content = {"collection": SLUG, "text": text, "url": f"https://example.org/{i}"}
            await ledger.submit([me.sign(4701, content)], origin=OPERATOR)
        claims = [f"Claim {i}: {' '.join(rng.choices(WORDS, k=12))}." for i in range(ns.claims)]
        for start in range(0, len(claims), 1000):
            batch = [
                me.sign(4702, {"collection": SLUG, "text": c}) for c in claims[start : start + 1000]
            ]
            await ledger.submit(batch, origin=OPERATOR)
        print(
            f"a collection of {ns.documents} evidence texts of {ns.chars:,} characters and "
            f"{ns.claims:,} claims; {ns.runs} runs each\n"
        )

        async def one_evidence() -> None:
            text = document(rng, ns.chars)
            await ledger.submit(
                [me.sign(4701, {"collection": SLUG, "text": text})], origin=OPERATOR
            )

        def claim_batch() -> Callable[[], Awaitable[Any]]:
            async def publish() -> None:
                batch = [
                    me.sign(4702, {"collection": SLUG, "text": f"New claim {me.serial} {i}."})
                    for i in range(1000)
                ]
                await ledger.submit(batch, origin=OPERATOR)

            return publish

        print("1. publishing")
        with_index = await timed(ns.runs, one_evidence)
        keyed = await timed(ns.runs, claim_batch())
        await pool.execute("DROP INDEX evidence_text_sha256")
        without_index = await timed(ns.runs, one_evidence)
        await pool.execute(
            "CREATE INDEX evidence_text_sha256 ON evidence (collection, tms_text_sha256(text))"
        )
        real = claim_keys.key_rows

        async def no_keys(*args: Any) -> Rows:
            return Rows("claim_keys", (), [])

        claim_keys.key_rows = no_keys  # type: ignore[assignment]  # what the commit calls
        unkeyed = await timed(ns.runs, claim_batch())
        claim_keys.key_rows = real
        print(f"   one {ns.chars:,}-char evidence, text sha256 indexed: {spread(with_index)}")
        print(f"   the same without the index:                   {spread(without_index)}")
        print(f"   1,000 claims, each claim's key written:          {spread(keyed)}")
        print(f"   the same without the keys:                       {spread(unkeyed)}")

        print("2. look-ups before signing")
        found = Lookups(pool)
        lab = Access(pool).unsafe_for_operator(SLUG)
        digest = hashlib.sha256(texts[-1].encode()).digest()
        keys = [claim_key(c.upper()) for c in rng.sample(claims, 20)]
        some = await pool.fetchval("SELECT id FROM claims WHERE collection = $1 LIMIT 1", SLUG)
        by_text = await timed(ns.runs * 10, lambda: found.evidence(lab, digest, None))
        by_url = await timed(
            ns.runs * 10, lambda: found.evidence(lab, None, "https://example.org/3")
        )
        by_key = await timed(ns.runs * 10, lambda: found.claims(lab, keys))
        whole = await timed(ns.runs * 10, lambda: found.targets(lab, [Reference(some)]))
        begun = await timed(ns.runs * 10, lambda: found.targets(lab, [Reference(some[:8])]))
        assert (await found.evidence(lab, digest, None))[0]["same_text"]
        assert len(await found.claims(lab, keys)) == 20
        print(f"   evidence by its text's sha256:   {spread(by_text)}")
        print(f"   evidence by URL:                 {spread(by_url)}")
        print(f"   20 claims by normalized key:     {spread(by_key)}")
        print(f"   a pasted id, whole:              {spread(whole)}")
        print(f"   a pasted id, first 8 hex digits: {spread(begun)}")

        print("3. the nearest passage of a wrong quote")
        text = texts[0]
        sha = hashlib.sha256(text.encode()).hexdigest()
        start = len(text) // 2
        words = text[start : start + 200].split(" ")[1:-1]
        words[len(words) // 2] = "changed"
        quote = " ".join(words)
        firsts, kept = [], []
        for _ in range(ns.runs):
            cache = Texts()
            begun_at = time.perf_counter()
            answer = await cache.nearest(me.key.pubkey, sha, quote, text)
            firsts.append(time.perf_counter() - begun_at)
            assert answer["nearest"] is not None
            kept += await timed(5, lambda c=cache: c.nearest(me.key.pubkey, sha, quote, None))
        print(f"   first, with the text sent:       {spread(firsts)}")
        print(f"   next, the text kept:             {spread(kept)}")
    finally:
        await pool.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chars", type=int, default=1_999_900)
    parser.add_argument("--documents", type=int, default=20)
    parser.add_argument("--claims", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--database-url", help="use this (empty) database instead of embedded")
    ns = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tms-bench-submit-") as tmp:
        asyncio.run(run(ns, Path(tmp)))


if __name__ == "__main__":
    main()
