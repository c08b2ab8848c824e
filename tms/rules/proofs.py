"""Thinking proofs: an agent's argument resting on ledger events, checked before it answers.

A proof lives outside the ledger::

    {"question": "Is DAO deficiency the cause of histamine intolerance?",
     "steps": [
      {"id": "s1", "say": "One review proposes ...", "from": ["<claim id>", "<link id>"]},
      {"id": "s3", "say": "Nothing covers children.", "from": [], "gap": true},
      {"id": "root", "say": "Proposed mechanism, not an established cause.", "from": ["s1", "s3"]}
     ]}

The rules (SPEC):

1. Every `from` entry is an event in this collection or an earlier step. Premises come before
   the steps that use them.
2. Exactly one step, the answer, is not cited by any other step.
3. Every step has a ledger event somewhere in its ancestry, or is marked `gap`.

The caller is an async database service, so look-ups are batched::

    ids = cited_event_ids(proof)                  # pure, never raises, bounded
    found = await reads.cited(readable, ids)      # {id: Cited}, this collection only
    result = check_proof(proof, found)            # pure, never raises

`found` holds only the events of the caller's collection, and of each only what the tree prints
(`Cited`): a proof citing a hundred 2-million-character documents reads their titles, not their
texts. An id that is missing and an id of another collection's event are both simply absent, and
both are reported the same way: "not an event in this collection". Nothing about any other
collection can appear in the result.

A check runs in three parts, one module each: reading the proof into steps, with its shape
problems and rule 1 (`tms.rules.proof_steps`, which holds the limits below); rules 2 and 3 over
those steps, and the result (here); and the tree printed from them (`tms.rules.proof_tree`).

Decisions the SPEC leaves open:

- A `from` entry that equals the id of a step (of any position) refers to that step, even if it
  looks like an event id; only other 64-lowercase-hex entries are event ids.
- A `gap` step may still cite earlier steps or events; it is merely exempt from rule 3. Gap steps
  are transparent for ancestry: a step citing only a gap step that itself rests on an event has
  that event in its ancestry. A step resting only on gap steps with no events below them breaks
  rule 3 unless it is marked `gap` too.
- Ancestry (rule 3) and citation (rule 2) follow every reference between steps, including the
  out-of-order ones that rule 1 already reports; a step never cites itself for rule 2.
- A step without a usable id (missing, blank, not a string, too long, or a duplicate) is reported
  as such and left out of the rule-2 count, since no other step could cite it anyway.
- Duplicate entries within one `from` list count once. `from` is required (use `[]` for none).
- Steps beyond `MAX_STEPS`, entries beyond `MAX_FROM` and distinct event ids beyond
  `MAX_CITED_EVENTS` are not checked and each overflow is itself a problem. When steps are cut
  off, rule 2 cannot be judged, so `root` is null.
- In `problems`, event ids are always shortened to their first 12 hex digits and an ellipsis.
- In `tree`, a step cited more than once is expanded the first time and shown as "(shown
  above)" thereafter; events are expanded every time they are cited (at most `MAX_FROM` per
  step). The tree is built iteratively, indentation stops growing at `MAX_TREE_DEPTH` levels
  (deeper lines carry their depth), and output stops at about `MAX_TREE_CHARS` characters
  (both in `tms.rules.proof_tree`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from tms.results import ProofResult
from tms.rules.cited import Cited, contested, disputed_links
from tms.rules.proof_steps import RULE_2, Problems, Step, parse, quoted
from tms.rules.proof_tree import tree_text
from tms.types import EventId

RULE_3: Final = "rule 3"


def cited_event_ids(proof: object) -> set[EventId]:
    """The event ids a proof cites: `from` entries of 64 lowercase hex characters that are not
    the id of a step. Never raises; at most `MAX_CITED_EVENTS` ids (from at most `MAX_STEPS`
    steps of at most `MAX_FROM` entries), the same ones `check_proof` will look for."""
    return set(parse(proof, Problems()).event_ids)


def check_proof(proof: object, events: Mapping[EventId, Cited]) -> ProofResult:
    """Check a proof against rules 1-3. `events` holds the cited events that belong to this
    collection (see `cited_event_ids`); any other id is "not an event in this collection".
    Never raises, whatever `proof` is."""
    problems = Problems()
    # Shape problems and rule 1 (every entry is an event here or an earlier step), step by step.
    parsed = parse(proof, problems, events)
    steps, citers = parsed.steps, parsed.citers

    # Rule 2: exactly one step with a usable id is cited by no other step.
    root: str | None = None
    if not parsed.truncated:
        candidates = [step for step in steps if step.id is not None]
        uncited = [step for step in candidates if not citers[step.number - 1]]
        if len(uncited) == 1:
            root = uncited[0].id
        elif candidates and not uncited:
            problems.add(
                "every step is cited by another step, so there is no answer; exactly one step, "
                f"the answer, must be cited by no other step ({RULE_2})"
            )
        elif uncited:
            problems.add(
                f"steps {_names(uncited)} are {'both' if len(uncited) == 2 else 'all'} uncited; "
                f"exactly one step, the answer, may be uncited ({RULE_2})"
            )

    # Rule 3: an event somewhere in the ancestry, or `gap`. Grounding flows from a step to every
    # step that cites it; a walk over those reverse edges is linear in the size of the proof.
    grounded = parsed.grounded
    frontier = [position for position, direct in enumerate(grounded) if direct]
    while frontier:
        for citer in citers[frontier.pop()]:
            if not grounded[citer]:
                grounded[citer] = True
                frontier.append(citer)
    for position, step in enumerate(steps):
        if step.is_object and not step.gap and not grounded[position]:
            problems.add(
                f"{step.label} has no ledger event in its ancestry and is not marked gap ({RULE_3})"
            )

    return {
        "ok": problems.count == 0,
        "problems": problems.listed(),
        "root": root,
        "tree": tree_text(parsed, events, root),
        # Beside the rules, never one of them: the claims a reader should weigh.
        "contested": contested(parsed.event_ids, events),
        "disputed_links": disputed_links(parsed.event_ids, events),
    }


def _names(steps: list[Step], limit: int = 10) -> str:
    """Uncited steps as rule 2's problem names them: 'a', 'b' and 'c', at most `limit`."""
    names = [
        quoted(step.id) if step.id is not None else f"#{step.number}" for step in steps[:limit]
    ]
    if len(steps) > limit:
        return ", ".join(names) + f" and {len(steps) - limit} more"
    return ", ".join(names[:-1]) + " and " + names[-1]
