"""The submit page's checks over HTTP, without a browser: the look-up (evidence and claims
already stored, what pasted ids name; members only, bounded), the nearest passage of a wrong
quote (the text sent at most once), the page's publish refusing a claim that is an id, and the
page's Fetch keeping its text for the hints."""

from __future__ import annotations

import asyncio
import hashlib
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

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
from fetch_site import Handler, Site

from tms.ledger.service import Ledger
from tms.nostr import nip19
from tms.nostr.events import SecretKey
from tms.pages.submit_checks import Texts
from tms.rules.admission import OPERATOR
from tms.rules.quotes import claim_key, normalize
from tms.store.database import open_pool

OWNER = SecretKey(bytes([0xA1]) * 32)
MEMBER = SecretKey(bytes([0xA2]) * 32)
OTHER = SecretKey(bytes([0xA3]) * 32)  # approved, owns `other`, not a member of `mcas`
TEXT = (
    "Serum DAO activity was measured in 60 adults with suspected histamine intolerance. "
    "Low DAO activity was found in most of them, which the authors call “a consistent pattern”."
)
URL = "https://example.org/dao"
DOC = evidence(OWNER, "mcas", TEXT, url=URL, title="DAO study")
ROAD = claim(OWNER, "mcas", "The road is long.")
QUOTED = link(OWNER, "mcas", DOC["id"], ROAD["id"], "a consistent pattern")
SHORT = claim(OWNER, "mcas", "The road is short.")
BOTH = contradiction(OWNER, "mcas", [ROAD["id"], SHORT["id"]], "Long or short.")


@pytest.fixture(scope="module")
def live(pg_server_url: str, template_url: str) -> Iterator[Live]:
    async def seed(url: str) -> None:
        pool = await open_pool(url, min_size=1, max_size=2)
        try:
            ledger = Ledger(pool)
            await ledger.approve([OWNER.pubkey, OTHER.pubkey])
            await ledger.submit(
                [
                    terms(OWNER),
                    members(OWNER, "mcas", [MEMBER.pubkey]),
                    *(DOC, ROAD, QUOTED, SHORT, BOTH),
                    terms(MEMBER),
                    terms(OTHER),
                    claim(OTHER, "other", "The road is long."),
                ],
                origin=OPERATOR,
            )
        finally:
            await pool.close()

    with fresh_database(pg_server_url, template_url, "tms_submit") as url:
        asyncio.run(seed(url))
        with live_server(url, settings(TMS_EMBED="off")) as server:
            yield server


@contextmanager
def session(live: Live, key: SecretKey) -> Iterator[httpx.Client]:
    """A client logged in with `key`, sending the page's Origin and CSRF token."""
    with httpx.Client(base_url=live.url, timeout=30) as client:
        challenge = client.get("/login/challenge").json()
        signed = key.sign(
            27235, "", int(time.time()), [["u", challenge["url"]], ["method", "POST"]]
        )
        answer = client.post(
            challenge["url"],
            headers={"Authorization": nip98_header(signed), "Origin": live.url},
        )
        assert answer.status_code == 200, answer.text
        home = client.get("/").text
        csrf = home.split('name="tms-csrf" content="')[1].split('"')[0]
        client.headers.update({"Origin": live.url, "X-CSRF-Token": csrf})
        yield client


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def found(record: dict[str, Any], kind: str, text: str, relation: str | None = None) -> Any:
    return {"id": record["id"], "kind": kind, "text": text, "relation": relation}


# --- the look-up -------------------------------------------------------------------------------


