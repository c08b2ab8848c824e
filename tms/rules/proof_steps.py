"""A thinking proof read into steps: its shape checked, each `from` entry told apart.

Rule 1 is judged while reading, since it is about each entry on its own: every `from` entry is
an event of this collection or an earlier step. What an entry turned out to be (`classify`:
an earlier step, an event, a later step, the step itself, a missing or uncounted event id, or
neither) is what both the rules (`tms.rules.proofs`, which judge rules 2 and 3 on the parsed
steps) and the printed tree (`tms.rules.proof_tree`, which shows a bad entry where it stands)
go on to read, so the reading lives here, once, with the limits that bound it and the capped
list of problems it fills. See `tms.rules.proofs` for the proof's shape and the decisions the
SPEC leaves open.

Pure: a JSON value in, steps and problems out; never raises.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from tms.nostr.events import is_hex64
from tms.rules.cited import Cited, clip, short
from tms.types import EventId

MAX_STEPS: Final = 1_000  # steps checked per proof; more is a problem
MAX_FROM: Final = 100  # `from` entries checked per step; more is a problem
MAX_CITED_EVENTS: Final = 10_000  # distinct event ids looked up per proof; more is a problem
MAX_STEP_ID_CHARS: Final = 64  # a longer step id is a problem
MAX_PROBLEMS: Final = 100  # problems listed; the rest are counted in one last line

RULE_1: Final = "rule 1"
RULE_1_ORDER: Final = "rule 1: premises come before the steps that use them"
RULE_2: Final = "rule 2"

SHOWN_JUNK_CHARS: Final = 40  # an entry that is neither an event id nor a step id, as shown

# What a `from` entry turned out to be. The first two are fine; the rest break rule 1.
STEP: Final = 0  # an earlier step
EVENT: Final = 1  # an event of this collection
LATER: Final = 2  # a later step
SELF: Final = 3  # the step itself
MISSING: Final = 4  # an event id that is not an event of this collection
OVER: Final = 5  # an event id beyond MAX_CITED_EVENTS, not looked up
JUNK: Final = 6  # neither an event id nor a step id


@dataclass(slots=True)
class Step:
    """One step as read, usable or not: a broken step is kept so that problems and the tree
    can still name it."""

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
            return f"step {quoted(self.id)}"
        if self.name is not None:
            return f"step #{self.number} ({quoted(self.name)})"
        return f"step #{self.number}"

    @property
    def tree_name(self) -> str:
        if self.id is not None:
            return clip(self.id)
        if self.name is not None:
            return f"#{self.number} ({clip(self.name)}, duplicate id)"
        return f"#{self.number}"


class Problems:
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
class Parsed:
    """A proof as read: its steps, and what the rules and the tree need of how they cite one
    another, computed in the one pass over the entries."""

    question: str | None = None
    steps: list[Step] = field(default_factory=list)
    index: dict[str, int] = field(default_factory=dict)  # usable step id -> position
    event_ids: dict[EventId, None] = field(default_factory=dict)  # first-cited first, capped
    citers: list[list[int]] = field(default_factory=list)  # per step: the other steps citing it
    cited_back: list[bool] = field(default_factory=list)  # per step: cited by a later step
    grounded: list[bool] = field(default_factory=list)  # per step: cites an event directly
    truncated: bool = False


def parse(
    proof: object, problems: Problems, events: Mapping[EventId, Cited] | None = None
) -> Parsed:
    """Read the proof, reporting shape problems and rule-1 problems as it goes. Without
    `events` every event id counts as found (that is how `cited_event_ids` collects them)."""
    parsed = Parsed()
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
            kind = classify(entry, position, target, event_ids, events)
            if kind == EVENT:
                grounded[position] = True
                continue
            if kind == LATER and target is not None:
                citers[target].append(position)
            if problems.room:
                problems.add(_rule_1_problem(step, kind, entry, target, steps))
            else:
                problems.count += 1
    parsed.citers, parsed.cited_back, parsed.grounded = citers, cited_back, grounded
    parsed.index = index
    return parsed


def classify(
    entry: str,
    position: int,
    target: int | None,
    event_ids: Mapping[EventId, None],
    events: Mapping[EventId, Cited] | None,
) -> int:
    """What the entry of the step at `position` is, given `target = index.get(entry)` and the
    event ids taken so far (all of them, once parsing is done)."""
    if target is not None:
        return STEP if target < position else LATER if target > position else SELF
    if entry in event_ids:
        return EVENT if events is None or entry in events else MISSING
    return OVER if is_hex64(entry) else JUNK


def _parse_step(
    position: int, raw: object, index: dict[str, int], steps: list[Step], problems: Problems
) -> Step:
    number = position + 1
    if not isinstance(raw, dict):
        problems.add(f"step #{number} is not an object with 'id', 'say' and 'from'")
        return Step(number, False, None, None, None, False, [])

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
            f"step #{number} reuses the id {quoted(raw_id)} of step #{first}; "
            "step ids must be unique"
        )
    else:
        step_id = name = raw_id
        index[raw_id] = position
    step = Step(number, True, step_id, name, None, False, [])

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
    step: Step, kind: int, entry: str, target: int | None, steps: list[Step]
) -> str:
    if kind == SELF:
        return f"{step.label} cites itself ({RULE_1_ORDER})"
    if kind == LATER and target is not None:
        later = steps[target].label
        return f"{step.label} cites {later}, which comes after it ({RULE_1_ORDER})"
    if kind == MISSING:
        return (
            f"{step.label} cites {quoted(short(entry))}, which is not an event in this "
            f"collection ({RULE_1})"
        )
    if kind == OVER:
        return (
            f"{step.label} cites {quoted(short(entry))}, beyond the limit of {MAX_CITED_EVENTS} "
            "distinct events per proof; it was not checked"
        )
    return (
        f"{step.label} cites {quoted(clip(entry, SHOWN_JUNK_CHARS))}, which is neither an "
        f"event id nor the id of an earlier step ({RULE_1})"
    )


def quoted(text: str) -> str:
    """A step id or an entry as a problem names it: in quotes, cut to MAX_STEP_ID_CHARS."""
    return f"'{clip(text, MAX_STEP_ID_CHARS)}'"
