"""`tms-sign`: make keys and sign events and requests locally, as the guide's "Local use" shows.

The secret comes only from the environment (`TMS_NSEC`), never from an argument, so it stays out
of shell history and process listings. Output is machine-readable on stdout; any refusal is one
line on stderr with exit code 2 and nothing on stdout.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from typing import Any, NoReturn

from tms.errors import TMSError
from tms.nostr import nip19
from tms.nostr.events import Event, SecretKey, check_text, compact_json, loads_strict
from tms.nostr.keys import parse_secret
from tms.rules.kinds import validate_content
from tms.types import KIND_REQUEST

USAGE_EXIT = 2


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        _fail(f"{message} (see tms-sign --help)")


def _fail(message: str) -> NoReturn:
    print(f"tms-sign: {message}", file=sys.stderr)
    raise SystemExit(USAGE_EXIT)


def _key_from_env() -> SecretKey:
    value = os.environ.get("TMS_NSEC", "")
    if not value.strip():
        raise TMSError("TMS_NSEC is not set: export the key as nsec1... or hex (tms-sign keygen)")
    return parse_secret(value)


def _json_object(text: str, what: str) -> dict[str, Any]:
    try:
        obj = loads_strict(text)
    except (ValueError, RecursionError) as exc:
        raise TMSError(f"{what} is not valid JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise TMSError(f"{what} must be a JSON object")
    return obj


def _key_lines(key: SecretKey, *, secret: bool) -> list[str]:
    """KEY=VALUE lines, named as the docs name them, so `eval "$(tms-sign keygen)"` works."""
    lines = []
    if secret:
        lines += [f"TMS_NSEC={nip19.nsec_encode(key.secret)}", f"BOT_SECRET_HEX={key.secret.hex()}"]
    return [*lines, f"NPUB={nip19.npub_encode(key.pubkey)}", f"PUBKEY_HEX={key.pubkey}"]


def _sign(kind: int, content: dict[str, Any]) -> Event:
    key = _key_from_env()
    text = compact_json(content)
    check_text(text, "content")
    event = key.sign(kind, text, int(time.time()))
    validate_content(event)  # refuse to sign what the ledger would refuse
    return event


def run(argv: Sequence[str] | None = None) -> str:
    parser = _Parser(
        prog="tms-sign",
        description="Make keys and sign TMS events locally. The key is read from TMS_NSEC.",
    )
    verbs = parser.add_subparsers(dest="verb", required=True, parser_class=_Parser)

    def verb(name: str, summary: str, details: str) -> argparse.ArgumentParser:
        description = f"{summary[0].upper()}{summary[1:]}. {details}"
        return verbs.add_parser(name, help=summary, description=description)

    verb(
        "keygen",
        "make a new key; prints TMS_NSEC, BOT_SECRET_HEX, NPUB, PUBKEY_HEX",
        "Four NAME=value lines, ready for an env file. Keep the secret ones secret; give the "
        "NPUB to a collection's owner or to the operator.",
    )
    verb(
        "pubkey",
        "print the npub and hex public key of TMS_NSEC",
        "NPUB=... and PUBKEY_HEX=... lines; the secret is read from TMS_NSEC (nsec or 64 hex).",
    )
    event = verb(
        "event",
        "sign an event: tms-sign event KIND 'JSON content'",
        "Signed now with TMS_NSEC; prints the event as one JSON line, ready for publish. "
        "Content the ledger would refuse is refused here, before signing.",
    )
    event.add_argument("kind", help="the event kind, e.g. 4702 for a claim")
    event.add_argument("content", help="the content as a JSON object")
    request = verb(
        "request",
        "sign a request: tms-sign request TOOL 'JSON args'",
        "A kind 4707 request for one call of TOOL, signed now with TMS_NSEC: pass it as the "
        "tool's `request` argument within 60 seconds; it works once.",
    )
    request.add_argument("tool", help="the MCP tool the request is for")
    request.add_argument("args", nargs="?", default="{}", help="the tool's arguments (JSON object)")
    ns = parser.parse_args(argv)

    if ns.verb == "keygen":
        return "\n".join(_key_lines(SecretKey.generate(), secret=True))
    if ns.verb == "pubkey":
        return "\n".join(_key_lines(_key_from_env(), secret=False))
    if ns.verb == "event":
        try:
            kind = int(ns.kind, 10)
        except ValueError:
            raise TMSError(f"KIND must be an integer, got {ns.kind!r}") from None
        if kind == KIND_REQUEST:
            raise TMSError("sign requests with: tms-sign request TOOL 'JSON args'")
        return _sign(kind, _json_object(ns.content, "content")).to_json()
    args = _json_object(ns.args, "args")
    return _sign(KIND_REQUEST, {"tool": ns.tool, "args": args}).to_json()


def main(argv: Sequence[str] | None = None) -> None:
    try:
        output = run(argv)
    except TMSError as exc:
        _fail(str(exc))
    try:
        print(output, flush=True)
    except BrokenPipeError:  # the reader took what it wanted (`tms-sign keygen | head -1`)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
