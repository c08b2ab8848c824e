"""Single use of signed requests, kept by the database so that it holds across server processes.

A request is known by its signature, not its id: the id of two identical calls (same tool, same
arguments) signed in the same second is the same, and a client has no field to make them differ
(arguments are strict, tags must be empty), so keying on the id would refuse the second of two
honest calls. BIP-340 signatures carry fresh randomness and cannot be altered into another valid
signature without the key, so a replay is always the very same signature. Its sha256 goes into
`used_requests` under the primary key before the tool runs: of two concurrent uses, one inserts
and the other finds the row, whichever process each reached.
Requests are only accepted within `REQUEST_WINDOW_SECONDS` of their `created_at`, so rows older
than that window (plus a margin for clock steps) are pruned now and then; a pruned request is
refused as stale anyway.
"""

from __future__ import annotations

import hashlib
import time
from typing import Final

from tms.errors import Refusal, RequestError
from tms.rules.requests import REQUEST_WINDOW_SECONDS, SignedRequest
from tms.store.database import Pool

PRUNE_EVERY_SECONDS: Final = 60
KEEP_SECONDS: Final = 2 * REQUEST_WINDOW_SECONDS + 60


class RequestLog:
    def __init__(self, pool: Pool) -> None:
        self.pool = pool
        self._last_prune = 0.0

    async def use(self, request: SignedRequest, now: int) -> None:
        """Record the request as used, or refuse it if it was used before."""
        fresh = await self.pool.fetchval(
            """INSERT INTO used_requests (id, created_at) VALUES ($1, $2)
               ON CONFLICT (id) DO NOTHING RETURNING true""",
            hashlib.sha256(bytes.fromhex(request.sig)).hexdigest(),
            request.created_at,
        )
        if not fresh:
            raise RequestError(
                "request was already used: each request works once; sign a new one for every call"
            ).refused_as(Refusal.REPLAY, request.pubkey)
        if time.monotonic() - self._last_prune > PRUNE_EVERY_SECONDS:
            self._last_prune = time.monotonic()
            await self.pool.execute(
                "DELETE FROM used_requests WHERE created_at < $1", now - KEEP_SECONDS
            )
