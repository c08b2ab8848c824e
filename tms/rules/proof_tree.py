"""A checked thinking proof printed as an indented tree, for the agent to show its reader.

The tree is what `check_proof` (`tms.rules.proofs`) returns beside its verdict: the question,
then the answer and every step beneath the steps and events it rests on, each event as
`tms.rules.cited` prints it. It is kept apart from the rules because it judges nothing: it
walks steps already read (`tms.rules.proof_steps`) and only has to stay bounded on a hostile
proof. So it is built iteratively (no recursion to exhaust), a step cited more than once is
expanded the first time and shown as "(shown above)" thereafter, events are expanded every time
they are cited (at most `MAX_FROM` a step), indentation stops growing at `MAX_TREE_DEPTH`
levels (deeper lines carry their depth), and output stops at about `MAX_TREE_CHARS` characters.

Pure; never raises.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from tms.rules.cited import Cited, clip, event_lines, short
from tms.rules.proof_steps import (
    EVENT,
    LATER,
    MISSING,
    OVER,
    SELF,
    SHOWN_JUNK_CHARS,
    STEP,
    Parsed,
    Step,
    classify,
    quoted,
)
from tms.types import EventId

MAX_TREE_DEPTH: Final = 40  # indentation levels; deeper lines are marked with their depth
MAX_TREE_CHARS: Final = 200_000  # the tree stops (with a note) once it is about this long


def tree_text(parsed: Parsed, events: Mapping[EventId, Cited], root: str | None) -> str:
    """The proof as an indented tree: the answer (`root`) first, then any other step no later
    step cites (a broken rule 2), each above what it rests on."""
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
            kind = classify(entry, item, found, event_ids, events)
            if kind == STEP:
                children.append((depth + 1, target))
            elif kind == EVENT:
                lines = expanded.get(entry)
                if lines is None:
                    lines = expanded[entry] = event_lines(entry, events[entry])
                children.append((depth + 1, lines))
            else:
                children.append((depth + 1, [_bad_ref_line(kind, entry, target, steps)]))
        stack.extend(reversed(children))
    return out.text()


class _Lines:
    """The tree's lines, indented up to MAX_TREE_DEPTH and cut off at about MAX_TREE_CHARS."""

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


def _bad_ref_line(kind: int, entry: str, target: int, steps: list[Step]) -> str:
    """The line that stands in the tree for an entry that breaks rule 1 (not followed)."""
    if kind in (SELF, LATER):
        return f"{steps[target].tree_name}: (cited out of order; not followed)"
    if kind == MISSING:
        return f"{short(entry)}: (not an event in this collection)"
    if kind == OVER:
        return f"{short(entry)}: (not checked: too many events cited)"
    return f"{quoted(clip(entry, SHOWN_JUNK_CHARS))}: (neither an event id nor an earlier step)"
