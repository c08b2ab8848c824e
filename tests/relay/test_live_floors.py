"""A live subscription carries only what committed after its REQ. The commit feed runs behind on
a loaded server: it may hand over, after a subscription began, events that committed before it.
Those were the stored answer's to send or not (its filters and `limit` said so), never live
ones: a subscriber asking `limit: 0` for new events once got the events another test had just
published, ahead of its own (the relay's protocol test, under load).

The hub is driven here as the feed drives it, on a real database, so that the late hand-over
happens every time rather than under load only."""

from __future__ import annotations

import json
import time

import pytest
from factories import MEMBER, OWNER, claim, members, terms

from tms.http.bodies import MiB
from tms.ledger.access import Access
from tms.ledger.read.filters import StoredEvents
from tms.ledger.service import Ledger
from tms.nostr.filters import parse_filter
from tms.relay.budget import Budget, ProcessBudget, Shared
from tms.relay.gate import Gate
from tms.relay.live import Hub, Subscription
from tms.relay.outbox import Filed
from tms.rules.admission import OPERATOR
from tms.types import PubKey

pytestmark = pytest.mark.anyio


class Recorder:
    """A connection as the hub sees it: what it was sent, in order."""

    def __init__(self, pubkey: PubKey, slugs: list[str]) -> None:
        self.pubkey = pubkey
        self.gate = Gate()
        self.gate.reset(pubkey, slugs)
        self.budget = Budget(ProcessBudget(MiB), MiB)
        self.sent: list[str] = []

    def send_live(self, sub_id: str, event: Shared, filed: Filed) -> None:
        self.sent.append(json.loads(event.text)["content"])

    def overflowed(self, sub_id: str, why: str) -> None:
        raise AssertionError(why)

    def membership_changed(self) -> None:
        pass


async def test_events_committed_before_the_req_are_never_sent_live(ledger: Ledger) -> None:
    T = int(time.time())
    await ledger.approve([OWNER.pubkey])
    await ledger.submit(
        [terms(OWNER), members(OWNER, "hub", [MEMBER.pubkey], created_at=T - 4)], origin=OPERATOR
    )
    before = claim(OWNER, "hub", "said before the REQ", created_at=T - 3)
    await ledger.submit([before], origin=OPERATOR)

    stored = StoredEvents(ledger.pool)
    hub = Hub(stored)
    client = Recorder(MEMBER.pubkey, ["hub"])
    sub = Subscription(client, "s", [parse_filter({"kinds": [4702]}, max_limit=10)], ["hub"])
    await hub.add(sub)
    during = claim(OWNER, "hub", "said while the stored answer is read", created_at=T - 2)
    await ledger.submit([during], origin=OPERATOR)

    scope = await Access(ledger.pool).collection(MEMBER.pubkey, "hub")
    late = await stored.by_ids(scope, [before["id"], during["id"]])
    hub.deliver(late)  # the feed, behind: what committed before the REQ, then after it
    sub.flush(set())  # a `limit: 0` answer: nothing stored was sent
    after = claim(OWNER, "hub", "said after the stored answer", created_at=T - 1)
    await ledger.submit([after], origin=OPERATOR)
    hub.deliver(await stored.by_ids(scope, [before["id"], after["id"]]))  # later still

    assert [json.loads(text)["text"] for text in client.sent] == [
        "said while the stored answer is read",
        "said after the stored answer",
    ]
