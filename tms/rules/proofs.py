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
  (deeper lines carry their depth), and output stops at about `MAX_TREE_CHARS` characters.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from tms.nostr.events import is_hex64
from tms.results import ProofResult
from tms.rules.cited import Cited, clip, contested, event_lines, short
from tms.types import (
    EventId,
)

MAX_STEPS: Final = 1_000  # steps checked per proof; more is a problem
MAX_FROM: Final = 100  # `from` entries checked per step; more is a problem
MAX_CITED_EVENTS: Final = 10_000  # distinct event ids looked up per proof; more is a problem
MAX_STEP_ID_CHARS: Final = 64  # a longer step id is a problem
MAX_PROBLEMS: Final = 100  # problems listed; the rest are counted in one last line
MAX_TREE_DEPTH: Final = 40  # indentation levels; deeper lines are marked with their depth
MAX_TREE_CHARS: Final = 200_000  # the tree stops (with a note) once it is about this long

RULE_1: Final = "rule 1"
RULE_1_ORDER: Final = "rule 1: premises come before the steps that use them"
RULE_2: Final = "rule 2"
RULE_3: Final = "rule 3"

_SHOWN_JUNK_CHARS: Final = 40


# --- parsing ------------------------------------------------------------------------------------

# What a `from` entry turned out to be. The first two are fine; the rest break rule 1.
_STEP: Final = 0  # an earlier step
_EVENT: Final = 1  # an event of this collection
_LATER: Final = 2  # a later step
_SELF: Final = 3  # the step itself
_MISSING: Final = 4  # an event id that is not an event of this collection
_OVER: Final = 5  # an event id beyond MAX_CITED_EVENTS, not looked up
_JUNK: Final = 6  # neither an event id nor a step id


@dataclass(slots=True)
class _Step:
    number: int  # 1-based position in `steps`
    is_object: bool
    id: str | None  # usable id: a valid string, first of its name
    name: str | None  # the valid-looking id, even when it duplicates an earlier step's
    say: str | None
    gap: bool
    entries: list[str]  # string `from` entries, deduplicated, at most MAX_FROM

    @property
    def label(self) -> str:
        if self.id is not None:
            return f"step {_q(self.id)}"
        if self.name is not None:
            return f"step #{self.number} ({_q(self.name)})"
        return f"step #{self.number}"

    @property
    def tree_name(self) -> str:
        if self.id is not None:
            return clip(self.id)
        if self.name is not None:
            return f"#{self.number} ({clip(self.name)}, duplicate id)"
        return f"#{self.number}"


class _Problems:
    """The problems in the order found; only the first MAX_PROBLEMS are kept (and formatted:
    hot loops check `room` before building a message)."""

    def __init__(self) -> None:
        self.items: list[str] = []
        self.count = 0

    @property
    def room(self) -> bool:
        return len(self.items) < MAX_PROBLEMS

    def add(self, message: str) -> None:
        self.count += 1
        if self.room:
            self.items.append(message)

    def listed(self) -> list[str]:
        extra = self.count - len(self.items)
        return [*self.items, f"... and {extra} more problems"] if extra else list(self.items)


@dataclass(slots=True)
class _Parsed:
    question: str | None = None
    steps: list[_Step] = field(default_factory=list)
    index: dict[str, int] = field(default_factory=dict)  # usable step id -> position
    event_ids: dict[EventId, None] = field(default_factory=dict)  # first-cited first, capped
    citers: list[list[int]] = field(default_factory=list)  # per step: the other steps citing it
    cited_back: list[bool] = field(default_factory=list)  # per step: cited by a later step
    grounded: list[bool] = field(default_factory=list)  # per step: cites an event directly
    truncated: bool = False


def _parse(
    proof: object, problems: _Problems, events: Mapping[EventId, Cited] | None = None
) -> _Parsed:
    """Read the proof, reporting shape problems and rule-1 problems as it goes. Without
    `events` every event id counts as found (that is how `cited_event_ids` collects them)."""
    parsed = _Parsed()
    if not isinstance(proof, dict):
        problems.add("the proof must be a JSON object with a 'steps' list")
        return parsed
    question = proof.get("question")
    if question is not None and not isinstance(question, str):
        problems.add("'question' must be a string when given")
        question = None
    parsed.question = question
    raw_steps = proof.get("steps")
    if raw_steps is None:
        problems.add("the proof has no 'steps' list")
        return parsed
    if not isinstance(raw_steps, list):
        problems.add("'steps' must be a list of step objects")
        return parsed
    if not raw_steps:
        problems.add(f"the proof has no steps; exactly one step, the answer, is needed ({RULE_2})")
        return parsed
    if len(raw_steps) > MAX_STEPS:
        parsed.truncated = True
        problems.add(
            f"the proof has {len(raw_steps)} steps, more than the limit of {MAX_STEPS}; "
            f"only the first {MAX_STEPS} were checked and the answer could not be determined"
        )

    steps = parsed.steps
    index: dict[str, int] = {}
    for position, raw in enumerate(raw_steps[:MAX_STEPS]):
        steps.append(_parse_step(position, raw, index, steps, problems))

    count = len(steps)
    citers: list[list[int]] = [[] for _ in range(count)]
    cited_back = [False] * count
    grounded = [False] * count
    event_ids = parsed.event_ids
    find = index.get
    for position, step in enumerate(steps):
        for entry in step.entries:
            target = find(entry)
            if target is not None and target < position:  # the usual case: an earlier step
                cited_back[target] = True
                citers[target].append(position)
                continue
            if (
                target is None
                and entry not in event_ids
                and len(event_ids) < MAX_CITED_EVENTS
                and is_hex64(entry)
            ):
                event_ids[entry] = None
            kind = _classify(entry, position, target, event_ids, events)
            if kind == _EVENT:
                grounded[position] = True
                continue
            if kind == _LATER and target is not None:
                citers[target].append(position)
            if problems.room:
                problems.add(_rule_1_problem(step, kind, entry, target, steps))
            else:
                problems.count += 1
    parsed.citers, parsed.cited_back, parsed.grounded = citers, cited_back, grounded
    parsed.index = index
    return parsed


