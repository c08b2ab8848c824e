"""The relay tests' server: a live `tms serve` over a database of its own per module, with one
collection (`rel`, owned by OWNER, MEMBER a member) and another (`other`, OWNER2's alone)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from factories import (
    MEMBER,
    OWNER,
    OWNER2,
    Live,
    fresh_database,
    live_server,
    members,
    settings,
    terms,
)

from tms.ledger.service import Ledger
from tms.store.database import open_pool


async def seed(url: str) -> None:
    pool = await open_pool(url, min_size=1, max_size=2)
    try:
        ledger = Ledger(pool)
        await ledger.approve([OWNER.pubkey, OWNER2.pubkey])
        await ledger.publish(
            [
                terms(OWNER),
                terms(OWNER2),
                members(OWNER, "rel", [MEMBER.pubkey]),
                terms(MEMBER),
                members(OWNER2, "other", []),
            ]
        )
    finally:
        await pool.close()


@pytest.fixture(scope="module")
def live(pg_server_url: str, template_url: str) -> Iterator[Live]:
    with fresh_database(pg_server_url, template_url, "tms_relay") as url:
        asyncio.run(seed(url))
        with live_server(url, settings(TMS_EMBED="off")) as server:
            yield server
