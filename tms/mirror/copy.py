"""A member's verified copy of one collection, on disk, and the checks that keep it honest.

The directory holds two files, and a third while a sync is under way:

- `copy.jsonl`: the collection's events exactly as signed, one JSON line each, in the export's
  format and order (its log entries in log order; each profile and terms line where the server
  says the export places it: `GET /c/<slug>/others`, `tms.rules.export_order`), so that
  `tms verify-export copy.jsonl --checkpoint state.json --key ...` checks it like an export;
- `state.json`: the last checkpoint the copy was verified against (its note, cosignatures
  included, size and root), the relay and log key it came from, how many bytes of
  `copy.jsonl` that checkpoint covers, their SHA-256 and the log's tree at that size (so a
  copy opens without hashing its entries again, and any byte changed in it is caught);
- `pending.jsonl`: the events fetched and checked (id and signature) that no checkpoint covers
  yet, appended as they come, so that a mirror stopped during a long first sync resumes from
  what it had fetched, not from nothing. Never part of the copy: each line is checked again
  when the directory is opened, a line cut short is dropped, and an event goes into
  `copy.jsonl` only as the log's entries and root say.

A sync only ever appends to `copy.jsonl`, and only after every check held; then it replaces
`state.json` atomically (written beside it, flushed, renamed). So a process killed at any point
leaves a directory whose `state.json` describes a valid prefix of `copy.jsonl`: bytes past it
(an append cut short) are dropped when the copy is opened again, and nothing verified is ever
rewritten. A check that fails changes nothing at all.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Final

from tms.errors import LogError, TMSError
from tms.nostr.events import Event
from tms.rules.kinds import unscoped_kinds
from tms.tlog.merkle import CompactRange, leaf_hash
from tms.tlog.note import Checkpoint

COPY: Final = "copy.jsonl"
STATE: Final = "state.json"
PENDING: Final = "pending.jsonl"
# How this side writes a line (`Event.to_json`): its fields in NIP-01's order, compact. Opening a
# copy reads only this head of each line (what it needs: id, time, kind), not the whole
# JSON; a line that does not start so is read as JSON.
_HEAD: Final = re.compile(
    rb'\{"id":"([0-9a-f]{64})","pubkey":"([0-9a-f]{64})","created_at":([0-9]{1,15}),'
    rb'"kind":([0-9]{1,10}),"tags":'
)


class MirrorMismatch(LogError):
    """The server's history and the copy's, or two of its checkpoints, disagree."""


@dataclass(frozen=True, slots=True)
class State:
    relay: str
    collection: str
    log_key: str
    size: int
    root: str  # hex
    note: str  # the checkpoint as kept: the log's signature and the witnesses'
    bytes: int  # of copy.jsonl this checkpoint covers
    written: tuple[str, ...] = ()  # ids of the profile and terms lines already in the copy
    # SHA-256 of those `bytes` of copy.jsonl: any changed byte of the copy is caught on opening
    # it, and the log's tree is not hashed again (`frontier`). Empty in a copy an older release
    # kept: its entries are hashed again, as they were then.
    digest: str = ""
    frontier: tuple[str, ...] = ()  # the log's tree at `size` (`CompactRange.hashes`), hex


class Copy:
    """The directory, opened: what it has verified so far, and the events it holds."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.state: State | None = None
        self.entries: list[str] = []  # log entries in the copy, in log order
        self.events: dict[str, str] = {}  # id -> its line, for every event in the copy
        self.tree = CompactRange()
        self.stamps: dict[str, int] = {}  # id -> created_at, for every event in the copy
        self.pending: dict[str, Event] = {}  # fetched and checked, not yet covered by the log
        self.digest = hashlib.sha256()  # of copy.jsonl so far (`State.digest`)

    @classmethod
    def open(cls, directory: Path) -> Copy:
        directory.mkdir(parents=True, exist_ok=True)
        copy = cls(directory)
        copy._read()
        copy._read_pending()
        return copy

    def _read(self) -> None:
        copy, directory = self, self.directory
        state_path = directory / STATE
        if not state_path.exists():
            return
        try:
            raw = json.loads(state_path.read_text("utf-8"))
            tuples = {k: tuple(raw.get(k, ())) for k in ("written", "frontier")}
            state = State(**{**raw, **tuples})
        except (OSError, ValueError, TypeError) as exc:
            raise LogError(f"{state_path} cannot be read: {exc}") from None
        copy.state = state
        path = directory / COPY
        unscoped = unscoped_kinds()
        leaves: list[bytes] = []
        with open(path, "r+b") as file:
            file.truncate(state.bytes)  # an append a kill cut short is not part of the copy
            file.seek(0)
            data = file.read()
        copy.digest.update(data)
        if state.digest and copy.digest.hexdigest() != state.digest:
            raise MirrorMismatch(
                f"{path} is not the copy {state_path} describes (its SHA-256 differs): the "
                "copy was changed by hand"
            )
        # Each line's head (id, time, kind), not a checked event: this side wrote it
        # after checking it, and the digest above (or, in a copy kept without one, the root
        # below) catches a changed line; a second run over a large copy starts in a fraction
        # of the time (tms verify-export checks every line whole).
        for number, raw_line in enumerate(data.splitlines(), 1):
            head = _HEAD.match(raw_line)
            if head is not None:
                event_id, stamp, kind = head[1].decode(), int(head[3]), int(head[4])
            else:
                event_id, stamp, kind = _fields(raw_line, path, number)
            copy.events[event_id] = raw_line.decode("utf-8", errors="replace")
            copy.stamps[event_id] = stamp
            if kind not in unscoped:
                copy.entries.append(event_id)
                if not state.digest:
                    leaves.append(leaf_hash(bytes.fromhex(event_id)))
        if state.digest:
            copy.tree = CompactRange(len(copy.entries), [bytes.fromhex(h) for h in state.frontier])
        else:
            copy.tree.append(leaves)
        if len(copy.entries) != state.size or copy.tree.root().hex() != state.root:
            raise MirrorMismatch(
                f"{path} does not hash to the checkpoint {state_path} keeps "
                f"(size {state.size}, root {state.root}): the copy was changed by hand"
            )

    def _read_pending(self) -> None:
        """The events a stopped sync had fetched: each checked again; the file ends at the
        last whole line (a line a kill cut short is dropped), and is dropped whole if any
        line is not an event this side checked (it is only ever a head start)."""
        path = self.directory / PENDING
        if not path.exists():
            return
        found: dict[str, Event] = {}
        whole = 0
        try:
            with open(path, "r+b") as file:
                for raw in file:
                    if not raw.endswith(b"\n"):
                        break
                    event = Event.from_json(raw[:-1].decode("utf-8"))
                    event.verify()
                    whole += len(raw)
                    if event.id not in self.events:
                        found[event.id] = event
                file.truncate(whole)
        except (ValueError, TMSError):
            path.unlink()
            return
        self.pending = found

    def hold(self, events: Iterable[Event]) -> None:
        """Events fetched and checked, kept aside (`pending.jsonl`) until the log covers them."""
        fresh = [e for e in events if e.id not in self.events and e.id not in self.pending]
        if not fresh:
            return
        with open(self.directory / PENDING, "ab") as file:
            file.write("".join(f"{e.to_json()}\n" for e in fresh).encode("utf-8"))
            file.flush()
            os.fsync(file.fileno())
        for event in fresh:
            self.pending[event.id] = event

    def forget(self, ids: Iterable[str]) -> None:
        """Pending events the relay no longer serves (NIP-77 says only this side holds them):
        nothing of its log can cover them, so they are not kept sync after sync."""
        gone = [i for i in ids if i in self.pending]
        for event_id in gone:
            del self.pending[event_id]
        if gone:
            self._settle()

    def extend(
        self,
        checkpoint: Checkpoint,
        note: str,
        entries: Sequence[str],
        events: Mapping[str, Event],
        places: Sequence[tuple[str, str | None]],
        *,
        relay: str,
        collection: str,
        log_key: str,
    ) -> int:
        """Verify the log's `entries` (all of them, in log order, as the log's tiles give them)
        against the copy and `checkpoint`, then append what is new, with the profile and terms
        lines where `places` puts them (`_new_lines`), and keep the checkpoint.
        Raises `MirrorMismatch`, naming what differs, before anything is written. Returns how
        many entries were added."""
        held = len(self.entries)
        if len(entries) != checkpoint.size:
            raise MirrorMismatch(
                f"the log's tiles give {len(entries)} entries, its checkpoint says "
                f"{checkpoint.size}"
            )
        if checkpoint.size < held:
            raise MirrorMismatch(
                f"the server's checkpoint (size {checkpoint.size}) is smaller than the one this "
                f"copy keeps (size {held}): it does not extend it"
            )
        for index, (mine, theirs) in enumerate(zip(self.entries, entries, strict=False)):
            if mine != theirs:
                raise MirrorMismatch(
                    f"entry {index} differs: the copy holds {mine}, the server's log now says "
                    f"{theirs}: the history this copy verified was rewritten"
                )
        tree = CompactRange(self.tree.size, list(self.tree.hashes))
        tree.append(leaf_hash(bytes.fromhex(i)) for i in entries[held:])
        if tree.root() != checkpoint.root:
            raise MirrorMismatch(
                f"the log's entries hash to root {tree.root().hex()} at size {checkpoint.size}, "
                f"but its checkpoint signs root {checkpoint.root.hex()}"
            )
        missing = [i for i in entries[held:] if i not in events]
        if missing:
            raise MirrorMismatch(
                f"{len(missing)} entries of the log were not served as events (the first: "
                f"{missing[0]}): the relay hides events its log holds"
            )
        lines = self._new_lines(entries[held:], events, places)
        path = self.directory / COPY
        start = self.state.bytes if self.state is not None else 0
        data = "".join(f"{line}\n" for _, line in lines).encode("utf-8")
        digest = self.digest.copy()
        digest.update(data)
        with open(path, "ab") as file:
            file.truncate(start)
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        self.digest = digest
        for event_id, line in lines:
            self.events[event_id] = line
            self.stamps[event_id] = events[event_id].created_at
        self.entries.extend(entries[held:])
        self.tree = tree
        written = (self.state.written if self.state is not None else ()) + tuple(
            event_id for event_id, _ in lines if events[event_id].kind in unscoped_kinds()
        )
        self._keep(
            State(
                relay,
                collection,
                log_key,
                checkpoint.size,
                checkpoint.root.hex(),
                note,
                start + len(data),
                written,
                digest.hexdigest(),
                tuple(h.hex() for h in tree.hashes),
            )
        )
        self._settle()
        return len(entries) - held

    def _settle(self) -> None:
        """`pending.jsonl` without the events the copy now holds (written beside it, then
        renamed; gone when nothing is left)."""
        for event_id in [i for i in self.pending if i in self.events]:
            del self.pending[event_id]
        path = self.directory / PENDING
        if not self.pending:
            path.unlink(missing_ok=True)
            return
        temporary = path.with_suffix(".jsonl.new")
        with open(temporary, "wb") as file:
            file.write("".join(f"{e.to_json()}\n" for e in self.pending.values()).encode("utf-8"))
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)

    def _new_lines(
        self,
        new_entries: Sequence[str],
        events: Mapping[str, Event],
        places: Sequence[tuple[str, str | None]],
    ) -> list[tuple[str, str]]:
        """The new entries' lines in log order, and the profile and terms lines where the
        server places them (`GET /c/<slug>/others`: the export's own order, as
        `tms.rules.export_order` defines it), each after the entry it names (None: the log's
        start); those already in the copy stay where they are. A place outside what this sync
        appends, or a line the relay did not serve as a profile or terms, is refused."""
        unscoped = unscoped_kinds()
        last = self.entries[-1] if self.entries else None
        open_gaps = {last, *new_entries}
        gaps: dict[str | None, list[str]] = {}
        placed: set[str] = set()
        for other_id, after in places:
            if after not in open_gaps:
                raise MirrorMismatch(
                    f"the server places the profile or terms line {other_id} after "
                    f"{after or 'the log start'}, not among the entries this sync appends: "
                    "the copy cannot hold it where the export does"
                )
            if other_id in self.events or other_id in placed:
                continue
            event = events.get(other_id)
            if event is None or event.kind not in unscoped:
                raise MirrorMismatch(
                    f"the server places {other_id} as a profile or terms line, but the relay "
                    "did not serve it as one"
                )
            placed.add(other_id)
            gaps.setdefault(after, []).append(other_id)
        out = [(i, events[i].to_json()) for i in gaps.get(last, ())]
        for event_id in new_entries:
            out.append((event_id, events[event_id].to_json()))
            out += [(i, events[i].to_json()) for i in gaps.get(event_id, ())]
        return out

    def _keep(self, state: State) -> None:
        path = self.directory / STATE
        temporary = path.with_suffix(".json.new")
        data: dict[str, Any] = asdict(state)
        data["written"] = list(state.written)
        data["frontier"] = list(state.frontier)
        with open(temporary, "w", encoding="utf-8") as file:
            file.write(json.dumps(data) + "\n")  # one line: `read_kept` reads a file's last
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
        directory = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)
        self.state = state


def _fields(raw: bytes, path: Path, number: int) -> tuple[str, int, int]:
    """A line's id, time and kind, read as JSON (a line this side did not write in
    its own form): a line that is no event means the copy was changed by hand."""
    try:
        fields = json.loads(raw)
        event_id, pubkey = fields["id"], fields["pubkey"]
        stamp, kind = fields["created_at"], fields["kind"]
        bytes.fromhex(event_id)
        if not (isinstance(stamp, int) and isinstance(kind, int) and isinstance(pubkey, str)):
            raise TypeError
    except (ValueError, TypeError, KeyError):
        raise MirrorMismatch(
            f"{path}, line {number}, is not an event: the copy was changed by hand"
        ) from None
    return event_id, stamp, kind
