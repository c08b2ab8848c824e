"""Browser logins as the database keeps them: nonces used once, and live sessions.

Not ledger: these rows change and expire (sql/004_sessions.sql). The web door decides what a
cookie or a nonce is (`tms.http.login`); this module only records and answers, so every process
serving the same database agrees on who is logged in, and a logout anywhere ends the session
everywhere.
"""

from __future__ import annotations

from datetime import datetime
from typing import Final

from tms.store.database import Pool
from tms.types import PubKey

_SQL_USE_NONCE: Final = """
    INSERT INTO login_nonces (nonce) VALUES ($1) ON CONFLICT DO NOTHING RETURNING nonce"""
_SQL_PURGE_NONCES: Final = """
    DELETE FROM login_nonces WHERE used_at < now() - make_interval(secs => $1)"""
_SQL_OPEN: Final = """
    INSERT INTO web_sessions (id_sha256, pubkey, expires_at) VALUES ($1, $2, $3)"""
_SQL_PURGE_SESSIONS: Final = "DELETE FROM web_sessions WHERE expires_at < now()"
_SQL_FIND: Final = """
    SELECT pubkey FROM web_sessions WHERE id_sha256 = $1 AND expires_at > now()"""
_SQL_CLOSE: Final = "DELETE FROM web_sessions WHERE id_sha256 = $1"
_SQL_CLOSE_ALL: Final = "DELETE FROM web_sessions WHERE pubkey = $1"


class Sessions:
    def __init__(self, pool: Pool) -> None:
        self.pool = pool

    async def use_nonce(self, nonce: str, lifetime_seconds: float) -> bool:
        """Record a login nonce's one use; False when it was used before. Nonces older than
        twice their lifetime are forgotten here: the door refuses them by their date anyway."""
        async with self.pool.acquire() as conn, conn.transaction():
            await conn.execute(_SQL_PURGE_NONCES, 2 * lifetime_seconds)
            return await conn.fetchval(_SQL_USE_NONCE, nonce) is not None

    async def open(self, id_sha256: str, pubkey: PubKey, expires_at: datetime) -> None:
        """Record a new session (expired ones are deleted on the way)."""
        async with self.pool.acquire() as conn, conn.transaction():
            await conn.execute(_SQL_PURGE_SESSIONS)
            await conn.execute(_SQL_OPEN, id_sha256, pubkey, expires_at)

    async def pubkey(self, id_sha256: str) -> PubKey | None:
        """The key a live session belongs to; None when it ended, expired or never was."""
        pubkey: PubKey | None = await self.pool.fetchval(_SQL_FIND, id_sha256)
        return pubkey

    async def close(self, id_sha256: str) -> None:
        await self.pool.execute(_SQL_CLOSE, id_sha256)

    async def close_all(self, pubkey: PubKey) -> int:
        """End every session of a key; returns how many there were."""
        status = await self.pool.execute(_SQL_CLOSE_ALL, pubkey)
        return int(status.rsplit(" ", 1)[-1])
