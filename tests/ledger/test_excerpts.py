"""What the reading pages read (tms.ledger.read.excerpts): quotes in their stored context, links,
contradictions, the picker's claims and a window of evidence, every text cut in SQL; and, over
a role that cannot read any evidence text, that the claim page's reads never need one."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator

import pytest
from factories import MEMBER, OWNER, OWNER2, STRANGER, claim, contradiction, evidence, link
from publishing import join, open_collection, publish, readable
from text_blind import drop_role, make_text_blind_role

from tms.errors import NotAReader
from tms.ledger.read import excerpts
from tms.ledger.read.excerpts import CLAIM_CHARS, QUOTE_CHARS, REASON_CHARS, Cut
from tms.ledger.read.reads import Reads
from tms.ledger.service import Ledger
from tms.ledger.write.anchors import backfill
from tms.rules.anchors import CONTEXT_WINDOW_CHARS
from tms.store.database import open_pool

pytestmark = pytest.mark.anyio


def prose(chars: int, seed: int) -> str:
    rng = random.Random(seed)
    words = "serum plasma diamine oxidase activity mast cell histamine review cohort".split()
    return " ".join(rng.choice(words) for _ in range(chars // 5))[:chars]


DEEP = "Serum DAO did not predict symptoms in this cohort."
LONG_TEXT = prose(300_000, 1) + " " + DEEP + " " + prose(1_000, 2)
AT = LONG_TEXT.index(DEEP)


class World:
    def __init__(self) -> None:
        self.doc = evidence(OWNER, "lab", LONG_TEXT, title="A long review")
        self.short = evidence(OWNER, "lab", "Short text. DAO matters.", title="Short")
        self.claim = claim(OWNER, "lab", "DAO predicts symptoms.")
        self.other = claim(OWNER, "lab", "DAO does not predict symptoms.")
        self.third = claim(MEMBER, "lab", "Histamine intolerance is rare.")
        self.deep = link(
            OWNER, "lab", self.doc["id"], self.claim["id"], DEEP.upper(), relation="REBUTS"
        )
        long_quote = LONG_TEXT[1_000:4_000]
        self.long = link(
            OWNER,
            "lab",
            self.doc["id"],
            self.claim["id"],
            long_quote,
            reason="R" * (REASON_CHARS + 50),
        )
        self.near_start = link(OWNER, "lab", self.short["id"], self.claim["id"], "short text")
        self.found = contradiction(
            OWNER,
            "lab",
            [self.other["id"], self.third["id"], self.claim["id"]],
            "They cannot all hold. " + "x" * REASON_CHARS,
        )

    async def publish(self, ledger: Ledger) -> None:
        await open_collection(ledger, OWNER, "lab", [MEMBER])
        await join(ledger, MEMBER)
        batch = [self.doc, self.short, self.claim, self.other, self.deep, self.long]
        await publish(ledger, *batch, self.near_start)
        await publish(ledger, self.third)
        await publish(ledger, self.found)
        await open_collection(ledger, OWNER2, "elsewhere")
        await publish(ledger, claim(OWNER2, "elsewhere", "DAO elsewhere."))


@pytest.fixture
async def world(ledger: Ledger) -> World:
    made = World()
    await made.publish(ledger)
    return made


async def test_a_deep_quote_comes_in_its_stored_context(ledger: Ledger, world: World) -> None:
    """The context is the text either side of the anchor, as signed, read from the anchor's
    row: at most CONTEXT_WINDOW_CHARS each side, and whether the text goes on."""
    reads = Reads(ledger.pool)
    ids = [world.deep["id"], world.long["id"], world.near_start["id"], world.claim["id"]]
    contexts = await reads.quote_contexts(await readable(reads, "lab"), ids)
    assert set(contexts) == set(ids[:3])  # a claim id has no context, and is simply absent
    deep = contexts[world.deep["id"]]
    assert deep.before == LONG_TEXT[AT - CONTEXT_WINDOW_CHARS : AT]
    assert deep.quote == Cut(DEEP, False)  # the evidence's own characters, not the quote's case
    assert deep.after == LONG_TEXT[AT + len(DEEP) :][:CONTEXT_WINDOW_CHARS]
    assert deep.more_before and deep.more_after
    long = contexts[world.long["id"]]
    assert long.quote == Cut(LONG_TEXT[1_000 : 1_000 + QUOTE_CHARS], True)
    assert long.after == LONG_TEXT[4_000 : 4_000 + CONTEXT_WINDOW_CHARS]
    short = contexts[world.near_start["id"]]
    assert (short.before, short.quote.text, short.after) == ("", "Short text", ". DAO matters.")
    assert not short.more_before and not short.more_after
    assert (
        await reads.quote_contexts(await readable(reads, "elsewhere"), ids) == {}
    )  # never another collection's


async def test_links_come_with_their_texts_cut(ledger: Ledger, world: World) -> None:
    reads = Reads(ledger.pool)
    shown = await reads.shown_links(await readable(reads, "lab"), to_id=world.claim["id"], limit=10)
    assert [s.id for s in shown] == [world.deep["id"], world.long["id"], world.near_start["id"]]
    deep, long, near = shown
    assert deep.quote == Cut(DEEP.upper(), False) and deep.relation == "REBUTS"
    assert (deep.start, deep.end) == (AT, AT + len(DEEP))
    assert deep.source_title == Cut("A long review", False)
    assert long.quote.more and len(long.quote.text) == QUOTE_CHARS
    assert long.reason == Cut("R" * REASON_CHARS, True)
    assert near.from_id == world.short["id"]
    quoting = await reads.shown_links(
        await readable(reads, "lab"), from_id=world.doc["id"], limit=1
    )
    assert [s.id for s in quoting] == [world.deep["id"]]
    assert (
        await reads.shown_links(
            await readable(reads, "elsewhere"), to_id=world.claim["id"], limit=10
        )
        == []
    )
    with pytest.raises(ValueError):
        await reads.shown_links(await readable(reads, "lab"), limit=10)


async def test_contradictions_name_this_claim_first(ledger: Ledger, world: World) -> None:
    reads = Reads(ledger.pool)
    [found] = await reads.shown_contradictions(await readable(reads, "lab"), world.claim["id"], 10)
    assert found.id == world.found["id"] and found.claim_count == 3
    assert [c.id for c in found.claims] == [world.claim["id"], world.other["id"], world.third["id"]]
    assert found.reason.more and len(found.reason.text) == REASON_CHARS
    assert (
        await reads.shown_contradictions(await readable(reads, "elsewhere"), world.claim["id"], 10)
        == []
    )


async def test_the_picker_offers_claims_of_the_collection(ledger: Ledger, world: World) -> None:
    """The newest first without words; by id or the start of one; by words; never the claim
    the page shows, never another collection's."""
    reads = Reads(ledger.pool)
    besides = world.claim["id"]
    newest = await reads.claim_choices(await readable(reads, "lab"), "", besides, 10)
    assert [c.id for c in newest] == [world.third["id"], world.other["id"]]
    by_words = await reads.claim_choices(
        await readable(reads, "lab"), "rare histamine", besides, 10
    )
    assert [c.id for c in by_words] == [world.third["id"]]
    assert await reads.claim_choices(await readable(reads, "lab"), "DAO", besides, 10) == [
        excerpts.NamedClaim(world.other["id"], Cut("DAO does not predict symptoms.", False))
    ]
    by_id = await reads.claim_choices(
        await readable(reads, "lab"), world.other["id"][:10] + "…", besides, 10
    )
    assert [c.id for c in by_id] == [world.other["id"]]
    assert (
        await reads.claim_choices(
            await readable(reads, "lab"), world.other["id"].upper(), besides, 10
        )
        == by_id
    )
    assert await reads.claim_choices(await readable(reads, "lab"), besides, besides, 10) == []
    assert await reads.claim_choices(await readable(reads, "elsewhere"), "symptoms", "", 10) == []
    long = claim(OWNER, "lab", "L" * (CLAIM_CHARS + 10))
    await publish(ledger, long)
    [first] = await reads.claim_choices(await readable(reads, "lab"), "", besides, 1)
    assert first.id == long["id"] and first.text == Cut("L" * CLAIM_CHARS, True)


