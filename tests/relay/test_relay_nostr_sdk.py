"""NIP-77 with a real client: rust-nostr's Python SDK (`nostr-sdk`, a dev dependency) reconciles
a collection against a live relay with `Client.sync`, authenticating by NIP-42 with its signer:
down into its own database from empty, down again after 10 new events, and up of the events
it holds that the relay lacks; a non-member's sync fails with the relay's refusal."""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import nostr_sdk as sdk
import pytest
from factories import MEMBER, Live, claim
from relay_client import Client, ws_url

from tms.ledger.service import Ledger
from tms.rules.admission import OPERATOR
from tms.store.database import open_pool

pytestmark = pytest.mark.anyio

CLAIMS = 300
TIMEOUT = timedelta(seconds=20)


@pytest.fixture(scope="module")
async def ledger(live: Live) -> AsyncIterator[Ledger]:
    pool = await open_pool(live.database_url, min_size=1, max_size=2)
    try:
        yield Ledger(pool)
    finally:
        await pool.close()


def claims(count: int, label: str) -> list[dict[str, Any]]:
    start = int(time.time()) - 5000
    return [
        claim(MEMBER, "rel", f"sdk {label} {i} {os.urandom(4).hex()}", created_at=start + i // 3)
        for i in range(count)
    ]


MEMBER_SECRET = (bytes([0x33]) * 32).hex()  # tests/factories.py's MEMBER: key(0x33)


async def client_of(tmp: Path, url: str) -> tuple[sdk.Client, sdk.NostrDatabase]:
    """nostr-sdk's client, authenticating as MEMBER (NIP-42), over an LMDB of its own."""
    # The authenticator is called back from the SDK's threads: it signs on this event loop.
    sdk.uniffi_set_event_loop(asyncio.get_running_loop())
    keys = sdk.Keys.parse(MEMBER_SECRET)
    assert keys.public_key().to_hex() == MEMBER.pubkey
    tmp.mkdir(parents=True, exist_ok=True)
    database = await sdk.NostrLmdb.open(str(tmp / "lmdb"))
    client = (
        sdk.ClientBuilder().database(database).authenticator(sdk.SignerAuthenticator(keys)).build()
    )
    await client.add_relay(sdk.RelayUrl.parse(url))
    await client.connect()
    return client, database


async def authenticated(client: sdk.Client, url: str) -> None:
    """Until the client has answered the relay's AUTH challenge (it does on its own, when the
    challenge arrives): a REQ it may read then finds what is stored."""
    target = sdk.ReqTarget.single(sdk.RelayUrl.parse(url), [kinds(4702).limit(1)])
    deadline = time.monotonic() + TIMEOUT.total_seconds()
    while not await client.fetch_events(target, timeout=timedelta(seconds=2)):
        assert time.monotonic() < deadline, "nostr-sdk did not authenticate"


def kinds(*numbers: int) -> sdk.Filter:
    return sdk.Filter.from_json(json.dumps({"kinds": list(numbers)}))


async def stored_ids(live: Live, path: str = "/c/rel") -> set[str]:
    async with await Client.open(ws_url(live.url, path)) as raw:
        assert (await raw.auth(MEMBER))[2] is True
        events, end = await raw.req("ids", {"kinds": [4702], "limit": 1000})
        assert end[0] == "EOSE"
        return {e["id"] for e in events}


async def test_sync_down_from_empty_then_ten_new_then_up(
    live: Live, ledger: Ledger, tmp_path: Path
) -> None:
    await ledger.submit(claims(CLAIMS, "first"), origin=OPERATOR)
    url = ws_url(live.url, "/c/rel")
    client, database = await client_of(tmp_path, url)
    try:
        down = sdk.SyncOptions().direction(sdk.SyncDirection.DOWN).initial_timeout(TIMEOUT)
        await authenticated(client, url)
        before = {e.id().to_hex() for e in await database.query(kinds(4702))}  # its one
        first = await client.sync(kinds(4702), opts=down)
        assert not first.failed, first.failed
        relay_has = await stored_ids(live)
        local = {e.id().to_hex() for e in await database.query(kinds(4702))}
        assert local == relay_has and len(local) >= CLAIMS
        assert {i.to_hex() for i in first.report.received} == relay_has - before

        ten = claims(10, "ten more")
        await ledger.submit(ten, origin=OPERATOR)
        again = await client.sync(kinds(4702), opts=down)
        assert not again.failed, again.failed
        assert {i.to_hex() for i in again.report.received} == {e["id"] for e in ten}
        local = {e.id().to_hex() for e in await database.query(kinds(4702))}
        assert local == await stored_ids(live)

        mine = claims(5, "only the client")
        for event in mine:
            await database.save_event(sdk.Event.from_json(json.dumps(event)))
        up = sdk.SyncOptions().direction(sdk.SyncDirection.UP).initial_timeout(TIMEOUT)
        sent = await client.sync(kinds(4702), opts=up)
        assert not sent.failed, sent.failed
        assert not any(sent.report.send_failures.values()), sent.report.send_failures
        assert {i.to_hex() for i in sent.report.sent} == {e["id"] for e in mine}
        assert {e["id"] for e in mine} <= await stored_ids(live)
    finally:
        await client.shutdown()


async def test_a_non_members_sync_fails_with_restricted(live: Live, tmp_path: Path) -> None:
    """`other` is OWNER2's alone (tests/relay/conftest.py); `no-such` does not exist."""
    said = {}
    for slug in ("other", "no-such"):
        client, _ = await client_of(tmp_path / slug, ws_url(live.url, f"/c/{slug}"))
        try:
            down = sdk.SyncOptions().direction(sdk.SyncDirection.DOWN).initial_timeout(TIMEOUT)
            deadline = time.monotonic() + TIMEOUT.total_seconds()
            while True:  # until the client has answered the AUTH challenge, as it does itself
                result = await client.sync(kinds(4702), opts=down)
                reasons = list(result.failed.values())
                if not reasons[0].startswith("auth-required:") or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.1)
            assert not result.report.received
            assert len(reasons) == 1 and reasons[0].startswith("restricted: "), result.failed
            said[slug] = reasons[0].replace(slug, "<slug>")
        finally:
            await client.shutdown()
    assert said["other"] == said["no-such"]
