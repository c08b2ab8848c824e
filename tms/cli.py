"""`tms`: the operator's command line.

`tms verify` checks an exported JSON Lines file offline, line by line, exactly as a member's own
Nostr library would: envelope, id, signature, and the kind's content schema.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Sequence
from importlib.metadata import version
from typing import TextIO

from tms.errors import TMSError
from tms.events import Event
from tms.kinds import validate_content


def verify_lines(lines: Iterable[str], out: TextIO) -> tuple[int, int]:
    """Print one line per bad event; return (good, bad). Blank lines are skipped."""
    good = bad = 0
    for number, line in enumerate(lines, start=1):
        if not line.strip():
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


def _verify(path: str) -> int:
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


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="tms", description="TMS, the evidence ledger.")
    parser.add_argument("--version", action="version", version=f"tms {version('tms')}")
    commands = parser.add_subparsers(dest="command", required=True)
    verify = commands.add_parser(
        "verify", help="check every line of a JSON Lines export: envelope, id, signature, schema"
    )
    verify.add_argument("file", help="the .jsonl file, or - for standard input")
    ns = parser.parse_args(argv)
    if ns.command == "verify":
        raise SystemExit(_verify(ns.file))
