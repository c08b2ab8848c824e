"""The witness protocol (C2SP `tlog-witness`), both sides, without I/O.

A log POSTs `<submission prefix>/add-checkpoint` with `old <size>`, the consistency proof from
that size (at most 63 base64 lines), a blank line and the signed checkpoint. The witness checks
the log's signature against the keys it trusts for the origin, that `old` is the size it last
cosigned (else 409 with that size, `text/x.tlog.size`), and the proof; then it records the new
size and answers its cosignature line. This module parses and writes those bodies, holds the
list of logs a witness trusts (`TMS_WITNESS_LOGS`: `log <origin> <vkey>` lines, an origin
ending in `/` covering every origin it prefixes), and decides a submission against the state a
witness has stored (`judge`). Persisting the decision atomically is the store's job
(`tms.witness.state`).
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass
from typing import Final

from tms.errors import LogError, shown
from tms.tlog.merkle import EMPTY_ROOT, HASH_SIZE, verify_consistency
from tms.tlog.note import (
    DASH,
    MAX_TREE_SIZE,
    Checkpoint,
    NoteVerifier,
    decode_base64,
    split_note,
)

MAX_PROOF_LINES: Final = 63
MAX_BODY_BYTES: Final = 128 * 1024  # a checkpoint note (64 KiB at most) and 63 proof lines
SIZE_CONTENT_TYPE: Final = "text/x.tlog.size"
NOTE_CONTENT_TYPE: Final = "text/plain; charset=utf-8"
_DIGITS: Final = frozenset("0123456789")


class WitnessRefusal(LogError):
    """A submission the witness does not cosign, with the HTTP status the protocol gives it."""

    def __init__(self, status: int, message: str, size: int | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.size = size  # for a 409: the size the witness last cosigned


@dataclass(frozen=True, slots=True)
class Submission:
    """An `add-checkpoint` request body, parsed."""

    old: int
    proof: tuple[bytes, ...]
    note: str  # the signed checkpoint, as sent

    def body(self) -> bytes:
        lines = [f"old {self.old}\n"] + [
            base64.b64encode(h).decode("ascii") + "\n" for h in self.proof
        ]
        return ("".join(lines) + "\n" + self.note).encode()

    @classmethod
    def parse(cls, body: bytes) -> Submission:
        """The body, or `WitnessRefusal` 400 saying what is wrong with it."""
        if len(body) > MAX_BODY_BYTES:
            raise WitnessRefusal(400, f"the body is over {MAX_BODY_BYTES:,} bytes")
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError:
            raise WitnessRefusal(400, "the body is not UTF-8") from None
        head, sep, note = text.partition("\n\n")
        if not sep:
            raise WitnessRefusal(400, "the body has no blank line before the checkpoint")
        lines = head.split("\n")
        first = lines[0]
        if not first.startswith("old ") or not _decimal(first[4:]):
            raise WitnessRefusal(400, "the body's first line is 'old <size>' in decimal")
        old = int(first[4:])
        if old > MAX_TREE_SIZE:
            raise WitnessRefusal(400, "the old size is too large")
        if len(lines) - 1 > MAX_PROOF_LINES:
            raise WitnessRefusal(400, f"more than {MAX_PROOF_LINES} consistency proof lines")
        proof = []
        for line in lines[1:]:
            try:
                raw = decode_base64(line, "a consistency proof line")
            except LogError as exc:
                raise WitnessRefusal(400, str(exc)) from None
            if len(raw) != HASH_SIZE:
                raise WitnessRefusal(400, "a consistency proof line is not a 32-byte hash")
            proof.append(raw)
        return cls(old, tuple(proof), note)


def _decimal(text: str) -> bool:
    """ASCII decimal with no leading zeroes (`0` alone for zero)."""
    return bool(text) and set(text) <= _DIGITS and (text == "0" or text[0] != "0")


def parse_size(body: bytes) -> int:
    """A 409's `text/x.tlog.size` body: the size the witness last cosigned."""
    text = body.decode("ascii", "replace")
    if not text.endswith("\n") or not _decimal(text[:-1]) or int(text[:-1]) > MAX_TREE_SIZE:
        raise LogError(f"the witness's size answer {shown(text[:40])!r} is not a size")
    return int(text[:-1])


