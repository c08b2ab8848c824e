"""The two MCP prompts, `claims_pass` and `briefing`: instructions an agent reads, as markdown.

Each render function takes the collection's slug and returns the prompt text; both are pure
(the only input besides the slug is the packaged terms text, whose hash the agent must sign).
A slug that is not a valid collection slug raises `ValueError`, so a typo fails before an agent
spends a session on it.

`PROMPTS` maps each prompt's name to its one-line description (for `prompts/list`) and its render
function; `COLLECTION_ARGUMENT` describes the one argument both take.

`briefing` embeds `EXAMPLE_PROOF`, a proof whose `<... id>` placeholders stand for real event ids;
with events of those kinds in place of the placeholders it passes `tms.proofs.check_proof`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from string import Template
from typing import Any, Final

from tms.rules.kinds import SLUG_PATTERN
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


_SIGNING: Final = """\
## Signing

- Every tool except `publish` takes one argument, `request`: an event of kind 4707 whose
  content is `{"tool": "<the tool's name>", "args": {...}}`. The server reads the arguments from
  the signed content only. Sign a fresh request for every call: `tool` must name the tool you
  call, `created_at` must be within 60 seconds of the server's clock, and each request works
  once (`request was already used` means: sign a new one).
- In stdio mode (the server run locally with `TMS_NSEC` set), tool calls without a `request`
  are signed for you: pass the args directly."""

_CLAIMS_PASS: Final = Template(
    """\
# Claims pass over collection `$collection`

You are turning evidence in the TMS collection `$collection` that no link cites yet into
claims, links and contradictions. TMS is an append-only ledger of signed events: nothing you
publish can be edited or deleted, so work carefully. The ledger records what the evidence says
and who recorded it; the server never decides what is true, and neither do you. Do not invent
facts, fill gaps from memory, or claim more than a quote shows.

Use only these TMS tools, with the arguments exactly as shown: `list_evidence`, `get_event`,
`search_claims`, `list_claims`, `get_links`, `search_contradictions` and `publish`
(`list_collections` shows which collections your key can use).

$signing
- `publish` takes `{"events": [...]}`: events signed with your own key, for example with
  `TMS_NSEC=nsec1... uv run tms-sign event 4702 '{"collection": "$collection", "text": "..."}'`
  or any Nostr library. An event's id is the sha256 of its serialization, so you know it before
  publishing and a batch can reference its own earlier events. Send each event exactly as
  signed: re-serializing `content` afterwards breaks the id.
- Before your first write, once per key, publish the terms (kind 4706), ideally with a profile
  (kind 0) whose `about` says you are an agent; otherwise writes fail with
  `sign the current terms first`:
$terms_event

## Procedure

1. **Find the work.** `list_evidence {"collection": "$collection", "ungrounded_only": true}`
   lists evidence that no link cites as `from`: title, url, source and `chars`, no text.
   Take one document at a time.
2. **Read all of it.** `get_event {"id": "<evidence id>", "offset": 0, "max_chars": 20000}`
   returns `content.text` from `offset`, and `chars`, the full length. Call again with `offset`
   plus the length of the window you got, until you reach `chars`. Never work from a partial
   read.
3. **Draft claims.** One assertion per claim: atomic (no "and" joining two facts),
   self-contained (names its subject; no "it", "this study" or "the authors"), and no stronger
   than the text. Keep hedges and scope ("is thought to", "in mice", "at 10 mg") in the claim,
   or record them with a QUALIFIES link.
4. **Reuse before adding.** For each draft, run
   `search_claims {"collection": "$collection", "text": "<draft claim>", "method": "vector"}`
   and again with `"method": "keyword"` on its key terms. If a claim already says the same
   thing, link to its id instead of publishing a duplicate.
   `list_claims {"collection": "$collection", "sort": "recent"}` gives an overview, and
   `get_links {"collection": "$collection", "to_id": "<claim id>"}` shows the links a claim
   already has, so you don't add the same one twice.
