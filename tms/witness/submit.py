"""Submitting checkpoints to the policy's witnesses, in the background: publishing never waits.

Every `INTERVAL` seconds the submitter asks which collections' newest checkpoint a witness has
not cosigned yet (and is not backing off from), and for each runs one *round*: the newest
checkpoint goes to every such witness at once, `old` being the size that witness last cosigned,
with the consistency proof from there. The same checkpoint to all of them, so that their
cosignatures add up to a quorum on one note. A round holds a PostgreSQL advisory lock for its
collection, so that of several servers on one database one submits at a time.

Answers (C2SP tlog-witness): 200 carries the witness's cosignature lines, which are verified
with the policy's key for it before they are kept; 409 says which size the witness holds, which
becomes `old` for one more try at once (a witness holding a size above this log's newest, or
refusing with 403/404/422, is logged loudly: a witness that saw a tree this server did not
sign, or a log key it does not trust, needs the operator). Failures back off, doubling from
`RETRY_SECONDS` up to `MAX_RETRY_SECONDS`, and are counted in `/metrics`; a witness that
answers again after failing is logged once.

A witness is a peer, not trusted to be honest (DESIGN.md, "Witnesses and mirrors"): its answer
is read by streaming (`tms.fetch.bounded`), at most `MAX_ANSWER_BYTES`, the whole call within
`DEADLINE` seconds, so one that answers without end or a byte at a time costs one failure, never
the server's memory or a submission stuck for good.

The database away meets the submitter at each look: that is reported to the server's outage
(`tms.store.outage`), which logs it once; any other failure of a look is logged once for each
kind, and the look that works again says how many failed meanwhile.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
from typing import Final

import asyncpg
import httpx

from tms import metrics
from tms.errors import LogError, is_database_down, one_line
from tms.fetch.bounded import PeerError, request
from tms.ledger import Access, Cosigned, LogReads, Outage, Pool, Standing, application_name, connect
from tms.tlog.note import split_note
from tms.tlog.policy import Policy, Witness
from tms.tlog.witness import SIZE_CONTENT_TYPE, Submission, parse_size
from tms.types import Slug

log = logging.getLogger(__name__)

INTERVAL: Final = 1.0  # seconds between looks for checkpoints to submit
TIMEOUT: Final = 10.0  # each step of a call (connect, write, read) within the deadline
DEADLINE: Final = 10.0  # one add-checkpoint call, connecting to last byte
# A witness answers a few signature lines; even post-quantum ones (5 kB each) fit many times.
MAX_ANSWER_BYTES: Final = 64 * 1024
RETRY_SECONDS: Final = 2.0
MAX_RETRY_SECONDS: Final = 300.0
_LOCK_SQL: Final = "SELECT pg_try_advisory_lock(hashtextextended('tms-witness:' || $1, 0))"
_UNLOCK_SQL: Final = "SELECT pg_advisory_unlock(hashtextextended('tms-witness:' || $1, 0))"


class Submitter:
    def __init__(
        self,
        database_url: str,
        pool: Pool,
        policy: Policy,
        cosigned: Cosigned,
        tlog: LogReads,
        access: Access,
        *,
        interval: float = INTERVAL,
        outage: Outage | None = None,
    ) -> None:
        self.database_url = database_url
        self.pool = pool
        self.targets = policy.submission_targets()
        self.cosigned = cosigned
        self.tlog = tlog
        self.access = access
        self.interval = interval
        self.outage = outage or Outage()
        self._paused: str | None = None  # the kind of failure the looks last met, if any
        self._failed_looks = 0
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self.targets:
            self._task = asyncio.create_task(self._run(), name="tms-witness-submit")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _run(self) -> None:
        keys = [w.key.encode() for w in self.targets]
        locks: list[asyncpg.Connection] = []  # the connection the rounds' locks live on
        try:
            async with httpx.AsyncClient(timeout=TIMEOUT, follow_redirects=False) as http:
                while True:
                    try:
                        await self._pass(http, keys, locks)
                    except Exception as exc:  # the database away: try again next time
                        self._look_failed(exc)
                        await _close(locks)
                    else:
                        self._look_worked()
                    await asyncio.sleep(self.interval)
        finally:
            await _close(locks)

    def _look_failed(self, exc: Exception) -> None:
        """One line for each kind of failure, however many looks meet it: the database away is
        the outage's to log (`tms.store.outage`), anything else is logged when it first comes."""
        self._failed_looks += 1
        if is_database_down(exc):
            self.outage.failed("the witness submitter", exc)
            kind = "database"
        else:
            kind = type(exc).__name__
            if kind != self._paused:
                log.warning("witnessing paused: %s", one_line(exc))
        self._paused = kind

    def _look_worked(self) -> None:
        if self._paused is not None and self._paused != "database":
            log.warning("witnessing resumes, after %d failed looks", self._failed_looks)
        self._paused, self._failed_looks = None, 0

    async def _pass(
        self, http: httpx.AsyncClient, keys: list[str], locks: list[asyncpg.Connection]
    ) -> None:
        """One look: a round for each collection some witness is behind on, under its lock."""
        if not locks or locks[0].is_closed():
            await _close(locks)
            locks.append(
                await connect(
                    self.database_url,
                    server_settings={"application_name": application_name("witness")},
                )
            )
        lock = locks[0]
        for slug, _ in await self.cosigned.behind(keys):
            if await lock.fetchval(_LOCK_SQL, slug):
                try:
                    await self.round(http, slug)
                finally:
                    await lock.fetchval(_UNLOCK_SQL, slug)

    async def round(self, http: httpx.AsyncClient, slug: Slug) -> None:
        """The collection's newest checkpoint to every witness that has not cosigned it."""
        readable = self.access.unsafe_for_operator(slug)
        latest = await self.tlog.checkpoint(readable)
        standing = await self.cosigned.standing(slug)
        due = []
        for witness in self.targets:
            stood = standing.get(witness.key.encode())
            if stood is None or (stood.due and stood.size < latest["size"]):
                due.append(self._submit(http, slug, latest["size"], latest["note"], witness, stood))
        await asyncio.gather(*due)

    async def _submit(
        self,
        http: httpx.AsyncClient,
        slug: Slug,
        size: int,
        note: str,
        witness: Witness,
        stood: Standing | None,
    ) -> None:
        key = witness.key.encode()
        old = 0 if stood is None else stood.size
        failures = 0 if stood is None else stood.failures
        assert witness.url is not None
        url = witness.url.rstrip("/") + "/add-checkpoint"
        for _ in range(2):  # once more after a 409 told us the witness's size
            try:
                proof = await self.tlog.consistency(
                    self.access.unsafe_for_operator(slug), old, size
                )
                body = Submission(
                    old, tuple(base64.b64decode(h) for h in proof["hashes"]), note
                ).body()
                answer = await request(
                    http,
                    "POST",
                    url,
                    max_bytes=MAX_ANSWER_BYTES,
                    deadline=DEADLINE,
                    content=body,
                )
            except (PeerError, LogError) as exc:
                return await self._failed(slug, witness, failures, f"unreachable: {one_line(exc)}")
            if answer.status == 200:
                try:
                    text, signatures = split_note(note + answer.text)
                except LogError as exc:
                    why = f"answered 200 without cosignature lines: {exc}"
                    return await self._failed(slug, witness, failures, why, loud=True)
                try:
                    cosignature = witness.key.find(text, signatures)
                except LogError as exc:
                    return await self._failed(slug, witness, failures, str(exc), loud=True)
                if cosignature is None:
                    why = "answered 200 without a cosignature by its key"
                    return await self._failed(slug, witness, failures, why, loud=True)
                await self.cosigned.record(slug, size, key, cosignature)
                metrics.WITNESS_SUBMISSIONS.labels(witness.name, "cosigned").inc()
                if failures:
                    log.warning(
                        "witness %s answers again on the log of '%s', after %d %s",
                        witness.name,
                        slug,
                        failures,
                        "failure" if failures == 1 else "failures",
                    )
                return None
            if answer.status == 409 and answer.headers.get("content-type", "").startswith(
                SIZE_CONTENT_TYPE
            ):
                try:
                    held = parse_size(answer.body)
                except LogError as exc:
                    return await self._failed(slug, witness, failures, str(exc))
                metrics.WITNESS_SUBMISSIONS.labels(witness.name, "conflict").inc()
                if held > size:
                    why = (
                        f"it holds size {held} of this log, above the newest checkpoint signed "
                        f"here ({size}): it saw a tree this server did not sign it, or this "
                        "database was restored from an older backup"
                    )
                    return await self._failed(slug, witness, failures, why, loud=True)
                if held == old:  # same size, other root: a history this server did not sign
                    why = f"it refuses size {size}: it cosigned size {held} with another root"
                    return await self._failed(slug, witness, failures, why, loud=True)
                old = held
                await self.cosigned.stands_at(slug, key, held)
                continue
            said = " ".join(answer.body[:300].decode("utf-8", "replace").split()) or "(no body)"
            loud = answer.status in (403, 404, 422)
            why = f"answered {answer.status}: {said}"
            return await self._failed(slug, witness, failures, why, loud=loud)
        return None

    async def _failed(
        self, slug: Slug, witness: Witness, failures: int, why: str, *, loud: bool = False
    ) -> None:
        retry = min(MAX_RETRY_SECONDS, RETRY_SECONDS * 2**failures)
        (log.error if loud else log.warning)(
            "witness %s on the log of '%s': %s (next try in %g s)", witness.name, slug, why, retry
        )
        metrics.WITNESS_SUBMISSIONS.labels(witness.name, "failed").inc()
        await self.cosigned.failed(slug, witness.key.encode(), retry, why)


async def _close(locks: list[asyncpg.Connection]) -> None:
    while locks:
        with contextlib.suppress(Exception):
            await locks.pop().close(timeout=2)