def origin_hash(origin: str) -> str:
    """How the monitoring view names a log: the hex SHA-256 of its origin line."""
    return hashlib.sha256(origin.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class TrustedLog:
    origin: str  # exact, or a prefix when it ends with '/'
    key: NoteVerifier

    def covers(self, origin: str) -> bool:
        if self.origin.endswith("/"):
            return origin.startswith(self.origin) and len(origin) > len(self.origin)
        return origin == self.origin


@dataclass(frozen=True, slots=True)
class TrustedLogs:
    """The logs a witness cosigns (`TMS_WITNESS_LOGS`)."""

    logs: tuple[TrustedLog, ...] = ()

    @classmethod
    def parse(cls, text: str) -> TrustedLogs:
        logs = []
        for number, raw in enumerate(text.split("\n"), 1):
            words = raw.split()
            if not words or words[0].startswith("#"):
                continue
            if words[0] != "log" or len(words) != 3:
                raise LogError(f"line {number}: a witnessed log is 'log <origin> <vkey>'")
            try:
                key = NoteVerifier.parse(words[2])
            except LogError as exc:
                raise LogError(f"line {number}: {exc}") from None
            logs.append(TrustedLog(words[1], key))
        return cls(tuple(logs))

    def keys_for(self, origin: str) -> list[NoteVerifier]:
        return [log.key for log in self.logs if log.covers(origin)]


@dataclass(frozen=True, slots=True)
class Stored:
    """What a witness holds of one log: the last checkpoint it cosigned."""

    size: int
    root: bytes


def admit(submission: Submission, logs: TrustedLogs) -> Checkpoint:
    """What can be judged of a submission without the witness's state, so that a request the
    witness refuses anyway costs it no database read: 400 for a checkpoint that is not a signed
    note, 404 for an origin not witnessed, 400 for a note with more than one line naming a
    trusted key (refused before any signature is verified: each such line would cost a
    verification, and a log signs a checkpoint once per key), 403 when no trusted key signed or
    a line naming one does not verify, 400 for an old size above the new one. At most one
    signature is verified per trusted key."""
    try:
        text, signatures = split_note(submission.note)
        checkpoint = Checkpoint.parse(text)
    except LogError as exc:
        raise WitnessRefusal(400, f"the checkpoint is not a signed note: {exc}") from None
    keys = logs.keys_for(checkpoint.origin)
    if not keys:
        raise WitnessRefusal(404, f"this witness does not witness {shown(checkpoint.origin)!r}")
    lines = [[sig for name, sig in signatures if key.names(name, sig)] for key in keys]
    for key, found in zip(keys, lines, strict=True):
        if len(found) > 1:
            raise WitnessRefusal(
                400, f"the checkpoint carries {len(found)} signature lines by {key.name}"
            )
    signed = [key.verifies(text, found[0]) for key, found in zip(keys, lines, strict=True) if found]
    if False in signed:
        raise WitnessRefusal(403, "a signature by a key this witness trusts does not verify")
    if True not in signed:
        raise WitnessRefusal(403, "no signature by a key this witness trusts for the origin")
    if submission.old > checkpoint.size:
        raise WitnessRefusal(400, "the old size is above the checkpoint's size")
    return checkpoint


def judge(submission: Submission, logs: TrustedLogs, stored: Stored | None) -> Checkpoint:
    """The checkpoint to cosign, or `WitnessRefusal` with the protocol's status (C2SP
    tlog-witness as it stands, in its order): `admit`'s, then `decide`'s."""
    return decide(submission, admit(submission, logs), stored)


def decide(submission: Submission, checkpoint: Checkpoint, stored: Stored | None) -> Checkpoint:
    """An admitted checkpoint against the last one the witness cosigned of its log: 409 when
    `old` is not the stored size; 422 for a size-0 checkpoint whose root is not the empty
    tree's, a proof sent with `old` 0, the same size with another root, or a consistency proof
    that does not hold."""
    current = stored.size if stored is not None else 0
    if submission.old != current:
        raise WitnessRefusal(409, f"this witness last cosigned size {current}", size=current)
    if checkpoint.size == 0 and checkpoint.root != EMPTY_ROOT:
        raise WitnessRefusal(422, "a checkpoint of size 0 has the empty tree's root")
    if submission.old == 0 and submission.proof:
        raise WitnessRefusal(422, "the consistency proof from size 0 is empty")
    old_root = stored.root if stored is not None else EMPTY_ROOT
    if submission.old == checkpoint.size:
        if checkpoint.root != old_root:
            raise WitnessRefusal(
                422, f"size {current} was cosigned here with another root: the trees differ"
            )
        return checkpoint
    if not verify_consistency(
        submission.old, checkpoint.size, old_root, checkpoint.root, submission.proof
    ):
        raise WitnessRefusal(
            422,
            f"the consistency proof from size {submission.old} to {checkpoint.size} does not hold",
        )
    return checkpoint


def signed_lines(note: str, keys: list[NoteVerifier]) -> str:
    """The note with only the signature lines of `keys` (those a witness verified): what it
    keeps and serves beside its own cosignature, never lines nobody checked."""
    text, signatures = split_note(note)
    kept = [
        f"{DASH} {name} {base64.b64encode(sig).decode('ascii')}\n"
        for name, sig in signatures
        if any(k.names(name, sig) for k in keys)
    ]
    return f"{text}\n" + "".join(kept)
