"""The MCP endpoint end to end: a live uvicorn server, raw JSON-RPC as SPEC's snippets send it,
signed requests and every rule about them, every tool's result against its published schema,
authorization, and the replay race."""

from __future__ import annotations

import asyncio
import base64
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import jsonschema
import pytest
import rfc6962 as rfc
from factories import (
    LOG_SIGNER,
    allow_connections,
    compact,
    nip98_header,
    request,
    signed,
    terms,
)
from mcp_helpers import HEADERS, Caller, approve

from tms.nostr.events import SecretKey
from tms.tlog.note import open_checkpoint

SLUG = "mcas"
DOC_TEXT = (
    "Histamine intolerance is thought to result from reduced diamine oxidase (DAO) activity. "
    "Serum DAO measurements correlate poorly with symptoms in several cohorts."
)
TOOL_NAMES = {
    "publish",
    "list_collections",
    "get_event",
    "search_claims",
    "list_claims",
    "get_links",
    "list_evidence",
    "search_contradictions",
    "check_proof",
    "fetch_url",
    "get_checkpoint",
    "get_consistency",
    "get_receipt",
}


class World:
    """One collection with evidence, two claims, a link and a contradiction, published through
    `/mcp` by its owner; a member; and a stranger who belongs nowhere."""

    def __init__(self, caller: Caller) -> None:
        self.caller = caller
        self.owner = SecretKey.generate()
        self.member = SecretKey.generate()
        self.other = SecretKey.generate()  # owns another collection
        self.stranger = SecretKey.generate()
        approve(caller.live.database_url, self.owner, self.other)
        o = self.owner
        self.setup = caller.publish(
            terms(o),
            signed(o, 0, {"name": "owner-bot", "about": "agent: test"}),
            signed(o, 4705, {"collection": SLUG, "members": [self.member.pubkey]}),
        )
        self.doc = signed(
            o,
            4701,
            {
                "collection": SLUG,
                "title": "HIT review",
                "url": "https://example.org/hit",
                "source": "Example journal",
                "text": DOC_TEXT,
            },
        )
        self.claim = signed(
            o,
            4702,
            {
                "collection": SLUG,
                "text": "Histamine intolerance results from reduced DAO activity.",
            },
        )
        self.claim2 = signed(
            o,
            4702,
            {
                "collection": SLUG,
                "text": "Serum DAO levels predict histamine intolerance symptoms.",
            },
        )
        self.link = signed(
            o,
            4703,
            {
                "collection": SLUG,
                "from": self.doc["id"],
                "to": self.claim["id"],
                "relation": "SUPPORTS",
                "quote": "thought to result from reduced diamine oxidase (DAO) activity",
                "reason": "The review names reduced DAO activity as the proposed mechanism.",
            },
        )
        self.rebut = signed(
            o,
            4703,
            {
                "collection": SLUG,
                "from": self.doc["id"],
                "to": self.claim2["id"],
                "relation": "REBUTS",
                "quote": "Serum DAO measurements correlate poorly with symptoms",
                "reason": "Poor correlation undercuts serum DAO as a predictor.",
            },
        )
        self.contradiction = signed(
            o,
            4704,
            {
                "collection": SLUG,
                "claims": [self.claim["id"], self.claim2["id"]],
                "reason": "If serum DAO does not track symptoms, low DAO alone cannot cause it.",
            },
        )
        self.batch = caller.publish(
            self.doc, self.claim, self.claim2, self.link, self.rebut, self.contradiction
        )
        caller.publish(terms(self.member))
        other_doc = signed(
            self.other, 4702, {"collection": "elsewhere", "text": "A claim elsewhere."}
        )
        caller.publish(terms(self.other), other_doc)
        self.elsewhere = other_doc


@pytest.fixture(scope="module")
def world(caller: Caller) -> World:
    return World(caller)


# --- listing -----------------------------------------------------------------------------------


def test_a_bare_tools_list_answers_without_a_session(caller: Caller) -> None:
    tools = caller.rpc("tools/list")["tools"]
    assert {t["name"] for t in tools} == TOOL_NAMES
    for tool in tools:
        assert tool["description"].strip()
        assert tool["inputSchema"]["type"] == "object"
        assert tool["outputSchema"]["type"] == "object"
        if tool["name"] != "publish":
            assert tool["inputSchema"]["required"] == ["request"]
            assert "4707" in tool["inputSchema"]["properties"]["request"]["description"]


