"""Where a page's view of a collection ends (`tms.ledger.read.watermark`), on real PostgreSQL: the
newest event of the kinds asked, in the ledger's order (never by `created_at`), "none yet" for a
collection without them, and "unknown" when they are not among its newest events."""

from __future__ import annotations

import pytest
from factories import claim, evidence, link, members, terms
from publishing import publish, reader_of

from tms.ledger.read import watermark
from tms.ledger.service import Ledger
from tms.nostr.events import SecretKey

pytestmark = pytest.mark.anyio

CLAIMS_AND_LINKS = (4702, 4703, 4704)


async def test_the_newest_of_the_kinds_in_the_ledgers_order(ledger: Ledger) -> None:
    owner = SecretKey.generate()
    await ledger.approve([owner.pubkey])
    await publish(ledger, terms(owner), members(owner, "c", []))
    readable = (await reader_of(ledger, owner.pubkey)).collection("c")
    assert await watermark.newest(ledger.pool, readable, CLAIMS_AND_LINKS) == watermark.NONE_YET
    doc = evidence(owner, "c", "A text to quote.")
    late = claim(owner, "c", "Signed late, stored first.", created_at=1_790_000_500)
    early = claim(owner, "c", "Signed early, stored last.", created_at=1_000)
    await publish(ledger, doc, late)
    await publish(ledger, early)
    assert await watermark.newest(ledger.pool, readable, CLAIMS_AND_LINKS) == early["id"]
    quoted = link(owner, "c", doc["id"], early["id"], "A text")
    await publish(ledger, quoted, evidence(owner, "c", "Stored after the link."))
    assert await watermark.newest(ledger.pool, readable, CLAIMS_AND_LINKS) == quoted["id"]
    assert await watermark.newest(ledger.pool, readable, (4703,)) == quoted["id"]


async def test_unknown_when_not_among_the_newest_events(ledger: Ledger) -> None:
    owner = SecretKey.generate()
    await ledger.approve([owner.pubkey])
    first = claim(owner, "c", "The only claim.")
    await publish(ledger, terms(owner), first)
    readable = (await reader_of(ledger, owner.pubkey)).collection("c")
    documents = [evidence(owner, "c", f"Document {n}.") for n in range(watermark.WINDOW)]
    await publish(ledger, *documents[:-1])
    assert await watermark.newest(ledger.pool, readable, CLAIMS_AND_LINKS) == first["id"]
    await publish(ledger, documents[-1])  # the claim is no longer among the newest thousand
    assert await watermark.newest(ledger.pool, readable, CLAIMS_AND_LINKS) is None
    assert await watermark.newest(ledger.pool, readable, (4701,)) == documents[-1]["id"]
