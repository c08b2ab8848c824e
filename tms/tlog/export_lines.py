"""One line of an export, read and checked: the part of an audit that runs line by line.

An export (`tms.ledger.read.export`) is one JSON line an event, in ledger order, and, when asked
for, a last *checkpoint line* that this module both writes (`checkpoint_line`, for the export)
and reads (`read_line`, `read_kept`), so the format has one home. Reading a line means parsing
it and checking its event's id and signature (step 1 of `tms.tlog.audit`): the CPU-bound part
of an audit, which `tms verify-export` spreads over worker processes (`read_lines`, one block
of lines a worker), so each line comes back as a small `Line` tuple holding only what the audit
of the whole file (`tms.tlog.audit`) and the replay (`tms.tlog.replay`) go on to read.

Pure: bytes in, lines out.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, NamedTuple

from tms.errors import InvalidEvent, LogError
from tms.nostr.events import Event, compact_json, is_hex64
from tms.rules.kinds import KINDS, unscoped_kinds
from tms.rules.membership import code_hash, parse_change, parse_request
from tms.types import KIND_JOIN, KIND_LEAVE, KIND_MEMBER_CHANGE, KIND_MEMBERS

CHECKPOINT_KEY: Final = "checkpoint"
Other = tuple[str, str | None]  # a profile or terms line: its id, and the entry before it


def checkpoint_line(note: str, entries: Sequence[str], others: Sequence[Other]) -> str:
    """The line an export ends with when asked: its signed checkpoint and what it covers."""
    listed = [list(other) for other in others]
    return compact_json({CHECKPOINT_KEY: note, "entries": list(entries), "others": listed})


class Line(NamedTuple):
    """One line of an export, as far as it could be read and checked (a tuple: workers send
    hundreds of thousands back, and tuples pickle several times faster than objects)."""

    number: int
    id: str | None  # the id the line claims (None: not an event at all)
    kind: int | None = None
    pubkey: str | None = None
    collection: str | None = None
    problem: str | None = None  # why it does not verify
    created_at: int | None = None
    cites: tuple[tuple[str, ...], ...] = ()  # what an entry cites, per reference of its kind
    listed: tuple[str, ...] | None = None  # a member list's members
    # a membership change's method and key (an invite's: its code hash); a join's ("join", its
    # code hash), a leave's ("leave", its signer)
    change: tuple[str, str] | None = None


@dataclass(frozen=True, slots=True)
class CheckpointLine:
    number: int
    note: str
    entries: list[str]
    others: list[Other]


def read_line(number: int, raw: bytes) -> Line | CheckpointLine:
    """Parse and check one line (its id and signature): the CPU-bound part of an audit."""
    if raw.startswith(b'{"' + CHECKPOINT_KEY.encode() + b'"'):
        try:
            return _checkpoint_line(number, json.loads(raw))
        except (ValueError, TypeError) as exc:
            return Line(number, None, problem=f"not an event nor a checkpoint line: {exc}")
    try:
        event = Event.from_json(raw)
    except InvalidEvent as exc:
        return Line(number, _claimed_id(raw), problem=f"not an event: {exc}")
    collection: str | None = None
    cites: tuple[tuple[str, ...], ...] = ()
    listed: tuple[str, ...] | None = None
    change: tuple[str, str] | None = None
    body_problem: str | None = None
    if event.kind == KIND_MEMBER_CHANGE:
        # Its collection and change are in its tags and body, the body checked against the
        # signed `payload` tag (`tms.rules.membership`).
        try:
            parsed = parse_change(event)
            collection, change = parsed.collection, (parsed.method, parsed.pubkey)
        except InvalidEvent as exc:
            body_problem = f"changed: {exc}"
    elif event.kind in (KIND_JOIN, KIND_LEAVE):
        # Its collection is the relay its AUTH event (in `body`) named; a join's claim is hashed
        # as the invite it used holds it.
        try:
            request = parse_request(event)
            collection = request.collection
            change = (
                ("join", code_hash(request.code))
                if request.code is not None
                else ("leave", request.pubkey)
            )
        except InvalidEvent as exc:
            body_problem = f"changed: {exc}"
    elif event.kind not in unscoped_kinds():
        try:
            content = json.loads(event.content)
        except ValueError:
            content = None
        if isinstance(content, dict):
            named = content.get("collection")
            collection = named if isinstance(named, str) else None
            cites = _cited(event.kind, content)
            listed = _listed(event.kind, content)
    try:
        event.verify()
        problem = body_problem
    except InvalidEvent as exc:
        problem = f"changed: {exc}"
    return Line(
        number,
        event.id,
        event.kind,
        event.pubkey,
        collection,
        problem,
        created_at=event.created_at,
        cites=cites,
        listed=listed,
        change=change,
    )


def _cited(kind: int, content: dict[str, object]) -> tuple[tuple[str, ...], ...]:
    """What an entry cites, one tuple per reference of its kind (`Kind.references`), for
    `tms.tlog.replay`."""
    known = KINDS.get(kind)
    return tuple(r.raw_ids(content) for r in known.references) if known is not None else ()


def _listed(kind: int, content: dict[str, object]) -> tuple[str, ...] | None:
    """Whom a member list lists, for `tms.tlog.replay`."""
    members = content.get("members")
    if kind != KIND_MEMBERS or not isinstance(members, list):
        return None
    return tuple(m for m in members if isinstance(m, str))


def read_lines(numbers: Sequence[int], raws: Sequence[bytes]) -> list[Line | CheckpointLine]:
    """`read_line` over a block of lines (a worker's share)."""
    return [read_line(number, raw) for number, raw in zip(numbers, raws, strict=True)]


def _checkpoint_line(number: int, obj: object) -> CheckpointLine:
    if not isinstance(obj, dict) or set(obj) != {CHECKPOINT_KEY, "entries", "others"}:
        raise ValueError('it must hold exactly "checkpoint", "entries" and "others"')
    note, entries, others = obj[CHECKPOINT_KEY], obj["entries"], obj["others"]
    if not isinstance(note, str):
        raise ValueError("its checkpoint must be a signed note")
    if not isinstance(entries, list) or not all(is_hex64(i) for i in entries):
        raise ValueError("its entries must be a list of event ids")
    if not isinstance(others, list) or not all(
        isinstance(o, list) and len(o) == 2 and is_hex64(o[0]) and (o[1] is None or is_hex64(o[1]))
        for o in others
    ):
        raise ValueError("its others must be a list of [event id, event id or null]")
    return CheckpointLine(number, note, entries, [(o[0], o[1]) for o in others])


def _claimed_id(raw: bytes) -> str | None:
    try:
        obj = json.loads(raw)
    except ValueError:
        return None
    claimed = obj.get("id") if isinstance(obj, dict) else None
    return claimed if isinstance(claimed, str) else None


def read_kept(text: str) -> list[str]:
    """The checkpoints in a file a member kept: a signed note, or JSON holding them (a
    checkpoint line, a `get_checkpoint` result, an export's last line)."""
    stripped = text.strip()
    if not stripped.startswith("{"):
        return [text]
    try:
        obj = json.loads(stripped.rsplit("\n", 1)[-1])  # JSON, or an export's last line
    except ValueError as exc:
        raise LogError(f"not a signed note, nor JSON holding one: {exc}") from None
    note = obj.get(CHECKPOINT_KEY, obj.get("note")) if isinstance(obj, dict) else None
    if isinstance(note, dict):
        note = note.get("note")
    if not isinstance(note, str):
        raise LogError('no checkpoint found: expected a signed note, or JSON with "note"')
    return [note]
