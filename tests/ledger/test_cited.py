"""What a proof reads of the events it cites (`Reads.cited`): kinds and the short fields its
tree prints, from this collection only, never a document's text."""

from __future__ import annotations

import pytest
from factories import OWNER, OWNER2, T0, claim, contradiction, evidence, link, members
from proof_events import cited
from publishing import open_collection, publish

from tms.ledger.reads import Reads
from tms.ledger.service import Ledger
from tms.nostr.events import Event
from tms.rules.cited import CITED_TEXT_CHARS, Cited
from tms.rules.proofs import check_proof

pytestmark = pytest.mark.anyio

BIG_TEXT = "Histamine intolerance is discussed at length. " * 40_000  # 1.84 million characters


def envelope(event: dict[str, object]) -> Event:
    return Event.from_dict(event)


async def test_cited_reads_kinds_and_short_fields_from_this_collection_only(
    ledger: Ledger,
) -> None:
    await open_collection(ledger, OWNER, "lab")
    await open_collection(ledger, OWNER2, "other")
    doc = evidence(OWNER, "lab", BIG_TEXT, title="A long review", url="https://e.org/r")
    long_claim = claim(OWNER, "lab", "word " * 1000)
    short_claim = claim(OWNER, "lab", "Reduced DAO activity causes histamine build-up.")
    quoted = link(OWNER, "lab", doc["id"], short_claim["id"], "discussed at length")
    contra = contradiction(OWNER, "lab", [long_claim["id"], short_claim["id"]])
    listed = members(OWNER, "lab", [], created_at=T0 + 5)
    elsewhere = claim(OWNER2, "other", "A claim in another collection.")
    await publish(ledger, doc, long_claim, short_claim, quoted, contra, listed)
    await publish(ledger, elsewhere)
    lab = [doc, long_claim, short_claim, quoted, contra, listed]

    got = await Reads(ledger.pool).cited("lab", [e["id"] for e in [*lab, elsewhere]])

    assert set(got) == {e["id"] for e in lab}  # the other collection's claim is simply absent
    assert got[doc["id"]] == Cited(4701, title="A long review", url="https://e.org/r")
    assert got[long_claim["id"]].text == ("word " * 1000)[:CITED_TEXT_CHARS]
    assert got[quoted["id"]].quote == "discussed at length"
    assert (got[quoted["id"]].from_, got[quoted["id"]].to) == (doc["id"], short_claim["id"])
    assert got[contra["id"]].claims == 2 and got[contra["id"]].reason == "both cannot hold"
    assert got[listed["id"]] == Cited(4705)
    assert await Reads(ledger.pool).cited("other", [e["id"] for e in lab]) == {}
    assert await Reads(ledger.pool).cited("lab", []) == {}

    # The tree a proof prints from the ledger is the one it prints from the signed events.
    proof = {"steps": [{"id": "root", "say": "All of it.", "from": [e["id"] for e in lab]}]}
    from_ledger = check_proof(proof, got)
    assert from_ledger["ok"], from_ledger["problems"]
    assert from_ledger == check_proof(proof, cited((envelope(e) for e in lab), map(envelope, lab)))
    assert '"A long review"' in from_ledger["tree"] and "…" in from_ledger["tree"]