5. **Copy quotes.** Each link's `quote` is a short passage (a phrase or a sentence, usually
   under 300 characters) copied VERBATIM from the evidence text. Matching forgives differences
   in case, whitespace and line breaks, curly versus straight quotes, dash styles, soft hyphens
   and fi/fl ligatures. Nothing else: no "..." or "…" joining passages, no [brackets], no fixed
   typos or spelling, no changed punctuation or numbers, no dropped citation markers such as
   "[12]", no paraphrase. If the words you need are not contiguous, use a shorter quote or two
   links.
6. **Pick the relation.** SUPPORTS: the quote says the target holds. REBUTS: it says the target
   does not hold. QUALIFIES: it limits or conditions a claim (population, dose, uncertainty);
   QUALIFIES only targets claims. Every link has a `reason`: a sentence on why the quote bears
   on the target. `from` is always the evidence id.
7. **Record contradictions.** When two or more distinct claims cannot all hold, check
   `search_contradictions {"collection": "$collection", "claim": "<claim id>"}`; if none says
   the same, publish a contradiction naming the claim ids, with a reason. Claims that differ
   only in scope (other populations, doses, years) do not contradict: use QUALIFIES.
8. **Dispute, don't replace.** To dispute an existing link or contradiction (a quote out of
   context, a wrong relation), publish a link from your evidence whose `to` is that event's id,
   with SUPPORTS or REBUTS, a quote and a reason.
9. **Publish.** One batch per document: `publish {"events": [...]}`, new claims before the
   links and contradictions that cite them, at most 1000 events per batch. A batch is all or
   nothing: if any quote is not found (`quote not found verbatim in evidence`) or any event is
   refused, the whole batch is rolled back. Fix that event (copy the quote again from the text),
   re-sign it and anything that cites it, and resend the batch. Resending is safe: events
   already stored are skipped. The result lists `accepted` and `skipped` ids.
10. **Check, then continue.** `get_links {"collection": "$collection", "from_id": "<evidence id>"}`
    shows your links; the document no longer appears with `ungrounded_only`. Next document.

## Event shapes

Build each event with `tags` `[]` and `content` serialized to a string (compact, as
`JSON.stringify` writes it); your signer adds `pubkey`, `created_at`, `id` and `sig`. Replace
each `<... id>` with a real 64-hex event id from this collection.

A claim (kind 4702):
$claim_event

A link (kind 4703); `to` may be a claim, link, contradiction or evidence id:
$link_event

A contradiction (kind 4704), two or more distinct claim ids:
$contradiction_event

A request (kind 4707), fresh for every tool call except `publish`:
$request_event

## Checklist

- [ ] Terms (kind 4706) signed before the first write; a fresh request for every tool call.
- [ ] The whole evidence text read, window by window, up to `chars`.
- [ ] Each claim: one assertion, self-contained, no stronger than the evidence; searched for
      first, and an existing claim's id reused when it says the same.
- [ ] Each link: `from` is the evidence id; the quote is short and copied verbatim; the
      relation fits (QUALIFIES only to claims); a reason.
- [ ] Each contradiction: two or more distinct claim ids that cannot all hold; a reason; not
      already recorded.
- [ ] Every id in collection `$collection`; new claims come before the events citing them.
- [ ] Nothing invented: what the evidence does not say is not published.
"""
)

_BRIEFING: Final = Template(
    """\
# Briefing from collection `$collection`

You answer the user's question using only what the TMS collection `$collection` records, and
you back the answer with a thinking proof that `check_proof` accepts. (If no question was
given, ask for one.) The ledger records what evidence says and who recorded it; the server
never decides what is true, and your answer must not pretend it does. Distances, ranks and
counts in tool results are retrieval aids, not confidence.

This is read-only: you publish nothing. Use these tools: `search_claims`, `get_links`,
`list_claims`, `get_event`, `search_contradictions` and `check_proof`.

$signing

## Procedure

