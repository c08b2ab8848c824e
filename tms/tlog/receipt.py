"""Receipts for one record: a C2SP `tlog-proof` (c2sp.org/tlog-proof@v1) that a collection's log
holds one event, checkable offline by anyone holding the server's log key (and, to demand
witnesses, a policy).

A receipt is text: the line `c2sp.org/tlog-proof@v1`; `extra <base64>`, the event itself as
one line of NIP-01 JSON (the spec's opaque extra data: not trusted, which is why the event's id
and signature are checked and the id is what the log holds); `index <n>`, the event's zero-based
place in its collection's log; the RFC 6962 inclusion path, one base64 hash a line, from the
leaf's sibling up; a blank line; and the checkpoint note verbatim, the log's signature and any
witnesses' cosignatures included. Write it to a `.tlog-proof` file.

Checking it (`check_receipt`) goes step by step, and a failure names its step (`STEPS`):
the receipt's format; the event (its id is the SHA-256 of its fields, its BIP-340 signature is
its pubkey's); the checkpoint's signature by the log key; the entry (the event is a record of
the collection the checkpoint's origin names, and its log entry is the event's 32-byte id); the
inclusion of the entry's leaf hash at that index against the checkpoint's root; and, with a
witness policy, that its quorum cosigned the checkpoint.

Pure: text in, a verdict out; no database, no network.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from tms.errors import InvalidEvent, LogError, shown
from tms.nostr.events import Event
from tms.rules.kinds import KINDS, collection_of, validate_content
from tms.tlog.merkle import HASH_SIZE, leaf_hash, verify_inclusion
from tms.tlog.note import (
    MAX_NOTE_CHARS,
    MAX_TREE_SIZE,
    Checkpoint,
    NoteVerifier,
    decode_base64,
    origin_slug,
    split_note,
)
from tms.tlog.policy import Policy

HEADER: Final = "c2sp.org/tlog-proof@v1"
EXTENSION: Final = ".tlog-proof"
MEDIA_TYPE: Final = "text/plain; charset=utf-8"
MAX_PATH: Final = 63  # a tree below 2**63 leaves has at most 63 levels
# The event's JSON (2,000,000 characters of content, up to 4 bytes each, in base64) and a note.
MAX_RECEIPT_CHARS: Final = 12 * 1024 * 1024
_INDEX: Final = re.compile(r"index (0|[1-9][0-9]{0,18})")

FORMAT: Final = "format"
EVENT: Final = "event"
ENTRY: Final = "entry"
LOG_SIGNATURE: Final = "log signature"
INCLUSION: Final = "inclusion"
QUORUM: Final = "quorum"
STEPS: Final = (FORMAT, EVENT, LOG_SIGNATURE, ENTRY, INCLUSION, QUORUM)  # in checking order


class ReceiptRefused(LogError):
    """A receipt that does not prove what it says, naming the step that failed."""

    def __init__(self, step: str, message: str) -> None:
        super().__init__(f"{step}: {message}")
        self.step = step
        self.reason = message


@dataclass(frozen=True, slots=True)
class Receipt:
    """A tlog-proof's parts, as the text carries them."""

    index: int
    path: tuple[bytes, ...]
    note: str  # the checkpoint, verbatim: its text, a blank line, its signature lines
    extra: bytes | None = None  # the event's JSON (not authenticated by the proof itself)

    def encode(self) -> str:
        lines = [HEADER]
        if self.extra is not None:
            lines.append(f"extra {base64.b64encode(self.extra).decode('ascii')}")
        lines.append(f"index {self.index}")
        lines.extend(base64.b64encode(h).decode("ascii") for h in self.path)
        return "\n".join(lines) + "\n\n" + self.note

    @classmethod
    def parse(cls, text: str) -> Receipt:
        """The parts of a receipt's text, or `ReceiptRefused` at the format step."""
        if len(text) > MAX_RECEIPT_CHARS:
            raise ReceiptRefused(FORMAT, f"the receipt is longer than {MAX_RECEIPT_CHARS:,}")
        head, sep, note = text.partition("\n\n")
        if not sep:
            raise ReceiptRefused(FORMAT, "no blank line before the checkpoint")
        lines = head.split("\n")
        if lines[0] != HEADER:
            raise ReceiptRefused(FORMAT, f"the first line is not {HEADER}")
        at = 1
        extra = None
        if at < len(lines) and lines[at].startswith("extra "):
            extra = _decoded(lines[at][len("extra ") :], "the extra data")
            at += 1
        if at >= len(lines) or not _INDEX.fullmatch(lines[at]):
            raise ReceiptRefused(FORMAT, "no 'index <n>' line (a decimal, no leading zeros)")
        index = int(lines[at].split(" ")[1])
        if index >= MAX_TREE_SIZE:
            raise ReceiptRefused(FORMAT, "the index is beyond any log's size")
        hashes = lines[at + 1 :]
        if len(hashes) > MAX_PATH:
            raise ReceiptRefused(FORMAT, f"the inclusion path is longer than {MAX_PATH} hashes")
        path = []
        for number, line in enumerate(hashes, 1):
            value = _decoded(line, f"hash {number} of the inclusion path")
            if len(value) != HASH_SIZE:
                raise ReceiptRefused(FORMAT, f"hash {number} of the inclusion path is not 32 bytes")
            path.append(value)
        if len(note) > MAX_NOTE_CHARS:
            raise ReceiptRefused(FORMAT, f"the checkpoint is longer than {MAX_NOTE_CHARS:,}")
        try:
            split_note(note)
        except LogError as exc:
            raise ReceiptRefused(FORMAT, f"the checkpoint is not a signed note: {exc}") from None
        return cls(index, tuple(path), note, extra)