def test_prompts_list_and_get(caller: Caller) -> None:
    prompts = caller.rpc("prompts/list")["prompts"]
    assert {p["name"] for p in prompts} == {"claims_pass", "briefing"}
    for prompt in prompts:
        assert [a["name"] for a in prompt["arguments"]] == ["collection"]
        got = caller.rpc("prompts/get", {"name": prompt["name"], "arguments": {"collection": SLUG}})
        text = got["messages"][0]["content"]["text"]
        assert SLUG in text and len(text) > 500


# --- results match SPEC and the published schemas -------------------------------------------------


def _schemas(caller: Caller) -> dict[str, dict[str, Any]]:
    return {t["name"]: t["outputSchema"] for t in caller.rpc("tools/list")["tools"]}


def test_publish_result_shape(world: World) -> None:
    assert world.batch["accepted"] == [
        e["id"]
        for e in (
            world.doc,
            world.claim,
            world.claim2,
            world.link,
            world.rebut,
            world.contradiction,
        )
    ]
    assert world.batch["skipped"] == []
    assert world.batch["collections"] == [SLUG]
    # the two claims and the contradiction got vectors within the wait budget (evidence gets
    # its vector in the background)
    assert world.batch["embedded"] == 3


def test_publishing_again_skips(world: World, caller: Caller) -> None:
    again = caller.publish(world.doc, world.claim)
    assert again["accepted"] == []
    assert again["skipped"] == [world.doc["id"], world.claim["id"]]
    assert again["embedded"] == 0


def test_every_tool_result_matches_its_schema(world: World, caller: Caller) -> None:
    schemas = _schemas(caller)
    o = world.owner
    calls: list[tuple[str, dict[str, Any]]] = [
        ("list_collections", {}),
        ("get_event", {"id": world.doc["id"]}),
        ("get_event", {"id": "0" * 64}),
        ("get_event", {"id": world.link["id"]}),
        ("get_event", {"id": world.doc["id"], "proof": True}),
        ("get_checkpoint", {"collection": SLUG}),
        ("get_consistency", {"collection": SLUG, "old_size": 1}),
        ("get_receipt", {"collection": SLUG, "id": world.claim["id"]}),
        ("get_receipt", {"collection": SLUG, "id": "0" * 64}),
        ("search_claims", {"collection": SLUG, "text": "DAO activity", "method": "keyword"}),
        ("search_claims", {"collection": SLUG, "text": "what causes histamine intolerance"}),
        ("list_claims", {"collection": SLUG, "sort": "contested"}),
        ("get_links", {"collection": SLUG}),
        ("list_evidence", {"collection": SLUG, "ungrounded_only": False}),
        ("search_contradictions", {"collection": SLUG, "claim": world.claim["id"]}),
        ("search_contradictions", {"collection": SLUG, "text": "serum DAO"}),
        ("search_contradictions", {"collection": SLUG}),
        ("check_proof", {"collection": SLUG, "proof": {"question": "q", "steps": []}}),
    ]
    for name, args in calls:
        result = caller.tool(o, name, **args)
        jsonschema.validate(result, schemas[name])
    jsonschema.validate(world.batch, schemas["publish"])


def test_list_collections(world: World, caller: Caller) -> None:
    (mine,) = caller.tool(world.owner, "list_collections")["result"]
    assert mine["slug"] == SLUG
    assert mine["owner"] == world.owner.pubkey
    assert mine["members"] == [world.member.pubkey]
    assert (mine["evidence"], mine["claims"], mine["links"], mine["contradictions"]) == (1, 2, 2, 1)
    member_view = caller.tool(world.member, "list_collections")["result"]
    assert [c["slug"] for c in member_view] == [SLUG]
    assert caller.tool(world.stranger, "list_collections") == {"result": []}


