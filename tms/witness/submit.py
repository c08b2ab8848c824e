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
`RETRY_SECONDS` up to `MAX_RETRY_SECONDS`, and are counted in `/metrics`.
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
from tms.errors import LogError, one_line
from tms.ledger.access import Access
from tms.ledger.log.cosigned import Cosigned, Standing
from tms.ledger.log.reads import LogReads
from tms.store.database import Pool, application_name
from tms.tlog.note import split_note
from tms.tlog.policy import Policy, Witness
from tms.tlog.witness import SIZE_CONTENT_TYPE, Submission, parse_size
from tms.types import Slug

log = logging.getLogger(__name__)

INTERVAL: Final = 1.0  # seconds between looks for checkpoints to submit
TIMEOUT: Final = 10.0  # one add-checkpoint call, connecting included
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
    ) -> None:
        self.database_url = database_url
        self.pool = pool
        self.targets = policy.submission_targets()
        self.cosigned = cosigned
        self.tlog = tlog
        self.access = access
        self.interval = interval
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
                        log.warning("witnessing paused: %s", one_line(exc))
                        await _close(locks)
                    await asyncio.sleep(self.interval)
        finally:
            await _close(locks)

    async def _pass(
        self, http: httpx.AsyncClient, keys: list[str], locks: list[asyncpg.Connection]
    ) -> None:
        """One look: a round for each collection some witness is behind on, under its lock."""
        if not locks or locks[0].is_closed():
            await _close(locks)
            locks.append(
                await asyncpg.connect(
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
                answer = await http.post(url, content=body)
            except (httpx.HTTPError, LogError) as exc:
                return await self._failed(slug, witness, failures, f"unreachable: {one_line(exc)}")
            if answer.status_code == 200:
                text, signatures = split_note(note + answer.text)
                try:
                    cosignature = witness.key.find(text, signatures)
                except LogError as exc:
                    return await self._failed(slug, witness, failures, str(exc), loud=True)
                if cosignature is None:
                    why = "answered 200 without a cosignature by its key"
                    return await self._failed(slug, witness, failures, why, loud=True)
                await self.cosigned.record(slug, size, key, cosignature)
                metrics.WITNESS_SUBMISSIONS.labels(witness.name, "cosigned").inc()
                return None
            if answer.status_code == 409 and answer.headers.get("content-type", "").startswith(
                SIZE_CONTENT_TYPE
            ):
                try:
                    held = parse_size(answer.content)
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
            said = " ".join(answer.text[:300].split()) or answer.reason_phrase
            loud = answer.status_code in (403, 404, 422)
            why = f"answered {answer.status_code}: {said}"
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
