"""`tms mirror`'s work: bring a collection down from its relay with NIP-77, check it against
the log, keep it (`tms.mirror.copy`), then follow it live.

One sync:
1. authenticate (NIP-42) on the collection's relay (`ws[s]://host/c/<slug>`);
2. reconcile with NIP-77 (this side the Negentropy initiator) over everything the relay serves
   there: the events the copy lacks are fetched by id with `REQ` and each is checked (id and
   signature); with `push`, the events only the copy holds are published (`EVENT`), as
   restoring a fresh server from a mirror needs, in the copy's order and only onto a log that
   is a prefix of the copy's (`tms.mirror.push`);
3. read the log key (the first time: `GET /log-key`, kept from then on; a server whose key
   changed is refused), the checkpoint the server serves (`GET /c/<slug>/checkpoint`, with
   NIP-98), and with a witness policy demand its quorum;
4. read the log's new entries from its tiles (`/c/<slug>/tile/entries/...`), and have the copy
   check that they extend what it holds to exactly the checkpoint's root, then append them.

Following: after a sync, a `REQ` subscription over the collection delivers new events; a sync
runs again once they stop for a moment (the server signs a checkpoint per publish), or every
`RESYNC_SECONDS`. Any mismatch stops the mirror with a message naming what differs.

A relay or server may lie, or just be slow. Whatever it sends is bounded (`Bounds`): each HTTP
call by bytes and a total deadline (`tms.fetch.bounded`), each WebSocket message by size, each
awaited answer by a deadline that only progress renews (an asked-for event, an EOSE, a NIP-77
round; a NOTICE or an event nobody asked for renews nothing), NIP-77 by rounds, ids and bytes,
the live buffer by bytes; a checkpoint larger than the events the relay served could fill is
refused before any tile is read. Only asked-for events of this collection are kept. And the
mirror paces itself by the server's rate limits (`tms.mirror.pace`), waiting out a refusal
rather than failing on it; the log's full entry tiles it read are kept across runs
(`tms.mirror.tiles`), so a stopped first copy resumes without reading them again.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import json
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

import httpx
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from tms.errors import LogError, TMSError
from tms.fetch.bounded import PeerError, request
from tms.mirror import push
from tms.mirror.copy import Copy, MirrorMismatch
from tms.mirror.pace import Pace, is_rate_limited
from tms.mirror.tiles import HeldTiles
from tms.nostr.events import Event, SecretKey
from tms.nostr.negentropy import Initiator, Items, NegentropyError
from tms.rules.content import SLUG_PATTERN
from tms.rules.kinds import unscoped_kinds
from tms.tlog.note import Checkpoint, NoteVerifier, open_checkpoint
from tms.tlog.policy import Policy
from tms.tlog.tiles import ENTRIES, TILE_WIDTH, Tile

log = logging.getLogger(__name__)

TIMEOUT: Final = 30.0  # opening the WebSocket
# Ids asked for in one REQ: one page of the relay's stored answer (a REQ of more is answered in
# pages that each look every id up again), several REQs in flight.
IDS_PER_REQ: Final = 100
IN_FLIGHT: Final = 8
HELD_AT_ONCE: Final = 1000  # events fetched between two writes of pending.jsonl
# A relay that states its prices and `max_ids_per_filter` is asked for up to this many ids in one
# REQ (it reads them a page at a time, and prices them so): fewer messages of its address budget.
MOST_IDS_PER_REQ: Final = 1000
FRAME_SIZE_LIMIT: Final = 256 * 1024  # our Negentropy messages, before hex
QUIET_SECONDS: Final = 1.0  # after live events stop this long, sync and check again
RESYNC_SECONDS: Final = 60.0
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


@dataclass(frozen=True, slots=True)
class Target:
    relay: str  # ws[s]://host/c/<slug>
    base: str  # http[s]://host
    slug: str

    @classmethod
    def of(cls, relay: str) -> Target:
        parts = urlsplit(relay)
        if parts.scheme not in ("ws", "wss") or not parts.netloc:
            raise MirrorError(f"{relay!r} is not a relay URL: ws://host/c/<slug> or wss://...")
        prefix, sep, slug = parts.path.rstrip("/").rpartition("/c/")
        if not sep or prefix or not SLUG_PATTERN.fullmatch(slug):
            raise MirrorError(f"{relay!r} names no collection: mirror one, ws[s]://host/c/<slug>")
        scheme = "https" if parts.scheme == "wss" else "http"
        return cls(f"{parts.scheme}://{parts.netloc}/c/{slug}", f"{scheme}://{parts.netloc}", slug)


@dataclass
class Report:
    fetched: int = 0
    pushed: int = 0
    added: int = 0  # log entries added to the copy
    size: int = 0
    witnessed_by: list[str] = field(default_factory=list)


class Mirror:
    def __init__(
        self,
        target: Target,
        key: SecretKey,
        directory: Path,
        *,
        policy: Policy | None = None,
        log_key: str | None = None,
        push: bool = False,
        say: Callable[[str], None] = print,
        bounds: Bounds = Bounds(),
    ) -> None:
        self.target = target
        self.key = key
        self.directory = directory
        self.policy = policy
        self.log_key = log_key
        self.push = push
        self.say = say
        self.bounds = bounds
        self.pace = Pace()
        # how a wait is waited: once connected, reading the relay meanwhile (`_Relay.pause`)
        self.pause: Callable[[float], Awaitable[None]] = asyncio.sleep
        self.copy = Copy.open(directory)
        self.tiles = HeldTiles(directory)
        # served, not yet covered by a checkpoint (kept on disk: a stopped sync resumes)
        self.pending: dict[str, Event] = self.copy.pending
        if self.copy.state is not None and self.copy.state.collection != target.slug:
            raise MirrorError(
                f"{directory} is a copy of '{self.copy.state.collection}', not of '{target.slug}'"
            )

    async def run(self, *, once: bool) -> Report:
        async with httpx.AsyncClient(timeout=self.bounds.http_seconds) as http:
            self.pace = await self._pace(http)
            async with connect(
                self.target.relay, max_size=MAX_MESSAGE_BYTES, open_timeout=TIMEOUT
            ) as ws:
                relay = _Relay(ws, self.pace, self.bounds, self.target.slug)
                self.pause = relay.pause
                await relay.authenticate(self.key, self.target.relay)
                report = await self.sync(relay, http)
                if once:
                    return report
                await relay.follow()
                while True:
                    arrived = await relay.live(QUIET_SECONDS, RESYNC_SECONDS)
                    self.copy.hold(arrived)
                    report = await self.sync(relay, http)

    async def _pace(self, http: httpx.AsyncClient) -> Pace:
        """The rate limits the relay's NIP-11 document states, if any (none: learnt from its
        refusals). A document that cannot be read is no reason not to sync."""
        url = self.target.relay.replace("ws", "http", 1)
        with contextlib.suppress(PeerError, ValueError):
            answer = await request(
                http,
                "GET",
                url,
                max_bytes=self.bounds.info_bytes,
                deadline=self.bounds.http_seconds,
                headers={"Accept": "application/nostr+json"},
            )
            info = json.loads(answer.body) if answer.status == 200 else None
            if isinstance(info, dict):
                return Pace.of(info)
        return Pace()

    async def sync(self, relay: _Relay, http: httpx.AsyncClient) -> Report:
        report = Report()
        held = [(stamp, bytes.fromhex(i)) for i, stamp in self.copy.stamps.items()]
        held += [(e.created_at, bytes.fromhex(i)) for i, e in self.pending.items()]
        try:
            have, need = await relay.reconcile(Items.of(held))
        except Restricted:
            if not self.push:
                raise
            # A fresh server being restored: nothing there this key may read yet (a missing
            # collection is refused as a closed one). Everything the copy holds goes up.
            have, need = [bytes.fromhex(i) for i in self.copy.events], []
        if not self.push:  # held aside, and not served: nothing a log of the relay's covers
            self.copy.forget(i.hex() for i in have)
        report.fetched += await self._fetch(relay, [i.hex() for i in need])
        verifier = await self._log_key(http)
        if self.push and have:
            target = await push.target_log(
                http, self.target.base, self.target.slug, self.key, verifier
            )
            lacking = {i.hex() for i in have}
            events = push.plan(self.copy, self.pending, lacking, target)
            report.pushed = await push.publish_in_order(http, self.target.base, events)
        note = (await self._get(http, f"/c/{self.target.slug}/checkpoint", "checkpoint")).decode(
            "utf-8", errors="replace"
        )
        checkpoint = open_checkpoint(note, verifier)
        if checkpoint.origin.rpartition("/c/")[2] != self.target.slug:
            raise MirrorMismatch(f"the server's checkpoint is of {checkpoint.origin!r}")
        if self.policy is not None:
            verdict = self.policy.judge(note)
            report.witnessed_by = self.policy.named(verdict.names)
            if not verdict.quorum:
                who = ", ".join(report.witnessed_by) or "no witness of the policy"
                raise MirrorMismatch(
                    f"the server's checkpoint (size {checkpoint.size}, root "
                    f"{checkpoint.root.hex()}) is cosigned by {who}, not the policy's quorum "
                    f"({verdict.needed}): refused"
                )
        self._plausible(checkpoint)
        try:
            held_entries = len(self.copy.entries)
            entries = self.copy.entries + await self._entries(http, held_entries, checkpoint)
            # entries published since the reconciliation: asked for by id
            late = [i for i in entries[held_entries:] if i not in self.pending]
            if late and len(late) <= self.bounds.extra_entries:
                report.fetched += await self._fetch(relay, late)
            report.added = self.copy.extend(
                checkpoint,
                note,
                entries,
                self.pending,
                relay=self.target.relay,
                collection=self.target.slug,
                log_key=verifier.encode(),
            )
        except MirrorMismatch:
            self.tiles.drop()  # read again next time: none of them is trusted
            raise
        self.tiles.drop()  # the copy holds their entries now
        report.size = checkpoint.size
        self.say(
            f"{self.target.slug}: {checkpoint.size} log entries verified against the server's "
            f"checkpoint (root {checkpoint.root.hex()[:16]}…"
            + (f", witnessed by {', '.join(report.witnessed_by)}" if report.witnessed_by else "")
            + f"); {report.added} new, {report.fetched} events fetched"
            + (f", {report.pushed} pushed" if self.push else "")
        )
        return report

    async def _fetch(self, relay: _Relay, wanted: list[str]) -> int:
        fetched = 0
        # What one `by_ids` fetches is held (written to pending.jsonl) at once: at most
        # HELD_AT_ONCE events at a time, so a run killed mid-fetch keeps all but the last few.
        per = relay.ids_per_req()
        step = max(per, min(per * IN_FLIGHT, HELD_AT_ONCE))
        for start in range(0, len(wanted), step):
            found = await relay.by_ids(wanted[start : start + step])
            self.copy.hold(found)
            fetched += len(found)
        return fetched

    def _plausible(self, checkpoint: Checkpoint) -> None:
        """A checkpoint whose new entries outnumber the events the relay served (and the few
        published since) is no log of them: refused before its tiles are read, since a size of
        2^40 would have them read for ever."""
        held = len(self.copy.entries)
        unscoped = unscoped_kinds()
        served = sum(1 for e in self.pending.values() if e.kind not in unscoped)
        if checkpoint.size - held > served + self.bounds.extra_entries:
            raise MirrorMismatch(
                f"the server's checkpoint counts {checkpoint.size:,} log entries, but the copy "
                f"holds {held:,} and the relay served {served:,} more events: it cannot be the "
                "log of what the relay serves (its tiles were not read)"
            )

    async def _log_key(self, http: httpx.AsyncClient) -> NoteVerifier:
        kept = self.copy.state.log_key if self.copy.state is not None else None
        given = self.log_key or kept
        body = await self._get(http, "/log-key", "log_key", signed=False)
        served = body.decode("utf-8", errors="replace").strip()
        if given is not None and NoteVerifier.parse(given) != NoteVerifier.parse(served):
            raise MirrorMismatch(
                f"the server's log key is now {_said(served, 200)}, not {given}: its "
                "checkpoints are no longer signed by the key this copy was verified with"
            )
        if given is None:
            self.say(f"{self.target.slug}: the server's log key is {served} (kept from now on)")
        return NoteVerifier.parse(given or served)

    async def _get(
        self, http: httpx.AsyncClient, path: str, what: str, *, signed: bool = True
    ) -> bytes:
        """One GET of the server's, within `what`'s byte cap and the call's deadline, paced by
        its rate limits: a 429 is waited out as its `Retry-After` says (`Pace.refused`)."""
        url = f"{self.target.base}{path}"
        cap: int = getattr(self.bounds, f"{what}_bytes")
        while True:
            await self.pace.take(sleep=self.pause)
            headers = {"Authorization": _nip98(self.key, url)} if signed else {}
            answer = await request(
                http, "GET", url, max_bytes=cap, deadline=self.bounds.http_seconds, headers=headers
            )
            if answer.status == 429:
                await self.pause(self.pace.refused(answer.text, answer.headers.get("retry-after")))
                continue
            if answer.status != 200:
                said = _said(answer.text, 300)
                raise MirrorError(f"GET {path} answered {answer.status}: {said}")
            self.pace.served()
            return answer.body

    async def _entries(
        self, http: httpx.AsyncClient, held: int, checkpoint: Checkpoint
    ) -> list[str]:
        """The log's entries from `held` to the checkpoint's size, from its entry tiles: the
        full ones kept from an earlier run are not read again."""
        out: list[str] = []
        first = held - held % TILE_WIDTH
        for start in range(first, checkpoint.size, TILE_WIDTH):
            width = min(TILE_WIDTH, checkpoint.size - start)
            tile = Tile(ENTRIES, start // TILE_WIDTH, width)
            ids = self.tiles.get(tile.index) if width == TILE_WIDTH else None
            if ids is None:
                body = await self._get(http, f"/c/{self.target.slug}/tile/{tile.path()}", "tile")
                ids = _bundle(body)
                if len(ids) != width:
                    raise MirrorMismatch(
                        f"the entry tile at {start} holds {len(ids)} entries, not {width}"
                    )
                self.tiles.keep(tile.index, ids)
            out.extend(ids[max(0, held - start) :])
        return out


class _Relay:
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
            log.warning("the relay says: %s", _said(str(message[1:]), 300))
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
        event = _checked(raw)
        if _ours(event, self.slug):
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
                raise MirrorError(f"the relay refused the key's AUTH: {_said(said, 300)}")
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
                refused = f"the relay refused NIP-77 sync: {_said(said, 300)}"
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
                event = _checked(raw)
                asked[sub].discard(event.id)
                if _ours(event, self.slug):
                    events.append(event)
                    self.progress()
                continue
            rest = asked.pop(sub)
            free.append(sub)
            said = str(message[2]) if len(message) > 2 else ""
            if message[0] == "CLOSED":
                if not is_rate_limited(said):
                    raise MirrorError(f"the relay closed the request: {_said(said, 300)}")
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
                        raise _Stop(f"the relay closed the live subscription: {_said(said, 300)}")
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


def _said(text: str, limit: int) -> str:
    """What a peer said, on one line and at most `limit` characters."""
    return " ".join(text.split())[:limit]


def _answers(event_id: str, message: list[Any]) -> bool:
    return message[0] == "OK" and message[1:2] == [event_id]


def _checked(raw: object) -> Event:
    event = Event.from_dict(raw)
    event.verify()
    return event


def _ours(event: Event, slug: str) -> bool:
    """Whether an event belongs in a copy of `slug`: a profile or terms (of no collection),
    or an event whose content names the collection."""
    if event.kind in unscoped_kinds():
        return True
    try:
        content = json.loads(event.content)
    except ValueError:
        return False
    return isinstance(content, dict) and content.get("collection") == slug


def _bundle(data: bytes) -> list[str]:
    ids = []
    at = 0
    while at < len(data):
        if at + 2 > len(data):
            raise MirrorMismatch("an entry tile ends inside a length")
        size = int.from_bytes(data[at : at + 2], "big")
        entry = data[at + 2 : at + 2 + size]
        if size != 32 or len(entry) != 32:
            raise MirrorMismatch("an entry tile holds an entry that is not a 32-byte event id")
        ids.append(entry.hex())
        at += 2 + size
    return ids


def _nip98(key: SecretKey, url: str, method: str = "GET") -> str:
    event = key.sign(27235, "", int(time.time()), [["u", url], ["method", method]])
    return "Nostr " + base64.b64encode(event.to_json().encode("utf-8")).decode("ascii")


async def run_mirror(mirror: Mirror, *, once: bool) -> int:
    """The command's exit code: 0 (synced, or followed until stopped), 1 (a mismatch: the
    copy is left as it was), 2 (the mirror could not run)."""
    try:
        await mirror.run(once=once)
    except MirrorMismatch as exc:
        mirror.say(f"tms mirror: STOPPED, the server's history does not match: {exc}")
        return 1
    except (MirrorError, LogError, TMSError) as exc:
        mirror.say(f"tms mirror: {exc}")
        return 2
    except (OSError, TimeoutError, httpx.HTTPError, ConnectionClosed) as exc:
        mirror.say(f"tms mirror: cannot reach {mirror.target.relay}: {exc}")
        return 2
    return 0