def test_links_come_with_their_anchors(world: World, caller: Caller) -> None:
    quote = "Serum DAO measurements correlate poorly with symptoms"
    start = DOC_TEXT.index(quote)
    anchor = {
        "start": start,
        "end": start + len(quote),
        "exact": quote,
        "prefix": DOC_TEXT[start - 32 : start],
        "suffix": DOC_TEXT[start + len(quote) :][:32],
        "occurrences": 1,
    }
    (rebut,) = caller.tool(world.member, "get_links", collection=SLUG, to_id=world.claim2["id"])[
        "result"
    ]
    assert rebut["anchor"] == anchor
    event = caller.tool(world.member, "get_event", id=world.rebut["id"])["result"]
    assert event["anchor"] == anchor and event["content"]["quote"] == quote


def test_get_event_windows_evidence_text(world: World, caller: Caller) -> None:
    got = caller.tool(world.member, "get_event", id=world.doc["id"], offset=10, max_chars=20)
    event = got["result"]
    assert event["kind"] == 4701 and event["kind_name"] == "evidence"
    assert event["author"] == "owner-bot"
    assert event["collection"] == SLUG
    assert event["content"]["text"] == DOC_TEXT[10:30]
    assert event["chars"] == len(DOC_TEXT) and event["offset"] == 10
    assert event["received_at"][:4].isdigit() and "T" in event["received_at"]


def test_search_claims_by_meaning_and_by_keyword(world: World, caller: Caller) -> None:
    vector = caller.tool(
        world.owner, "search_claims", collection=SLUG, text="what causes histamine intolerance?"
    )
    assert vector["method"] == "vector"
    assert vector["note"] is None
    top = vector["items"][0]
    assert top["id"] == world.claim["id"]
    assert 0 <= top["distance"] < vector["items"][1]["distance"]
    assert [link["id"] for link in top["links"]] == [world.link["id"]]
    assert top["contradiction_ids"] == [world.contradiction["id"]]
    keyword = caller.tool(
        world.owner, "search_claims", collection=SLUG, text='"serum DAO"', method="keyword"
    )
    assert keyword["method"] == "keyword"
    assert [item["id"] for item in keyword["items"]] == [world.claim2["id"]]
    assert keyword["items"][0]["rank"] > 0


def test_check_proof_over_the_callers_collection(world: World, caller: Caller) -> None:
    proof = {
        "question": "Is DAO deficiency the cause of histamine intolerance?",
        "steps": [
            {
                "id": "s1",
                "say": "A review proposes reduced DAO.",
                "from": [world.claim["id"], world.link["id"]],
            },
            {
                "id": "s2",
                "say": "Serum data sit badly with it.",
                "from": [world.contradiction["id"]],
            },
            {"id": "s3", "say": "Nothing covers children.", "from": [], "gap": True},
            {"id": "root", "say": "A proposed mechanism.", "from": ["s1", "s2", "s3"]},
        ],
    }
    result = caller.tool(world.member, "check_proof", collection=SLUG, proof=proof)
    assert result["ok"] is True and result["problems"] == [] and result["root"] == "root"
    assert "thought to result from reduced diamine oxidase" in result["tree"]
    # Where the quote sits, and the contradiction that names the cited claim.
    start = DOC_TEXT.index("thought to result")
    assert f"at characters {start}-{start + 61}" in result["tree"]
    assert result["contested"] == [
        {
            "claim": world.claim["id"],
            "rebuts": [],
            "contradictions": [
                {
                    "id": world.contradiction["id"],
                    "reason": "If serum DAO does not track symptoms, low DAO alone cannot cause "
                    "it.",
                }
            ],
        }
    ]
    assert "[contested]" in result["tree"]
    # an event of another collection is "not in this collection", and never named
    proof["steps"][0]["from"] = [world.elsewhere["id"]]
    result = caller.tool(world.member, "check_proof", collection=SLUG, proof=proof)
    assert result["ok"] is False
    assert "elsewhere" not in str(result)


# --- signed requests -----------------------------------------------------------------------------


