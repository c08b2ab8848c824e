"""`tms receipt SLUG EVENT_ID` and `tms verify-receipt EVENT RECEIPT [--key K] [--policy P]`:
a receipt for one event (a C2SP tlog-proof, `tms.tlog.receipt`), made from the database as `tms
export` makes an export, and checked offline as `tms verify-export` checks one.

`receipt` writes the receipt the collection's `GET /c/<slug>/receipt/<id>` serves: proved
against the checkpoint its `/checkpoint` shows (with `TMS_WITNESS_POLICY`, the newest its quorum
cosigned). `verify-receipt` prints each step that holds and, at the first that fails, its name
and why; exit 0: every step holds; 1: one fails; 2: it cannot run (a file that cannot be read, a
key or policy that is not one, no log key given).
"""

from __future__ import annotations

import sys
from typing import Final, TextIO

from tms.cli.database import open_ledger
from tms.cli.small_files import log_verifier, read_small
from tms.errors import InvalidEvent, LogError
from tms.nostr.events import Event, is_hex64
from tms.tlog.policy import Policy
from tms.tlog.receipt import MAX_RECEIPT_CHARS, QUORUM, STEPS, ReceiptRefused, check_receipt

MAX_EVENT_BYTES: Final = 16 << 20  # an event's JSON: 2,000,000 characters and its envelope


async def receipt(slug: str, event_id: str) -> int:
    """The receipt on stdout; exit 1 (one line on stderr) for a collection or an event the
    database does not hold."""
    from tms.config import Settings
    from tms.ledger import Access, Cosigned, LogReads
    from tms.rules.content import SLUG_PATTERN
    from tms.witness.settings import WitnessSettings

    policy = WitnessSettings.load(Settings.from_env()).policy
    async with open_ledger() as ledger:
        if not SLUG_PATTERN.fullmatch(slug) or not await ledger.collection_exists(slug):
            print(f"tms: no such collection {slug!r}", file=sys.stderr)
            return 1
        readable = Access(ledger.pool).unsafe_for_operator(slug)
        reads = LogReads(ledger.pool, ledger.log, Cosigned(ledger.pool, policy))
        info = await reads.receipt(readable, event_id) if is_hex64(event_id) else None
    if info is None:
        print(f"tms: no event {event_id!r} in collection {slug!r}", file=sys.stderr)
        return 1
    sys.stdout.write(info["receipt"])
    sys.stdout.flush()
    if info["quorum"] is False:
        print(
            "tms: the checkpoint is not yet cosigned by the policy's quorum "
            f"(cosigned by: {', '.join(info['witnessed_by']) or 'nobody'})",
            file=sys.stderr,
        )
    return 0


def verify_receipt(
    event: str, receipt_path: str, key: str | None, policy_path: str | None, out: TextIO
) -> int:
    try:
        keys = [] if key is None else [log_verifier(key)]
        policy = None if policy_path is None else Policy.parse(read_small(policy_path))
        if not keys and (policy is None or not policy.logs):
            raise LogError(
                "no log key: give --key (GET /log-key), or a --policy with the log's 'log' line"
            )
        given = None
        event_id = None
        if is_hex64(event):
            event_id = event
        else:
            try:
                given = Event.from_json(read_small(event, MAX_EVENT_BYTES))
            except InvalidEvent as exc:
                raise LogError(f"{event} holds no event: {exc}") from None
        text = read_small(receipt_path, MAX_RECEIPT_CHARS)
    except LogError as exc:
        print(f"tms: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"tms: cannot read {exc.filename}: {exc.strerror}", file=sys.stderr)
        return 2
    try:
        verified = check_receipt(text, event=given, event_id=event_id, log_keys=keys, policy=policy)
    except ReceiptRefused as exc:
        for step in STEPS[: STEPS.index(exc.step)]:
            if step != QUORUM:
                print(f"{step}: ok", file=out)
        print(f"FAILED {exc.step}: {exc.reason}", file=out)
        print(f"the receipt does not hold: the {exc.step} step failed", file=out)
        return 1
    for line in verified.lines():
        print(line, file=out)
    print(
        f"the receipt holds: event {verified.event.id} is entry {verified.index:,} of "
        f"{verified.checkpoint.origin}",
        file=out,
    )
    return 0
