"""One collection, every door, every kind of outsider: a collection closed to a key answers
exactly as one that does not exist, through each read tool, the export, the transparency log's
routes and the pages. The read services take a capability only `tms.ledger.access` makes, so
this holds by construction; this module shows it from outside.

The outsiders: a stranger (approved by no one, in no collection), a member of another
collection who is not approved, a key approved by the operator that owns another collection,
and a member removed from the collection by a newer member list.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Final

import httpx
import pytest
from factories import (
    Live,
    claim,
    contradiction,
    evidence,
    fresh_database,
    link,
    live_server,
    members,
    nip98_header,
    settings,
    terms,
)
from mcp_helpers import Caller

from tms.ledger.service import Ledger
from tms.nostr.events import SecretKey
from tms.rules.admission import OPERATOR
from tms.store.database import open_pool

SLUG: Final = "lab"
MISSING: Final = "no-such-lab"
OWNER = SecretKey(bytes([0xA1]) * 32)
MEMBER = SecretKey(bytes([0xA2]) * 32)
REMOVED = SecretKey(bytes([0xA3]) * 32)  # a member until the newer list; still in `side`
UNAPPROVED = SecretKey(bytes([0xA4]) * 32)  # a member of `side` only, never approved
OTHER = SecretKey(bytes([0xA5]) * 32)  # approved, owns `side`
STRANGER = SecretKey(bytes([0xA6]) * 32)
OUTSIDERS: Final = {
    "removed member": REMOVED,
    "unapproved member elsewhere": UNAPPROVED,
    "approved owner elsewhere": OTHER,
    "stranger": STRANGER,
}
DOC = evidence(OWNER, SLUG, "Histamine intolerance is thought to follow reduced DAO activity.")
CLAIM = claim(OWNER, SLUG, "Reduced DAO activity causes histamine intolerance.")
OTHER_CLAIM = claim(OWNER, SLUG, "Serum DAO does not predict symptoms.")
LINK = link(OWNER, SLUG, DOC["id"], CLAIM["id"], "reduced DAO activity")
CONTRADICTION = contradiction(OWNER, SLUG, [CLAIM["id"], OTHER_CLAIM["id"]])
EVENTS: Final = (DOC, CLAIM, OTHER_CLAIM, LINK, CONTRADICTION)


@pytest.fixture(scope="module")
def live(pg_server_url: str, template_url: str) -> Iterator[Live]:
    async def seed(url: str) -> None:
        pool = await open_pool(url, min_size=1, max_size=2)
        try:
            ledger = Ledger(pool)
            await ledger.approve([OWNER.pubkey, OTHER.pubkey])
            now = int(time.time())
            await ledger.submit(
                [
                    terms(OWNER),
                    members(OWNER, SLUG, [MEMBER.pubkey, REMOVED.pubkey], created_at=now - 60),
                    *EVENTS,
                    terms(OTHER),
                    members(OTHER, "side", [UNAPPROVED.pubkey, REMOVED.pubkey]),
                    members(OWNER, SLUG, [MEMBER.pubkey], created_at=now),  # REMOVED leaves
                ],
                origin=OPERATOR,
            )
        finally:
            await pool.close()

    with fresh_database(pg_server_url, template_url, "tms_isolation") as url:
        asyncio.run(seed(url))
        with live_server(url, settings(TMS_EMBED="off")) as server:
            yield server


@pytest.fixture(scope="module")
def caller(live: Live) -> Iterator[Caller]:
    calling = Caller(live)
    yield calling
    calling.close()


READ_TOOLS: Final[list[tuple[str, dict[str, Any]]]] = [
    ("search_claims", {"text": "DAO", "method": "keyword"}),
    ("list_claims", {}),
    ("list_claims", {"sort": "contested"}),
    ("get_links", {}),
    ("get_links", {"to_id": CLAIM["id"]}),
    ("list_evidence", {}),
    ("list_evidence", {"ungrounded_only": True}),
    ("search_contradictions", {}),
    ("search_contradictions", {"text": "serum"}),
    ("search_contradictions", {"claim": CLAIM["id"]}),
    ("check_proof", {"proof": {"steps": [{"id": "root", "say": "x", "from": [CLAIM["id"]]}]}}),
    ("get_checkpoint", {}),
    ("get_consistency", {"old_size": 1}),
    ("get_receipt", {"id": CLAIM["id"]}),
]


@pytest.mark.parametrize("who", OUTSIDERS)
def test_every_read_tool_answers_an_outsider_as_a_missing_collection(
    caller: Caller, who: str
) -> None:
    key = OUTSIDERS[who]
    for name, args in READ_TOOLS:
        closed = caller.tool_error(key, name, collection=SLUG, **args)
        absent = caller.tool_error(key, name, collection=MISSING, **args)
        assert closed == absent.replace(MISSING, SLUG), (who, name, closed, absent)
        assert closed.startswith(f"not a member of collection '{SLUG}' (or no such"), closed
    for event in EVENTS:
        for proof in (False, True):
            got = caller.tool(key, "get_event", id=event["id"], proof=proof)
            assert got == {"result": None}, (who, event["kind"])
    listed = caller.tool(key, "list_collections")["result"]
    assert SLUG not in [c["slug"] for c in listed]


def test_a_member_passes_every_door(caller: Caller) -> None:
    for name, args in READ_TOOLS:
        caller.tool(MEMBER, name, collection=SLUG, **args)
    for event in EVENTS:
        assert caller.tool(MEMBER, "get_event", id=event["id"])["result"]["id"] == event["id"]
    assert SLUG in [c["slug"] for c in caller.tool(MEMBER, "list_collections")["result"]]


ROUTES: Final = (
    "/c/{slug}/export.jsonl",
    "/c/{slug}/export.jsonl?checkpoint=1",
    "/c/{slug}/checkpoint",
    "/c/{slug}/consistency?old=1",
    "/c/{slug}/tile/0/000.p/7",  # seven entries: two member lists and five records
    "/c/{slug}/tile/entries/000.p/7",
)


def _signed_get(live: Live, key: SecretKey, path: str) -> httpx.Response:
    url = f"{live.url}{path}"
    event = key.sign(27235, "", int(time.time()), [["u", url], ["method", "GET"]])
    return httpx.get(url, headers={"Authorization": nip98_header(event)}, timeout=30)


@pytest.mark.parametrize("who", OUTSIDERS)
def test_the_export_and_the_log_routes_answer_an_outsider_as_a_missing_collection(
    live: Live, who: str
) -> None:
    key = OUTSIDERS[who]
    for route in ROUTES:
        answers = []
        for slug in (SLUG, MISSING):
            response = _signed_get(live, key, route.format(slug=slug))
            answers.append(
                (response.status_code, response.content, response.headers["content-type"])
            )
        assert answers[0] == answers[1], (who, route)
        assert answers[0][0] == 404 and b"no such collection" in answers[0][1]
    for route in ROUTES:  # ... and the member is served
        assert _signed_get(live, MEMBER, route.format(slug=SLUG)).status_code == 200, route


@contextmanager
def logged_in(live: Live, key: SecretKey) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=live.url, timeout=30) as client:
        challenge = client.get("/login/challenge").json()
        event = key.sign(27235, "", int(time.time()), [["u", challenge["url"]], ["method", "POST"]])
        answer = client.post(
            challenge["url"], headers={"Authorization": nip98_header(event), "Origin": live.url}
        )
        assert answer.status_code == 200, answer.text
        client.headers["Accept"] = "text/html"
        yield client


PAGES: Final = (
    "/c/{slug}",
    "/c/{slug}?q=DAO&method=keyword",
    "/c/{slug}/members",
    "/c/{slug}/members.json",
    "/c/{slug}/claims/" + CLAIM["id"],
    "/c/{slug}/evidence/" + DOC["id"],
    "/c/{slug}/export.jsonl",
)


@pytest.mark.parametrize(
    "who", ["removed member", "unapproved member elsewhere", "approved owner elsewhere"]
)
def test_every_page_answers_an_outsider_as_a_missing_collection(live: Live, who: str) -> None:
    """(A stranger cannot log in at all: tests/pages/test_pages_http.py.)"""
    with logged_in(live, OUTSIDERS[who]) as client:
        for page in PAGES:
            closed = client.get(page.format(slug=SLUG))
            absent = client.get(page.format(slug=MISSING))
            assert (closed.status_code, closed.text) == (absent.status_code, absent.text), page
            assert closed.status_code == 404, page
        for page in ("/", "/submit", f"/submit?c={SLUG}", f"/dashboard?c={SLUG}", "/dashboard"):
            shown = client.get(page)
            assert shown.status_code == 200, page
            assert f"/c/{SLUG}" not in shown.text and CLAIM["id"] not in shown.text, page
            assert "Reduced DAO activity" not in shown.text, page


def test_the_member_reads_every_page(live: Live) -> None:
    with logged_in(live, MEMBER) as client:
        for page in PAGES:
            if "/members" in page:
                continue  # the owner's
            assert client.get(page.format(slug=SLUG)).status_code == 200, page