def test_the_lookup_finds_stored_evidence_and_claims_and_names_pasted_ids(live: Live) -> None:
    with session(live, MEMBER) as client:
        answer = client.post(
            "/c/mcas/lookup",
            json={
                "evidence": {"sha256": sha256(TEXT), "url": URL},
                "rows": [
                    {"text": "  the ROAD is long. "},  # the same claim, as quotes normalize
                    {"key": claim_key("THE ROAD IS SHORT.").hex()},  # a long text's key
                    {"text": "A new claim."},
                    {"text": ROAD["id"]},
                    {"text": f"{QUOTED['id'][:8]}…"},
                    {"text": nip19.encode("note", bytes.fromhex(BOTH["id"]))},
                    {"text": f"{live.url}/c/mcas/claims/{SHORT['id']}"},
                    {"text": DOC["id"][:12] + "..."},
                    {"text": "f" * 64},
                    {"text": "138e8246…"},
                    {"text": "…f9e1"},
                ],
            },
        )
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["evidence"] == [
        {
            "id": DOC["id"],
            "title": "DAO study",
            "url": URL,
            "chars": len(TEXT),
            "same_text": True,
            "same_url": True,
        }
    ]
    rows = body["rows"]
    assert rows[0] == {"as": "text", "same": [found(ROAD, "claim", "The road is long.")]}
    assert rows[1] == {"as": "text", "same": [found(SHORT, "claim", "The road is short.")]}
    assert rows[2] == {"as": "text", "same": []}
    assert rows[3] == {"as": "id", "target": found(ROAD, "claim", "The road is long.")}
    assert rows[4] == {
        "as": "id",
        "target": found(QUOTED, "link", "a consistent pattern", "SUPPORTS"),
    }
    assert rows[5] == {"as": "id", "target": found(BOTH, "contradiction", "Long or short.")}
    assert rows[6] == {"as": "id", "target": found(SHORT, "claim", "The road is short.")}
    assert rows[7]["as"] == "id" and "is an evidence document of mcas" in rows[7]["error"]
    assert rows[8] == {
        "as": "id",
        "error": f"no claim, link or contradiction of mcas has the id {'f' * 64}: copy the "
        "whole id from the record's page, or write the claim as a sentence",
    }
    assert "has an id like 138e8246…" in rows[9]["error"]
    assert "too short to find it by" in rows[10]["error"]


def test_the_lookup_is_for_readers_only_and_looks_like_a_missing_collection(live: Live) -> None:
    ask = {"evidence": {"sha256": sha256(TEXT)}, "rows": [{"text": ROAD["id"]}]}
    with session(live, OTHER) as client:
        closed = client.post("/c/mcas/lookup", json=ask)
        missing = client.post("/c/nothing-here/lookup", json=ask)
        odd = client.post("/c/NOT%20A%20SLUG/lookup", json=ask)
        # Its own collection: the other collection's claim of the same text only.
        own = client.post("/c/other/lookup", json={"rows": [{"text": "The road is long."}]})
    assert closed.status_code == missing.status_code == odd.status_code == 404
    assert closed.content == missing.content == odd.content
    assert closed.json() == {"error": "no such collection"}
    [same] = own.json()["rows"][0]["same"]
    assert same["id"] != ROAD["id"]
    anonymous = httpx.post(f"{live.url}/c/mcas/lookup", json=ask, headers={"Origin": live.url})
    assert anonymous.status_code == 401


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ([], "send {"),
        ({"rows": [{"text": "x"}] * 21}, "at most 20 rows"),
        ({"rows": [{"text": "x" * 2001}]}, "send its key"),
        ({"rows": [{"key": "F" * 64}]}, "64 lowercase hex"),
        ({"rows": [{"text": "x", "key": "0" * 64}]}, "rows[0] is"),
        ({"evidence": {"sha256": "abc"}}, "64 lowercase hex"),
        ({"evidence": {"title": "x"}}, '"evidence" is'),
        ({"evidence": {"url": 5}}, "is a string"),
        ({"other": 1}, "send {"),
    ],
)
def test_the_lookup_refuses_what_the_page_never_sends(live: Live, body: Any, words: str) -> None:
    with session(live, MEMBER) as client:
        answer = client.post("/c/mcas/lookup", json=body)
    assert answer.status_code == 400 and words in answer.json()["error"]


def test_the_lookup_body_is_small(live: Live) -> None:
    with session(live, MEMBER) as client:
        big = client.post(
            "/c/mcas/lookup", content=b'{"rows": [{"text": "' + b"x" * 70_000 + b'"}]}'
        )
        cross = client.post("/c/mcas/lookup", json={}, headers={"Origin": "https://evil.example"})
    assert big.status_code == 413 and "64 KiB" in big.json()["error"]
    assert cross.status_code == 403


