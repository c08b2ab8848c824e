"""The operator's write policy on the ledger's one path (`Ledger.submit`, `Admission`): asked
once a batch's envelopes, signatures, schemas, collection and rate limits hold, before its
transaction; a refusal raises `Blocked` with the policy's words and stores nothing; a
shadow-rejection answers as a publish that stored the batch would, stores nothing, and is noted
in the refusal log; a batch stays all or nothing. On real PostgreSQL."""

from __future__ import annotations

import json
from collections.abc import Sequence

import pytest
from factories import MEMBER, OWNER, claim, evidence, profile
from publishing import counts, join, open_collection, publish

from tms.errors import Blocked, PublishError, Refusal
from tms.ledger.service import Ledger
from tms.nostr.events import Event
from tms.rules.admission import ACCEPTED, OPERATOR, Action, Committed, Decision, Door, Origin

pytestmark = pytest.mark.anyio


class Words:
    """A write policy on the content's words: `forbidden` refused, `secret` shadow-rejected."""

    def __init__(self) -> None:
        self.asked: list[tuple[list[str], Origin]] = []

    async def admit(self, events: Sequence[Event], origin: Origin) -> Decision:
        self.asked.append(([e.id for e in events], origin))
        texts = [json.loads(e.content).get("text", "") for e in events]
        if any("forbidden" in t for t in texts):
            return Decision(Action.REJECT, "no forbidden words here", "words")
        if any("secret" in t for t in texts):
            return Decision(Action.SHADOW_REJECT, "", "words")
        return ACCEPTED


class Noted:
    """The refusal log's recording seam, kept in a list."""

    def __init__(self) -> None:
        self.records: list[tuple[Refusal, str, str | None, str | None]] = []

    def record(
        self, kind: Refusal, tool: str, pubkey: str | None = None, address: str | None = None
    ) -> None:
        self.records.append((kind, tool, pubkey, address))


async def test_a_policy_refuses_or_shadow_rejects_a_whole_batch(ledger: Ledger) -> None:
    policy, noted = Words(), Noted()
    await open_collection(ledger, OWNER, "lab", [MEMBER])
    await join(ledger, MEMBER)
    ledger.admission, ledger.refusals = policy, noted
    stored = claim(MEMBER, "lab", "Stored before.")
    await publish(ledger, stored)
    origin = Origin(Door.RELAY, MEMBER.pubkey, "192.0.2.7")
    before = await counts(ledger)

    # one refused event refuses the batch, in the policy's words
    fine, bad = claim(MEMBER, "lab", "A fine claim."), claim(MEMBER, "lab", "A forbidden claim.")
    with pytest.raises(Blocked, match=r"^no forbidden words here$") as refused:
        await ledger.submit([fine, bad], origin=origin)
    assert refused.value.refusal is Refusal.BLOCKED and refused.value.pubkey == MEMBER.pubkey
    assert await counts(ledger) == before
    assert policy.asked[-1] == ([fine["id"], bad["id"]], origin)

    # a shadow-rejected batch is told what a publish would say, and nothing is stored
    hidden = claim(MEMBER, "lab", "A secret claim.")
    said = await ledger.submit([stored, hidden, hidden], origin=origin)
    assert said["accepted"] == [hidden["id"]]
    assert said["skipped"] == [stored["id"], hidden["id"]]
    assert said["collections"] == ["lab"] and said["embedded"] == 0
    [checkpoint] = said["checkpoints"]
    assert checkpoint["collection"] == "lab" and checkpoint["size"] == before["tlog_leaves"]
    assert await counts(ledger) == before
    assert noted.records == [(Refusal.SHADOW_REJECTED, "relay", MEMBER.pubkey, "192.0.2.7")]

    # an accepted batch is stored as ever
    assert (await ledger.submit([fine], origin=origin))["accepted"] == [fine["id"]]


async def test_the_policy_is_asked_only_after_the_ledgers_own_checks(ledger: Ledger) -> None:
    policy = Words()
    await open_collection(ledger, OWNER, "lab", [MEMBER])
    await join(ledger, MEMBER)
    ledger.admission = policy
    forged = claim(MEMBER, "lab", "A forbidden claim.")
    forged["sig"] = "0" * 128
    with pytest.raises(PublishError, match="signature"):
        await ledger.submit([forged], origin=OPERATOR)
    elsewhere = claim(MEMBER, "other", "A forbidden claim, elsewhere.")
    with pytest.raises(PublishError, match="this relay is collection 'lab'; an event of coll"):
        await ledger.submit([elsewhere], origin=OPERATOR, within="lab")
    assert policy.asked == []
    # a profile belongs to no collection: welcome on any collection's relay
    doc = evidence(MEMBER, "lab", "Some text.")
    result = await ledger.submit([profile(MEMBER, "Member"), doc], origin=OPERATOR, within="lab")
    assert len(result["accepted"]) == 2 and len(policy.asked) == 1


async def test_a_refusal_names_the_event_the_policy_decided_on(ledger: Ledger) -> None:
    await open_collection(ledger, OWNER, "lab", [MEMBER])
    await join(ledger, MEMBER)

    class Second:
        async def admit(self, events: Sequence[Event], origin: Origin) -> Decision:
            return Decision(Action.REJECT, "not this one", "second", 1)

    ledger.admission = Second()
    fine, bad = claim(MEMBER, "lab", "First."), claim(MEMBER, "lab", "Second.")
    with pytest.raises(Blocked) as refused:
        await ledger.submit([fine, bad], origin=OPERATOR)
    assert str(refused.value) == f"events[1] ({bad['id'][:12]}…): not this one"
    assert refused.value.alone == "not this one"  # what the relay's OK says


class Told:
    """The after-commit seam, kept in a list."""

    def __init__(self) -> None:
        self.batches: list[Committed] = []

    def submit(self, committed: Committed) -> None:
        self.batches.append(committed)


async def test_each_commit_that_stored_something_is_told_once(ledger: Ledger) -> None:
    await open_collection(ledger, OWNER, "lab", [MEMBER])
    await join(ledger, MEMBER)
    told = Told()
    ledger.after_commit, ledger.admission = told, Words()
    origin = Origin(Door.MCP, None, "192.0.2.8")
    one, two = claim(MEMBER, "lab", "One."), claim(MEMBER, "lab", "Two.")
    await ledger.submit([one], origin=origin)
    await ledger.submit([one, two], origin=origin)  # `one` was stored before: not told again
    await ledger.submit([one, two], origin=origin)  # nothing new: nobody's news
    await ledger.submit([claim(MEMBER, "lab", "A secret.")], origin=origin)  # shadow-rejected
    with pytest.raises(Blocked):
        await ledger.submit([claim(MEMBER, "lab", "A forbidden one.")], origin=origin)
    assert told.batches == [
        Committed((one["id"],), ("lab",), origin),
        Committed((two["id"],), ("lab",), origin),
    ]