1. **Sharpen the question.** Split it into sub-questions if it has several parts.
2. **Search claims.**
   `search_claims {"collection": "$collection", "text": "<question>", "method": "vector"}`,
   then the same with `"method": "keyword"` on the key terms (names, compounds, numbers), and
   again with synonyms. Each item carries its `links` (quotes cut to 300 characters) and
   `contradiction_ids`. `list_claims {"collection": "$collection", "sort": "contested"}` shows
   the most disputed claims.
3. **Read links and quotes.** For each relevant claim,
   `get_links {"collection": "$collection", "to_id": "<claim id>"}` lists its SUPPORTS, REBUTS
   and QUALIFIES links with full quotes and reasons. A link can itself be disputed: run
   `get_links` with `"to_id": "<link id>"` for the links your answer leans on.
4. **Check context.** For a quote that carries weight,
   `get_event {"id": "<evidence id>", "offset": 0, "max_chars": 20000}` returns the text window
   from `offset` and `chars`, the full length; page on with `offset` to the passage. Note the
   title and source. Is it a review, a hypothesis, an animal study, an opinion?
5. **Look for contradictions.**
   `search_contradictions {"collection": "$collection", "claim": "<claim id>"}` for each key
   claim, and `search_contradictions {"collection": "$collection", "text": "<topic>"}`.
6. **Build the proof** (below).
7. **Check it.** `check_proof {"collection": "$collection", "proof": {...}}` returns `ok`,
   `problems`, `root` and `tree`. Fix every problem and check again until `ok` is true.
8. **Answer** (below).

## The proof

`{"question": "...", "steps": [...]}`. Each step has a unique `id`, a one-sentence `say`, and
`from`: full 64-hex event ids from this collection (claims, links, contradictions, evidence),
or ids of earlier steps; `[]` when it cites nothing. Mark a step `"gap": true` when no event
supports it (something the collection does not cover, or your own inference beyond it). Rules:

1. Every `from` entry is an event in this collection or an earlier step: premises come first.
2. Exactly one step, the answer, is not cited by any other step; put it last.
3. Every step has a ledger event somewhere in its ancestry, or is marked `gap`.

Example (put real ids where it says `<claim id>`, `<link id>` and `<contradiction id>`):
$example_proof

Fixing problems (ids in problems are cut to 12 hex digits; always cite the full id):
- "not an event in this collection": a typo, a shortened id, or an event you never read here.
- "comes after it": move the premise above the step that uses it.
- rule 2: cite every loose step from the answer or drop it; the answer must be the only one.
- rule 3: cite the event the step rests on, or mark it `"gap": true` and say so in the answer.

## The answer

- Lead with the answer in one or two sentences, matching the root step's `say`.
- Show the `tree` that `check_proof` returned, verbatim, in a code block.
- Cite event ids (the first 12 hex digits are enough in prose) for each point.
- Name the gaps plainly: what the collection does not cover stays open.
- Name what is contested: rebutting links, qualifications and contradictions, and who holds
  each side. Do not settle a dispute the evidence does not settle.
- Say "the evidence in `$collection` says" or "a review proposes", not "it is true that". Do not
  fill gaps from memory; anything from outside the ledger is labelled as such and is a gap
  step in the proof. If the collection has nothing relevant, say so (the proof is then one
  root step marked `"gap": true`).

## Checklist

- [ ] Searched by vector and by keyword, and read the links and quotes the answer rests on.
- [ ] Checked context with `get_event` and contradictions with `search_contradictions`.
- [ ] `check_proof` returned `ok: true` for the proof behind the answer.
- [ ] The answer shows the tree, cites ids, and marks gaps and contested points.
- [ ] "The evidence says" is never passed off as "true".
"""
)


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


PROMPTS: Final[dict[str, tuple[str, Callable[[str], str]]]] = {
    "claims_pass": (CLAIMS_PASS_DESCRIPTION, claims_pass),
    "briefing": (BRIEFING_DESCRIPTION, briefing),
}
