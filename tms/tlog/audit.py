"""Checking an export against its collection's signed log, offline: what `tms verify-export`
reports.

An export (`tms.ledger.read.export`) is the collection's events in ledger order, with the terms and
profiles of the keys that wrote them; asked for, it ends with a *checkpoint line*:
`{"checkpoint": <signed note>, "entries": [<event ids in log order>], "others": [[<id of a
profile or terms line>, <id of the entry just before it, or null>], ...]}`, a JSON object no
event can be (it has no `id`). The audit:

1. checks every event line's id and signature (a changed line is named): done line by line,
   before the audit, by `tms.tlog.export_lines.read_line`;
2. opens every checkpoint (the export's own, and any the member kept) with the server's
   verifier key, and learns the collection from the checkpoints' origin `<host>/c/<slug>`;
3. rebuilds the tree from the collection's events in file order, and checks that its first
   `size` entries hash to each checkpoint's root;
4. with the checkpoint line's entries (authentic once they hash to the signed root), names
   exactly what is missing, extra or out of order, by line and id; its `others` (not covered
   by the signature: profiles and terms are not entries) name a dropped profile or terms line.

With no checkpoint at all (an export taken without `?checkpoint=1`, and none kept), steps 2 to 4
cannot run: the lines are still checked (step 1), and the file against itself
(`tms.tlog.replay`: one collection, no repeats, every citation earlier in the file, every author
the owner or a member then), and the report says that nothing proves the file whole.

Pure: read lines in (`tms.tlog.export_lines.Line`), a report out. Reading the file and
spreading the signature checks over the CPUs is the CLI's (`tms.cli.verify_export`).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Final

from tms.errors import LogError, shown
from tms.rules.kinds import unscoped_kinds
from tms.tlog.export_lines import CheckpointLine, Line
from tms.tlog.merkle import CompactRange, leaf_hash, root_of
from tms.tlog.note import Checkpoint, NoteVerifier, open_checkpoint, origin_slug
from tms.tlog.policy import Policy
from tms.tlog.replay import replay
from tms.types import KIND_JOIN, KIND_LEAVE, KIND_TERMS

MAX_REPORTED: Final = 1000  # problems printed; the count is always exact
NO_CHECKPOINT: Final = (
    "no checkpoint: the export has no checkpoint line, and none was given, so nothing proves "
    "that it holds every event of its collection; its lines were checked, and the file against "
    "itself (ids, signatures, terms, citations, authors). To prove it whole, export it with its "
    "checkpoint (tms export --checkpoint SLUG, or /c/SLUG/export.jsonl?checkpoint=1), or give "
    "a checkpoint you kept from publish or get_checkpoint (--checkpoint FILE)"
)


@dataclass
class Report:
    problems: list[tuple[float, str]] = field(default_factory=list)  # (line, text), for order
    findings: list[str] = field(default_factory=list)  # what was checked and held
    events: int = 0  # lines that are events whose id and signature verify
    entries: int = 0  # lines that are entries of the collection's log
    collection: str | None = None  # whose log: from the checkpoints, else the first entry
    unproven: str | None = None  # why nothing proves the file whole (no checkpoint)

    def problem(self, text: str, line: float = float("inf")) -> None:
        self.problems.append((line, text))

    @property
    def ok(self) -> bool:
        """Every check held, and a checkpoint proves the file whole."""
        return not self.problems and self.unproven is None

    def lines(self) -> list[str]:
        """What to print: every problem by line (the first MAX_REPORTED), then findings, then
        what is left unproven."""
        ordered = [text for _, text in sorted(self.problems, key=lambda p: p[0])]
        if len(ordered) > MAX_REPORTED:
            ordered = [*ordered[:MAX_REPORTED], f"... and {len(ordered) - MAX_REPORTED} more"]
        return [*ordered, *self.findings, *([self.unproven] if self.unproven else [])]

    def summary(self) -> str:
        """The last line `tms verify-export` prints."""
        count = len(self.problems)
        of = f" of '{self.collection}'" if self.collection else ""
        counted = f"{self.events} events verified, {self.entries} log entries{of}"
        if count:
            return f"{counted}: {count} problem" + ("s" if count > 1 else "")
        if self.unproven:
            return f"{counted}: no problem found, but not proven whole (no checkpoint)"
        return f"{counted}: OK"


def audit(
    items: Iterable[Line | CheckpointLine],
    verifier: NoteVerifier,
    kept: Sequence[str] = (),
    policy: Policy | None = None,
) -> Report:
    """Check an export's lines (in file order) against its own checkpoint line, if it ends
    with one, and against the checkpoints the member `kept` (signed notes). With a witness
    `policy`, the checkpoint that proves the file whole (its own, else the largest kept) must
    carry cosignatures by the policy's quorum; every checkpoint's witnesses are named."""
    report = Report()
    lines: list[Line] = []
    record: CheckpointLine | None = None
    for item in items:
        if record is not None:  # a checkpoint line is the last line, or not one at all
            report.problem(f"line {record.number}: a checkpoint line before the end", record.number)
            record = None
        if isinstance(item, CheckpointLine):
            record = item
        else:
            lines.append(item)
    if record is None and not kept:
        _alone(lines, report)
        return report
    checkpoints = _open(record, kept, verifier, report)
    if not checkpoints:
        return report
    if policy is not None:
        notes = ([record.note] if record is not None else []) + list(kept)
        _witnessed(notes, checkpoints, verifier, policy, report)
    origin = checkpoints[0].origin
    slug = origin_slug(origin)
    if any(c.origin != origin for c in checkpoints) or slug is None:
        names = ", ".join(sorted({c.origin for c in checkpoints}))
        report.problem(f"the checkpoints are not of one TMS collection's log: {names}")
        return report
    report.collection = slug
    entries = [(e.number, e.id) for e in _entries(lines, slug, report) if e.id is not None]
    _check_roots(entries, checkpoints, report)
    if record is not None:
        _compare(entries, record, checkpoints[0], report)
        _compare_others(lines, record, report)
    return report


def _witnessed(
    notes: Sequence[str],
    checkpoints: Sequence[Checkpoint],
    verifier: NoteVerifier,
    policy: Policy,
    report: Report,
) -> None:
    """Who cosigned each checkpoint, and whether the one that proves the file whole (the
    export's own, the first; else the largest kept) has the policy's quorum."""
    if policy.logs and verifier.public not in {log.public for log in policy.logs}:
        report.problem("the log key given is not one of the policy's logs")
    proving = 0 if len(notes) == 1 else max(range(len(notes)), key=lambda i: checkpoints[i].size)
    for i, (note, checkpoint) in enumerate(zip(notes, checkpoints, strict=True)):
        try:
            verdict = policy.judge(note)
        except LogError as exc:
            report.problem(f"the checkpoint at size {checkpoint.size}: {exc}")
            continue
        who = ", ".join(policy.named(verdict.names)) or "no witness of the policy"
        said = f"the checkpoint at size {checkpoint.size} is cosigned by {who}"
        if verdict.quorum:
            report.findings.append(f"{said}: the policy's quorum ({verdict.needed}) holds")
        elif i == proving:
            report.problem(
                f"{said}: not the policy's quorum ({verdict.needed}); export with "
                "?checkpoint=cosigned (the file then ends at the newest checkpoint the "
                "witnesses cosigned), or export again once they have cosigned this one"
            )
        else:
            report.findings.append(f"{said}: not the policy's quorum ({verdict.needed})")


def _alone(lines: list[Line], report: Report) -> None:
    """No checkpoint: every line checked, and the file against itself, its collection learned
    from its first entry."""
    report.unproven = NO_CHECKPOINT
    unscoped = unscoped_kinds()
    slug = next(
        (line.collection for line in lines if line.kind is not None and line.kind not in unscoped),
        None,
    )
    if slug is None:  # no entry at all, or the first names no collection
        for line in lines:
            if line.problem is not None:
                report.problem(f"{_named(line)}: {line.problem}", line.number)
            else:
                report.events += 1
        _check_terms(lines, report)
        return
    report.collection = slug
    replay(_entries(lines, slug, report), slug, report.problem)


def _open(
    record: CheckpointLine | None, kept: Sequence[str], verifier: NoteVerifier, report: Report
) -> list[Checkpoint]:
    """Every checkpoint whose signature holds, the export's own first."""
    opened = []
    notes = [("the export's checkpoint line", record.note)] if record is not None else []
    notes += [(f"checkpoint {i + 1} given", note) for i, note in enumerate(kept)]
    for where, note in notes:
        try:
            opened.append(open_checkpoint(note, verifier))
        except LogError as exc:
            report.problem(f"{where}: {exc}")
    if len(opened) < len(notes):
        return []
    return opened


def _entries(lines: list[Line], slug: str, report: Report) -> list[Line]:
    """The collection's log entries in file order, each line's problems noted."""
    entries = []
    unscoped = unscoped_kinds()
    for line in lines:
        if line.problem is not None:
            report.problem(f"{_named(line)}: {line.problem}", line.number)
        else:
            report.events += 1
        if line.id is None or line.kind is None or line.kind in unscoped:
            continue
        if line.collection != slug:
            where = shown(line.collection) if line.collection else "no collection"
            report.problem(
                f"{_named(line)}: extra: an event of {where}, not of '{slug}'", line.number
            )
            continue
        entries.append(line)
    report.entries = len(entries)
    _check_terms(lines, report)
    return entries


def _named(line: Line) -> str:
    return f"line {line.number}" + (f" ({shown(line.id)})" if line.id else "")


def _check_terms(lines: list[Line], report: Report) -> None:
    """Every author signs the terms before its first write, so an export that can be
    published again holds each author's terms before the author's first entry."""
    signed: set[str] = set()
    unscoped = unscoped_kinds()
    for line in lines:
        if line.kind == KIND_TERMS and line.pubkey is not None:
            signed.add(line.pubkey)
        elif (
            line.kind is not None
            and line.kind not in unscoped
            and line.kind not in (KIND_JOIN, KIND_LEAVE)  # a join or leave needs no terms
            and line.pubkey is not None
            and line.pubkey not in signed
        ):
            signed.add(line.pubkey)  # named once, at the author's first entry
            report.problem(
                f"line {line.number} ({line.id}): its author {line.pubkey} signed no terms "
                "earlier in the file: a terms line is missing or out of order",
                line.number,
            )


def _check_roots(
    entries: list[tuple[int, str]], checkpoints: list[Checkpoint], report: Report
) -> None:
    """Step 3: the tree rebuilt from the file, at each checkpoint's size."""
    tree = CompactRange()
    for checkpoint in sorted(checkpoints, key=lambda c: c.size):
        if checkpoint.size > len(entries):
            report.problem(
                f"the file holds {len(entries)} entries of {checkpoint.origin}, but the "
                f"checkpoint signed {checkpoint.size}: {checkpoint.size - len(entries)} missing"
            )
            continue
        ids = (bytes.fromhex(i) for _, i in entries[tree.size : checkpoint.size])
        tree.append(leaf_hash(i) for i in ids)
        if tree.root() == checkpoint.root:
            report.findings.append(
                f"the first {checkpoint.size} entries hash to the root signed at size "
                f"{checkpoint.size} ({checkpoint.origin})"
            )
        else:
            report.problem(
                f"the file's first {checkpoint.size} entries do not hash to the root signed at "
                f"size {checkpoint.size}: an entry is missing, extra, changed or out of order"
            )
    largest = max(c.size for c in checkpoints)
    if len(entries) > largest:
        report.findings.append(
            f"{len(entries) - largest} entries after entry {largest} are newer than every "
            "checkpoint given"
        )


def _compare(
    entries: list[tuple[int, str]], record: CheckpointLine, own: Checkpoint, report: Report
) -> None:
    """Step 4: the file's entries against the log's, named one by one."""
    log = record.entries
    if len(log) != own.size or root_of(leaf_hash(bytes.fromhex(i)) for i in log) != own.root:
        report.problem(
            f"line {record.number}: its entries do not hash to the root it signs: the "
            "checkpoint line was altered, so what is missing cannot be named",
            record.number,
        )
        return
    if [i for _, i in entries] == log:
        return
    place = {event_id: index for index, event_id in enumerate(log)}
    seen: dict[str, int] = {}
    kept: list[tuple[int, int, str]] = []  # (log index, line, id), first occurrences in the log
    for number, event_id in entries:
        if event_id in seen:
            report.problem(
                f"line {number} ({event_id}): extra: repeats line {seen[event_id]}", number
            )
            continue
        seen[event_id] = number
        if event_id not in place:
            report.problem(f"line {number} ({event_id}): extra: not in the log", number)
        else:
            kept.append((place[event_id], number, event_id))
    in_order = _longest_increasing([index for index, _, _ in kept])
    for index, number, event_id in kept:
        if index not in in_order:
            report.problem(
                f"line {number} ({event_id}): out of order: it is entry {index} of the log",
                number,
            )
    line_of = {index: number for index, number, _ in kept}
    previous = 0.0
    for index, event_id in enumerate(log):
        if index in line_of:
            previous = line_of[index]
        elif event_id not in seen:
            where = f"after line {int(previous)}" if previous else "before the first entry"
            report.problem(f"missing: entry {index} of the log ({event_id}), {where}", previous)


def _compare_others(lines: list[Line], record: CheckpointLine, report: Report) -> None:
    """The profile and terms lines the export listed, each after the entry it followed (not
    signed: profiles and terms are no log's entries, so this catches a line lost or moved in
    the file, not a server that hides one)."""
    found: list[tuple[int, str, str | None]] = []  # (line, id, the entry before it)
    entries: set[str] = set()
    before: str | None = None
    unscoped = unscoped_kinds()
    for line in lines:
        if line.id is None or line.kind is None:
            continue
        if line.kind not in unscoped:
            before = line.id
            entries.add(line.id)
        elif line.kind in unscoped:
            found.append((line.number, line.id, before))
    listed = dict(record.others)
    present = {event_id for _, event_id, _ in found}
    for number, event_id, after in found:
        if event_id not in listed:
            report.problem(f"line {number} ({event_id}): extra: not listed by the export", number)
        elif listed[event_id] != after and (listed[event_id] or "") in entries | {""}:
            where = f"entry {listed[event_id]}" if listed[event_id] else "the first entry"
            side = "after" if listed[event_id] else "before"
            report.problem(
                f"line {number} ({event_id}): out of place: the export wrote it {side} {where}",
                number,
            )
    order = [event_id for event_id, _ in record.others if event_id in present]
    in_file = [(number, event_id) for number, event_id, _ in found if event_id in listed]
    for (number, event_id), expected in zip(in_file, order, strict=True):
        if event_id != expected:
            report.problem(f"line {number} ({event_id}): out of order among profiles and terms")
            break
    for event_id, _ in record.others:
        if event_id not in present:
            report.problem(
                f"missing: the profile or terms line {event_id} the export listed (profiles "
                "and terms are not log entries: the signature does not cover them)"
            )


def _longest_increasing(values: list[int]) -> set[int]:
    """The values of one longest strictly increasing subsequence (patience sorting)."""
    tails: list[int] = []  # tails[k]: smallest tail of an increasing run of length k + 1
    tail_at: list[int] = []  # positions of those tails in `values`
    before = [-1] * len(values)
    for position, value in enumerate(values):
        k = bisect.bisect_left(tails, value)
        if k == len(tails):
            tails.append(value)
            tail_at.append(position)
        else:
            tails[k] = value
            tail_at[k] = position
        before[position] = tail_at[k - 1] if k else -1
    chosen: set[int] = set()
    position = tail_at[-1] if tail_at else -1
    while position >= 0:
        chosen.add(values[position])
        position = before[position]
    return chosen
