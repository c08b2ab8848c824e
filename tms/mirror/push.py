"""`tms mirror --push`: restoring a server from a copy without ever storing an event out of order.

The ledger is append-only, so a push that stores an event before one that precedes it in the
copy leaves the target with another signed history for good: a root that differs from the
original, and often a refusal on every later run (a removed member's terms landing after the
list that removed her). So a push:

1. checks first that the target's log is a prefix of the copy's: the target's latest signed
   checkpoint (`?witnessed=0`) must sign, at its size, the root of the copy's first entries;
   otherwise it refuses (`NotAPrefix`) before sending anything. A collection the key cannot
   read there answers as a missing one does (the server tells neither apart), and is taken as
   an empty log: the sync that follows the push checks what was stored against the target's
   log whole, entry by entry;
2. sends the events the target lacks in the copy's order (profiles and terms, which are no log
   entries, where the copy has them: before the entry they precede), one at a time, each only
   once the one before it is acknowledged stored (`OK` true). A relay judges a connection's
   events in the order sent but refuses each on its own: events sent ahead of an answer would
   be stored past a refused one (one signer over its rate limit while the next signer is not);
3. on `rate-limited:` waits as long as the relay says ("try again in N s") and sends the same
   event again, rather than skipping it; on any other refusal it stops there, naming the event
   and the relay's words (`PushRefused`): nothing after it was sent.

A push killed at any point thus leaves the target holding a prefix of the copy's order, which
the next run checks and completes.
"""

from __future__ import annotations

import asyncio
import base64
import re
import time
from collections.abc import Awaitable, Callable, Collection, Mapping
from typing import Any, Final

import httpx

from tms.errors import TMSError
from tms.fetch.bounded import request
from tms.mirror.copy import Copy, MirrorMismatch
from tms.nostr.events import Event, SecretKey
from tms.tlog.merkle import leaf_hash, root_of
from tms.tlog.note import Checkpoint, NoteVerifier, open_checkpoint

RATE_LIMITED: Final = "rate-limited:"
RETRY: Final = re.compile(r"try again in (\d+) s")
SHORTEST_WAIT: Final = 1.0  # seconds, when the relay names none
LONGEST_WAIT: Final = 120.0  # a relay asking for longer is waited this long, then asked again
MOST_WAITS: Final = 50  # rate-limited answers in a row for one event before the push gives up
NOTE_BYTES: Final = 64 * 1024  # a checkpoint note, cosignatures included
TIMEOUT: Final = 30.0

Send = Callable[[list[Any]], Awaitable[None]]
Answer = Callable[[str], Awaitable[tuple[bool, str]]]  # an event id -> its OK: (stored, message)


class NotAPrefix(MirrorMismatch):
    """The target's log is not a prefix of the copy's: pushing would fork it for good."""


class PushRefused(TMSError):
    """The relay refused an event of the push (other than for its rate): the push stopped there."""


async def target_log(
    http: httpx.AsyncClient, base: str, slug: str, key: SecretKey, verifier: NoteVerifier
) -> Checkpoint | None:
    """The target's latest signed checkpoint of `slug`, checked with the copy's log key; None
    when the collection is missing there (or closed to this key: answered alike). A 429 is
    waited out as its `Retry-After` says."""
    url = f"{base}/c/{slug}/checkpoint?witnessed=0"
    for _ in range(MOST_WAITS):
        answer = await request(
            http,
            "GET",
            url,
            max_bytes=NOTE_BYTES,
            deadline=TIMEOUT,
            headers={"Authorization": _nip98(key, url)},
        )
        if answer.status == 429:
            await asyncio.sleep(_seconds(answer.headers.get("retry-after", "")))
            continue
        if answer.status == 404:
            return None
        if answer.status != 200:
            raise PushRefused(
                f"GET /c/{slug}/checkpoint answered {answer.status}: {answer.text[:300]}"
            )
        return open_checkpoint(answer.text, verifier)
    raise PushRefused(f"GET /c/{slug}/checkpoint stayed rate limited: try again later")


def plan(
    copy: Copy,
    pending: Mapping[str, Event],
    lacking: Collection[str],
    target: Checkpoint | None,
) -> list[Event]:
    """What to send, in order: the events the target lacks (`lacking`, by id) in the copy's
    order, then those no checkpoint covers yet (oldest first). Raises `NotAPrefix` when the
    target's log is not a prefix of the copy's, or is longer yet lacks one of its entries."""
    held = len(copy.entries)
    size = 0 if target is None else target.size
    if target is not None and size <= held:
        mine = root_of(leaf_hash(bytes.fromhex(i)) for i in copy.entries[:size])
        if mine != target.root:
            raise NotAPrefix(
                f"the target's log (size {size}, root {target.root.hex()}) is not a prefix of "
                f"the copy's: the copy's first {size} entries hash to root {mine.hex()}. "
                "Nothing was pushed: restore into a server where the collection does not exist"
            )
    index = {event_id: at for at, event_id in enumerate(copy.entries)}
    if size > held:
        missing = [i for i in copy.entries if i in lacking]
        if missing:
            raise NotAPrefix(
                f"the target's log (size {size}) is longer than the copy's ({held}) yet lacks "
                f"entry {index[missing[0]]} ({missing[0]}) of it: it is not the copy's history. "
                "Nothing was pushed"
            )
    wanted = set(lacking)
    # Entries below the target's size are in its log (its root says so) whatever a relay lists.
    out = [
        Event.from_json(line)
        for event_id, line in copy.events.items()
        if event_id in wanted and index.get(event_id, size) >= size
    ]
    rest = [e for i, e in pending.items() if i in wanted and i not in copy.events]
    return out + sorted(rest, key=lambda e: (e.created_at, e.id))


async def send_in_order(
    events: list[Event],
    send: Send,
    answer: Answer,
    *,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> int:
    """Each event, once the one before it is stored; how many were (a duplicate is stored)."""
    for at, event in enumerate(events):
        waits = 0
        while True:
            await send(["EVENT", event.to_dict()])
            stored, said = await answer(event.id)
            if stored:
                break
            if not said.startswith(RATE_LIMITED) or waits >= MOST_WAITS:
                raise PushRefused(
                    f"the relay refused event {event.id} (kind {event.kind}, {at + 1} of "
                    f"{len(events)} to push): {said}. The push stopped there: nothing after it "
                    f"was sent ({at} stored before it)"
                )
            waits += 1
            found = RETRY.search(said)
            await sleep(_seconds(found.group(1) if found else ""))
    return len(events)


def _seconds(text: str) -> float:
    """A wait the relay asked for (seconds), kept between `SHORTEST_WAIT` and `LONGEST_WAIT`."""
    text = text.strip()
    asked = float(text) if text.isascii() and text.isdigit() else SHORTEST_WAIT
    return min(LONGEST_WAIT, max(SHORTEST_WAIT, asked))


def _nip98(key: SecretKey, url: str) -> str:
    event = key.sign(27235, "", int(time.time()), [["u", url], ["method", "GET"]])
    return "Nostr " + base64.b64encode(event.to_json().encode("utf-8")).decode("ascii")
