"""The relay in the operator's figures (`tms.metrics`): its open connections and subscriptions
move as clients come, subscribe, close and leave, and each handshake is a request of the door
`relay`. The live server runs in this process, so its figures are read here, from the registry
`/metrics` serves (tests/mcp/test_metrics.py reads them over HTTP)."""

from __future__ import annotations

import asyncio
import time

import pytest
from factories import MEMBER, Live
from prometheus_client import REGISTRY
from relay_client import Client, ws_url

pytestmark = pytest.mark.anyio


def figure(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


async def settles(name: str, expected: float) -> None:
    """The figure reaches `expected` (a connection's end is counted once its handler returns)."""
    deadline = time.monotonic() + 10
    while figure(name) != expected:
        assert time.monotonic() < deadline, (name, figure(name), expected)
        await asyncio.sleep(0.05)


async def test_connections_and_subscriptions_are_counted_while_open(live: Live) -> None:
    connections = figure("tms_relay_connections")
    subscriptions = figure("tms_relay_subscriptions")
    handshakes = figure("tms_requests_total", door="relay", outcome="ok")
    client = await Client.open(ws_url(live.url, "/c/rel"))
    try:
        await settles("tms_relay_connections", connections + 1)
        assert figure("tms_requests_total", door="relay", outcome="ok") == handshakes
        assert (await client.auth(MEMBER))[2] is True
        for sub_id in ("a", "b"):
            _, end = await client.req(sub_id, {"kinds": [4702], "limit": 0})
            assert end == ["EOSE", sub_id]
        assert figure("tms_relay_subscriptions") == subscriptions + 2
        assert figure("tms_relay_memory_bytes") > 0  # their filters, at least
        await client.send(["CLOSE", "a"])
        await settles("tms_relay_subscriptions", subscriptions + 1)
        # a REQ whose filters only search ends at EOSE: never a live subscription
        _, end = await client.req("c", {"kinds": [4702], "search": "cats", "limit": 1})
        assert end[0] in ("EOSE", "CLOSED")
        assert figure("tms_relay_subscriptions") == subscriptions + 1
    finally:
        await client.close()
    await settles("tms_relay_subscriptions", subscriptions)
    await settles("tms_relay_connections", connections)
    # the handshake is counted when the connection ends, as every request is at its answer
    assert figure("tms_requests_total", door="relay", outcome="ok") == handshakes + 1