# --- the page's publish ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "138e82465439f10b…",
        "138e8246...",
        "a" * 64,
        "deadbeef12",
        nip19.encode("note", bytes(32)),
        nip19.encode("nevent", bytes([0, 32]) + bytes(32)),
    ],
)
def test_the_pages_publish_refuses_a_claim_that_is_an_id(live: Live, text: str) -> None:
    made = claim(MEMBER, "mcas", text)
    with session(live, MEMBER) as client:
        answer = client.post("/publish", json={"events": [made]})
        exists = client.get(f"/c/mcas/claims/{made['id']}")
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error.startswith(f"events[0] ({made['id'][:12]}…): the claim's text ")
    assert "looks like an event id, not a statement" in error
    assert "put its whole id in the link's `to`" in error
    assert exists.status_code == 404  # nothing was stored


def test_claims_that_merely_hold_hex_are_published(live: Live) -> None:
    made = claim(MEMBER, "mcas", f"The claim {ROAD['id'][:8]} is about roads ({time.time()}).")
    with session(live, MEMBER) as client:
        answer = client.post("/publish", json={"events": [made]})
    assert answer.status_code == 200, answer.text


# --- the nearest passage -------------------------------------------------------------------------


def test_a_wrong_quotes_nearest_passage_the_text_sent_once(live: Live) -> None:
    text = f"{TEXT} {time.time()}"  # a text this server has not kept yet
    wrong = "Low DAO activity was seen in most of them"
    with session(live, MEMBER) as client:
        first = client.post("/quotes/nearest", json={"sha256": sha256(text), "quote": wrong})
        assert first.status_code == 200 and first.json() == {"need_text": True}
        sent = client.post(
            "/quotes/nearest", json={"sha256": sha256(text), "quote": wrong, "text": text}
        )
        again = client.post(
            "/quotes/nearest", json={"sha256": sha256(text), "quote": "which the authers call"}
        )
        nothing = client.post(
            "/quotes/nearest", json={"sha256": sha256(text), "quote": "zzzz qqqq xxxx"}
        )
        lying = client.post(
            "/quotes/nearest", json={"sha256": sha256("other"), "quote": wrong, "text": text}
        )
    nearest = sent.json()["nearest"]
    assert nearest["passage"] == text[nearest["start"] : nearest["end"]]
    assert nearest["passage"].startswith("Low DAO activity was found in most of them")
    assert 0.5 < nearest["similarity"] < 1 and nearest["cut"] is False
    assert again.json()["nearest"]["passage"] == "which the authors call"
    assert nothing.json() == {"nearest": None}
    assert lying.status_code == 400 and "is not the sha256" in lying.json()["error"]


def test_the_nearest_passage_is_per_key(live: Live) -> None:
    text = f"{TEXT} per key {time.time()}"
    with session(live, MEMBER) as client:
        client.post("/quotes/nearest", json={"sha256": sha256(text), "quote": "x", "text": text})
    with session(live, OWNER) as client:  # another key does not see what MEMBER sent
        other = client.post("/quotes/nearest", json={"sha256": sha256(text), "quote": "Serum"})
    assert other.json() == {"need_text": True}


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({"quote": "x"}, "send {"),
        ({"sha256": "x", "quote": "x"}, "64 lowercase hex"),
        ({"sha256": "0" * 64, "quote": 5}, '"quote" is a string'),
        ({"sha256": "0" * 64, "quote": "x" * 8001}, "at most 8000"),
        ({"sha256": "0" * 64, "quote": "x", "text": "y" * 2_000_001}, "at most 2,000,000"),
    ],
)
def test_the_nearest_passage_refuses_what_the_page_never_sends(
    live: Live, body: Any, words: str
) -> None:
    with session(live, MEMBER) as client:
        answer = client.post("/quotes/nearest", json=body)
    assert answer.status_code == 400 and words in answer.json()["error"], answer.text


