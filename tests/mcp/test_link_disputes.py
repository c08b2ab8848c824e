"""A dispute of a link, as a bot meets it through the official MCP SDK client: `get_links` lists
the REBUTS links aimed at each link (`disputed_by`), and `check_proof` names a cited link that is
disputed (`disputed_links`, and `[disputed]` in its tree), both within the published schemas
(issue 27: `check_proof` on a proof citing a rebutted link answered `contested: []`)."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest
from factories import Live, request, signed, terms
from mcp import Client
from mcp_helpers import Caller, approve

from tms.nostr.events import SecretKey

pytestmark = pytest.mark.anyio

SLUG = "disputes"
TEXT = "Histamine intolerance is thought to result from reduced diamine oxidase (DAO) activity."
LATER = "Later cohorts found DAO activity normal in most people with these symptoms."


def _structured(result: Any) -> Any:
    assert not result.is_error, result.content[0].text
    return result.structured_content


@pytest.fixture(scope="module")
def world(live: Live) -> dict[str, Any]:
    """Alice's claim, supported by a link from her evidence; Bob's REBUTS link aimed at that
    link, quoting his evidence (what **Dispute** on the claim page publishes)."""
    alice, bob = SecretKey.generate(), SecretKey.generate()
    approve(live.database_url, alice)
    doc = signed(alice, 4701, {"collection": SLUG, "title": "HIT review", "text": TEXT})
    claim = signed(alice, 4702, {"collection": SLUG, "text": "Low DAO causes HIT."})
    link = signed(
        alice,
        4703,
        {
            "collection": SLUG,
            "from": doc["id"],
            "to": claim["id"],
            "relation": "SUPPORTS",
            "quote": "reduced diamine oxidase (DAO) activity",
            "reason": "The review names it.",
        },
    )
    later = signed(bob, 4701, {"collection": SLUG, "title": "Cohorts", "text": LATER})
    dispute = signed(
        bob,
        4703,
        {
            "collection": SLUG,
            "from": later["id"],
            "to": link["id"],
            "relation": "REBUTS",
            "quote": "DAO activity normal",
            "reason": "The review's mechanism does not hold up in cohorts.",
        },
    )
    caller = Caller(live)
    try:
        caller.publish(
            terms(alice), signed(alice, 4705, {"collection": SLUG, "members": [bob.pubkey]})
        )
        caller.publish(doc, claim, link)
        caller.publish(terms(bob), later, dispute)
    finally:
        caller.close()
    return {"alice": alice, "claim": claim, "link": link, "dispute": dispute}


async def test_a_disputed_link_shows_in_get_links_and_check_proof(
    live: Live, world: dict[str, Any]
) -> None:
    alice, claim, link = world["alice"], world["claim"], world["link"]
    dispute = world["dispute"]

    async with Client(live.mcp) as client:
        schemas = {t.name: t.output_schema for t in (await client.list_tools()).tools}

        async def tool(key: SecretKey, name: str, **args: Any) -> Any:
            got = _structured(await client.call_tool(name, {"request": request(key, name, **args)}))
            jsonschema.validate(got, schemas[name])
            return got

        (supporting,) = (await tool(alice, "get_links", collection=SLUG, to_id=claim["id"]))[
            "result"
        ]
        assert supporting["id"] == link["id"]
        assert supporting["disputed_by"] == [dispute["id"]]
        (disputing,) = (await tool(alice, "get_links", collection=SLUG, to_id=link["id"]))["result"]
        assert disputing["id"] == dispute["id"] and disputing["disputed_by"] == []

        proof = {
            "question": "Does low DAO cause HIT?",
            "steps": [
                {"id": "s1", "say": "A review says so.", "from": [claim["id"], link["id"]]},
                {"id": "root", "say": "Proposed, not established.", "from": ["s1"]},
            ],
        }
        checked = await tool(alice, "check_proof", collection=SLUG, proof=proof)
        assert checked["ok"] is True and checked["contested"] == []
        assert checked["disputed_links"] == [
            {
                "link": link["id"],
                "rebuts": [
                    {
                        "id": dispute["id"],
                        "reason": "The review's mechanism does not hold up in cohorts.",
                    }
                ],
            }
        ]
        assert f"link {link['id'][:12]}…: [disputed]" in checked["tree"]
        assert f"disputed: rebutted by link {dispute['id'][:12]}…" in checked["tree"]