def test_request_rules_each_refused_in_specs_words(world: World, caller: Caller) -> None:
    o = world.owner
    now = int(time.time())
    stale = request(o, "list_collections", created_at=now - 120)
    assert "more than 60s from server time" in caller.error("list_collections", {"request": stale})
    ahead = request(o, "list_collections", created_at=now + 120)
    assert "more than 60s from server time" in caller.error("list_collections", {"request": ahead})
    other_tool = request(o, "get_links", collection=SLUG)
    assert "request was signed for tool 'get_links', not 'list_claims'" in caller.error(
        "list_claims", {"request": other_tool}
    )
    beside = request(o, "list_claims", collection=SLUG)
    assert "pass the arguments inside its signed content" in caller.error(
        "list_claims", {"request": beside, "collection": SLUG}
    )
    tampered = dict(request(o, "list_collections"))
    tampered["sig"] = ("0" if tampered["sig"][0] != "0" else "1") + tampered["sig"][1:]
    assert "signature does not verify" in caller.error("list_collections", {"request": tampered})
    changed = dict(request(o, "list_collections"))
    changed["content"] = changed["content"].replace("{}", '{"x":1}')
    assert "id does not match" in caller.error("list_collections", {"request": changed})
    not_a_request = signed(o, 4702, {"collection": SLUG, "text": "x"})
    assert "kind 4707" in caller.error("list_collections", {"request": not_a_request})
    assert "needs a signed `request`" in caller.error("list_collections", {})
    assert "request: event must be a JSON object" in caller.error(
        "list_collections", {"request": "x"}
    )


def test_a_request_works_once(world: World, caller: Caller) -> None:
    once = request(world.owner, "list_collections")
    caller.call("list_collections", {"request": once})
    assert "request was already used" in caller.error("list_collections", {"request": once})


def test_replay_race_lets_exactly_one_through(world: World, caller: Caller) -> None:
    for _ in range(3):
        once = request(world.owner, "list_claims", collection=SLUG)
        with ThreadPoolExecutor(8) as pool:
            arguments = {"request": once}
            results = list(pool.map(caller.raw, ["list_claims"] * 8, [arguments] * 8))
        ok = [r for r in results if not r.get("isError")]
        refused = [r for r in results if r.get("isError")]
        assert len(ok) == 1
        assert all("request was already used" in r["content"][0]["text"] for r in refused)


def test_argument_errors(world: World, caller: Caller) -> None:
    o = world.owner
    assert "field 'limit' is invalid in list_claims args" in caller.tool_error(
        o, "list_claims", collection=SLUG, limit=201
    )
    assert "field 'limit' is invalid" in caller.tool_error(
        o, "list_claims", collection=SLUG, limit=0
    )
    assert "field 'limit' is invalid" in caller.tool_error(
        o, "get_links", collection=SLUG, limit=1001
    )
    assert caller.tool(o, "get_links", collection=SLUG, limit=1000)["result"]
    assert caller.tool(o, "list_evidence", collection=SLUG, limit=500)["result"]
    assert "field 'limit' is invalid" in caller.tool_error(
        o, "list_evidence", collection=SLUG, limit=501
    )
    assert "field 'collection' is missing from list_claims args" in caller.tool_error(
        o, "list_claims"
    )
    assert "unknown fields in list_claims args: 'colection'" in caller.tool_error(
        o, "list_claims", colection=SLUG
    )
    assert "field 'sort' is invalid" in caller.tool_error(
        o, "list_claims", collection=SLUG, sort="best"
    )
    assert "field 'method' is invalid" in caller.tool_error(
        o, "search_claims", collection=SLUG, text="x", method="magic"
    )
    assert "field 'limit' is invalid" in caller.tool_error(
        o, "list_claims", collection=SLUG, limit="5"
    )
    assert "field 'id' is invalid" in caller.tool_error(o, "get_event", id="nope")
    assert "not both" in caller.tool_error(
        o, "search_contradictions", collection=SLUG, claim=world.claim["id"], text="x"
    )
    assert "unknown tool" in caller.error("no_such_tool", {})


def test_publish_errors_come_back_as_tool_errors(world: World, caller: Caller) -> None:
    o = world.owner
    bad_quote = signed(
        o,
        4703,
        {
            "collection": SLUG,
            "from": world.doc["id"],
            "to": world.claim["id"],
            "relation": "SUPPORTS",
            "quote": "a sentence the review never wrote",
            "reason": "r",
        },
    )
    claim = signed(o, 4702, {"collection": SLUG, "text": "A claim that must not be stored."})
    text = caller.error("publish", {"events": [claim, bad_quote]})
    assert "quote not found verbatim in evidence" in text and text.startswith("events[1]")
    assert caller.tool(o, "get_event", id=claim["id"]) == {"result": None}
    assert "is not approved and is not a member of any collection" in caller.error(
        "publish",
        {"events": [signed(SecretKey.generate(), 4702, {"collection": SLUG, "text": "x"})]},
    )
    assert "kind 4707 requests are never stored" in caller.error(
        "publish", {"events": [request(o, "list_collections")]}
    )
    assert "unknown fields in publish args" in caller.error("publish", {"events": [], "x": 1})


