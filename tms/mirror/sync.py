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
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

import httpx
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from tms.errors import LogError, TMSError
from tms.mirror import push
from tms.mirror.copy import Copy, MirrorMismatch
from tms.nostr.events import Event, SecretKey
from tms.nostr.negentropy import Initiator, Items
from tms.rules.content import SLUG_PATTERN
from tms.tlog.note import Checkpoint, NoteVerifier, open_checkpoint
from tms.tlog.policy import Policy
from tms.tlog.tiles import ENTRIES, TILE_WIDTH, Tile

log = logging.getLogger(__name__)

TIMEOUT: Final = 30.0  # one answer from the relay or the server
# Ids asked for in one REQ: one page of the relay's stored answer (a REQ of more is answered in
# pages that each look every id up again), several REQs in flight.
IDS_PER_REQ: Final = 100
IN_FLIGHT: Final = 8
FRAME_SIZE_LIMIT: Final = 256 * 1024  # our Negentropy messages, before hex
QUIET_SECONDS: Final = 1.0  # after live events stop this long, sync and check again
RESYNC_SECONDS: Final = 60.0
MAX_MESSAGE_BYTES: Final = 40 * 1024 * 1024  # a relay message: one full-size evidence, escaped
NEG_ID: Final = "tms-mirror-neg"
LIVE_ID: Final = "tms-mirror-live"


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
    ) -> None:
        self.target = target
        self.key = key
        self.directory = directory
        self.policy = policy
        self.log_key = log_key
        self.push = push
        self.say = say
        self.copy = Copy.open(directory)
        # served, not yet covered by a checkpoint (kept on disk: a stopped sync resumes)
        self.pending: dict[str, Event] = self.copy.pending
        if self.copy.state is not None and self.copy.state.collection != target.slug:
            raise MirrorError(
                f"{directory} is a copy of '{self.copy.state.collection}', not of '{target.slug}'"
            )

    async def run(self, *, once: bool) -> Report:
        async with (
            httpx.AsyncClient(timeout=TIMEOUT) as http,
            connect(self.target.relay, max_size=MAX_MESSAGE_BYTES, open_timeout=TIMEOUT) as ws,
        ):
            relay = _Relay(ws)
            await relay.authenticate(self.key, self.target.relay)
            report = await self.sync(relay, http)
            if once:
                return report
            await relay.send(["REQ", LIVE_ID, {"limit": 0}])
            while True:
                arrived = await relay.live(QUIET_SECONDS, RESYNC_SECONDS)
                self.copy.hold(arrived)
                report = await self.sync(relay, http)

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
        wanted = [i.hex() for i in need]
        for start in range(0, len(wanted), IDS_PER_REQ * IN_FLIGHT):
            found = await relay.by_ids(wanted[start : start + IDS_PER_REQ * IN_FLIGHT])
            self.copy.hold(found)
            report.fetched += len(found)
        verifier = await self._log_key(http)
        if self.push and have:
            target = await push.target_log(
                http, self.target.base, self.target.slug, self.key, verifier
            )
            lacking = {i.hex() for i in have}
            report.pushed = await relay.publish(push.plan(self.copy, self.pending, lacking, target))
        note = await self._get(http, f"/c/{self.target.slug}/checkpoint")
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
        entries = self.copy.entries + await self._entries(http, len(self.copy.entries), checkpoint)
        report.added = self.copy.extend(
            checkpoint,
            note,
            entries,
            self.pending,
            relay=self.target.relay,
            collection=self.target.slug,
            log_key=verifier.encode(),
        )
        report.size = checkpoint.size
        self.say(
            f"{self.target.slug}: {checkpoint.size} log entries verified against the server's "
            f"checkpoint (root {checkpoint.root.hex()[:16]}…"
            + (f", witnessed by {', '.join(report.witnessed_by)}" if report.witnessed_by else "")
            + f"); {report.added} new, {report.fetched} events fetched"
            + (f", {report.pushed} pushed" if self.push else "")
        )
        return report

    async def _log_key(self, http: httpx.AsyncClient) -> NoteVerifier:
        kept = self.copy.state.log_key if self.copy.state is not None else None
        given = self.log_key or kept
        served = (await http.get(f"{self.target.base}/log-key")).text.strip()
        if given is not None and NoteVerifier.parse(given) != NoteVerifier.parse(served):
            raise MirrorMismatch(
                f"the server's log key is now {served}, not {given}: its checkpoints are no "
                "longer signed by the key this copy was verified with"
            )
        if given is None:
            self.say(f"{self.target.slug}: the server's log key is {served} (kept from now on)")
        return NoteVerifier.parse(given or served)

    async def _get(self, http: httpx.AsyncClient, path: str) -> str:
        response = await self._authorized(http, path)
        return response.text

    async def _authorized(self, http: httpx.AsyncClient, path: str) -> httpx.Response:
        url = f"{self.target.base}{path}"
        response = await http.get(url, headers={"Authorization": _nip98(self.key, url)})
        if response.status_code != 200:
            said = response.text[:300]
            raise MirrorError(f"GET {path} answered {response.status_code}: {said}")
        return response

    async def _entries(
        self, http: httpx.AsyncClient, held: int, checkpoint: Checkpoint
    ) -> list[str]:
        """The log's entries from `held` to the checkpoint's size, from its entry tiles."""
        out: list[str] = []
        first = held - held % TILE_WIDTH
        for start in range(first, checkpoint.size, TILE_WIDTH):
            width = min(TILE_WIDTH, checkpoint.size - start)
            tile = Tile(ENTRIES, start // TILE_WIDTH, width)
            response = await self._authorized(http, f"/c/{self.target.slug}/tile/{tile.path()}")
            ids = _bundle(response.content)
            if len(ids) != width:
                raise MirrorMismatch(
                    f"the entry tile at {start} holds {len(ids)} entries, not {width}"
                )
            out.extend(ids[max(0, held - start) :])
        return out


class _Relay:
    """The relay end of the mirror's WebSocket: requests answered in NIP-01's and NIP-77's
    words, live events put aside for `live`."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.arrived: list[Event] = []

    async def send(self, message: list[Any]) -> None:
        await self.ws.send(json.dumps(message, separators=(",", ":"), ensure_ascii=False))

    async def _next(self, seconds: float = TIMEOUT) -> list[Any]:
        while True:
            raw = await asyncio.wait_for(self.ws.recv(), seconds)
            message = json.loads(raw)
            if not isinstance(message, list) or not message:
                continue
            if message[0] == "EVENT" and len(message) == 3 and message[1] == LIVE_ID:
                self.arrived.append(_checked(message[2]))
                continue
            if message[0] == "NOTICE":
                log.warning("the relay says: %s", message[1:])
                continue
            return message

    async def _until(self, accept: Callable[[list[Any]], bool]) -> list[Any]:
        while True:
            message = await self._next()
            if accept(message):
                return message

    async def authenticate(self, key: SecretKey, url: str) -> None:
        challenge = await self._until(lambda m: m[0] == "AUTH")
        event = key.sign(22242, "", int(time.time()), [["relay", url], ["challenge", challenge[1]]])
        await self.send(["AUTH", event.to_dict()])
        answer = await self._until(lambda m: m[0] == "OK" and m[1] == event.id)
        if answer[2] is not True:
            raise MirrorError(f"the relay refused the key's AUTH: {answer[3]}")

    async def reconcile(self, items: Items) -> tuple[list[bytes], list[bytes]]:
        """NIP-77 over everything the relay serves here: (ids only we have, ids only it has)."""
        initiator = Initiator(items, FRAME_SIZE_LIMIT)
        first = initiator.initiate()
        have: list[bytes] = []
        need: list[bytes] = []
        await self.send(["NEG-OPEN", NEG_ID, {}, first.hex()])
        message: bytes | None = first
        while message is not None:
            answer = await self._until(lambda m: m[0] in ("NEG-MSG", "NEG-ERR") and m[1] == NEG_ID)
            if answer[0] == "NEG-ERR":
                said = f"the relay refused NIP-77 sync: {answer[2]}"
                if str(answer[2]).startswith("restricted:"):
                    raise Restricted(said)
                raise MirrorError(said)
            message, more_have, more_need = initiator.reconcile(bytes.fromhex(answer[2]))
            have += more_have
            need += more_need
            if message is not None:
                await self.send(["NEG-MSG", NEG_ID, message.hex()])
        await self.send(["NEG-CLOSE", NEG_ID])
        return have, need

    async def by_ids(self, ids: list[str]) -> list[Event]:
        """The events of these ids the relay serves, each checked: REQs of `IDS_PER_REQ` ids,
        sent at once."""
        subs: set[str] = set()
        for start in range(0, len(ids), IDS_PER_REQ):
            sub = f"tms-mirror-get-{start // IDS_PER_REQ}"
            chunk = ids[start : start + IDS_PER_REQ]
            await self.send(["REQ", sub, {"ids": chunk, "limit": len(chunk)}])
            subs.add(sub)
        events: list[Event] = []
        while subs:
            message = await self._until(
                lambda m: m[0] in ("EVENT", "EOSE", "CLOSED") and m[1] in subs
            )
            if message[0] == "EVENT":
                events.append(_checked(message[2]))
                continue
            if message[0] == "CLOSED":
                raise MirrorError(f"the relay closed the request: {message[2]}")
            subs.discard(message[1])
            await self.send(["CLOSE", message[1]])
        return events

    async def publish(self, events: list[Event]) -> int:
        """The events in order, each once the one before it is stored (`tms.mirror.push`)."""
        return await push.send_in_order(events, self.send, self._ok)

    async def _ok(self, event_id: str) -> tuple[bool, str]:
        answer = await self._until(lambda m: m[0] == "OK" and m[1] == event_id)
        return answer[2] is True, str(answer[3]) if len(answer) > 3 else ""

    async def live(self, quiet: float, longest: float) -> list[Event]:
        """Live events, once they have stopped arriving for `quiet` seconds (or after
        `longest`, whichever comes first)."""
        deadline = time.monotonic() + longest
        while time.monotonic() < deadline:
            seen = len(self.arrived)
            with contextlib.suppress(TimeoutError):
                message = await self._next(min(quiet, max(0.01, deadline - time.monotonic())))
                if message[0] == "CLOSED" and message[1] == LIVE_ID:
                    raise MirrorError(f"the relay closed the live subscription: {message[2]}")
            if self.arrived and len(self.arrived) == seen:
                break
        arrived, self.arrived = self.arrived, []
        return arrived


def _checked(raw: object) -> Event:
    event = Event.from_dict(raw)
    event.verify()
    return event


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
