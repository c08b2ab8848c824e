"""One client's relay connection: its AUTH state, its subscriptions, and its queue of messages
to send.

Messages from the client are handled in the order they arrive. EVENTs are checked (envelope,
signature, schema) one by one, then committed without waiting for each other: those for the same
collections join its queue in arrival order and are judged in that order, usually in one group
commit (so a link may follow its evidence, and a client with many events in flight gets them
committed together); an event for other collections waits until those before it are answered,
and so does any other message (a read after a write sees it).
Writes need no AUTH: `Ledger.publish` judges a one-event batch exactly as it judges any batch.
Reads (REQ, COUNT) need an authenticated key that may read: NIP-42 AUTH, or the login cookie of
a same-origin browser (`tms.relay.endpoint`).

Everything sent goes through one bounded queue, written by a task of its own: whatever has
queued up meanwhile goes out in one write (`send_many`, up to `WRITE_BYTES`), so that a batch's
events reach a subscriber, and a group's OKs a writer, in one system call rather than one each.
Live events are never waited for: a client that lets its queue pass `OUTBOX_BYTES` or
`OUTBOX_MESSAGES` is behind, and is told so in a NOTICE and closed. A stored answer waits for
room (the query pages are small), up to `STALL_SECONDS`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import secrets
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Final

from tms.errors import (
    DATABASE_UNAVAILABLE,
    AuthError,
    NotAReader,
    RateLimited,
    Refusal,
    TMSError,
    one_line,
    sendable,
    shown,
)
from tms.guard.rates import Throttle
from tms.guard.refusals import RefusalLog
from tms.ledger.access import Access, ReadableCollection, Reader, not_a_reader
from tms.ledger.feed import CommitFeed
from tms.ledger.filters import PAGE, Stored, StoredEvents
from tms.ledger.service import Ledger
from tms.ledger.sessions import Sessions
from tms.ledger.writes import lock_keys
from tms.nostr import nip42
from tms.nostr.events import is_hex64
from tms.nostr.filters import Filter
from tms.relay import messages
from tms.relay.limits import (
    DEFAULT_LIMIT,
    MAX_IN_FLIGHT,
    MAX_SEARCH_RESULTS,
    MAX_SUBSCRIPTIONS,
    OUTBOX_BYTES,
    OUTBOX_MESSAGES,
    STALL_SECONDS,
)
from tms.relay.live import Hub, Subscription
from tms.relay.messages import (
    AuthMessage,
    CloseMessage,
    CountMessage,
    EventMessage,
    ProtocolError,
    Refused,
    ReqMessage,
)
from tms.relay.prefixes import reason
from tms.results import PublishResult
from tms.search.search import Search
from tms.services import Services
from tms.store.database import is_database_down
from tms.types import KIND_CLAIM, KIND_CONTRADICTION, KIND_PROFILE, KIND_TERMS, PubKey, Slug

log = logging.getLogger(__name__)

ROUTE: Final = "relay"  # what the refusal log calls this door
SEARCHABLE: Final = frozenset({KIND_CLAIM, KIND_CONTRADICTION})
UNSCOPED: Final = frozenset({KIND_PROFILE, KIND_TERMS})
AUTH_REQUIRED: Final = (
    "auth-required: reading needs NIP-42 AUTH by a key that may read; answer this relay's "
    "AUTH challenge first"
)
REAUTHENTICATED: Final = (
    "auth-required: this connection authenticated as another key; subscribe again"
)
WRITE_BYTES: Final = 256 * 1024  # queued messages written at once, about (one at least)
FEED_WAIT_SECONDS: Final = 10.0
FEED_NOT_READY: Final = (
    "error: live delivery is not ready (the database is not answering yet); try again shortly"
)
NOT_LIVE: Final = (
    "unsupported: search results are not live (NIP-50 ranks what is stored); REQ again "
    "without search to follow new events"
)


@dataclass(frozen=True, slots=True)
class Relay:
    """What every connection of this process shares."""

    ledger: Ledger
    access: Access
    search: Search
    stored: StoredEvents
    throttle: Throttle
    refusals: RefusalLog
    sessions: Sessions
    hub: Hub
    feed: CommitFeed


@asynccontextmanager
async def open_relay(services: Services, database_url: str) -> AsyncIterator[Relay]:
    """The relay of this process: its hub of subscriptions, fed by the commit feed."""
    pool = services.ledger.pool
    stored = StoredEvents(pool)
    hub = Hub(stored)
    feed = CommitFeed(
        database_url, pool, wanted=hub.wanted, deliver=hub.deliver, outage=services.outage
    )
    feed.start()
    try:
        yield Relay(
            ledger=services.ledger,
            access=services.access,
            search=services.search,
            stored=stored,
            throttle=services.throttle,
            refusals=services.refusals,
            sessions=services.sessions,
            hub=hub,
            feed=feed,
        )
    finally:
        await feed.close()


class Connection:
    def __init__(
        self,
        relay: Relay,
        send: Callable[[str], Awaitable[None]],
        *,
        send_many: Callable[[list[str]], Awaitable[None]] | None = None,
        slug: Slug | None,
        url: str,
        address: str | None,
        pubkey: PubKey | None = None,
        idle: Callable[[bool], None] | None = None,
    ) -> None:
        """`send`: one message to the client; `send_many`: several in one write, when the
        server can (`tms.http.websocket`); `slug`: the collection this relay is (None: the
        root, every collection the key reads); `url`: this relay's URL, as AUTH events must
        name it; `pubkey`: the key a login cookie authenticated; `idle(flag)`: told when the
        connection has no subscription (the server may then close it to make room for
        another)."""
        self.relay = relay
        self._send = send
        self._send_many = send_many
        self.slug = slug
        self.url = url
        self.address = address
        self.challenge = secrets.token_urlsafe(24)
        self._pubkey = pubkey
        self.reader: Reader | None = None
        self.subs: dict[str, Subscription] = {}
        self.last_active = time.monotonic()
        self.ending: str | None = None  # why the connection must end, once it must
        self.ended = asyncio.Event()
        self._idle = idle
        self._outbox: deque[str] = deque()
        self._outbox_chars = 0
        self._wake = asyncio.Event()
        self._room = asyncio.Event()
        self._room.set()
        self._writer: asyncio.Task[None] | None = None
        self._refresh: asyncio.Task[None] | None = None
        self._inflight: set[asyncio.Task[PublishResult]] = set()  # events not yet answered
        self._lane: tuple[str, ...] = ()  # the lock keys of the events in flight

    @property
    def pubkey(self) -> PubKey | None:
        return self._pubkey

    # --- lifecycle ------------------------------------------------------------------------------

    async def open(self) -> None:
        self._writer = asyncio.create_task(self._write(), name="tms-relay-writer")
        self.send(messages.auth(self.challenge))
        if self._pubkey is not None:
            self.reader = await self.relay.access.reader(self._pubkey)
            self.relay.hub.clients.add(self)

    async def close(self, flush_seconds: float = 0.0) -> None:
        """Leave the hub; with `flush_seconds`, give what is queued (a closing NOTICE) that
        long to go out."""
        for sub in self.subs.values():
            self.relay.hub.remove(sub)
        self.subs.clear()
        self.relay.hub.clients.discard(self)
        for task in (self._refresh,):
            if task is not None:
                task.cancel()
        if self._writer is None:
            return
        if flush_seconds > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._drained(), flush_seconds)
        self._writer.cancel()
        await asyncio.gather(self._writer, return_exceptions=True)

    def idle_for(self) -> float | None:
        """Seconds since the last message, while nothing is subscribed (None: not idle)."""
        return None if self.subs else time.monotonic() - self.last_active

    # --- sending --------------------------------------------------------------------------------

    def send(self, message: str) -> None:
        """Queue a message; a client whose queue is full is behind and is closed."""
        if self.ending is not None:
            return
        if len(self._outbox) >= OUTBOX_MESSAGES or self._outbox_chars + len(message) > (
            OUTBOX_BYTES
        ):
            self.behind(
                f"{len(self._outbox):,} messages ({self._outbox_chars:,} bytes) wait to be "
                f"read, over this relay's {OUTBOX_MESSAGES:,} messages or {OUTBOX_BYTES:,} "
                "bytes per connection"
            )
            return
        self._outbox.append(message)
        self._outbox_chars += len(message)
        if self._outbox_chars > OUTBOX_BYTES // 2:
            self._room.clear()
        self._wake.set()

    send_live = send

    async def send_stored(self, message: str) -> None:
        """Queue a stored event once there is room: a slow reader slows its own answer."""
        if not self._room.is_set():
            try:
                await asyncio.wait_for(self._room.wait(), STALL_SECONDS)
            except TimeoutError:
                self.behind(f"a stored answer was not read for {STALL_SECONDS:g} s")
        self.send(message)

    def behind(self, why: str) -> None:
        if self.ending is not None:
            return
        self._outbox.clear()
        self._outbox_chars = 0
        self._outbox.append(messages.notice(f"error: closing this connection: {why}"))
        self._wake.set()
        self.ending = f"behind: {why}"
        self.ended.set()

    def end(self, why: str, notice: str) -> None:
        """Close the connection after a last NOTICE."""
        if self.ending is None:
            self.send(messages.notice(notice))
            self.ending = why
            self.ended.set()

    async def _write(self) -> None:
        while True:
            while not self._outbox:
                self._wake.clear()
                await self._wake.wait()
            if self._send_many is None:
                message = self._outbox.popleft()
                self._taken(len(message))
                await self._send(message)
                continue
            batch = [self._outbox.popleft()]
            size = len(batch[0])
            while self._outbox and size + len(self._outbox[0]) <= WRITE_BYTES:
                size += len(self._outbox[0])
                batch.append(self._outbox.popleft())
            self._taken(size)
            await self._send_many(batch)

    def _taken(self, chars: int) -> None:
        self._outbox_chars -= chars
        if self._outbox_chars <= OUTBOX_BYTES // 4:
            self._room.set()

    async def _drained(self) -> None:
        while self._outbox:
            await asyncio.sleep(0.01)

    # --- handling -------------------------------------------------------------------------------

    async def handle(self, text: str) -> None:
        """One message from the client, answered in NIP-01's words."""
        self.last_active = time.monotonic()
        try:
            message = messages.parse(text)
        except ProtocolError as exc:
            self._refused(Refusal.INVALID)
            if exc.event_id is not None:
                self.send(messages.ok(exc.event_id, False, str(exc)))
            else:
                self.send(messages.notice(str(exc)))
            return
        except Refused as exc:
            self._refused(Refusal.INVALID)
            self.send(messages.closed(exc.sub_id, str(exc)))
            return
        if isinstance(message, CloseMessage):
            self._unsubscribe(message.sub_id)
            return
        if not isinstance(message, EventMessage):
            await self.settle()  # a read after a write sees it
        try:
            await self.relay.throttle.address(self.address)
        except RateLimited as exc:
            self._limited(message, exc)
            return
        try:
            if isinstance(message, EventMessage):
                await self._event(message)
            elif isinstance(message, AuthMessage):
                await self._auth(message)
            elif isinstance(message, ReqMessage):
                await self._req(message)
            else:
                await self._count(message)
        except Refused as exc:
            self.send(messages.closed(exc.sub_id, str(exc)))
        except Exception as exc:  # not the client's doing (the database is away, ...)
            self._failed_on(message, self.failure(exc))

    def _failed_on(self, message: messages.ClientMessage, said: str) -> None:
        """Answer a message that failed on our side, in the form the client waits for."""
        if isinstance(message, ReqMessage | CountMessage):
            self._unsubscribe(message.sub_id)
            self.send(messages.closed(message.sub_id, said))
        elif isinstance(message, EventMessage):
            self.send(messages.ok(message.id, False, said))
        elif isinstance(message, AuthMessage) and isinstance(message.event, dict):
            event_id = message.event.get("id")
            if isinstance(event_id, str) and is_hex64(event_id):
                self.send(messages.ok(event_id, False, said))
            else:
                self.send(messages.notice(said))
        else:
            self.send(messages.notice(said))

    def _limited(self, message: messages.ClientMessage, exc: RateLimited) -> None:
        self.relay.refusals.record(Refusal.RATE_LIMITED, ROUTE)
        self._failed_on(message, reason(exc))

    def _refused(self, kind: Refusal, pubkey: PubKey | None = None) -> None:
        self.relay.refusals.record(kind, ROUTE, pubkey, self.address)

    # --- EVENT ----------------------------------------------------------------------------------

    async def _event(self, message: EventMessage) -> None:
        elsewhere = self._other_collection(message.event)
        if elsewhere is not None:
            self._refused(Refusal.INVALID)
            here = shown(self.slug or "")
            said = (
                f"invalid: this relay is collection '{here}'; an event of collection "
                f"'{elsewhere}' goes to that collection's relay, /c/{elsewhere}, or to /"
            )
            self.send(messages.ok(message.id, False, said))
            return
        ledger = self.relay.ledger
        try:
            batch = await ledger.check([message.event])
        except TMSError as exc:
            self.relay.refusals.refused(exc, ROUTE)
            self.send(messages.ok(message.id, False, reason(exc)))
            return
        keys = lock_keys(batch)
        if keys != self._lane:  # another collection: what it may depend on commits first
            await self.settle()
        while len(self._inflight) >= MAX_IN_FLIGHT:
            await asyncio.wait(self._inflight, return_when=asyncio.FIRST_COMPLETED)
        # Started in arrival order, each takes its place in its collection's queue before it
        # first waits: judged in that order, committed together with the others waiting.
        task = asyncio.create_task(ledger.commit(batch, wait_for_vectors=False))
        task.add_done_callback(functools.partial(self._answer, message.id))
        self._inflight.add(task)
        self._lane = keys

    async def settle(self) -> None:
        """Until every event sent so far is committed or refused (and answered)."""
        if self._inflight:
            await asyncio.wait(set(self._inflight))

    def _answer(self, event_id: str, task: asyncio.Task[PublishResult]) -> None:
        self._inflight.discard(task)
        if task.cancelled():
            return
        exc = task.exception()
        if exc is None:
            if event_id in task.result()["skipped"]:
                self.send(messages.ok(event_id, True, "duplicate: already stored"))
            else:
                self.send(messages.ok(event_id, True, ""))
        elif isinstance(exc, TMSError):
            self.relay.refusals.refused(exc, ROUTE)
            self.send(messages.ok(event_id, False, reason(exc)))
        else:
            self.send(messages.ok(event_id, False, self.failure(exc)))

    def _other_collection(self, event: dict[str, object]) -> str | None:
        """On a collection's relay, the collection another event names (None: this one, or
        none: profiles and terms, or what the ledger will refuse anyway)."""
        if self.slug is None or event.get("kind") in UNSCOPED:
            return None
        content = event.get("content")
        if not isinstance(content, str):
            return None
        try:
            named = json.loads(content).get("collection")
        except (ValueError, AttributeError, RecursionError):
            return None
        if isinstance(named, str) and named != self.slug:
            return shown(named)
        return None

    # --- AUTH -----------------------------------------------------------------------------------

    async def _auth(self, message: AuthMessage) -> None:
        raw = message.event
        event_id = raw.get("id") if isinstance(raw, dict) else None
        try:
            pubkey = nip42.check_auth(
                raw, challenge=self.challenge, relay_url=self.url, now=int(time.time())
            )
        except AuthError as exc:
            self.relay.refusals.refused(exc, ROUTE)
            said = sendable(str(exc))
            if isinstance(event_id, str) and is_hex64(event_id):
                self.send(messages.ok(event_id, False, said))
            else:
                self.send(messages.notice(said))
            return
        if self._pubkey is not None and pubkey != self._pubkey:
            for sub_id in list(self.subs):  # they were opened as the other key
                self._unsubscribe(sub_id)
                self.send(messages.closed(sub_id, REAUTHENTICATED))
        self._pubkey = pubkey
        self.reader = await self.relay.access.reader(pubkey)
        self.relay.hub.clients.add(self)
        self.send(messages.ok(str(event_id), True, ""))

    # --- REQ, COUNT, CLOSE ----------------------------------------------------------------------

    async def _scope(self, sub_id: str) -> Reader | ReadableCollection:
        """What this key reads here, or `Refused` (auth-required / restricted / rate-limited)."""
        if self._pubkey is None:
            self._refused(Refusal.UNAUTHENTICATED)
            raise Refused(sub_id, AUTH_REQUIRED)
        try:
            await self.relay.throttle.key(self._pubkey)
        except RateLimited as exc:
            self.relay.refusals.refused(exc, ROUTE)
            raise Refused(sub_id, reason(exc)) from None
        self.reader = await self.relay.access.reader(self._pubkey)  # checked once per request
        if self.slug is not None:
            try:
                return self.reader.collection(self.slug)
            except NotAReader as exc:
                self._refused(Refusal.NOT_MEMBER, self._pubkey)
                raise Refused(sub_id, f"restricted: {exc}") from None
        if not self.reader.slugs:
            self._refused(Refusal.NOT_MEMBER, self._pubkey)
            raise Refused(sub_id, f"restricted: {self._reads_nothing()}")
        return self.reader

    async def _req(self, message: ReqMessage) -> None:
        self._unsubscribe(message.sub_id)  # NIP-01: a REQ with an open id replaces it
        scope = await self._scope(message.sub_id)
        if len(self.subs) >= MAX_SUBSCRIPTIONS:
            self._refused(Refusal.TOO_LARGE, self._pubkey)
            raise Refused(
                message.sub_id,
                f"invalid: {len(self.subs)} subscriptions are open on this connection, this "
                f"relay's max_subscriptions is {MAX_SUBSCRIPTIONS}: CLOSE one first",
            )
        for wanted in message.filters:
            if (
                wanted.search is not None
                and wanted.kinds is not None
                and not wanted.kinds & SEARCHABLE
            ):
                raise Refused(
                    message.sub_id,
                    "invalid: search covers claims (kind 4702) and contradictions (kind 4704) only",
                )
        try:
            await asyncio.wait_for(self.relay.feed.ready.wait(), FEED_WAIT_SECONDS)
        except TimeoutError:
            raise Refused(message.sub_id, FEED_NOT_READY) from None
        live = [f for f in message.filters if f.search is None]
        slugs = [scope.slug] if isinstance(scope, ReadableCollection) else scope.slugs
        sub = Subscription(self, message.sub_id, live, slugs)
        if live:
            await self.relay.hub.add(sub)
            self.subs[message.sub_id] = sub
            if len(self.subs) == 1 and self._idle is not None:
                self._idle(False)
        sent: set[str] = set()
        try:
            for wanted in message.filters:
                await self._stored(message.sub_id, scope, wanted, sent)
        except Exception as exc:
            self._unsubscribe(message.sub_id)
            self.send(messages.closed(message.sub_id, self.failure(exc)))
            return
        self.send(messages.eose(message.sub_id))
        if live:
            sub.flush(sent)
        else:
            self.send(messages.closed(message.sub_id, NOT_LIVE))

    async def _stored(
        self, sub_id: str, scope: Reader | ReadableCollection, wanted: Filter, sent: set[str]
    ) -> None:
        """One filter's stored answer, newest first (search: best first), each event once."""
        if wanted.search is not None:
            for stored in await self._search(scope, wanted):
                if stored.event.id not in sent:
                    sent.add(stored.event.id)
                    await self.send_stored(messages.event(sub_id, stored.event.to_json()))
            return
        left = DEFAULT_LIMIT if wanted.limit is None else wanted.limit
        before: int | None = None
        while left > 0 and self.ending is None:
            size = min(left, PAGE)
            page = await self.relay.stored.page(scope, wanted, before=before, size=size)
            for stored in page:
                if stored.event.id not in sent:
                    sent.add(stored.event.id)
                    await self.send_stored(messages.event(sub_id, stored.event.to_json()))
            if len(page) < size:
                return
            left -= len(page)
            before = page[-1].seq

    async def _search(self, scope: Reader | ReadableCollection, wanted: Filter) -> list[Stored]:
        assert wanted.search is not None
        kinds = (wanted.kinds or frozenset({KIND_CLAIM})) & SEARCHABLE
        limit = min(MAX_SEARCH_RESULTS, DEFAULT_LIMIT if wanted.limit is None else wanted.limit)
        if limit <= 0:
            return []
        readables = (
            [scope]
            if isinstance(scope, ReadableCollection)
            else [scope.collection(slug) for slug in scope.slugs]
        )
        search = self.relay.search
        hits: list[tuple[float, str]] = []
        for readable in readables:
            if KIND_CLAIM in kinds:
                found = await search.claims(readable, wanted.search, "vector", limit)
                for item in found["items"]:
                    hits.append((_score(item), item["id"]))
            if KIND_CONTRADICTION in kinds:
                for info in await search.contradictions(readable, wanted.search, limit):
                    hits.append((_score(info), info["id"]))
        hits.sort()
        ranked = [event_id for _, event_id in hits]
        found_events = await self.relay.stored.by_ids(scope, ranked)
        return [s for s in found_events if wanted.matches(s.event)][:limit]

    async def _count(self, message: CountMessage) -> None:
        scope = await self._scope(message.sub_id)
        if any(f.search is not None for f in message.filters):
            raise Refused(message.sub_id, "invalid: COUNT does not take search (NIP-50)")
        try:
            number = await self.relay.stored.count(scope, message.filters)
        except Exception as exc:
            self.send(messages.closed(message.sub_id, self.failure(exc)))
            return
        self.send(messages.count(message.sub_id, number))

    def _unsubscribe(self, sub_id: str) -> None:
        sub = self.subs.pop(sub_id, None)
        if sub is not None:
            self.relay.hub.remove(sub)
            if not self.subs and self._idle is not None:
                self._idle(True)

    # --- membership -----------------------------------------------------------------------------

    def membership_changed(self) -> None:
        if self._refresh is None or self._refresh.done():
            self._refresh = asyncio.create_task(self._new_reader(), name="tms-relay-reader")

    async def _new_reader(self) -> None:
        """A member list changed: read what this key may read now, and follow it."""
        if self._pubkey is None:
            return
        try:
            reader = await self.relay.access.reader(self._pubkey)
        except Exception as exc:
            log.warning("a relay connection could not refresh its reader: %s", one_line(exc))
            return
        self.reader = reader
        for sub_id, sub in list(self.subs.items()):
            if self.slug is None and reader.slugs:
                await self.relay.hub.rescope(sub, reader.slugs)
            elif self.slug is None:
                self._unsubscribe(sub_id)
                self.send(messages.closed(sub_id, f"restricted: {self._reads_nothing()}"))
            elif not reader.may_read(self.slug):
                self._unsubscribe(sub_id)
                self.send(messages.closed(sub_id, f"restricted: {not_a_reader(self.slug)}"))

    def _reads_nothing(self) -> str:
        return f"key {self._pubkey} may read no collection here: ask a collection's owner to add it"

    # --- failures -------------------------------------------------------------------------------

    def failure(self, exc: BaseException) -> str:
        """What to tell the client of an error that is not its refusal (logged here)."""
        if isinstance(exc, TMSError):
            return reason(exc)
        if is_database_down(exc):
            log.warning("database unavailable on the relay: %s", one_line(exc))
            return f"error: {DATABASE_UNAVAILABLE}"
        log.error("internal error on the relay", exc_info=exc)
        return "error: internal error"


def _score(item: object) -> float:
    """Best first: the smallest distance, or the highest rank."""
    assert isinstance(item, dict)
    if "distance" in item:
        return float(item["distance"])
    return -float(item.get("rank", 0.0))