# --- authorization: outside your collections looks like nothing --------------------------------


def test_a_stranger_sees_nothing(world: World, caller: Caller) -> None:
    s = world.stranger
    closed = caller.tool_error(s, "list_claims", collection=SLUG)
    missing = caller.tool_error(s, "list_claims", collection="no-such-collection")
    assert closed.replace(SLUG, "X") == missing.replace("no-such-collection", "X")
    assert "not a member of collection" in closed
    assert caller.tool(s, "get_event", id=world.doc["id"]) == {"result": None}
    assert caller.tool(s, "get_event", id="f" * 64) == {"result": None}
    for name, args in [
        ("search_claims", {"text": "DAO", "method": "keyword"}),
        ("get_links", {}),
        ("list_evidence", {}),
        ("search_contradictions", {}),
        ("check_proof", {"proof": {"steps": []}}),
    ]:
        assert "not a member of collection" in caller.tool_error(s, name, collection=SLUG, **args)


def test_a_member_of_another_collection_cannot_read_this_one(world: World, caller: Caller) -> None:
    assert caller.tool(world.other, "get_event", id=world.claim["id"]) == {"result": None}
    assert caller.tool(world.owner, "get_event", id=world.elsewhere["id"]) == {"result": None}
    assert "not a member of collection" in caller.tool_error(
        world.other, "get_links", collection=SLUG
    )


def test_every_door_answers_outsiders_exactly_as_a_missing_collection(
    world: World, caller: Caller
) -> None:
    """The access rule is asked by every door: each read tool and the HTTP export give a key of
    another collection and a stranger exactly what a collection that does not exist gives."""
    missing = "no-such-collection"
    tools: list[tuple[str, dict[str, Any]]] = [
        ("search_claims", {"text": "DAO", "method": "keyword"}),
        ("list_claims", {}),
        ("get_links", {}),
        ("list_evidence", {}),
        ("search_contradictions", {}),
        ("search_contradictions", {"text": "serum"}),
        ("search_contradictions", {"claim": world.claim["id"]}),
        ("check_proof", {"proof": {"steps": []}}),
    ]
    for outsider in (world.other, world.stranger):
        for name, args in tools:
            closed = caller.tool_error(outsider, name, collection=SLUG, **args)
            absent = caller.tool_error(outsider, name, collection=missing, **args)
            assert closed == absent.replace(missing, SLUG), (name, closed, absent)
            assert closed.startswith(f"not a member of collection '{SLUG}' (or no such")
        for event in (world.doc, world.claim, world.link, world.contradiction):
            assert caller.tool(outsider, "get_event", id=event["id"]) == {"result": None}
        listed = caller.tool(outsider, "list_collections")["result"]
        assert SLUG not in [c["slug"] for c in listed]
        answers = []
        for slug in (SLUG, missing):
            url = f"{caller.live.url}/c/{slug}/export.jsonl"
            event = outsider.sign(27235, "", int(time.time()), [["u", url], ["method", "GET"]])
            response = caller.http.get(url, headers={"Authorization": nip98_header(event)})
            answers.append(
                (response.status_code, response.content, response.headers["content-type"])
            )
        assert answers[0] == answers[1] and answers[0][0] == 404
    # ...while a member passes every door.
    for name, args in tools:
        assert not caller.raw(
            name, {"request": request(world.member, name, collection=SLUG, **args)}
        ).get("isError")


def test_a_full_size_evidence_document_goes_through(world: World, caller: Caller) -> None:
    envelope = len(compact({"collection": SLUG, "title": "Big", "text": ""}))
    size = 2_000_000 - envelope  # the content string, JSON and all, is exactly at the limit
    text = ("Ünïcödé evidence text, repeated to the limit. " * 50_000)[:size]
    doc = signed(world.owner, 4701, {"collection": SLUG, "title": "Big", "text": text})
    assert len(doc["content"]) == 2_000_000
    assert caller.publish(doc)["accepted"] == [doc["id"]]
    event = caller.tool(world.member, "get_event", id=doc["id"], offset=size - 10)["result"]
    assert event["chars"] == size and event["content"]["text"] == text[-10:]