def _classify(
    entry: str,
    position: int,
    target: int | None,
    event_ids: Mapping[EventId, None],
    events: Mapping[EventId, Cited] | None,
) -> int:
    """What the entry of the step at `position` is, given `target = index.get(entry)` and the
    event ids taken so far (all of them, once parsing is done)."""
    if target is not None:
        return _STEP if target < position else _LATER if target > position else _SELF
    if entry in event_ids:
        return _EVENT if events is None or entry in events else _MISSING
    return _OVER if is_hex64(entry) else _JUNK


def _parse_step(
    position: int, raw: object, index: dict[str, int], steps: list[_Step], problems: _Problems
) -> _Step:
    number = position + 1
    if not isinstance(raw, dict):
        problems.add(f"step #{number} is not an object with 'id', 'say' and 'from'")
        return _Step(number, False, None, None, None, False, [])

    raw_id = raw.get("id")
    step_id: str | None = None
    name: str | None = None
    if not isinstance(raw_id, str) or not raw_id.strip():
        problems.add(f"step #{number} has no 'id' (a non-blank string is required)")
    elif len(raw_id) > MAX_STEP_ID_CHARS:
        problems.add(f"step #{number} has an 'id' longer than {MAX_STEP_ID_CHARS} characters")
    elif raw_id in index:
        name = raw_id
        first = steps[index[raw_id]].number
        problems.add(
            f"step #{number} reuses the id {_q(raw_id)} of step #{first}; step ids must be unique"
        )
    else:
        step_id = name = raw_id
        index[raw_id] = position
    step = _Step(number, True, step_id, name, None, False, [])

    say = raw.get("say")
    if isinstance(say, str) and say.strip():
        step.say = say
    else:
        problems.add(f"{step.label} has no 'say' (a one-sentence string is required)")

    gap = raw.get("gap", False)
    if isinstance(gap, bool):
        step.gap = gap
    else:
        problems.add(f"{step.label} has a 'gap' that is neither true nor false")

    if "from" not in raw:
        problems.add(f"{step.label} has no 'from' list (use [] when it cites nothing)")
        return step
    cited = raw["from"]
    if not isinstance(cited, list):
        problems.add(f"{step.label} has a 'from' that is not a list")
        return step
    if len(cited) > MAX_FROM:
        problems.add(
            f"{step.label} cites {len(cited)} entries, more than the limit of {MAX_FROM}; "
            f"only the first {MAX_FROM} were checked"
        )
        cited = cited[:MAX_FROM]
    strings = [entry for entry in cited if isinstance(entry, str)]
    others = len(cited) - len(strings)
    if others == 1:
        problems.add(f"{step.label} has a 'from' entry that is not a string ({RULE_1})")
    elif others:
        problems.add(f"{step.label} has {others} 'from' entries that are not strings ({RULE_1})")
    step.entries = list(dict.fromkeys(strings))
    return step


def _rule_1_problem(
    step: _Step, kind: int, entry: str, target: int | None, steps: list[_Step]
) -> str:
    if kind == _SELF:
        return f"{step.label} cites itself ({RULE_1_ORDER})"
    if kind == _LATER and target is not None:
        later = steps[target].label
        return f"{step.label} cites {later}, which comes after it ({RULE_1_ORDER})"
    if kind == _MISSING:
        return (
            f"{step.label} cites {_q(short(entry))}, which is not an event in this "
            f"collection ({RULE_1})"
        )
    if kind == _OVER:
        return (
            f"{step.label} cites {_q(short(entry))}, beyond the limit of {MAX_CITED_EVENTS} "
            "distinct events per proof; it was not checked"
        )
    return (
        f"{step.label} cites {_q(clip(entry, _SHOWN_JUNK_CHARS))}, which is neither an "
        f"event id nor the id of an earlier step ({RULE_1})"
    )