def make_receipt(event: Event, index: int, path: Sequence[bytes], note: str) -> str:
    """The receipt's text for an event at `index` of a log, proved by `path` against the
    checkpoint `note` (the log's signature and any cosignatures)."""
    return Receipt(index, tuple(path), note, event.to_json().encode("utf-8")).encode()


@dataclass(frozen=True, slots=True)
class Verified:
    """What a receipt proved: which event, where, in which log, and who vouched."""

    event: Event
    collection: str
    index: int
    checkpoint: Checkpoint
    witnessed_by: tuple[str, ...]  # the policy's names of the witnesses that cosigned
    quorum: str | None  # the policy's quorum in words; None without a policy

    def lines(self) -> list[str]:
        """One line a step, as `tms verify-receipt` prints them."""
        checkpoint = self.checkpoint
        said = [
            f"{FORMAT}: ok ({HEADER})",
            f"{EVENT}: ok (id {self.event.id}, signed by {self.event.pubkey})",
            f"{LOG_SIGNATURE}: ok ({checkpoint.origin}, {checkpoint.size:,} entries)",
            f"{ENTRY}: ok (kind {self.event.kind}, filed in collection '{self.collection}')",
            f"{INCLUSION}: ok (entry {self.index:,} of {checkpoint.size:,})",
        ]
        if self.quorum is not None:
            who = ", ".join(self.witnessed_by) or "nobody"
            said.append(f"{QUORUM}: ok ({self.quorum}; cosigned by {who})")
        return said


