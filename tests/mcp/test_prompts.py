"""The MCP prompts: rendered with the slug, naming only SPEC's tools, arguments, kinds and
relations, with example events the ledger would accept and an example proof `check_proof` passes.
Pure: no database."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import pytest
from factories import sign
from proof_events import cited

from tms.mcp.prompts import (
    BRIEFING_DESCRIPTION,
    CLAIMS_PASS_DESCRIPTION,
    COLLECTION_ARGUMENT,
    EXAMPLE_PROOF,
    PROMPTS,
    briefing,
    claims_pass,
)
from tms.nostr.events import SecretKey, compact_json
from tms.rules.kinds import KINDS, parse_content
from tms.rules.proofs import check_proof
from tms.rules.terms import current_terms
from tms.types import (
    KIND_CLAIM,
    KIND_CONTRADICTION,
    KIND_EVIDENCE,
    KIND_LINK,
    KIND_TERMS,
)

SLUG = "histamine-2_x"
RELATIONS = ("SUPPORTS", "REBUTS", "QUALIFIES")  # SPEC's, as a link's `relation`
KEY = SecretKey.generate()

# SPEC's tool table: required args, optional args.
TOOL_ARGS: dict[str, tuple[set[str], set[str]]] = {
    "publish": ({"events"}, set()),
    "list_collections": (set(), set()),
    "get_event": ({"id"}, {"offset", "max_chars"}),
    "search_claims": ({"collection", "text"}, {"method", "limit"}),
    "list_claims": ({"collection"}, {"sort", "limit"}),
    "get_links": ({"collection"}, {"to_id", "from_id", "relation", "limit"}),
    "list_evidence": ({"collection"}, {"ungrounded_only", "source", "limit"}),
    "search_contradictions": ({"collection"}, {"claim", "text", "limit"}),
    "check_proof": ({"collection", "proof"}, set()),
    "fetch_url": ({"url"}, set()),
}
TOOLS = set(TOOL_ARGS)
ARG_VALUES: dict[str, set[object]] = {
    "method": {"vector", "keyword"},
    "sort": {"unsupported", "unchallenged", "contested", "links", "recent"},
    "relation": set(RELATIONS),
}
# Names SPEC gives to arguments, event fields, content fields and result fields.
FIELDS = {
    *(name for required, optional in TOOL_ARGS.values() for name in required | optional),
    *"request tool args id pubkey created_at kind tags content sig".split(),
    *"name about picture url title source from to quote reason claims version sha256".split(),
    *"accepted skipped embedded author received_at chars distance rank links".split(),
    *"contradiction_ids supports qualifies rebuts findings link_count claim_ids".split(),
    *"ok problems root tree question steps say gap contested disputed_links".split(),
    *"anchor start end occurrences".split(),
}
RENDERS: list[Callable[[str], str]] = [claims_pass, briefing]

CODE_SPAN = re.compile(r"`([^`\n]+)`")
TOOL_CALL = re.compile(r"([a-z_]+) (\{.*\})")
IDENTIFIER = re.compile(r"[a-z][a-z0-9_]*")
JSON_BLOCK = re.compile(r"```json\n(.*?)\n```", re.DOTALL)
PLACEHOLDER = re.compile(r"<([a-z ]+) id>")


def spans(text: str) -> list[str]:
    return CODE_SPAN.findall(text)


def json_blocks(text: str) -> list[Any]:
    return [json.loads(block) for block in JSON_BLOCK.findall(text)]


def fill_ids(value: Any, ids: dict[str, str]) -> Any:
    """Replace every `<... id>` placeholder with the real id `ids` gives it."""
    if isinstance(value, str):
        match = PLACEHOLDER.fullmatch(value)
        return ids[match.group(0)] if match else value
    if isinstance(value, list):
        return [fill_ids(item, ids) for item in value]
    if isinstance(value, dict):
        return {key: fill_ids(item, ids) for key, item in value.items()}
    return value


# --- rendering ----------------------------------------------------------------------------------


def test_prompts_table() -> None:
    assert {name: prompt.description for name, prompt in PROMPTS.items()} == {
        "claims_pass": CLAIMS_PASS_DESCRIPTION,
        "briefing": BRIEFING_DESCRIPTION,
    }
    for name, render in (("claims_pass", claims_pass), ("briefing", briefing)):
        prompt = PROMPTS[name]
        assert prompt.description.strip() and "\n" not in prompt.description
        assert [(a.name, a.required) for a in prompt.arguments] == [("collection", True)]
        assert prompt.arguments[0].description == COLLECTION_ARGUMENT
        assert prompt.render({"collection": f" {SLUG} "}) == render(SLUG)
        with pytest.raises(ValueError, match=rf"^prompt '{name}' needs `collection`, a coll"):
            prompt.render({})
    assert "slug" in COLLECTION_ARGUMENT


@pytest.mark.parametrize("render", RENDERS)
def test_renders_with_the_slug(render: Callable[[str], str]) -> None:
    text = render(SLUG)
    assert text.startswith("# ") and text.endswith("\n")
    assert f"`{SLUG}`" in text
    assert "$" not in text  # every template placeholder was filled
    collections = re.findall(r'"collection": "([^"]*)"', text)
    assert collections and set(collections) == {SLUG}
    assert "mcas" not in text
    assert render(SLUG) == text  # pure
    assert 60 <= text.count("\n") <= 160


@pytest.mark.parametrize("render", RENDERS)
@pytest.mark.parametrize("bad", ["", "MCAS", "a b", 'x"y', "a" * 65, "mcas\n"])
def test_refuses_a_bad_slug(render: Callable[[str], str], bad: str) -> None:
    with pytest.raises(ValueError, match="slug"):
        render(bad)


# --- vocabulary ---------------------------------------------------------------------------------


@pytest.mark.parametrize("render", RENDERS)
def test_names_in_backticks_are_spec_tools_or_fields(render: Callable[[str], str]) -> None:
    text = render(SLUG)
    for span in spans(text):
        if IDENTIFIER.fullmatch(span) and ("_" in span or span in TOOLS):
            assert span in TOOLS | FIELDS, span
        call = TOOL_CALL.fullmatch(span)
        if call:
            assert call.group(1) in TOOLS, span


@pytest.mark.parametrize("render", RENDERS)
def test_tool_calls_use_spec_args(render: Callable[[str], str]) -> None:
    calls = 0
    for span in spans(render(SLUG)):
        call = TOOL_CALL.fullmatch(span)
        if not call:
            continue
        calls += 1
        tool = call.group(1)
        args = json.loads(call.group(2).replace("[...]", "[]").replace("{...}", "{}"))
        required, optional = TOOL_ARGS[tool]
        assert required <= set(args) <= required | optional, span
        assert args.get("collection", SLUG) == SLUG
        for name, allowed in ARG_VALUES.items():
            if name in args:
                assert args[name] in allowed, span
        if "offset" in args:
            assert args["max_chars"] == 20_000  # SPEC's default window
    assert calls >= 5


def test_claims_pass_mentions_its_tools() -> None:
    named = {span for span in spans(claims_pass(SLUG)) if span in TOOLS}
    assert {
        "list_evidence",
        "get_event",
        "search_claims",
        "list_claims",
        "get_links",
        "search_contradictions",
        "publish",
    } <= named
    called = {m.group(1) for s in spans(claims_pass(SLUG)) if (m := TOOL_CALL.fullmatch(s))}
    assert {"list_evidence", "get_event", "search_claims", "publish"} <= called


def test_briefing_mentions_its_tools() -> None:
    text = briefing(SLUG)
    called = {m.group(1) for s in spans(text) if (m := TOOL_CALL.fullmatch(s))}
    assert {"search_claims", "get_links", "get_event", "search_contradictions"} <= called
    assert "check_proof" in called
    assert '"method": "vector"' in text and '"method": "keyword"' in text


@pytest.mark.parametrize("render", RENDERS)
def test_kinds_and_relations_are_specs(render: Callable[[str], str]) -> None:
    text = render(SLUG)
    kinds = {int(k) for k in re.findall(r'kind"?:? (\d+)', text)}
    assert kinds and kinds <= set(KINDS)
    assert set(re.findall(r"\b[A-Z]{5,}\b", text)) <= {*RELATIONS, "VERBATIM"}
    for relation in RELATIONS:
        assert relation in text
    assert set(re.findall(r'"relation": "([^"]*)"', text)) <= set(RELATIONS)


def test_claims_pass_teaches_the_rules() -> None:
    text = claims_pass(SLUG)
    for phrase in (
        "ungrounded_only",
        "max_chars",
        "within 60 seconds",
        "works\n  once",
        "all or\n   nothing",
        "1000",
        "VERBATIM",
        "QUALIFIES only targets claims",
        "skipped",
        "TMS_NSEC",
        "kind 4706",
        "whose `to` is that event's id",
        "never decides what is true",
        "look at `contested` before relying on it",
        "nearest passage",
    ):
        assert phrase in text, phrase


def test_briefing_teaches_the_rules() -> None:
    text = briefing(SLUG)
    for phrase in (
        "retrieval aids, not confidence",
        "Exactly one step, the answer, is not cited",
        "premises come first",
        '"gap": true',
        "`ok` is true",
        "`tree`",
        "never decides what is true",
        "TMS_NSEC",
        "`contested` before relying on the proof",
        "`ok` does not depend on it",
    ):
        assert phrase in text, phrase


# --- examples the ledger and the checker accept -------------------------------------------------


def test_claims_pass_event_shapes_are_valid_content() -> None:
    events = [block for block in json_blocks(claims_pass(SLUG)) if "kind" in block]
    kinds = [event["kind"] for event in events]
    assert {KIND_TERMS, KIND_CLAIM, KIND_LINK, KIND_CONTRADICTION, 4707} <= set(kinds)
    placeholders = set(PLACEHOLDER.findall(json.dumps(events)))
    ids = {f"<{name} id>": f"{n:064x}" for n, name in enumerate(sorted(placeholders), 1)}
    for event in events:
        assert event["tags"] == []
        content = fill_ids(event["content"], ids)
        parse_content(event["kind"], compact_json(content))  # raises if the ledger would refuse
        if "collection" in content:
            assert content["collection"] == SLUG
    terms = next(event["content"] for event in events if event["kind"] == KIND_TERMS)
    assert terms == {"version": current_terms()["version"], "sha256": current_terms()["sha256"]}


def test_briefing_embeds_the_example_proof() -> None:
    proofs = [block for block in json_blocks(briefing(SLUG)) if "steps" in block]
    assert proofs == [EXAMPLE_PROOF]


def test_example_proof_passes_check_proof_with_real_events() -> None:
    evidence = sign(
        KEY,
        KIND_EVIDENCE,
        {"collection": SLUG, "text": "DAO is thought to cause it.", "title": "A review"},
    )
    claim = sign(KEY, KIND_CLAIM, {"collection": SLUG, "text": "Reduced DAO activity causes HIT."})
    other = sign(
        KEY, KIND_CLAIM, {"collection": SLUG, "text": "Serum DAO does not track symptoms."}
    )
    link = sign(
        KEY,
        KIND_LINK,
        {
            "collection": SLUG,
            "from": evidence.id,
            "to": claim.id,
            "relation": "SUPPORTS",
            "quote": "DAO is thought to cause it",
            "reason": "The review says so.",
        },
    )
    contradiction = sign(
        KEY,
        KIND_CONTRADICTION,
        {"collection": SLUG, "claims": [claim.id, other.id], "reason": "Serum data disagree."},
    )
    by_placeholder = {
        "<claim id>": claim,
        "<link id>": link,
        "<contradiction id>": contradiction,
        "<evidence id>": evidence,
    }
    used = set(PLACEHOLDER.findall(json.dumps(EXAMPLE_PROOF)))
    assert used and {f"<{name} id>" for name in used} <= set(by_placeholder)

    # As printed, the placeholders are not events: rule 1 catches them.
    assert not check_proof(EXAMPLE_PROOF, {})["ok"]

    proof = fill_ids(EXAMPLE_PROOF, {name: event.id for name, event in by_placeholder.items()})
    events = {event.id: event for event in by_placeholder.values()}
    result = check_proof(proof, cited(events.values()))
    assert result["problems"] == []
    assert result["ok"] and result["root"] == "root" == proof["steps"][-1]["id"]
    assert claim.id[:12] in result["tree"] and "Reduced DAO activity causes HIT." in result["tree"]
    for step in proof["steps"]:
        assert step["say"].count(". ") == 0 and step["say"].endswith(".")  # one sentence


def test_example_proof_each_rule_matters() -> None:
    """Dropping the gap mark, or adding a loose step, breaks the example as SPEC says."""
    claim = sign(KEY, KIND_CLAIM, {"collection": SLUG, "text": "A claim."})
    ids = {"<claim id>": claim.id, "<link id>": claim.id, "<contradiction id>": claim.id}
    proof = fill_ids(EXAMPLE_PROOF, ids)
    assert check_proof(proof, cited([claim]))["ok"]

    no_gap = json.loads(json.dumps(proof))
    for step in no_gap["steps"]:
        step.pop("gap", None)
    assert any("rule 3" in p for p in check_proof(no_gap, cited([claim]))["problems"])

    loose = json.loads(json.dumps(proof))
    loose["steps"].insert(0, {"id": "extra", "say": "Unused.", "from": [claim.id]})
    assert any("rule 2" in p for p in check_proof(loose, cited([claim]))["problems"])
