"""Benchmark of the pure core: `uv run python bench/core.py`.

Prints figures, asserts nothing. Targets (issue 2, on the 2-core dev machine):
- envelope parse + id check + signature verification of 10,000 signed claims costs at most 1.5x
  bare coincurve verification, measured in the same run;
- 1,000 quotes checked against one 2,000,000-character evidence in under 1 s, including the one
  normalization of the evidence;
- (issue 11) the same with every quote anchored (offsets, context, occurrences): its cost over
  plain checking, for 1,000 quotes and for one;
- (issue 11) the nearest passage of a 2,000,000-character evidence, for a quote that is not in
  it, in at most 50 ms, whatever the quote.
Also printed: the proof checker on a 1,000-step chain and on a 1,000-step DAG where every step
cites the 99 before it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import time
from collections.abc import Callable

from coincurve import PublicKeyXOnly

from tms.nostr.events import Event, SecretKey
from tms.rules.anchors import anchor, nearest
from tms.rules.cited import Cited
from tms.rules.proofs import check_proof, cited_event_ids
from tms.rules.quotes import PreparedText
from tms.types import KIND_CLAIM

WORDS = (
    "histamine intolerance diamine oxidase activity serum plasma mast cell review trial cohort "
    "patients reported symptoms “reduced” enzyme — levels were measured in 2019 and again"
).split()


def best_of(runs: int, fn: Callable[[], object]) -> float:
    """Best wall time of several runs: the least disturbed by the rest of the machine."""
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def best_of_each(runs: int, fns: list[Callable[[], object]]) -> list[float]:
    best = [float("inf")] * len(fns)
    for _ in range(runs):
        for i, fn in enumerate(fns):
            best[i] = min(best[i], best_of(1, fn))
    return best


def envelope(count: int, authors: int, runs: int) -> None:
    keys = [SecretKey.generate() for _ in range(authors)]
    events = [
        keys[i % authors].sign(
            4702,
            json.dumps({"collection": "bench", "text": f"Claim {i}: " + " ".join(WORDS[: i % 20])}),
            1_790_000_000 + i,
        )
        for i in range(count)
    ]
    dicts = [json.loads(e.to_json()) for e in events]
    lines = [e.to_json() for e in events]
    raw = [(bytes.fromhex(e.pubkey), bytes.fromhex(e.sig), bytes.fromhex(e.id)) for e in events]
    parsed = {pk: PublicKeyXOnly(pk) for pk, _, _ in raw}

    def bare() -> None:
        for pk, sig, msg in raw:
            assert parsed[pk].verify(sig, msg)

    def bare_with_key_parse() -> None:
        for pk, sig, msg in raw:
            assert PublicKeyXOnly(pk).verify(sig, msg)

    def full_from_dicts() -> None:
        for obj in dicts:
            Event.from_dict(obj).verify()

    def full_from_text() -> None:
        for line in lines:
            Event.from_json(line).verify()

    # Interleaved, so that a busy moment of the machine hits every variant alike.
    t_bare, t_bare_parse, t_dicts, t_text = best_of_each(
        runs, [bare, bare_with_key_parse, full_from_dicts, full_from_text]
    )
    print(f"envelope: {count:,} signed claims from {authors} authors, best of {runs} runs")
    print(f"  bare coincurve verify (key pre-parsed)   {count / t_bare:10,.0f} events/s")
    print(f"  bare coincurve verify (key parsed each)  {count / t_bare_parse:10,.0f} events/s")
    print(
        f"  parse dict + id check + verify           {count / t_dicts:10,.0f} events/s"
        f"   {t_dicts / t_bare:.2f}x bare"
    )
    print(
        f"  parse JSON text + id check + verify      {count / t_text:10,.0f} events/s"
        f"   {t_text / t_bare:.2f}x bare"
    )


def bench_text(chars: int, rng: random.Random) -> str:
    """Random words of a 20-word vocabulary, curly quotes and dashes among them."""
    words = []
    length = 0
    while length < chars:
        word = rng.choice(WORDS)
        words.append(word)
        length += len(word) + 1
    return " ".join(words)[:chars]


def bench_quotes(text: str, count: int, rng: random.Random) -> list[str]:
    """Quotes from everywhere in the text, re-typed with allowed variations, plus misses."""
    picks = []
    for i in range(count):
        start = rng.randrange(0, len(text) - 400)
        quote = text[start : start + rng.randrange(40, 300)].strip()
        if i % 3 == 0:
            quote = quote.upper().replace("“", '"').replace("—", "-")
        if i % 10 == 9:
            quote += " zzz"  # not in the text: a full scan
        picks.append(quote)
    return picks


def quotes(chars: int, count: int, runs: int) -> None:
    rng = random.Random(7)
    text = bench_text(chars, rng)
    picks = bench_quotes(text, count, rng)

    def check_all() -> int:
        prepared = PreparedText(text)
        return sum(prepared.contains(q) for q in picks)

    found = check_all()
    t_prepare = best_of(runs, lambda: PreparedText(text))
    t_total = best_of(runs, check_all)
    print(f"quotes: {count:,} quotes against one {chars:,}-character evidence, best of {runs}")
    print(f"  normalize the evidence once              {t_prepare * 1000:10.1f} ms")
    print(
        f"  normalize + {count:,} quote checks          {t_total * 1000:10.1f} ms"
        f"   ({found} found, {count - found} not found)"
    )


def anchors(chars: int, count: int, runs: int) -> None:
    """What anchoring adds to finding: the publish path anchors every quote it finds."""
    text = bench_text(chars, random.Random(7))
    picks = bench_quotes(text, count, random.Random(8))
    text_with_paragraphs = text.replace(" and again ", " and again\n\n")

    for name, evidence in (("one line", text), ("paragraphs", text_with_paragraphs)):

        def found_all(evidence: str = evidence) -> int:
            prepared = PreparedText(evidence)
            return sum(prepared.contains(q) for q in picks)

        def anchored_all(evidence: str = evidence) -> int:
            prepared = PreparedText(evidence)
            return sum(anchor(prepared, q) is not None for q in picks)

        def found_one(evidence: str = evidence) -> bool:
            return PreparedText(evidence).contains(picks[0])

        def anchored_one(evidence: str = evidence) -> bool:
            return anchor(PreparedText(evidence), picks[0]) is not None

        assert found_all() == anchored_all()
        t_found, t_anchored, t_one, t_one_anchored = best_of_each(
            runs, [found_all, anchored_all, found_one, anchored_one]
        )
        print(f"anchors: {count:,} quotes against one {chars:,}-character evidence ({name})")
        print(
            f"  normalize + {count:,} checks / anchors   {t_found * 1000:8.1f} ms"
            f" / {t_anchored * 1000:8.1f} ms   (+{(t_anchored - t_found) * 1000:.1f} ms)"
        )
        print(
            f"  normalize + 1 check / anchor        {t_one * 1000:8.1f} ms"
            f" / {t_one_anchored * 1000:8.1f} ms   (+{(t_one_anchored - t_one) * 1000:.1f} ms)"
        )


def prose(chars: int, rng: random.Random) -> str:
    """Pseudo-words of one to four syllables: text whose pieces are about as rare as prose's."""
    words, length = [], 0
    while length < chars:
        word = "".join(rng.choice("bcdfghklmnprstvz") + rng.choice("aeiou") for _ in range(4))
        words.append(word[: 2 * rng.randint(1, 4)])
        length += len(words[-1]) + 1
    return " ".join(words)[:chars]