async def test_an_evidence_window_is_read_alone(ledger: Ledger, world: World) -> None:
    reads = Reads(ledger.pool)
    window = await reads.evidence_window(
        await readable(reads, "lab", MEMBER.pubkey), world.doc["id"], AT, 100
    )
    assert window is not None
    assert window.text == LONG_TEXT[AT : AT + 100] and window.chars == len(LONG_TEXT)
    assert window.title == Cut("A long review", False) and window.collection == "lab"
    with pytest.raises(NotAReader):  # the door's check: a stranger gets nothing to read with
        await readable(reads, "lab", STRANGER.pubkey)
    elsewhere = await readable(reads, "elsewhere")
    assert await reads.evidence_window(elsewhere, world.doc["id"], 0, 100) is None
    assert (
        await reads.evidence_window(await readable(reads, "lab", MEMBER.pubkey), "ab" * 32, 0, 100)
        is None
    )
    tail = await reads.evidence_window(
        await readable(reads, "lab", MEMBER.pubkey), world.doc["id"], len(LONG_TEXT) - 5, 100
    )
    assert tail is not None and tail.text == LONG_TEXT[-5:]


async def test_anchors_stored_before_their_context_get_it_at_start_up(
    ledger: Ledger, world: World
) -> None:
    """Anchors stored before sql/012 have no context: those quotes are shown without one
    until the back-fill reads each evidence once and fills it in."""
    reads = Reads(ledger.pool)
    ids = [world.deep["id"], world.long["id"], world.near_start["id"]]
    before = await reads.quote_contexts(await readable(reads, "lab"), ids)
    await ledger.pool.execute("UPDATE link_anchors SET context_before = NULL, context_after = NULL")
    assert await reads.quote_contexts(await readable(reads, "lab"), ids) == {}
    assert await backfill(ledger.pool) == 3
    assert await reads.quote_contexts(await readable(reads, "lab"), ids) == before
    assert await backfill(ledger.pool) == 0


