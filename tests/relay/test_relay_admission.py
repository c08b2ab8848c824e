"""The relay's EVENT and MCP's `publish` meet the operator's write policy on the ledger's one
path, with the same words: the relay says `blocked: <words>`, MCP's tool error says the words; a
shadow-rejected EVENT is answered `OK true` and nothing is stored; the policy sees the door and
the key the connection authenticated. The read filter refuses a REQ, a COUNT or a NEG-OPEN."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from factories import MEMBER, claim, settings
from relay_client import seed

from tms.errors import Blocked
from tms.nostr.events import Event
from tms.nostr.negentropy import Initiator, Items
from tms.plugins.policies import ReadFilters
from tms.relay.connection import Connection
from tms.relay.shared import open_relay
from tms.rules.admission import ACCEPTED, Action, Decision, Door, Origin
from tms.runtime import open_runtime

pytestmark = pytest.mark.anyio


class Words:
    """A write policy on the content's words: `forbidden` refused, `secret` shadow-rejected."""

    def __init__(self) -> None:
        self.origins: list[Origin] = []

    async def admit(self, events: Sequence[Event], origin: Origin) -> Decision:
        self.origins.append(origin)
        texts = [json.loads(e.content).get("text", "") for e in events]
        if any("forbidden" in t for t in texts):
            return Decision(Action.REJECT, "no forbidden words here", "words")
        if any("secret" in t for t in texts):
            return Decision(Action.SHADOW_REJECT, "", "words")
        return ACCEPTED


async def test_every_door_meets_the_same_policy_with_the_same_words(db_url: str) -> None:
    await seed(db_url)
    said: list[list[Any]] = []

    async def send(text: str) -> None:
        said.append(json.loads(text))

    policy = Words()
    now = int(time.time())
    bad = claim(MEMBER, "rel", "A forbidden claim.", created_at=now)
    hidden = claim(MEMBER, "rel", "A secret claim.", created_at=now)
    fine = claim(MEMBER, "rel", "A fine claim.", created_at=now)
    async with (
        open_runtime(settings(TMS_EMBED="off"), db_url) as runtime,
        open_relay(runtime.services, db_url) as relay,
    ):
        runtime.services.ledger.admission = policy
        conn = Connection(
            relay, send, slug="rel", url="ws://x/", address="192.0.2.9", pubkey=MEMBER.pubkey
        )
        await conn.open()
        for event in (bad, hidden, fine):
            await conn.handle(json.dumps(["EVENT", event]))
        await until(lambda: sum(m[0] == "OK" for m in said) == 3)
        oks = {m[1]: m[2:] for m in said if m[0] == "OK"}
        assert oks == {
            bad["id"]: [False, "blocked: no forbidden words here"],
            hidden["id"]: [True, ""],
            fine["id"]: [True, ""],
        }
        assert policy.origins[0] == Origin(Door.RELAY, MEMBER.pubkey, "192.0.2.9")
        stored = await runtime.ledger.pool.fetch(
            "SELECT id FROM events WHERE id = ANY($1::text[])", [e["id"] for e in (bad, hidden)]
        )
        assert stored == []

        tools = runtime.tools()
        with pytest.raises(Blocked, match=r"^no forbidden words here$"):
            await tools.call("publish", {"events": [bad]})
        assert policy.origins[-1].door is Door.MCP
        await conn.close()


async def until(condition: Callable[[], bool], seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "the condition never held"
        await asyncio.sleep(0.01)


async def test_the_read_filter_refuses_a_req_count_or_neg_open_before_it_runs(db_url: str) -> None:
    """The plugins' read filters (`Relay.read_filter`) are asked with the door, the key, the
    address, this relay's collection and the filters as NIP-01 writes them; a refusal is the
    read's CLOSED (NEG-ERR for NIP-77) after `blocked:`, and nothing of it is sent. A read
    filter is a plugin's: it is asked in the surface's own vocabulary."""
    from tms.extension import Door, Origin, Read

    await seed(db_url)
    said: list[list[Any]] = []
    asked: list[Read] = []

    async def send(text: str) -> None:
        said.append(json.loads(text))

    async def no_links(read: Read) -> str | None:
        asked.append(read)
        return "links are sealed here" if 4703 in read.filters[0].get("kinds", ()) else None

    empty = Initiator(Items.of([])).initiate().hex()
    async with (
        open_runtime(settings(TMS_EMBED="off"), db_url) as runtime,
        open_relay(runtime.services, db_url) as relay,
    ):
        filtered = dataclasses.replace(relay, read_filter=ReadFilters([("links", no_links)], 5))
        conn = Connection(
            filtered, send, slug="rel", url="ws://x/", address="192.0.2.9", pubkey=MEMBER.pubkey
        )
        await conn.open()
        for message in (
            ["REQ", "r", {"kinds": [4703], "#e": ["ab" * 32]}],
            ["COUNT", "c", {"kinds": [4703]}],
            ["NEG-OPEN", "n", {"kinds": [4703]}, empty],
            ["COUNT", "fine", {"kinds": [4702]}],
        ):
            await conn.handle(json.dumps(message))
        await until(lambda: len([m for m in said if m[0] != "AUTH"]) >= 4)
        answers = {m[1]: m for m in said if m[0] != "AUTH"}
        refusal = "blocked: links are sealed here"
        assert answers["r"] == ["CLOSED", "r", refusal]
        assert answers["c"] == ["CLOSED", "c", refusal]
        assert answers["n"] == ["NEG-ERR", "n", refusal]
        assert answers["fine"] == ["COUNT", "fine", {"count": 0}]
        assert asked[0] == Read(
            Origin(Door.RELAY, MEMBER.pubkey, "192.0.2.9"),
            "rel",
            ({"kinds": [4703], "#e": ["ab" * 32]},),
        )
        await conn.close()
