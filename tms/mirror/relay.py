"""The relay end of `tms mirror`'s WebSocket (`Relay`): NIP-42 AUTH, NIP-77 reconciliation,
REQs by id, ordered EVENTs and the live subscription, in NIP-01's and NIP-77's words, each
bounded (`Bounds`) and paced by the server's rate limits (`tms.mirror.pace`).

A relay may lie, or just be slow: each WebSocket message is bounded by size, each awaited
answer by a deadline that only progress renews (an asked-for event, an EOSE, a NIP-77 round; a
NOTICE or an event nobody asked for renews nothing), NIP-77 by rounds, ids and bytes, the live
buffer by bytes. Only asked-for events of this collection are kept.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from websockets.asyncio.client import ClientConnection

from tms.errors import InvalidEvent, TMSError
from tms.mirror.pace import Pace, is_rate_limited
from tms.nostr.events import Event, SecretKey
from tms.nostr.negentropy import Initiator, Items, NegentropyError
from tms.rules.kinds import unscoped_kinds
from tms.rules.membership import parse_change, parse_request
from tms.tlog.tiles import TILE_WIDTH
from tms.types import KIND_JOIN, KIND_LEAVE, KIND_MEMBER_CHANGE

log = logging.getLogger(__name__)

# Ids asked for in one REQ: one page of the relay's stored answer (a REQ of more is answered in
# pages that each look every id up again), several REQs in flight.
IDS_PER_REQ: Final = 100
IN_FLIGHT: Final = 8
# A relay that states its prices and `max_ids_per_filter` is asked for up to this many ids in one
# REQ (it reads them a page at a time, and prices them so): fewer messages of its address budget.
MOST_IDS_PER_REQ: Final = 1000
FRAME_SIZE_LIMIT: Final = 256 * 1024  # our Negentropy messages, before hex
MAX_MESSAGE_BYTES: Final = 40 * 1024 * 1024  # a relay message: one full-size evidence, escaped
NEG_ID: Final = "tms-mirror-neg"
LIVE_ID: Final = "tms-mirror-live"
GET_ID: Final = "tms-mirror-get-{}"


@dataclass(frozen=True, slots=True)
class Bounds:
    """What a mirror takes from a relay and its server at most: the defaults fit a collection
    of millions of events; the tests make them small."""

    answer_seconds: float = 60.0  # awaiting an answer with no progress: the step fails
    http_seconds: float = 30.0  # one HTTP call, connect to last byte
    info_bytes: int = 64 * 1024  # the NIP-11 document
    log_key_bytes: int = 4096
    checkpoint_bytes: int = 1024 * 1024  # a note and its cosignatures
    tile_bytes: int = (2 + 32) * TILE_WIDTH  # a full entry tile
    others_bytes: int = 16 * 1024 * 1024  # where the export places profiles and terms
    neg_message_chars: int = 4 * 1024 * 1024  # one NEG-MSG, hex (the relay's frames are 1 MiB)
    neg_chars: int = 512 * 1024 * 1024  # every NEG-MSG of one reconciliation, together
    neg_ids: int = 2_000_000  # ids one reconciliation learns (the relay's own cap on its list)
    neg_rounds: int = 32  # NIP-77 rounds, and one more for each `neg_ids_per_round` ids learnt
    neg_ids_per_round: int = 500
    live_bytes: int = 32 * 1024 * 1024  # live events held between syncs; past it, a sync runs
    early_messages: int = 20_000  # answers read while waiting out a rate limit, put aside
    extra_entries: int = 40 * TILE_WIDTH  # a checkpoint past the events served: published since


class MirrorError(TMSError):
    """The mirror cannot go on: the relay refused, or answered out of protocol."""


class Restricted(MirrorError):
    """The relay refused NIP-77 with `restricted:`: nothing there this key may read."""


class Relay:
    """The relay end of the mirror's WebSocket: requests answered in NIP-01's and NIP-77's
    words, paced by the server's rate limits, each awaited answer within a deadline only
    progress renews; live events put aside for `live`, up to `Bounds.live_bytes`."""

    def __init__(self, ws: ClientConnection, pace: Pace, bounds: Bounds, slug: str) -> None:
        self.ws = ws
        self.pace = pace
        self.bounds = bounds
        self.slug = slug
        self.arrived: list[Event] = []
        self.arrived_bytes = 0
        self.behind = False  # live events were let go: the next sync fetches them
        self.deadline = 0.0
        self.early: deque[list[Any]] = deque()  # read during a `pause`, for `_next`

    async def send(self, message: list[Any]) -> None:
        """Send, once the server's budgets allow what it costs (`Pace.costs`)."""
        await self.pace.take(self.pace.costs(message), self.pause)
        await self.ws.send(json.dumps(message, separators=(",", ":"), ensure_ascii=False))
        self.progress()

    def ids_per_req(self) -> int:
        stated = self.pace.ids_per_filter
        if self.pace.prices is None or stated is None:
            return IDS_PER_REQ
        return max(1, min(stated, MOST_IDS_PER_REQ))

    def progress(self) -> None:
        """Something asked for came (or was just asked): the relay has `answer_seconds` more."""
        self.deadline = asyncio.get_running_loop().time() + self.bounds.answer_seconds

    async def _next(self) -> list[Any]:
        """The next message for a request (first those put aside by `pause`), by the deadline:
        NOTICEs and live events (kept aside) do not renew it."""
        if self.early:
            return self.early.popleft()
        try:
            async with asyncio.timeout_at(self.deadline):
                while (message := await self._read()) is None:
                    pass
                return message
        except TimeoutError:
            raise _Silent(
                f"the relay answered nothing asked for within {self.bounds.answer_seconds:g} s"
            ) from None

    async def _read(self) -> list[Any] | None:
        """One message off the connection: a request's, or None (a live event, kept aside; a
        NOTICE, logged; anything else of no request)."""
        raw = await self.ws.recv()
        try:
            message = json.loads(raw)
        except ValueError:
            raise MirrorError("the relay sent a message that is not JSON") from None
        if not isinstance(message, list) or not message:
            return None
        if message[0] == "EVENT" and len(message) == 3 and message[1] == LIVE_ID:
            self._live(message[2], len(raw))
            return None
        if message[0] == "NOTICE":
            log.warning("the relay says: %s", quoted(str(message[1:]), 300))
            return None
        return message

    async def pause(self, seconds: float) -> None:
        """Wait, reading meanwhile (what comes is put aside for `_next`, up to
        `Bounds.early_messages`): a connection left unread stops reading, its pings'
        answers too, and is closed as dead, by either side, after 20 s."""
        loop = asyncio.get_running_loop()
        until = loop.time() + seconds
        while (left := until - loop.time()) > 0:
            try:
                async with asyncio.timeout(left):
                    message = await self._read()
            except TimeoutError:
                break
            if message is None:
                continue
            if len(self.early) >= self.bounds.early_messages:
                raise MirrorError(
                    f"the relay sent more than {self.bounds.early_messages:,} messages while "
                    "this side waited out its rate limit: stopped"
                )
            self.early.append(message)
        self.progress()

    def _live(self, raw: object, size: int) -> None:
        if self.arrived_bytes + size > self.bounds.live_bytes:
            self.behind = True  # let go: the sync that follows fetches what is real
            return
        event = checked(raw)
        if ours(event, self.slug):
            self.arrived.append(event)
            self.arrived_bytes += size

    async def _until(self, accept: Callable[[list[Any]], bool]) -> list[Any]:
        while True:
            message = await self._next()
            if accept(message):
                return message

    async def authenticate(self, key: SecretKey, url: str) -> None:
        self.progress()
        challenge = await self._until(lambda m: m[0] == "AUTH" and len(m) > 1)
        while True:
            event = key.sign(
                22242, "", int(time.time()), [["relay", url], ["challenge", str(challenge[1])]]
            )
            await self.send(["AUTH", event.to_dict()])
            answer = await self._until(functools.partial(_answers, event.id))
            said = str(answer[3]) if len(answer) > 3 else ""
            if answer[2:3] == [True]:
                self.pace.served()
                return
            if not is_rate_limited(said):
                raise MirrorError(f"the relay refused the key's AUTH: {quoted(said, 300)}")
            await self.pause(self.pace.refused(said))

    async def reconcile(self, items: Items) -> tuple[list[bytes], list[bytes]]:
        """NIP-77 over everything the relay serves here: (ids only we have, ids only it has).
        A rate-limited refusal is waited out and the reconciliation starts again."""
        while True:
            try:
                return await self._reconcile(items)
            except _Limited as exc:
                await self.pause(self.pace.refused(exc.said))

    async def _reconcile(self, items: Items) -> tuple[list[bytes], list[bytes]]:
        bounds = self.bounds
        initiator = Initiator(items, FRAME_SIZE_LIMIT)
        first = initiator.initiate()
        have: list[bytes] = []
        need: list[bytes] = []
        await self.send(["NEG-OPEN", NEG_ID, {}, first.hex()])
        message: bytes | None = first
        rounds = chars = 0
        while message is not None:
            answer = await self._until(
                lambda m: m[0] in ("NEG-MSG", "NEG-ERR") and m[1:2] == [NEG_ID]
            )
            said = str(answer[2]) if len(answer) > 2 else ""
            if answer[0] == "NEG-ERR":
                if is_rate_limited(said):
                    raise _Limited(said)
                refused = f"the relay refused NIP-77 sync: {quoted(said, 300)}"
                if said.startswith("restricted:"):
                    raise Restricted(refused)
                raise MirrorError(refused)
            self.pace.served()
            rounds += 1
            chars += len(said)
            if len(said) > bounds.neg_message_chars or chars > bounds.neg_chars:
                raise MirrorError(
                    f"the relay's NIP-77 messages went past {bounds.neg_message_chars:,} "
                    f"characters (one) or {bounds.neg_chars:,} (together): stopped"
                )
            try:
                message, more_have, more_need = initiator.reconcile(bytes.fromhex(said))
            except (ValueError, NegentropyError) as exc:
                raise MirrorError(f"the relay's NIP-77 message cannot be read: {exc}") from None
            have += more_have
            need += more_need
            learnt = len(have) + len(need)
            if learnt > bounds.neg_ids:
                raise MirrorError(
                    f"the relay's NIP-77 answers name more than {bounds.neg_ids:,} ids: stopped"
                )
            if message is not None and rounds >= bounds.neg_rounds + learnt // (
                bounds.neg_ids_per_round
            ):
                raise MirrorError(
                    f"NIP-77 went on for {rounds} rounds, naming {learnt:,} ids: more than a "
                    "reconciliation of this size takes; stopped"
                )
            if message is not None:
                await self.send(["NEG-MSG", NEG_ID, message.hex()])
        await self.send(["NEG-CLOSE", NEG_ID])
        return have, need

    async def by_ids(self, ids: list[str]) -> list[Event]:
        """The events of these ids the relay serves, each checked, of this collection and
        asked for (any other is dropped): REQs of `ids_per_req` ids, `IN_FLIGHT` at once, each
        slot's id reused (a REQ replaces an open one of its id, so no CLOSE is spent between);
        one refused as rate-limited is asked again once the wait it was told has passed."""
        per = self.ids_per_req()
        chunks = deque(ids[at : at + per] for at in range(0, len(ids), per))
        free = [GET_ID.format(slot) for slot in range(IN_FLIGHT)]
        asked: dict[str, set[str]] = {}
        used: set[str] = set()
        events: list[Event] = []
        while chunks or asked:
            while chunks and free:
                sub, chunk = free.pop(), chunks.popleft()
                await self.send(["REQ", sub, {"ids": chunk, "limit": len(chunk)}])
                asked[sub] = set(chunk)
                used.add(sub)
            message = await self._until(
                lambda m: m[0] in ("EVENT", "EOSE", "CLOSED") and len(m) > 1 and m[1] in asked
            )
            sub = message[1]
            if message[0] == "EVENT":
                raw = message[2] if len(message) > 2 else None
                event_id = raw.get("id") if isinstance(raw, dict) else None
                if event_id not in asked[sub]:
                    continue  # not asked for: neither kept nor counted as progress
                event = checked(raw)
                asked[sub].discard(event.id)
                if ours(event, self.slug):
                    events.append(event)
                    self.progress()
                continue
            rest = asked.pop(sub)
            free.append(sub)
            said = str(message[2]) if len(message) > 2 else ""
            if message[0] == "CLOSED":
                if not is_rate_limited(said):
                    raise MirrorError(f"the relay closed the request: {quoted(said, 300)}")
                chunks.append(sorted(rest))
                await self.pause(self.pace.refused(said))
                continue
            self.pace.served()
            self.progress()
        for sub in sorted(used):
            await self.send(["CLOSE", sub])
        return events

    async def follow(self) -> None:
        await self.send(["REQ", LIVE_ID, {"limit": 0}])

    async def live(self, quiet: float, longest: float) -> list[Event]:
        """Live events, once they have stopped arriving for `quiet` seconds (or after
        `longest`, or once `Bounds.live_bytes` of them are held, whichever comes first)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + longest
        while loop.time() < deadline and not self.behind:
            seen = len(self.arrived)
            self.deadline = min(loop.time() + quiet, deadline)
            with contextlib.suppress(_Silent):
                message = await self._next()
                if message[0] == "CLOSED" and message[1:2] == [LIVE_ID]:
                    said = str(message[2]) if len(message) > 2 else ""
                    if not is_rate_limited(said):
                        raise _Stop(f"the relay closed the live subscription: {quoted(said, 300)}")
                    await self.pause(self.pace.refused(said))
                    await self.follow()
            if self.arrived and len(self.arrived) == seen:
                break
        arrived, self.arrived, self.arrived_bytes, self.behind = self.arrived, [], 0, False
        return arrived


class _Limited(Exception):
    def __init__(self, said: str) -> None:
        self.said = said


class _Silent(MirrorError):
    """Nothing asked for came by the deadline (while following: a quiet moment)."""


class _Stop(MirrorError):
    """The live subscription ended."""


def quoted(text: str, limit: int) -> str:
    """What a peer said, on one line and at most `limit` characters."""
    return " ".join(text.split())[:limit]


def _answers(event_id: str, message: list[Any]) -> bool:
    return message[0] == "OK" and message[1:2] == [event_id]


def checked(raw: object) -> Event:
    event = Event.from_dict(raw)
    event.verify()
    return event


def ours(event: Event, slug: str) -> bool:
    """Whether an event belongs in a copy of `slug`: a profile or terms (of no collection),
    or an event whose content names the collection (a membership change: whose signed URL does,
    its body the one its `payload` tag hashes, `tms.rules.membership`)."""
    if event.kind in unscoped_kinds():
        return True
    if event.kind == KIND_MEMBER_CHANGE:
        try:
            return parse_change(event).collection == slug
        except InvalidEvent:
            return False
    if event.kind in (KIND_JOIN, KIND_LEAVE):  # a join or leave: whose AUTH event names it
        try:
            return parse_request(event).collection == slug
        except InvalidEvent:
            return False
    try:
        content = json.loads(event.content)
    except ValueError:
        return False
    return isinstance(content, dict) and content.get("collection") == slug
