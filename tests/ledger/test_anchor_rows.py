"""Anchors through a real ledger: computed by the publish that stores a link and stored beside
it (never in the signed event), returned by get_links and get_event, filled in at start-up for
links stored without one; and a refused quote's nearest passage, read from stored evidence."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest
from factories import NOW, OWNER, claim, evidence, link, settings
from publishing import open_collection, publish, readable, reader_of, refused

from tms.ledger.read.reads import Reads
from tms.ledger.service import Ledger
from tms.ledger.write.anchors import backfill
from tms.rules.admission import OPERATOR
from tms.rules.quotes import normalize
from tms.runtime import open_runtime

pytestmark = pytest.mark.anyio

TEXT = (
    "Die Straße\u2014so hei\u00adßt es\u2014ist  lang.\n\n"
    "Histamine intolerance is \ufb01rst thought to result from reduced diamine oxidase "
    "activity. Reduced DAO is common; reduced dao is measured."
)


def expected(start: int, end: int, occurrences: int) -> dict[str, Any]:
    return {
        "start": start,
        "end": end,
        "exact": TEXT[start:end],
        "prefix": TEXT[max(0, start - 32) : start],
        "suffix": TEXT[end : end + 32],
        "occurrences": occurrences,
    }


async def anchored_world(ledger: Ledger) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    await open_collection(ledger, OWNER, "lab")
    doc = evidence(OWNER, "lab", TEXT)
    c = claim(OWNER, "lab", "Roads are long.")
    links = [
        link(OWNER, "lab", doc["id"], c["id"], "strasse-so heisst ES-ist lang"),
        link(OWNER, "lab", doc["id"], c["id"], "first thought to result"),
        link(OWNER, "lab", doc["id"], c["id"], "REDUCED DAO"),
    ]
    await publish(ledger, doc, c, *links)
    return doc, links


WANTED = [
    expected(TEXT.index("Straße"), TEXT.index("lang") + 4, 1),
    expected(TEXT.index("\ufb01rst"), TEXT.index(" from reduced"), 1),
    expected(TEXT.index("Reduced DAO"), TEXT.index("Reduced DAO") + 11, 2),
]


async def test_anchors_are_stored_at_publish_and_returned(ledger: Ledger) -> None:
    doc, _ = await anchored_world(ledger)
    reads = Reads(ledger.pool)
    got = await reads.get_links(await readable(reads, "lab"), None, doc["id"], None, 10)
    assert [item["anchor"] for item in got] == WANTED
    # Offsets count code points of the text as signed: get_event's window at them is the quote.
    for item, wanted in zip(got, WANTED, strict=True):
        window = await reads.get_event(
            await reader_of(reads, OWNER.pubkey),
            doc["id"],
            wanted["start"],
            wanted["end"] - wanted["start"],
        )
        assert window is not None and window["content"]["text"] == wanted["exact"]
        one = await reads.get_event(await reader_of(reads, OWNER.pubkey), item["id"])
        assert one is not None and one["anchor"] == wanted
        assert one["content"]["quote"] == item["quote"]  # the signed content, untouched
    evidence_event = await reads.get_event(await reader_of(reads, OWNER.pubkey), doc["id"])
    assert evidence_event is not None and "anchor" not in evidence_event


async def test_batches_committed_together_keep_their_anchors(ledger: Ledger) -> None:
    """Concurrent publishes to one collection are judged in one transaction (group commit):
    every accepted link gets its anchor, and each refused batch its own nearest passage."""
    await open_collection(ledger, OWNER, "lab")
    doc = evidence(OWNER, "lab", TEXT)
    c = claim(OWNER, "lab", "Roads are long.")
    await publish(ledger, doc, c)
    quotes = ["strasse", "first thought", "oxidase activity", "reduced dao", "is measured"]
    good = [link(OWNER, "lab", doc["id"], c["id"], quote) for quote in quotes]
    bad = [
        link(OWNER, "lab", doc["id"], c["id"], "first assumed to result"),
        link(OWNER, "lab", doc["id"], c["id"], "reduced diamine oxidase ACTIVITIES"),
    ]
    outcomes = await asyncio.gather(
        *(ledger.submit([e], now=NOW, origin=OPERATOR) for e in [*good, *bad]),
        return_exceptions=True,
    )
    assert all(isinstance(o, dict) for o in outcomes[: len(good)]), outcomes
    assert '"\ufb01rst thought to result"' in str(outcomes[-2])
    assert '"reduced diamine oxidase activity"' in str(outcomes[-1])
    got = await Reads(ledger.pool).get_links(
        await readable(Reads(ledger.pool), "lab"), None, doc["id"], None, 10
    )
    assert {item["id"] for item in got} == {e["id"] for e in good}
    for item in got:
        assert item["anchor"] is not None
        assert normalize(item["anchor"]["exact"]) == normalize(item["quote"])


async def test_links_stored_without_anchors_get_them_at_start_up(ledger: Ledger) -> None:
    """As links published before anchors existed: no row in link_anchors, `anchor: null`, until
    the start-up back-fill computes the same anchors a publish would have."""
    doc, links = await anchored_world(ledger)
    reads = Reads(ledger.pool)
    stored = await ledger.pool.fetch("SELECT id, content FROM events ORDER BY seq")
    await ledger.pool.execute("DELETE FROM link_anchors")  # not ledger: derived, recomputable
    got = await reads.get_links(await readable(reads, "lab"), None, doc["id"], None, 10)
    assert [item["anchor"] for item in got] == [None, None, None]
    one = await reads.get_event(await reader_of(reads, OWNER.pubkey), links[0]["id"])
    assert one is not None and one["anchor"] is None

    assert await backfill(ledger.pool) == 3
    got = await reads.get_links(await readable(reads, "lab"), None, doc["id"], None, 10)
    assert [item["anchor"] for item in got] == WANTED
    assert await backfill(ledger.pool) == 0  # one-off: what has its anchor is left alone
    assert await ledger.pool.fetch("SELECT id, content FROM events ORDER BY seq") == stored


async def test_the_runtime_anchors_stored_links_at_start_up(db_url: str, ledger: Ledger) -> None:
    """What `tms serve` and `tms stdio` open starts the back-fill, in the background."""
    doc, _ = await anchored_world(ledger)
    await ledger.pool.execute("DELETE FROM link_anchors")
    async with open_runtime(settings(TMS_EMBED="off"), database_url=db_url):
        for _ in range(200):
            if await ledger.pool.fetchval("SELECT count(*) FROM link_anchors") == 3:
                break
            await asyncio.sleep(0.05)
    got = await Reads(ledger.pool).get_links(
        await readable(Reads(ledger.pool), "lab"), None, doc["id"], None, 10
    )
    assert [item["anchor"] for item in got] == WANTED


def prose(words: int, seed: int) -> str:
    """Pseudo-words of one to four syllables: text long enough to be searched through seeds."""
    rng = random.Random(seed)

    def word() -> str:
        return "".join(rng.choice("bdfgklmnprstvz") + rng.choice("aeiou") for _ in range(4))[
            : 2 * rng.randint(1, 4)
        ]

    return " ".join(word() for _ in range(words))


async def test_a_refusal_names_the_nearest_passage_of_stored_evidence(ledger: Ledger) -> None:
    """One changed word: refused in SPEC's words, nothing stored (no anchor either), and the
    hint points at the passage as the stored evidence has it."""
    await open_collection(ledger, OWNER, "lab")
    head = prose(5000, 1) + " "
    text = head + "Serum DAO levels correlate poorly with symptoms. " + prose(5000, 2)
    doc = evidence(OWNER, "lab", text)
    c = claim(OWNER, "lab", "Serum DAO predicts symptoms.")
    await publish(ledger, doc, c)
    good = link(OWNER, "lab", doc["id"], c["id"], "correlate poorly")
    bad = link(OWNER, "lab", doc["id"], c["id"], "Serum DAO levels correlate WELL with symptoms")
    start = len(head)
    message = await refused(
        ledger,
        [good, bad],
        f"events[1] ({bad['id'][:12]}…): quote not found verbatim in evidence {doc['id']}; copy "
        "it exactly from the evidence text (case, whitespace, quote and dash styles may differ; "
        f"nothing else); the nearest passage is characters {start}-",
        ': "Serum DAO levels correlate poorly with symptoms"',  # whole words, no stray period
        position=1,
    )
    assert len(message) < 1000