def spread(times: list[float]) -> str:
    ordered = sorted(times)
    return f"median {ordered[len(ordered) // 2] * 1000:5.1f} ms, max {ordered[-1] * 1000:5.1f} ms"


def nearest_passages(chars: int, per_length: int) -> None:
    """The hint for a refused quote: one word changed, or nothing like the text at all."""
    rng = random.Random(9)
    for name, text in (
        ("prose", prose(chars, rng)),
        ("20-word vocabulary", bench_text(chars, rng)),
    ):
        prepared = PreparedText(text)
        print(f"nearest passage: one {chars:,}-character evidence ({name})")
        for length in (20, 60, 150, 300, 1000, 2000):
            times, right = [], 0
            for _ in range(per_length):
                start = rng.randrange(0, len(text) - length - 1)
                words = text[start : start + length].split(" ")
                words[len(words) // 2] = "changed"
                quote = " ".join(words)
                began = time.perf_counter()
                hint = nearest(prepared, quote)
                times.append(time.perf_counter() - began)
                right += hint is not None and abs(hint.start - start) <= 20
            print(
                f"  {length:5,}-character quote, a word changed: {spread(times)};"
                f" the right passage {right}/{per_length}"
            )
        times = []
        for i in range(per_length):
            quote = f"nothing of the sort {i} was ever written here, not a word of it"
            began = time.perf_counter()
            nearest(prepared, quote)
            times.append(time.perf_counter() - began)
        print(f"  a quote like nothing in the text:         {spread(times)}")


def proofs(steps: int, runs: int) -> None:
    # What the ledger reads of each cited claim for the checker (tms.ledger.read.cited).
    claims = [(hashlib.sha256(f"claim {i}".encode()).hexdigest(), f"Claim {i}.") for i in range(10)]
    events = {claim_id: Cited(KIND_CLAIM, text=text) for claim_id, text in claims}
    chain = [{"id": "s0", "say": "Start.", "from": [claims[0][0]]}]
    chain += [{"id": f"s{i}", "say": f"Step {i}.", "from": [f"s{i - 1}"]} for i in range(1, steps)]
    wide = [{"id": f"s{i}", "say": "Premise.", "from": [claims[i % 10][0]]} for i in range(10)]
    wide += [
        {"id": f"s{i}", "say": "Step.", "from": [f"s{j}" for j in range(max(0, i - 99), i)]}
        for i in range(10, steps - 1)
    ]
    wide.append({"id": "root", "say": "Answer.", "from": [f"s{steps - 2}"]})
    for name, proof in (
        ("chain", {"steps": chain}),
        ("wide DAG (99 cites a step)", {"steps": wide}),
    ):
        assert cited_event_ids(proof)
        seconds = best_of(runs, lambda proof=proof: check_proof(proof, events))
        assert check_proof(proof, events)["ok"]
        print(f"proofs: {steps:,}-step {name:28} {seconds * 1000:8.1f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=10_000)
    parser.add_argument("--authors", type=int, default=10)
    parser.add_argument("--chars", type=int, default=2_000_000)
    parser.add_argument("--quotes", type=int, default=1_000)
    parser.add_argument("--steps", type=int, default=1_000)
    parser.add_argument("--nearest", type=int, default=20, help="hints per quote length")
    parser.add_argument("--runs", type=int, default=5)
    ns = parser.parse_args()
    envelope(ns.events, ns.authors, ns.runs)
    quotes(ns.chars, ns.quotes, ns.runs)
    anchors(ns.chars, ns.quotes, ns.runs)
    nearest_passages(ns.chars, ns.nearest)
    proofs(ns.steps, ns.runs)


if __name__ == "__main__":
    main()
