"""Keys and times as the operator writes them in a command's arguments and reads them in its
output: a key as npub or 64 hex, `--since` as an age or an ISO 8601 time, every time printed in
UTC to the second."""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from tms.errors import TMSError
from tms.types import PubKey


def pubkeys(texts: Sequence[str], done: str) -> list[PubKey] | None:
    """Every key parsed, duplicates dropped; or None, after one line on stderr naming the first
    bad one (so that nothing is `done` unless every key is good)."""
    from tms.nostr.keys import parse_pubkey

    keys = []
    for text in texts:
        try:
            keys.append(parse_pubkey(text))
        except TMSError as exc:
            print(f"tms: {text.strip()[:80]!r}: {exc}; nothing was {done}", file=sys.stderr)
            return None
    return list(dict.fromkeys(keys))


_AGO = re.compile(r"(\d+)\s*([smhdw])")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def since_when(text: str, now: datetime) -> datetime | None:
    """`--since`: an age (`90s`, `15m`, `1h`, `2d`, `1w`) or an ISO 8601 time (UTC unless it
    says otherwise); None when it is neither."""
    text = text.strip().lower()
    match = _AGO.fullmatch(text)
    if match:
        return now - timedelta(**{_UNITS[match.group(2)]: int(match.group(1))})
    try:
        when = datetime.fromisoformat(text.upper())
    except ValueError:
        return None
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


def utc(when: datetime) -> str:
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
