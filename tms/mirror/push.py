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
   entries, where the copy has them: before the entry they precede) through the batch door,
   MCP's `publish` (`publish_in_order`): batches of at most `BATCH_EVENTS` events and
   `BATCH_BYTES` bytes, each all or nothing and stored in its own order, each sent only once the
   one before it is committed. A relay judges a connection's events in the order sent but
   refuses each on its own (events sent ahead of an answer would be stored past a refused one),
   and prices each EVENT as a batch of one: a restore of 20,000 events one EVENT at a time took
   2,010 s under the default `TMS_RATE_KEY`. A batch costs what any member's `publish` costs,
   one unit of the address's budget and one of each signer's, so a restore is no cheaper a
   write path than the one every member already has (docs/operating.md, "Rate limits");
3. on `rate-limited:` (a 429 with `Retry-After`, or the tool's "rate limited: ... try again in
   N s") waits as long as the server says and sends the same batch again, rather than skipping
   it; on any other refusal it stores the events before the one refused (the refusal names its
   place, `events[N]`; else one event at a time) and stops there, naming the event and the
   server's words (`PushRefused`): nothing after it was sent.

A push killed at any point thus leaves the target holding a prefix of the copy's order, which
the next run checks and completes.
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
import time
from collections.abc import Awaitable, Callable, Collection, Mapping
from typing import Final

import httpx

from tms.errors import TMSError
from tms.fetch.bounded import request
from tms.mirror.copy import Copy, MirrorMismatch
from tms.nostr.events import Event, SecretKey
from tms.tlog.merkle import leaf_hash, root_of
from tms.tlog.note import Checkpoint, NoteVerifier, open_checkpoint

RATE_LIMITED: Final = "rate-limited:"
RATE_LIMITED_WORDS: Final = "rate limited:"  # the tool's words (`tms.guard.rates`)
LOCATED: Final = re.compile(r"events\[(\d+)\]")  # where a refusal places its event in a batch
BATCH_EVENTS: Final = 1000  # SPEC: events per `publish` batch
BATCH_BYTES: Final = 8 * 1024 * 1024  # a batch's events, about: well within the 64 MiB body
BATCH_SECONDS: Final = 300.0  # one batch sent, committed and answered
MCP_ACCEPT: Final = "application/json, text/event-stream"  # streamable HTTP asks for both
ANSWER_BYTES: Final = 1024 * 1024  # `publish`'s answer: the ids, skipped ids, checkpoints
RETRY: Final = re.compile(r"try again in (\d+) s")
SHORTEST_WAIT: Final = 1.0  # seconds, when the relay names none
LONGEST_WAIT: Final = 120.0  # a relay asking for longer is waited this long, then asked again
MOST_WAITS: Final = 50  # rate-limited answers in a row for one call before the push gives up
NOTE_BYTES: Final = 64 * 1024  # a checkpoint note, cosignatures included
TIMEOUT: Final = 30.0


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


async def publish_in_order(
    http: httpx.AsyncClient,
    base: str,
    events: list[Event],
    *,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> int:
    """The events in order through `publish` at `base`/mcp, a batch at a time, each batch once
    the one before it is committed; how many were stored (a duplicate is: `skipped`)."""
    done = 0
    for batch in batches(events):
        await _batch(http, f"{base}/mcp", batch, done, len(events), sleep)
        done += len(batch)
    return done


def batches(events: list[Event]) -> list[list[Event]]:
    """The events cut, in order, into batches of at most `BATCH_EVENTS` events and `BATCH_BYTES`
    bytes (an event larger than that alone)."""
    out: list[list[Event]] = []
    batch: list[Event] = []
    size = 0
    for event in events:
        bytes_ = len(event.to_json().encode("utf-8"))
        if batch and (len(batch) >= BATCH_EVENTS or size + bytes_ > BATCH_BYTES):
            out.append(batch)
            batch, size = [], 0
        batch.append(event)
        size += bytes_
    if batch:
        out.append(batch)
    return out


async def _batch(
    http: httpx.AsyncClient,
    url: str,
    batch: list[Event],
    before: int,
    total: int,
    sleep: Callable[[float], Awaitable[None]],
) -> None:
    """One batch stored whole, waiting out rate limits; at a refusal, the events before the
    refused one stored (as batches of their own) and `PushRefused` naming it (the one alone
    stored after all: the rest goes on). `before`: events of the push stored before this
    batch."""
    for _ in range(MOST_WAITS):
        stored, said, wait = await _publish(http, url, batch)
        if stored:
            return
        if wait is None:
            break
        await sleep(wait)
    else:
        raise PushRefused(
            f"the server stayed rate limited for {MOST_WAITS} tries of a batch of {len(batch)} "
            f"events from {before + 1} of {total}: {said}. The push stopped there ({before} "
            "stored before it): run it again later"
        )
    if len(batch) > 1:  # all or nothing: none of it was stored
        found = LOCATED.search(said)
        at = int(found.group(1)) if found else -1
        if 0 <= at < len(batch):  # the events before the one named, it alone, the rest
            parts = [batch[:at], batch[at : at + 1], batch[at + 1 :]]
        else:  # unnamed: one at a time, until the one refused
            parts = [[event] for event in batch]
        for part in parts:
            if part:
                await _batch(http, url, part, before, total, sleep)
                before += len(part)
        return
    event = batch[0]
    raise PushRefused(
        f"the server refused event {event.id} (kind {event.kind}, {before + 1} of {total} to "
        f"push): {said}. The push stopped there: nothing after it was sent ({before} stored "
        "before it)"
    )


async def _publish(
    http: httpx.AsyncClient, url: str, batch: list[Event]
) -> tuple[bool, str, float | None]:
    """One `publish` call: (stored, the server's words, seconds to wait before sending it again
    when it was rate limited or busy, else None)."""
    call = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "publish", "arguments": {"events": [e.to_dict() for e in batch]}},
    }
    answer = await request(
        http,
        "POST",
        url,
        max_bytes=ANSWER_BYTES,
        deadline=BATCH_SECONDS,
        headers={"Content-Type": "application/json", "Accept": MCP_ACCEPT},
        content=json.dumps(call, separators=(",", ":"), ensure_ascii=False).encode("utf-8"),
    )
    if answer.status in (429, 503):
        return False, answer.text[:300], _seconds(answer.headers.get("retry-after", ""))
    try:
        body = json.loads(answer.body)
    except ValueError:
        body = None
    if answer.status != 200 or not isinstance(body, dict):
        return False, f"POST {url} answered {answer.status}: {answer.text[:300]}", None
    result = body.get("result")
    if not isinstance(result, dict):
        error = body.get("error")
        said = str(error.get("message")) if isinstance(error, dict) else answer.text[:300]
        return False, said, None
    if not result.get("isError"):
        return True, "", None
    content = result.get("content")
    said = ""
    if isinstance(content, list) and content and isinstance(content[0], dict):
        said = str(content[0].get("text", ""))
    if said.startswith(RATE_LIMITED_WORDS) or said.startswith(RATE_LIMITED):
        found = RETRY.search(said)
        return False, said, _seconds(found.group(1) if found else "")
    return False, said, None


def _seconds(text: str) -> float:
    """A wait the relay asked for (seconds), kept between `SHORTEST_WAIT` and `LONGEST_WAIT`."""
    text = text.strip()
    asked = float(text) if text.isascii() and text.isdigit() else SHORTEST_WAIT
    return min(LONGEST_WAIT, max(SHORTEST_WAIT, asked))


def _nip98(key: SecretKey, url: str) -> str:
    event = key.sign(27235, "", int(time.time()), [["u", url], ["method", "GET"]])
    return "Nostr " + base64.b64encode(event.to_json().encode("utf-8")).decode("ascii")
