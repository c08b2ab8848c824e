"""What the submit page looks up before signing, on real PostgreSQL (sql/013): evidence by the
sha256 of its exact text or by URL, claims by their normalized text, pasted ids by whole id or
by the beginning of one; never across collections; keys written with every claim published and
back-filled for claims stored before."""

from __future__ import annotations

import hashlib

import pytest
from factories import OWNER, OWNER2, claim, contradiction, evidence, link
from publishing import open_collection, publish, readable

from tms.ledger.read.lookups import Lookups
from tms.ledger.service import Ledger
from tms.ledger.write import claim_keys
from tms.rules.quotes import claim_key, normalize
from tms.rules.references import Reference

pytestmark = pytest.mark.anyio

TEXT = "Serum DAO activity was low in 40 of 60 adults — a “consistent pattern”.\n" * 50
URL = "https://example.org/studies/dao?id=7"


def sha256(text: str) -> bytes:
    return hashlib.sha256(text.encode()).digest()


async def seeded(ledger: Ledger) -> dict[str, dict[str, str]]:
    await open_collection(ledger, OWNER, "mine")
    await open_collection(ledger, OWNER2, "theirs")
    doc = evidence(OWNER, "mine", TEXT, url=URL, title="DAO study")
    road = claim(OWNER, "mine", "The road is long.")
    quoted = link(OWNER, "mine", doc["id"], road["id"], "consistent pattern")
    other = claim(OWNER, "mine", "The road is short.")
    both = contradiction(OWNER, "mine", [road["id"], other["id"]], "Long or short, not both.")
    await publish(ledger, doc, road, quoted, other, both)
    elsewhere = evidence(OWNER2, "theirs", TEXT, url=URL)
    await publish(ledger, elsewhere, claim(OWNER2, "theirs", "The road is long."))
    return {"doc": doc, "road": road, "link": quoted, "other": other, "both": both}


async def test_evidence_is_found_by_its_exact_text_or_its_url_in_its_collection_only(
    ledger: Ledger,
) -> None:
    made = await seeded(ledger)
    found = Lookups(ledger.pool)
    [by_text] = await found.evidence(await readable(ledger, "mine"), sha256(TEXT), None)
    assert by_text == {
        "id": made["doc"]["id"],
        "title": "DAO study",
        "url": URL,
        "chars": len(TEXT),
        "same_text": True,
        "same_url": False,
    }
    [both] = await found.evidence(await readable(ledger, "mine"), sha256(TEXT), URL)
    assert both["same_text"] and both["same_url"]
    [by_url] = await found.evidence(await readable(ledger, "mine"), sha256(TEXT + " "), URL)
    assert not by_url["same_text"] and by_url["same_url"]
    assert (
        await found.evidence(await readable(ledger, "mine"), sha256(TEXT.upper()), URL + "#x") == []
    )
    assert await found.evidence(await readable(ledger, "nothing"), sha256(TEXT), URL) == []
    [theirs] = await found.evidence(await readable(ledger, "theirs"), sha256(TEXT), None)
    assert theirs["id"] != made["doc"]["id"]


async def test_the_text_hash_is_the_browsers_sha256_of_the_utf8_text(ledger: Ledger) -> None:
    """Non-ASCII and astral characters: PostgreSQL's hash of the stored text is the one
    `crypto.subtle` computes in the browser over TextEncoder's UTF-8."""
    await open_collection(ledger, OWNER, "mine")
    text = "Straße — “café” 漢字 🧪\n\ttab"
    doc = evidence(OWNER, "mine", text)
    await publish(ledger, doc)
    assert await ledger.pool.fetchval(
        "SELECT tms_text_sha256(text) FROM evidence WHERE id = $1", doc["id"]
    ) == sha256(text)
    [found] = await Lookups(ledger.pool).evidence(
        await readable(ledger, "mine"), sha256(text), None
    )
    assert found["id"] == doc["id"]


async def test_claims_are_found_by_their_text_as_quote_matching_normalizes_it(
    ledger: Ledger,
) -> None:
    made = await seeded(ledger)
    found = Lookups(ledger.pool)
    same = claim_key("  the ROAD is\u00a0\n long.  ")
    assert same == claim_key("The road is long.")
    other = claim_key("The road is longer.")
    answer = await found.claims(await readable(ledger, "mine"), [same, other])
    assert answer == {
        same: [
            {
                "id": made["road"]["id"],
                "kind": "claim",
                "text": "The road is long.",
                "relation": None,
            }
        ]
    }
    assert [
        c["id"] for c in (await found.claims(await readable(ledger, "theirs"), [same]))[same]
    ] != [made["road"]["id"]]
    assert await found.claims(await readable(ledger, "nothing"), [same]) == {}
    assert await found.claims(await readable(ledger, "mine"), []) == {}