def check_receipt(
    text: str,
    *,
    event: Event | None = None,
    event_id: str | None = None,
    log_keys: Sequence[NoteVerifier] = (),
    policy: Policy | None = None,
) -> Verified:
    """Check a receipt offline, or `ReceiptRefused` naming the step that failed.

    The event is `event` when given (then the receipt's extra data, if any, must be that very
    event), else the receipt's extra data; `event_id`, when given, is the id it must have. The
    checkpoint must carry a signature by one of `log_keys`, else by a log the policy names."""
    receipt = Receipt.parse(text)
    held = _event(receipt, event, event_id)
    checkpoint = _signed(receipt.note, [*log_keys, *(policy.logs if policy else ())])
    slug = _entry(held)
    if origin_slug(checkpoint.origin) != slug:
        raise ReceiptRefused(
            ENTRY,
            f"the event is filed in collection '{slug}', but the checkpoint is of the log "
            f"{shown(checkpoint.origin)!r}",
        )
    if not verify_inclusion(
        leaf_hash(bytes.fromhex(held.id)),
        receipt.index,
        checkpoint.size,
        receipt.path,
        checkpoint.root,
    ):
        raise ReceiptRefused(
            INCLUSION,
            f"the path does not lead from entry {receipt.index:,} (this event's id) to the "
            f"root of the checkpoint of {checkpoint.size:,} entries",
        )
    if policy is None:
        return Verified(held, slug, receipt.index, checkpoint, (), None)
    try:
        verdict = policy.judge(receipt.note)
    except LogError as exc:
        raise ReceiptRefused(QUORUM, str(exc)) from None
    names = tuple(policy.named(c.name for c in verdict.cosigned_by))
    if not verdict.quorum:
        who = ", ".join(names) or "no witness of the policy"
        raise ReceiptRefused(
            QUORUM, f"the checkpoint is cosigned by {who}; the policy needs {verdict.needed}"
        )
    return Verified(held, slug, receipt.index, checkpoint, names, verdict.needed)


def _decoded(text: str, what: str) -> bytes:
    try:
        return decode_base64(text, what)
    except LogError as exc:
        raise ReceiptRefused(FORMAT, str(exc)) from None


def _event(receipt: Receipt, given: Event | None, event_id: str | None) -> Event:
    """The event the receipt is for, its id and signature checked (the event step)."""
    carried = None
    if receipt.extra is not None:
        try:
            carried = Event.from_json(receipt.extra)
        except InvalidEvent as exc:
            raise ReceiptRefused(EVENT, f"the receipt's event is not an event: {exc}") from None
    held = given or carried
    if held is None:
        raise ReceiptRefused(EVENT, "the receipt carries no event, and none was given")
    if given is not None and carried is not None and carried != given:
        raise ReceiptRefused(EVENT, "the receipt carries another event than the one given")
    if event_id is not None and held.id != event_id:
        raise ReceiptRefused(EVENT, f"the event's id is {held.id}, not {event_id}")
    try:
        held.verify()
    except InvalidEvent as exc:
        raise ReceiptRefused(EVENT, str(exc)) from None
    return held


def _entry(event: Event) -> str:
    """The collection whose log has the event as an entry (the entry step, first half)."""
    if event.kind not in KINDS or not KINDS[event.kind].scoped:
        raise ReceiptRefused(ENTRY, f"an event of kind {event.kind} is no collection's log entry")
    try:
        slug = collection_of(event.kind, validate_content(event))
    except InvalidEvent as exc:
        raise ReceiptRefused(ENTRY, f"the event is no ledger record: {exc}") from None
    if slug is None:
        raise ReceiptRefused(ENTRY, f"an event of kind {event.kind} is no collection's log entry")
    return slug


def _signed(note: str, keys: Sequence[NoteVerifier]) -> Checkpoint:
    """The checkpoint, once a signature by one of the log keys verifies (log signature step)."""
    if not keys:
        raise ReceiptRefused(LOG_SIGNATURE, "no log key to check the checkpoint against")
    problems = []
    for key in keys:
        try:
            text = key.open(note)
        except LogError as exc:
            problems.append(str(exc))
            continue
        try:
            return Checkpoint.parse(text)
        except LogError as exc:
            raise ReceiptRefused(FORMAT, f"the checkpoint: {exc}") from None
    raise ReceiptRefused(LOG_SIGNATURE, "; ".join(problems))
