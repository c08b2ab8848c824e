"""What a proof reads of the events it cites (`Reads.cited`): kinds and the short fields its
tree prints, from this collection only, never a document's text; and the disputes of the claims
it rests on, read at every check, never from another collection."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from factories import OWNER, OWNER2, T0, EventDict, claim, contradiction, evidence, link, members
from proof_events import cited
from publishing import open_collection, publish, readable

from tms.ledger.read.cited import disputes
from tms.ledger.read.reads import Reads
from tms.ledger.service import Ledger
from tms.nostr.events import Event
from tms.results import ContestedClaim, ProofResult
from tms.rules.cited import CITED_TEXT_CHARS, Cited
from tms.rules.proofs import check_proof, cited_event_ids

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

    got = await Reads(ledger.pool).cited(
        await readable(Reads(ledger.pool), "lab"), [e["id"] for e in [*lab, elsewhere]]
    )

    assert set(got) == {e["id"] for e in lab}  # the other collection's claim is simply absent
    assert got[doc["id"]] == Cited(4701, title="A long review", url="https://e.org/r")
    assert got[long_claim["id"]].text == ("word " * 1000)[:CITED_TEXT_CHARS]
    assert got[quoted["id"]].quote == "discussed at length"
    assert (got[quoted["id"]].from_, got[quoted["id"]].to) == (doc["id"], short_claim["id"])
    assert got[contra["id"]].claims == 2 and got[contra["id"]].reason == "both cannot hold"
    assert got[listed["id"]] == Cited(4705)
    assert (
        await Reads(ledger.pool).cited(
            await readable(Reads(ledger.pool), "other"), [e["id"] for e in lab]
        )
        == {}
    )
    assert await Reads(ledger.pool).cited(await readable(Reads(ledger.pool), "lab"), []) == {}

    # The tree a proof prints from the ledger is the one it prints from the signed events.
    proof = {"steps": [{"id": "root", "say": "All of it.", "from": [e["id"] for e in lab]}]}
    from_ledger = check_proof(proof, got)
    assert from_ledger["ok"], from_ledger["problems"]
    assert from_ledger == check_proof(proof, cited((envelope(e) for e in lab), map(envelope, lab)))
    assert '"A long review"' in from_ledger["tree"] and "…" in from_ledger["tree"]


# --- contested premises: read from the ledger each time a proof is checked ---------------------


@dataclass(frozen=True)
class Premises:
    doc: EventDict
    claims: list[EventDict]
    proof: dict[str, Any]


async def premises(ledger: Ledger) -> Premises:
    """ "lab" with an evidence and three claims, each SUPPORTed, that a proof rests on (two cited
    by a step, one by the root); "other" exists beside it."""
    await open_collection(ledger, OWNER, "lab")
    await open_collection(ledger, OWNER2, "other")
    doc = evidence(OWNER, "lab", "DAO breaks down histamine. Serum DAO varies.")
    claims = [claim(OWNER, "lab", f"Claim {n}.") for n in range(3)]
    support = [link(OWNER, "lab", doc["id"], c["id"], "DAO breaks down") for c in claims]
    await publish(ledger, doc, *claims, *support)
    proof = {
        "steps": [
            {"id": "s1", "say": "Two premises.", "from": [claims[0]["id"], claims[1]["id"]]},
            {"id": "root", "say": "The answer.", "from": ["s1", claims[2]["id"]]},
        ]
    }
    return Premises(doc, claims, proof)


async def checked(ledger: Ledger, proof: dict[str, Any]) -> ProofResult:
    """`check_proof` in "lab", reading the ledger as the tool does."""
    return check_proof(
        proof,
        await Reads(ledger.pool).cited(
            await readable(Reads(ledger.pool), "lab"), cited_event_ids(proof)
        ),
    )


async def contested_of(ledger: Ledger, proof: dict[str, Any]) -> list[ContestedClaim]:
    """What a well-formed proof reports as contested: disputes never change its verdict."""
    result = await checked(ledger, proof)
    assert result["ok"], result["problems"]
    return result["contested"]


async def test_a_proof_with_no_disputes_has_nothing_contested(ledger: Ledger) -> None:
    world = await premises(ledger)
    assert await contested_of(ledger, world.proof) == []


async def test_a_rebutted_premise_is_contested_and_marked(ledger: Ledger) -> None:
    world = await premises(ledger)
    target = world.claims[2]["id"]
    reason = "Varies " * 50
    rebut = link(
        OWNER, "lab", world.doc["id"], target, "Serum DAO", relation="REBUTS", reason=reason
    )
    await publish(ledger, rebut)
    assert await contested_of(ledger, world.proof) == [
        {
            "claim": target,
            "rebuts": [{"id": rebut["id"], "reason": reason[:199] + "…"}],
            "contradictions": [],
        }
    ]
    tree = (await checked(ledger, world.proof))["tree"]
    assert "[contested] Claim 2." in tree and f"rebutted by link {rebut['id'][:12]}…" in tree


async def test_a_premise_in_a_contradiction_is_contested(ledger: Ledger) -> None:
    world = await premises(ledger)
    other = claim(OWNER, "lab", "Not cited by the proof.")
    contra = contradiction(OWNER, "lab", [world.claims[1]["id"], other["id"]], "Cannot both hold.")
    await publish(ledger, other, contra)
    assert await contested_of(ledger, world.proof) == [
        {
            "claim": world.claims[1]["id"],
            "rebuts": [],
            "contradictions": [{"id": contra["id"], "reason": "Cannot both hold."}],
        }
    ]


async def test_a_dispute_stored_after_a_check_shows_on_the_next(ledger: Ledger) -> None:
    world = await premises(ledger)
    assert await contested_of(ledger, world.proof) == []
    first, last = world.claims[0]["id"], world.claims[2]["id"]
    await publish(ledger, contradiction(OWNER, "lab", [first, last], "A later finding."))
    got = await contested_of(ledger, world.proof)
    assert [entry["claim"] for entry in got] == [first, last]


async def test_a_dispute_in_another_collection_is_never_shown(ledger: Ledger) -> None:
    world = await premises(ledger)
    # "other" holds claims with the same texts, disputed there by a contradiction and a link.
    doc = evidence(OWNER2, "other", "DAO breaks down histamine. Serum DAO varies.")
    twins = [claim(OWNER2, "other", f"Claim {n}.") for n in range(3)]
    contra = contradiction(OWNER2, "other", [t["id"] for t in twins], "Elsewhere.")
    rebut = link(OWNER2, "other", doc["id"], twins[0]["id"], "Serum DAO", relation="REBUTS")
    await publish(ledger, doc, *twins, contra, rebut)
    assert await contested_of(ledger, world.proof) == []
    # Citing the other collection's claims breaks rule 1, and still shows no dispute.
    foreign = {"steps": [{"id": "root", "say": "x", "from": [t["id"] for t in twins]}]}
    result = await checked(ledger, foreign)
    assert not result["ok"] and result["contested"] == []
    assert "Elsewhere" not in str(result)
    async with ledger.pool.acquire() as conn:
        assert await disputes(conn, "lab", [t["id"] for t in twins]) == {}
        found = await disputes(conn, "other", [t["id"] for t in twins])
        assert set(found) == {t["id"] for t in twins}
