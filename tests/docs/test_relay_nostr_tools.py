"""A Nostr client nobody here wrote: nostr-tools' `Relay` (the version /docs uses) connects to a
live server's relay, authenticates (NIP-42), publishes evidence, a claim and a link, and a second
member's subscription receives them live, in order; a stranger is `restricted` and sees
nothing, a missing collection answers exactly as a forbidden one, and a client that never
authenticated is told `auth-required`."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from factories import (
    ASSETS,
    MEMBER,
    MEMBER2,
    OWNER,
    STRANGER,
    Live,
    environment,
    fresh_database,
    live_server,
    members,
    settings,
    terms,
)

from tms.ledger.service import Ledger
from tms.rules.admission import OPERATOR
from tms.store.database import open_pool

RUN_SECONDS = 120


@pytest.fixture(scope="module")
def live(pg_server_url: str, template_url: str) -> Iterator[Live]:
    async def seed(url: str) -> None:
        pool = await open_pool(url, min_size=1, max_size=2)
        try:
            ledger = Ledger(pool)
            await ledger.approve([OWNER.pubkey])
            await ledger.submit(
                [
                    terms(OWNER),
                    members(OWNER, "rel", [MEMBER.pubkey, MEMBER2.pubkey]),
                    terms(MEMBER),
                    terms(MEMBER2),
                ],
                origin=OPERATOR,
            )
        finally:
            await pool.close()

    with fresh_database(pg_server_url, template_url, "tms_nostr_tools") as url:
        asyncio.run(seed(url))
        with live_server(url, settings(TMS_EMBED="off")) as server:
            yield server


def test_nostr_tools_publishes_subscribes_and_is_refused(live: Live, js_packages: Path) -> None:
    shutil.copyfile(ASSETS / "relay_roles.mjs", js_packages / "relay_roles.mjs")
    result = subprocess.run(
        ["node", "--experimental-websocket", "relay_roles.mjs"],
        cwd=js_packages,
        env=environment(
            RELAY_BASE=live.url,
            READER_HEX=MEMBER.secret.hex(),
            WRITER_HEX=MEMBER2.secret.hex(),
            STRANGER_HEX=STRANGER.secret.hex(),
        ),
        capture_output=True,
        text=True,
        timeout=RUN_SECONDS,
    )
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen["published"] == ["", "", ""]
    assert seen["refused"].startswith("invalid: ") and "/c/other" in seen["refused"]
    assert seen["received"] == seen["sent"]  # live, in order
    assert seen["stranger"].startswith("restricted: ")
    assert seen["missing"] == seen["stranger"].replace("'rel'", "'no-such'")
    assert seen["anonymous"].startswith("auth-required: ")
