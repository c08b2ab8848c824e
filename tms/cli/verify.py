"""`tms verify FILE`: check an exported JSON Lines file offline, line by line, exactly as a
member's own Nostr library would: envelope, id, signature, and the kind's content schema. Whether
the file holds its whole collection is `tms verify-export`'s to prove (`tms.cli.verify_export`)."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import TextIO

from tms.errors import TMSError
from tms.nostr.events import Event


def verify_lines(lines: Iterable[str], out: TextIO) -> tuple[int, int]:
    """Print one line per bad event; return (good, bad). Blank lines are skipped."""
    from tms.rules.kinds import validate_content  # here: its schemas cost every other command

    good = bad = 0
    for number, line in enumerate(lines, start=1):
        if not line.strip() or line.startswith('{"checkpoint"'):  # for tms verify-export
            continue
        try:
            event = Event.from_json(line)
            event.verify()
            validate_content(event)
        except TMSError as exc:
            bad += 1
            print(f"line {number}: {exc}", file=out)
        else:
            good += 1
    return good, bad


def verify(path: str) -> int:
    try:
        stream = sys.stdin if path == "-" else open(path, encoding="utf-8")  # noqa: SIM115
    except OSError as exc:
        print(f"tms: cannot read {path}: {exc.strerror}", file=sys.stderr)
        return 2
    with stream:
        try:
            good, bad = verify_lines(stream, sys.stdout)
        except UnicodeDecodeError:
            print(f"tms: {path} is not UTF-8 text", file=sys.stderr)
            return 2
    print(f"{good} events verified, {bad} invalid")
    return 1 if bad else 0
