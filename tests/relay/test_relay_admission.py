"""The relay's EVENT and MCP's `publish` meet the operator's write policy on the ledger's one
path, with the same words: the relay says `blocked: <words>`, MCP's tool error says the words; a
shadow-rejected EVENT is answered `OK true` and nothing is stored; the policy sees the door and
the key the connection authenticated."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from factories import MEMBER, claim, settings
from relay_client import seed

from tms.errors import Blocked
from tms.nostr.events import Event
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