@pytest.fixture
async def blind_reads(db_url: str, world: World) -> AsyncIterator[Reads]:
    role, url = await make_text_blind_role(db_url)
    pool = await open_pool(url, min_size=1, max_size=2)
    try:
        yield Reads(pool)
    finally:
        await pool.close()
        await drop_role(db_url, role)


async def test_the_claim_page_reads_need_no_evidence_text(
    blind_reads: Reads, ledger: Ledger, world: World
) -> None:
    """Over a role refused every evidence text, the claim page's reads give what they give
    to anyone: none of them reads a text, whatever its length. The evidence page's window
    does read one, and is refused there."""
    ids = [world.deep["id"], world.long["id"], world.near_start["id"]]
    full = Reads(ledger.pool)
    assert await blind_reads.quote_contexts(
        await readable(blind_reads, "lab"), ids
    ) == await full.quote_contexts(await readable(full, "lab"), ids)
    shown = await blind_reads.shown_links(
        await readable(blind_reads, "lab"), to_id=world.claim["id"], limit=10
    )
    assert shown == await full.shown_links(
        await readable(full, "lab"), to_id=world.claim["id"], limit=10
    )
    assert await blind_reads.shown_contradictions(
        await readable(blind_reads, "lab"), world.claim["id"], 10
    ) == await full.shown_contradictions(await readable(full, "lab"), world.claim["id"], 10)
    assert await blind_reads.claim_choices(
        await readable(blind_reads, "lab"), "DAO", "", 10
    ) == await full.claim_choices(await readable(full, "lab"), "DAO", "", 10)
    lab = await readable(full, "lab", MEMBER.pubkey)
    with pytest.raises(Exception, match="permission denied"):
        await blind_reads.evidence_window(lab, world.doc["id"], 0, 10)