def test_a_body_over_the_limit_is_refused_with_a_clear_error(caller: Caller) -> None:
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "publish", "arguments": {"events": ["x" * (65 * 1024 * 1024)]}},
    }
    response = caller.http.post(caller.live.mcp, json=body, headers=HEADERS)
    assert response.status_code == 413
    assert "too large" in response.json()["error"]["message"]


def test_fetch_url_is_for_keys_that_may_use_the_service(world: World, caller: Caller) -> None:
    stranger = caller.tool_error(world.stranger, "fetch_url", url="https://example.org/")
    assert "is not approved and is not a member of any collection" in stranger
    internal = caller.tool_error(world.member, "fetch_url", url="http://127.0.0.1:8080/")
    assert "127.0.0.1 is a loopback address" in internal
    metadata = caller.tool_error(world.member, "fetch_url", url="http://169.254.169.254/latest")
    assert "link-local" in metadata


def test_only_post_is_served(caller: Caller) -> None:
    for method in ("GET", "DELETE", "PUT"):
        response = caller.http.request(method, caller.live.mcp, headers=HEADERS)
        assert response.status_code == 405
        assert response.headers["allow"] == "POST"
        assert "stateless" in response.json()["error"]["message"]


def test_prompt_errors_are_json_rpc_errors(caller: Caller) -> None:
    for params, fragment in [
        ({"name": "nope", "arguments": {"collection": SLUG}}, "unknown prompt 'nope'"),
        ({"name": "briefing", "arguments": {}}, "needs `collection`"),
        ({"name": "claims_pass", "arguments": {"collection": "Not A Slug"}}, "must be a slug"),
    ]:
        body = {"jsonrpc": "2.0", "id": 9, "method": "prompts/get", "params": params}
        reply = caller.http.post(caller.live.mcp, json=body, headers=HEADERS).json()
        assert reply["error"]["code"] == -32602
        assert fragment in reply["error"]["message"]


def test_every_publish_error_row_of_spec_through_mcp(world: World, caller: Caller) -> None:
    """SPEC's "Common errors" rows that `publish` produces, each through /mcp, each storing
    nothing."""
    o, m = world.owner, world.member
    fresh = SecretKey.generate()  # approved, but has not signed the terms
    approve(caller.live.database_url, fresh)
    link = dict(world.link)
    content = {"collection": SLUG, "from": world.doc["id"], "reason": "r", "quote": "DAO"}
    cases: list[tuple[list[dict[str, Any]], str]] = [
        ([signed(fresh, 4702, {"collection": SLUG, "text": "x"})], "sign the current terms first"),
        (
            [signed(world.other, 4702, {"collection": SLUG, "text": "x"})],
            "not a member of collection",
        ),
        (
            [signed(m, 4702, {"collection": "brand-new", "text": "x"})],
            "only approved pubkeys create collections",
        ),
        (
            [signed(m, 4705, {"collection": SLUG, "members": []})],
            f"only the owner of collection '{SLUG}' changes its members",
        ),
        (
            [
                signed(
                    o,
                    4703,
                    {
                        **content,
                        "quote": "not in the text",
                        "to": world.claim["id"],
                        "relation": "SUPPORTS",
                    },
                )
            ],
            "quote not found verbatim in evidence",
        ),
        (
            [
                signed(
                    o,
                    4703,
                    {
                        **content,
                        "from": world.claim["id"],
                        "to": world.claim["id"],
                        "relation": "SUPPORTS",
                    },
                )
            ],
            "from must be an evidence event",
        ),
        (
            [
                signed(
                    o,
                    4704,
                    {
                        "collection": SLUG,
                        "claims": [world.claim["id"], world.doc["id"]],
                        "reason": "r",
                    },
                )
            ],
            f"is not a claim in collection '{SLUG}'",
        ),
        (
            [signed(o, 4703, {**content, "to": "ab" * 32, "relation": "SUPPORTS"})],
            "does not exist",
        ),
        (
            [signed(o, 4703, {**content, "to": world.link["id"], "relation": "QUALIFIES"})],
            "QUALIFIES may only target a claim",
        ),
        ([{**link, "content": link["content"] + " "}], "id does not match"),
        ([{**link, "sig": link["sig"][::-1]}], "signature does not verify"),
        ([signed(o, 4702, {"collection": SLUG, "text": "x", "extra": 1})], "unknown fields"),
        ([signed(o, 4702, {"collection": SLUG})], "is missing"),
        ([signed(o, 4702, {"collection": SLUG, "text": 5})], "field 'text' is invalid"),
        (
            [signed(o, 4702, {"collection": SLUG, "text": "x"}, tags=[["t", "x"]])],
            "tags must be []",
        ),
    ]
    before = caller.tool(o, "list_collections")["result"]
    for events, fragment in cases:
        message = caller.error("publish", {"events": events})
        assert fragment in message, (fragment, message)
        assert message.startswith("events[0]"), message
    assert caller.tool(o, "list_collections")["result"] == before


