"""What the operator sets from a Nostr app (NIP-86 on the root relay URL, `tms.relay.operator`):
the client addresses the gate refuses, and the root relay's NIP-11 name and description.
Not ledger: state that changes (sql/025), kept in the database so that every server process
sees it (each reads it again every `REFRESH_SECONDS`, and at once after its own change)."""

from __future__ import annotations

from typing import Final

from tms.store.database import Pool

REFRESH_SECONDS: Final = 5.0
DETAILS: Final = ("name", "description")


class Operated:
    def __init__(self, pool: Pool) -> None:
        self.pool = pool

    async def blocked(self) -> list[tuple[str, str]]:
        """Every blocked address (or network) and the reason given, oldest first."""
        rows = await self.pool.fetch(
            "SELECT address, reason FROM blocked_addresses ORDER BY blocked_at, address"
        )
        return [(row["address"], row["reason"]) for row in rows]

    async def block(self, address: str, reason: str) -> None:
        await self.pool.execute(
            """INSERT INTO blocked_addresses (address, reason) VALUES ($1, $2)
               ON CONFLICT (address) DO UPDATE SET reason = EXCLUDED.reason""",
            address,
            reason,
        )

    async def unblock(self, address: str) -> bool:
        """Whether the address was blocked."""
        found = await self.pool.fetchval(
            "DELETE FROM blocked_addresses WHERE address = $1 RETURNING true", address
        )
        return bool(found)

    async def details(self) -> dict[str, str]:
        """The root relay's name and description the operator set (absent: the default)."""
        rows = await self.pool.fetch("SELECT field, value FROM relay_details")
        return {row["field"]: row["value"] for row in rows}

    async def set_detail(self, field: str, value: str) -> None:
        assert field in DETAILS
        await self.pool.execute(
            """INSERT INTO relay_details (field, value) VALUES ($1, $2)
               ON CONFLICT (field) DO UPDATE SET value = EXCLUDED.value""",
            field,
            value,
        )
