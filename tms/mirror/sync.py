"""`tms mirror`'s work: bring a collection down from its relay with NIP-77, check it against
the log, keep it (`tms.mirror.copy`), then follow it live.

One sync:
1. authenticate (NIP-42) on the collection's relay (`ws[s]://host/c/<slug>`);
2. reconcile with NIP-77 (this side the Negentropy initiator) over everything the relay serves
   there: the events the copy lacks are fetched by id with `REQ` and each is checked (id and
   signature); with `push`, the events only the copy holds are published (MCP `publish`, in
   ordered batches), as restoring a fresh server from a mirror needs, in the copy's order and
   only onto a log that is a prefix of the copy's (`tms.mirror.push`);
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
import json
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final
from urllib.parse import urlsplit

import httpx
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from tms.errors import LogError, TMSError
from tms.fetch.bounded import PeerError, request
from tms.mirror import push
from tms.mirror.copy import Copy, MirrorMismatch
from tms.mirror.pace import Pace
from tms.mirror.relay import (
    IN_FLIGHT,
    MAX_MESSAGE_BYTES,
    Bounds,
    MirrorError,
    Relay,
    Restricted,
    quoted,
)
from tms.mirror.tiles import HeldTiles
from tms.nostr.events import Event, SecretKey
from tms.nostr.negentropy import Items
from tms.rules.content import SLUG_PATTERN
from tms.rules.kinds import unscoped_kinds
from tms.tlog.note import Checkpoint, NoteVerifier, open_checkpoint
from tms.tlog.policy import Policy
from tms.tlog.tiles import ENTRIES, TILE_WIDTH, Tile

TIMEOUT: Final = 30.0  # opening the WebSocket
HELD_AT_ONCE: Final = 1000  # events fetched between two writes of pending.jsonl
QUIET_SECONDS: Final = 1.0  # after live events stop this long, sync and check again
RESYNC_SECONDS: Final = 60.0
DEFAULT_BOUNDS: Final = Bounds()
_HEX64: Final = re.compile(r"[0-9a-f]{64}")


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
        bounds: Bounds = DEFAULT_BOUNDS,
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
        # how a wait is waited: once connected, reading the relay meanwhile (`Relay.pause`)
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
                relay = Relay(ws, self.pace, self.bounds, self.target.slug)
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

    async def sync(self, relay: Relay, http: httpx.AsyncClient) -> Report:
        report = Report()
        stamps = [*self.copy.stamps.values(), *(e.created_at for e in self.pending.values())]
        try:
            have, need = await relay.reconcile(
                Items.of_hex(stamps, [*self.copy.stamps, *self.pending])
            )
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
            places = await self._places(http, held_entries, checkpoint.size)
            # entries (and profile or terms lines) stored since the reconciliation: by id
            late = [i for i in entries[held_entries:] if i not in self.pending]
            late += [i for i, _ in places if i not in self.pending and i not in self.copy.events]
            if late and len(late) <= self.bounds.extra_entries:
                report.fetched += await self._fetch(relay, late)
            report.added = self.copy.extend(
                checkpoint,
                note,
                entries,
                self.pending,
                places,
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

    async def _fetch(self, relay: Relay, wanted: list[str]) -> int:
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
                f"the server's log key is now {quoted(served, 200)}, not {given}: its "
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
                said = quoted(answer.text, 300)
                raise MirrorError(f"GET {path} answered {answer.status}: {said}")
            self.pace.served()
            return answer.body

    async def _places(
        self, http: httpx.AsyncClient, held: int, size: int
    ) -> list[tuple[str, str | None]]:
        """Where the export places the profile and terms lines among the entries this sync
        appends (`GET /c/<slug>/others`): each line's id and the entry it follows."""
        body = await self._get(
            http, f"/c/{self.target.slug}/others?held={held}&size={size}", "others"
        )
        try:
            listed = json.loads(body)["others"]
            places = [
                (str(other), None if after is None else str(after)) for other, after in listed
            ]
        except (ValueError, TypeError, KeyError) as exc:
            raise MirrorError(f"the server's /others answer cannot be read: {exc}") from None
        if not all(_HEX64.fullmatch(i) and (a is None or _HEX64.fullmatch(a)) for i, a in places):
            raise MirrorError("the server's /others answer names something that is not an event id")
        return places

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
