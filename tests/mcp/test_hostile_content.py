"""Hostile content through /mcp: whatever keys and values a signed event or request carries,
from any key, the answer is a clean refusal the wire can carry (never a 500, never "internal
error"); and a database lost in the middle of a publish is "database unavailable"."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any

import asyncpg
import cluster
import pytest
from factories import fresh_database, live_server, terms
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp_helpers import Caller, approve

from tms.ledger.locks import hold_locks
from tms.nostr.events import SecretKey

KINDS = (0, 4701, 4702, 4703, 4704, 4705, 4706)
FIELDS = (
    "collection",
    "text",
    "url",
    "title",
    "source",
    "from",
    "to",
    "relation",
    "quote",
    "reason",
    "claims",
    "members",
    "version",
    "sha256",
    "name",
    "about",
    "tool",
    "args",
)
LONE = st.sampled_from(["\ud800", "\udfff", "a\udc00b", "\ud83d"])
TEXT = st.one_of(st.text(max_size=20), LONE, st.just("\x00"))
VALUES = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), TEXT),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(TEXT, inner, max_size=3)),
    max_leaves=6,
)
KEYS = st.one_of(st.sampled_from(FIELDS), TEXT)
CONTENT = st.dictionaries(KEYS, VALUES, max_size=6)


def dumps(content: dict[str, Any]) -> str:
    """As a client would send it: lone surrogates escaped (`\\ud800`), as JSON.stringify does."""
    return json.dumps(content, separators=(",", ":"))


KNOWN = SecretKey.generate()
UNKNOWN = SecretKey.generate()


@pytest.fixture(scope="module")
def known(caller: Caller) -> SecretKey:
    approve(caller.live.database_url, KNOWN)
    caller.publish(terms(KNOWN))
    return KNOWN


def assert_clean(result: dict[str, Any]) -> str:
    assert result.get("isError") is True, result
    text: str = result["content"][0]["text"]
    text.encode("utf-8")  # the wire carried it, and it is valid Unicode
    assert "internal error" not in text
    return text


@settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(kind=st.sampled_from(KINDS), content=CONTENT, unknown=st.booleans())
def test_any_content_of_a_signed_event_is_refused_cleanly(
    caller: Caller, known: SecretKey, kind: int, content: dict[str, Any], unknown: bool
) -> None:
    key = UNKNOWN if unknown else known
    event = key.sign(kind, dumps(content), int(time.time())).to_dict()
    result = caller.raw("publish", {"events": [event]})
    if not result.get("isError"):
        return  # it happened to be a valid event: fine
    assert_clean(result)


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    tool=st.sampled_from(["list_claims", "get_event", "check_proof", "fetch_url"]),
    args=CONTENT,
    unknown=st.booleans(),
)
def test_any_arguments_of_a_signed_request_are_refused_cleanly(
    caller: Caller, known: SecretKey, tool: str, args: dict[str, Any], unknown: bool
) -> None:
    key = UNKNOWN if unknown else known
    event = key.sign(4707, dumps({"tool": tool, "args": args}), int(time.time())).to_dict()
    result = caller.raw(tool, {"request": event})
    if result.get("isError"):
        assert_clean(result)


def test_a_lone_surrogate_key_is_named_escaped(caller: Caller, known: SecretKey) -> None:
    event = known.sign(4702, '{"collection":"lab","text":"x","\\ud800":1}', int(time.time()))
    text = assert_clean(caller.raw("publish", {"events": [event.to_dict()]}))
    assert "'\\ud800'" in text and "lone UTF-16 surrogate" in text


def test_losing_the_database_mid_publish_is_database_unavailable(
    pg_server_url: str, template_url: str
) -> None:
    """The publish's connection is cut while its transaction waits for the collection's lock
    (held here): the caller hears "database unavailable", and nothing was stored."""
    owner = SecretKey.generate()
    with fresh_database(pg_server_url, template_url) as database, live_server(database) as live:
        approve(database, owner)
        caller = Caller(live)
        caller.publish(terms(owner))
        claim = owner.sign(4702, dumps({"collection": "lab", "text": "A claim."}), int(time.time()))

        holding = threading.Event()

        async def hold_lock_then_cut() -> None:
            conn = await asyncpg.connect(database)
            # The lock lives where the collection's rows do: on Citus, on a worker, where the
            # publish's statement waits for it (and is cut).
            nodes = [await asyncpg.connect(url) for url in await cluster.node_urls(database)]
            try:
                async with conn.transaction():
                    await hold_locks(conn, ["lab"])
                    holding.set()
                    for _ in range(200):
                        for node in nodes:
                            cut = await node.fetchval(
                                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                                "WHERE wait_event_type = 'Lock' AND wait_event = 'advisory'"
                            )
                            if cut:
                                return
                        await asyncio.sleep(0.05)
                    raise AssertionError("the publish never waited for the lock")
            finally:
                await conn.close()
                for node in nodes:
                    await node.close()

        cutter = threading.Thread(target=asyncio.run, args=(hold_lock_then_cut(),))
        cutter.start()
        assert holding.wait(30)
        message = caller.error("publish", {"events": [claim.to_dict()]})
        cutter.join(30)
        assert message == "database unavailable, try again shortly"
        # The server goes on: the same batch is stored on the next try.
        assert caller.publish(claim.to_dict())["accepted"] == [claim.id]
        assert caller.tool(owner, "get_event", id=claim.id)["result"]["id"] == claim.id
        caller.close()
