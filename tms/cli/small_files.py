"""The small files the offline checks read beside what they check (a log key, a policy, a kept
checkpoint, a receipt, an event): each read whole but never past its cap, so a wrong path (a
log, a device) is refused in one line rather than read into memory."""

from __future__ import annotations

from pathlib import Path
from typing import Final

from tms.errors import LogError
from tms.tlog.note import NoteVerifier

MAX_SMALL_BYTES: Final = 1 << 20  # a key, a policy or a kept checkpoint: a few hundred bytes


def read_small(path: str, limit: int = MAX_SMALL_BYTES) -> str:
    """The file's text, or `LogError` if it is longer than `limit` bytes or not UTF-8."""
    with open(path, "rb") as file:
        data = file.read(limit + 1)
    if len(data) > limit:
        raise LogError(f"{path} is longer than {limit:,} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise LogError(f"{path} is not UTF-8 text") from None


def log_verifier(key: str) -> NoteVerifier:
    """The log's key as text (`name+id+base64`), or the path of a file holding it."""
    if "+" not in key and Path(key).is_file():
        key = read_small(key)
    return NoteVerifier.parse(key)
