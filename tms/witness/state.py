"""This server as a witness of other logs: `add-checkpoint` judged first on what it carries
alone (`tms.tlog.witness.admit`: form, origin, the log's signature), before anything stored is
read, then decided (`decide`) against the last checkpoint it cosigned of that log, and that
checkpoint advanced by a compare-and-set on its size, so that of two submissions racing from
one size at most one advances it and the other is told the new size (409), as the protocol
requires. The size is persisted before the cosignature is answered: a witness restarted loses
no cosigned size.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Final

from tms.ledger import Pool
from tms.tlog.cosignature import CosignerKey
from tms.tlog.note import Checkpoint, split_note
from tms.tlog.witness import (
    NOTE_CONTENT_TYPE,
    SIZE_CONTENT_TYPE,
    Stored,
    Submission,
    TrustedLogs,
    WitnessRefusal,
    admit,
    decide,
    origin_hash,
    signed_lines,
)

_SQL_STORED: Final = "SELECT size, root FROM witnessed_logs WHERE origin = $1"
_SQL_FIRST: Final = """
    INSERT INTO witnessed_logs (origin, size, root, note, origin_sha256)
    VALUES ($1, $2, $3, $4, $5)
    ON CONFLICT (origin) DO NOTHING"""
_SQL_ADVANCE: Final = """
    UPDATE witnessed_logs SET size = $2, root = $3, note = $4, updated_at = now()
    WHERE origin = $1 AND size = $5 AND root = $6"""
_SQL_SIZE: Final = "SELECT size FROM witnessed_logs WHERE origin = $1"
_SQL_BY_HASH: Final = """
    SELECT note FROM witnessed_logs WHERE origin_sha256 = $1"""


@dataclass(frozen=True, slots=True)
class Answer:
    """An HTTP answer of the witness protocol."""

    status: int
    content_type: str
    body: str


class WitnessService:
    def __init__(self, pool: Pool, logs: TrustedLogs, key: CosignerKey | None) -> None:
        self.pool = pool
        self.logs = logs
        self.key = key

    async def add_checkpoint(self, body: bytes) -> Answer:
        try:
            submission = Submission.parse(body)
            if self.key is None:  # no log is witnessed here: every origin is unknown
                raise WitnessRefusal(404, "this server witnesses no log")
            # Everything that needs no stored state first: a request refused anyway (malformed,
            # an origin not witnessed, a signature that does not verify) never reaches the
            # database, and costs at most one signature verification per trusted key.
            checkpoint = admit(submission, self.logs)
            return await self._add(submission, checkpoint, self.key)
        except WitnessRefusal as refused:
            if refused.status == 409 and refused.size is not None:
                return Answer(409, SIZE_CONTENT_TYPE, f"{refused.size}\n")
            return Answer(refused.status, NOTE_CONTENT_TYPE, f"{refused}\n")

    async def _add(
        self, submission: Submission, checkpoint: Checkpoint, key: CosignerKey
    ) -> Answer:
        async with self.pool.acquire() as conn:
            origin = checkpoint.origin
            row = await conn.fetchrow(_SQL_STORED, origin)
            stored = None if row is None else Stored(row["size"], bytes(row["root"]))
            decide(submission, checkpoint, stored)
            text, _ = split_note(submission.note)  # its extension lines are cosigned too
            line = key.cosign(text, int(time.time()))
            # Kept and served (the monitoring view): the log's signatures this witness
            # verified, and its own; other lines of the submission were checked by nobody.
            cosigned = signed_lines(submission.note, self.logs.keys_for(checkpoint.origin)) + line
            if stored is None:
                done = await conn.execute(
                    _SQL_FIRST,
                    origin,
                    checkpoint.size,
                    checkpoint.root,
                    cosigned,
                    origin_hash(origin),
                )
            else:
                done = await conn.execute(
                    _SQL_ADVANCE,
                    origin,
                    checkpoint.size,
                    checkpoint.root,
                    cosigned,
                    stored.size,
                    stored.root,
                )
            if done.endswith(" 0"):  # another submission advanced it first
                size = await conn.fetchval(_SQL_SIZE, origin)
                raise WitnessRefusal(409, f"this witness last cosigned size {size}", size=size)
        return Answer(200, NOTE_CONTENT_TYPE, line)

    async def latest(self, hashed_origin: str) -> str | None:
        """The monitoring view: the last checkpoint cosigned of the log whose origin hashes to
        this (hex SHA-256), with this witness's cosignature; None if it witnessed none."""
        if len(hashed_origin) != 64 or not all(c in "0123456789abcdef" for c in hashed_origin):
            return None
        note: str | None = await self.pool.fetchval(_SQL_BY_HASH, hashed_origin)
        return note