# --- public API ---------------------------------------------------------------------------------


def cited_event_ids(proof: object) -> set[EventId]:
    """The event ids a proof cites: `from` entries of 64 lowercase hex characters that are not
    the id of a step. Never raises; at most `MAX_CITED_EVENTS` ids (from at most `MAX_STEPS`
    steps of at most `MAX_FROM` entries), the same ones `check_proof` will look for."""
    return set(_parse(proof, _Problems()).event_ids)


def check_proof(proof: object, events: Mapping[EventId, Cited]) -> ProofResult:
    """Check a proof against rules 1-3. `events` holds the cited events that belong to this
    collection (see `cited_event_ids`); any other id is "not an event in this collection".
    Never raises, whatever `proof` is."""
    problems = _Problems()
    # Shape problems and rule 1 (every entry is an event here or an earlier step), step by step.
    parsed = _parse(proof, problems, events)
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

    tree = _tree(parsed, events, root)
    return {
        "ok": problems.count == 0,
        "problems": problems.listed(),
        "root": root,
        "tree": tree,
        # Beside the rules, never one of them: the claims a reader should weigh.
        "contested": contested(parsed.event_ids, events),
    }


# --- the tree -----------------------------------------------------------------------------------


def _tree(parsed: _Parsed, events: Mapping[EventId, Cited], root: str | None) -> str:
    out = _Lines()
    if parsed.question is not None:
        out.add(0, f"Question: {clip(parsed.question)}")
    steps, index, event_ids = parsed.steps, parsed.index, parsed.event_ids
    if not steps:
        out.add(0, "(no steps)")
        return out.text()

    # Top level: the answer first, then every other step no later step cites (only possible when
    # a rule is broken). Following only backward citations reaches every step exactly once.
    cited_back = parsed.cited_back
    tops = [i for i, step in enumerate(steps) if step.is_object and not cited_back[i]]
    if root is not None:
        answer = next(i for i, step in enumerate(steps) if step.id == root)
        tops = [answer, *(i for i in tops if i != answer)]

    shown: set[int] = set()
    expanded: dict[EventId, list[str]] = {}
    stack: list[tuple[int, int | list[str]]] = [(0, i) for i in reversed(tops)]
    while stack and not out.full:
        depth, item = stack.pop()
        if isinstance(item, list):
            out.add(depth, item[0])
            for line in item[1:]:
                out.add(depth + 1, line)
            continue
        step = steps[item]
        if item in shown:
            out.add(depth, f"{step.tree_name}: (shown above)")
            continue
        shown.add(item)
        mark = "[gap] " if step.gap else ""
        say = clip(step.say) if step.say is not None else "(no say)"
        out.add(depth, f"{step.tree_name}: {mark}{say}")
        children: list[tuple[int, int | list[str]]] = []
        for entry in step.entries:
            found = index.get(entry)
            target = -1 if found is None else found
            kind = _classify(entry, item, found, event_ids, events)
            if kind == _STEP:
                children.append((depth + 1, target))
            elif kind == _EVENT:
                lines = expanded.get(entry)
                if lines is None:
                    lines = expanded[entry] = event_lines(entry, events[entry])
                children.append((depth + 1, lines))
            else:
                children.append((depth + 1, [_bad_ref_line(kind, entry, target, steps)]))
        stack.extend(reversed(children))
    return out.text()


class _Lines:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.size = 0
        self.full = False

    def add(self, depth: int, line: str) -> None:
        if self.full:
            return
        if depth > MAX_TREE_DEPTH:
            line = f"(depth {depth}) {line}"
        line = "  " * min(depth, MAX_TREE_DEPTH) + line
        if self.size + len(line) > MAX_TREE_CHARS:
            self.lines.append(f"... (tree cut off at {MAX_TREE_CHARS} characters)")
            self.full = True
            return
        self.lines.append(line)
        self.size += len(line) + 1

    def text(self) -> str:
        return "\n".join(self.lines)


def _bad_ref_line(kind: int, entry: str, target: int, steps: list[_Step]) -> str:
    if kind in (_SELF, _LATER):
        return f"{steps[target].tree_name}: (cited out of order; not followed)"
    if kind == _MISSING:
        return f"{short(entry)}: (not an event in this collection)"
    if kind == _OVER:
        return f"{short(entry)}: (not checked: too many events cited)"
    return f"{_q(clip(entry, _SHOWN_JUNK_CHARS))}: (neither an event id nor an earlier step)"


# --- text helpers -------------------------------------------------------------------------------


def _q(text: str) -> str:
    return f"'{clip(text, MAX_STEP_ID_CHARS)}'"


def _names(steps: list[_Step], limit: int = 10) -> str:
    names = [_q(step.id) if step.id is not None else f"#{step.number}" for step in steps[:limit]]
    if len(steps) > limit:
        return ", ".join(names) + f" and {len(steps) - limit} more"
    return ", ".join(names[:-1]) + " and " + names[-1]