def test_a_database_outage_is_a_clear_tool_error_then_recovers(
    world: World, caller: Caller, pg_server_url: str
) -> None:
    database = caller.live.database_url
    asyncio.run(allow_connections(pg_server_url, database, False))
    try:
        message = caller.tool_error(world.owner, "list_claims", collection=SLUG)
        assert message == "database unavailable, try again shortly"
    finally:
        asyncio.run(allow_connections(pg_server_url, database, True))
    # As a client told "try again shortly" does: the first call after may still meet a pooled
    # connection the outage broke (seen on Citus: "cannot switch to state 12; another operation
    # is in progress"); a later call gets through.
    deadline = time.monotonic() + 15
    while True:
        answer = caller.raw(
            "list_claims", {"request": request(world.owner, "list_claims", collection=SLUG)}
        )
        if not answer.get("isError"):
            break
        assert answer["content"][0]["text"] == "database unavailable, try again shortly"
        assert time.monotonic() < deadline, "not back within 15 s"
        time.sleep(0.2)
    assert answer["structuredContent"]["result"]


# --- the transparency log ------------------------------------------------------------------------


def test_the_transparency_log_over_mcp(world: World, caller: Caller) -> None:
    """A member's checkpoint verifies with the server's key; an event's inclusion proof and a
    consistency proof from the first checkpoint verify by the RFCs' algorithms."""
    key = LOG_SIGNER.verifier()
    latest = caller.tool(world.member, "get_checkpoint", collection=SLUG)
    # a server that names no witnesses says so, and serves the latest signed checkpoint
    assert (latest.pop("witnessed_by"), latest.pop("quorum")) == ([], None)
    signed_latest = open_checkpoint(latest["note"], key)
    assert (signed_latest.origin, signed_latest.size) == (f"127.0.0.1/c/{SLUG}", latest["size"])

    event = caller.tool(world.member, "get_event", id=world.link["id"], proof=True)["result"]
    proof = event["proof"]
    assert proof["checkpoint"] == latest and proof["tree_size"] == latest["size"]
    path = [base64.b64decode(h) for h in proof["hashes"]]
    leaf = rfc.leaf(bytes.fromhex(world.link["id"]))
    assert rfc.verify_inclusion(proof["leaf_index"], latest["size"], leaf, path, signed_latest.root)
    assert "proof" not in caller.tool(world.member, "get_event", id=world.link["id"])["result"]

    [first] = world.setup["checkpoints"]
    signed_first = open_checkpoint(first["note"], key)
    grown = caller.tool(world.member, "get_consistency", collection=SLUG, old_size=first["size"])
    hashes = [base64.b64decode(h) for h in grown["hashes"]]
    assert rfc.verify_consistency(
        signed_first.size, signed_latest.size, signed_first.root, signed_latest.root, hashes
    )
    too_big = caller.tool_error(
        world.member, "get_consistency", collection=SLUG, old_size=latest["size"] + 1
    )
    assert "no consistency proof" in too_big

    for tool, args in [("get_checkpoint", {}), ("get_consistency", {"old_size": 0})]:
        closed = caller.tool_error(world.stranger, tool, collection=SLUG, **args)
        missing = caller.tool_error(world.stranger, tool, collection="no-such", **args)
        assert closed == missing.replace("no-such", SLUG)
