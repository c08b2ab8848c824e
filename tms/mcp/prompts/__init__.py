"""The two MCP prompts, `claims_pass` and `briefing`: instructions an agent reads, as markdown.

Each render function takes the collection's slug and returns the prompt text; both are pure
(the only input besides the slug is the packaged terms text, whose hash the agent must sign).
A slug that is not a valid collection slug raises `ValueError`, so a typo fails before an agent
spends a session on it.

`PROMPTS` maps each prompt's name to a `Prompt`: its one-line description and its arguments (for
`prompts/list`) and what renders it from the arguments `prompts/get` names; a registry
(`tms.registry`) whose server copy takes the enabled plugins' prompts, a name taken twice stopping
start-up. Both core prompts take one argument, `collection` (`COLLECTION_ARGUMENT`).

`briefing` embeds `EXAMPLE_PROOF`, a proof whose `<... id>` placeholders stand for real event ids;
with events of those kinds in place of the placeholders it passes `tms.rules.proofs.check_proof`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib.resources import files
from string import Template
from typing import Any, Final

from tms.registry import Registry
from tms.rules.content import SLUG_PATTERN
from tms.rules.terms import current_terms
from tms.types import (
    KIND_CLAIM,
    KIND_CONTRADICTION,
    KIND_LINK,
    KIND_PROFILE,
    KIND_REQUEST,
    KIND_TERMS,
)

__all__ = [
    "BRIEFING_DESCRIPTION",
    "CLAIMS_PASS_DESCRIPTION",
    "COLLECTION_ARGUMENT",
    "EXAMPLE_PROOF",
    "PROMPTS",
    "Prompt",
    "PromptArgument",
    "briefing",
    "claims_pass",
]

COLLECTION_ARGUMENT: Final = (
    "The collection's slug (1-64 lowercase letters, digits, '-' or '_'), "
    "as list_collections shows it."
)
CLAIMS_PASS_DESCRIPTION: Final = (
    "Turn evidence in a collection that no link cites yet into claims, links and contradictions."
)
BRIEFING_DESCRIPTION: Final = (
    "Answer a question from one collection, backed by a thinking proof that check_proof accepts."
)

EXAMPLE_PROOF: Final[dict[str, Any]] = {
    "question": "Is reduced DAO activity the cause of histamine intolerance?",
    "steps": [
        {
            "id": "s1",
            "say": "A review proposes reduced DAO activity as the mechanism.",
            "from": ["<claim id>", "<link id>"],
        },
        {
            "id": "s2",
            "say": "A recorded contradiction says serum DAO levels do not track symptoms.",
            "from": ["<contradiction id>"],
        },
        {
            "id": "s3",
            "say": "So the mechanism is proposed in the collection but contested.",
            "from": ["s1", "s2"],
        },
        {
            "id": "s4",
            "say": "Nothing in the collection covers children.",
            "from": [],
            "gap": True,
        },
        {
            "id": "root",
            "say": "The evidence here presents a proposed, contested mechanism, not a cause.",
            "from": ["s3", "s4"],
        },
    ],
}


def _check_slug(collection: str) -> str:
    if not isinstance(collection, str) or not SLUG_PATTERN.fullmatch(collection):
        raise ValueError("collection must be a slug: 1 to 64 lowercase letters, digits, '-' or '_'")
    return collection


def _dumps(value: object) -> str:
    return json.dumps(value, ensure_ascii=False)


def _event_block(kind: int, content: dict[str, Any]) -> str:
    """An unsigned event as the agent builds it, before its signer adds the rest."""
    return "```json\n" + _dumps({"kind": kind, "tags": [], "content": content}) + "\n```"


def _proof_block(proof: dict[str, Any]) -> str:
    """The proof as SPEC prints one: the question, then one step per line."""
    steps = ",\n  ".join(_dumps(step) for step in proof["steps"])
    return f'```json\n{{"question": {_dumps(proof["question"])},\n "steps": [\n  {steps}\n ]}}\n```'


def _terms_content() -> dict[str, str]:
    terms = current_terms()
    return {"version": terms["version"], "sha256": terms["sha256"]}


def _text(name: str) -> str:
    return files("tms.mcp.prompts").joinpath(name).read_text("utf-8")


# The prompts' Markdown lives beside this module, one file each; `$names` are filled in here.
_SIGNING: Final = _text("signing.md").rstrip("\n")
_CLAIMS_PASS: Final = Template(_text("claims_pass.md"))
_BRIEFING: Final = Template(_text("briefing.md"))


def claims_pass(collection: str) -> str:
    """The `claims_pass` prompt: from evidence no link cites yet to claims, links and
    contradictions, with the events to sign for `collection`."""
    slug = _check_slug(collection)
    return _CLAIMS_PASS.substitute(
        collection=slug,
        signing=_SIGNING,
        terms_event=_event_block(KIND_TERMS, _terms_content())
        + "\n"
        + _event_block(KIND_PROFILE, {"name": "my-agent", "about": "agent: <what you do>"}),
        claim_event=_event_block(
            KIND_CLAIM,
            {
                "collection": slug,
                "text": "Histamine intolerance results from reduced diamine oxidase (DAO) "
                "activity.",
            },
        ),
        link_event=_event_block(
            KIND_LINK,
            {
                "collection": slug,
                "from": "<evidence id>",
                "to": "<claim id>",
                "relation": "SUPPORTS",
                "quote": "thought to result from reduced diamine oxidase (DAO) activity",
                "reason": "The review names reduced DAO activity as the proposed mechanism.",
            },
        ),
        contradiction_event=_event_block(
            KIND_CONTRADICTION,
            {
                "collection": slug,
                "claims": ["<claim id>", "<other claim id>"],
                "reason": "Both cannot hold: one says serum DAO tracks symptoms, the other "
                "that it does not.",
            },
        ),
        request_event=_event_block(
            KIND_REQUEST,
            {"tool": "list_evidence", "args": {"collection": slug, "ungrounded_only": True}},
        ),
    )


def briefing(collection: str) -> str:
    """The `briefing` prompt: from a question to an answer in `collection`, backed by a thinking
    proof that `check_proof` accepts."""
    slug = _check_slug(collection)
    return _BRIEFING.substitute(
        collection=slug, signing=_SIGNING, example_proof=_proof_block(EXAMPLE_PROOF)
    )


@dataclass(frozen=True, slots=True)
class PromptArgument:
    name: str
    description: str
    required: bool = True


@dataclass(frozen=True, slots=True)
class Prompt:
    """A prompt as `prompts/list` shows it and `prompts/get` renders it: `render` takes the
    arguments sent and returns the text, or raises `ValueError` whose message the client is
    told (a required argument missing, a slug that is not one)."""

    description: str
    arguments: tuple[PromptArgument, ...]
    render: Callable[[Mapping[str, str]], str]


def _for_collection(name: str, render: Callable[[str], str]) -> Callable[[Mapping[str, str]], str]:
    def rendered(arguments: Mapping[str, str]) -> str:
        collection = str(arguments.get("collection", "")).strip()
        try:
            return render(collection)
        except ValueError as exc:  # not a slug
            raise ValueError(
                f"prompt '{name}' needs `collection`, a collection's slug: {exc}"
            ) from None

    return rendered


_COLLECTION: Final = (PromptArgument("collection", COLLECTION_ARGUMENT),)

PROMPTS: Final[Registry[Prompt]] = Registry("MCP prompt")
PROMPTS.register(
    "claims_pass",
    Prompt(CLAIMS_PASS_DESCRIPTION, _COLLECTION, _for_collection("claims_pass", claims_pass)),
)
PROMPTS.register(
    "briefing", Prompt(BRIEFING_DESCRIPTION, _COLLECTION, _for_collection("briefing", briefing))
)