async def test_a_claim_key_is_sha256_of_the_normalized_text() -> None:
    text = "“Curly” — and ﬁne"
    assert claim_key(text) == hashlib.sha256(normalize(text).encode()).digest()
    assert claim_key(text) == claim_key('"curly" - AND fine')


async def test_every_published_claim_gets_its_key_long_ones_too(ledger: Ledger) -> None:
    await open_collection(ledger, OWNER, "mine")
    long_text = "A long claim. " * (claim_keys.INLINE_KEY_CHARS // 10)  # keyed off the loop
    short, long = claim(OWNER, "mine", "Short."), claim(OWNER, "mine", long_text)
    await publish(ledger, short, long)
    rows = await ledger.pool.fetch("SELECT claim_id, collection, key FROM claim_keys")
    assert {(r["claim_id"], r["collection"], bytes(r["key"])) for r in rows} == {
        (short["id"], "mine", claim_key("Short.")),
        (long["id"], "mine", claim_key(long_text)),
    }


async def test_claims_stored_before_keys_existed_are_back_filled(ledger: Ledger) -> None:
    made = await seeded(ledger)
    before = {
        r["claim_id"]: bytes(r["key"])
        for r in await ledger.pool.fetch("SELECT claim_id, key FROM claim_keys")
    }
    assert len(before) == 3
    await ledger.pool.execute("DELETE FROM claim_keys")  # as a database from before sql/013
    assert (
        await Lookups(ledger.pool).claims(
            await readable(ledger, "mine"), [claim_key("The road is long.")]
        )
        == {}
    )
    assert await claim_keys.backfill(ledger.pool) == 3
    after = {
        r["claim_id"]: bytes(r["key"])
        for r in await ledger.pool.fetch("SELECT claim_id, key FROM claim_keys")
    }
    assert after == before
    assert await claim_keys.backfill(ledger.pool) == 0
    found = await Lookups(ledger.pool).claims(
        await readable(ledger, "mine"), [claim_key("The road is long.")]
    )
    assert [c["id"] for c in found[claim_key("The road is long.")]] == [made["road"]["id"]]


async def test_pasted_ids_name_claims_links_contradictions_and_evidence_of_the_collection(
    ledger: Ledger,
) -> None:
    made = await seeded(ledger)
    found = Lookups(ledger.pool)
    road, quoted, both, doc = made["road"], made["link"], made["both"], made["doc"]
    answers = await found.targets(
        await readable(ledger, "mine"),
        [
            Reference(road["id"]),
            Reference(quoted["id"][:10]),
            Reference(both["id"][:6], both["id"][-4:]),
            Reference(doc["id"]),
            Reference("f" * 64),
        ],
    )
    assert answers == [
        [{"id": road["id"], "kind": "claim", "text": "The road is long.", "relation": None}],
        [
            {
                "id": quoted["id"],
                "kind": "link",
                "text": "consistent pattern",
                "relation": "SUPPORTS",
            }
        ],
        [
            {
                "id": both["id"],
                "kind": "contradiction",
                "text": "Long or short, not both.",
                "relation": None,
            }
        ],
        [{"id": doc["id"], "kind": "evidence", "text": "DAO study", "relation": None}],
        [],
    ]
    # Another collection's records are not there, as if they did not exist.
    assert await found.targets(await readable(ledger, "theirs"), [Reference(road["id"])]) == [[]]
    # Too short a beginning names nothing, rather than a range of the whole table.
    assert await found.targets(await readable(ledger, "mine"), [Reference(road["id"][:3])]) == [[]]


async def test_a_beginning_shared_by_several_records_finds_several(ledger: Ledger) -> None:
    await open_collection(ledger, OWNER, "mine")
    seen: dict[str, dict[str, str]] = {}
    i = 0
    while True:  # two claims whose ids begin alike (a few hundred tries: the birthday bound)
        made = claim(OWNER, "mine", f"Claim number {i}.")
        i += 1
        if made["id"][:4] in seen:
            break
        seen[made["id"][:4]] = made
    first = seen[made["id"][:4]]
    await publish(ledger, first, made)
    found = Lookups(ledger.pool)
    [both] = await found.targets(await readable(ledger, "mine"), [Reference(made["id"][:4])])
    assert {f["id"] for f in both} == {first["id"], made["id"]}
    [one] = await found.targets(
        await readable(ledger, "mine"), [Reference(made["id"][:4], made["id"][-6:])]
    )
    assert [f["id"] for f in one] == [made["id"]]