def test_a_two_million_character_text_gets_its_hint_and_is_sent_once(live: Live) -> None:
    words = [f"w{i:05d}" for i in range(40_000)]
    text = (" ".join(words) + " ")[:2_000_000].ljust(2_000_000, "z")
    quote = " ".join(words[30_000:30_012]).replace("w30005", "w3OOO5")
    with session(live, MEMBER) as client:
        sent = client.post(
            "/quotes/nearest", json={"sha256": sha256(text), "quote": quote, "text": text}
        )
        kept = client.post("/quotes/nearest", json={"sha256": sha256(text), "quote": quote})
    assert sent.json() == kept.json()
    assert kept.json()["nearest"]["passage"] == " ".join(words[30_000:30_012])


def test_a_fetched_text_needs_no_sending_for_its_hints(live: Live) -> None:
    page = f"{TEXT} fetched {time.time()}"

    def plain(handler: Handler) -> None:
        handler.reply(200, page.encode(), "text/plain; charset=utf-8")

    with Site({"/page.txt": plain}) as site:
        old = os.environ.get("TMS_FETCH_ALLOW")
        os.environ["TMS_FETCH_ALLOW"] = site.allow
        try:
            with session(live, MEMBER) as client:
                fetched = client.post("/fetch", json={"url": site.url("/page.txt")}).json()
                hint = client.post(
                    "/quotes/nearest",
                    json={"sha256": sha256(fetched["text"]), "quote": "Serum DA0 activity"},
                )
        finally:
            if old is None:
                os.environ.pop("TMS_FETCH_ALLOW", None)
            else:
                os.environ["TMS_FETCH_ALLOW"] = old
    assert hint.json()["nearest"]["passage"] == "Serum DAO activity"


def test_sending_texts_for_hints_spends_the_fetch_budget(
    pg_server_url: str, template_url: str
) -> None:
    async def seed(url: str) -> None:
        pool = await open_pool(url, min_size=1, max_size=2)
        try:
            ledger = Ledger(pool)
            await ledger.approve([OWNER.pubkey])
            await ledger.submit([terms(OWNER)], origin=OPERATOR)
        finally:
            await pool.close()

    config = settings(TMS_EMBED="off", TMS_RATE_FETCH="2/minute")
    long = "A long text. " * 10_000
    with fresh_database(pg_server_url, template_url, "tms_hints") as url:
        asyncio.run(seed(url))
        with live_server(url, config) as server, session(server, OWNER) as client:
            answers = [
                client.post(
                    "/quotes/nearest",
                    json={"sha256": sha256(t), "quote": "one", "text": t},
                )
                for t in (long + "1", long + "2", long + "3", "a short text")
            ]
            kept = client.post("/quotes/nearest", json={"sha256": sha256(long + "1"), "quote": "x"})
    assert [a.status_code for a in answers] == [200, 200, 429, 200]  # a short text is cheap
    assert "this key's fetches" in answers[2].json()["error"]
    assert kept.status_code == 200  # a kept text costs no fetch


def test_quote_normalization_keys_match_the_servers() -> None:
    """The page hashes long claims as the server does: sha256 of the normalized UTF-8."""
    text = "“Straße” — ﬁne"
    assert claim_key(text).hex() == sha256(normalize(text))


@pytest.mark.anyio
async def test_kept_texts_are_bounded_and_a_text_over_the_bound_is_still_answered() -> None:
    texts = Texts(max_chars=100)
    first, second = "alpha beta gamma " * 3, "delta epsilon zeta " * 3  # 51 and 57 characters
    for text in (first, second):
        answer = await texts.nearest("k", sha256(text), "beta gamna", text)
        assert "nearest" in answer
    assert not texts.has("k", sha256(first)) and texts.has("k", sha256(second))  # oldest out
    big = "omega psi chi " * 10  # over the bound: answered, never kept
    answer = await texts.nearest("k", sha256(big), "psi chj", big)
    assert answer["nearest"]["passage"].startswith("psi")
    assert not texts.has("k", sha256(big)) and texts.has("k", sha256(second))
    assert await texts.nearest("other", sha256(second), "delta", None) == {"need_text": True}
