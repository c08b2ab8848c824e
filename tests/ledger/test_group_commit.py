"""Group commit: batches that wait for the same collection are judged together in one
transaction, in arrival order, each against what the ones before it left; each caller hears the
truth about its own batch, and only the batches that pass are stored."""

from __future__ import annotations

import asyncio
import json
import random

import anyio
import pytest
from factories import MEMBER, OWNER, STRANGER, claim, evidence, link, members
from publishing import open_collection, publish

from tms.errors import PublishError
from tms.ledger.locks import hold_locks
from tms.ledger.service import Ledger
from tms.rules.admission import OPERATOR
from tms.store.database import open_pool

pytestmark = pytest.mark.anyio

DOC = "Histamine intolerance is thought to result from reduced diamine oxidase activity."


async def stored_ids(ledger: Ledger, collection: str) -> set[str]:
    rows = await ledger.pool.fetch("SELECT id FROM events WHERE collection = $1", collection)
    return {r["id"] for r in rows}


async def commits(ledger: Ledger) -> int:
    return int(
        await ledger.pool.fetchval(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
        )
    )


async def test_two_hundred_concurrent_publishes_are_each_told_the_truth(ledger: Ledger) -> None:
    await open_collection(ledger, OWNER, "lab", [MEMBER])
    rng = random.Random(7)
    doc = evidence(OWNER, "lab", DOC)
    await publish(ledger, doc)
    batches: list[list[dict[str, object]]] = []
    expected: list[str] = []  # per batch: "ok", "skip", or the words of its refusal
    good: set[str] = set()
    for n in range(200):
        roll = rng.random()
        if roll < 0.55:
            event = claim(OWNER, "lab", f"Claim number {n}.")
            batches.append([event])
            expected.append("ok")
            good.add(str(event["id"]))
        elif roll < 0.65:
            batches.append([claim(STRANGER, "lab", f"Not allowed {n}.")])
            expected.append("is not approved and is not a member")
        elif roll < 0.75:
            target = claim(OWNER, "lab", f"Quoted claim {n}.")
            wrong = link(OWNER, "lab", str(doc["id"]), str(target["id"]), f"words not there {n}")
            batches.append([target, wrong])
            expected.append("quote not found verbatim")
        elif roll < 0.85:
            batches.append([claim(MEMBER, "lab", f"Member without terms {n}.")])
            expected.append("must sign the current terms first")
        else:
            batches.append([doc])  # already stored: skipped
            expected.append("skip")
    before = await commits(ledger)
    outcomes = await asyncio.gather(
        *(ledger.submit(list(batch), origin=OPERATOR) for batch in batches), return_exceptions=True
    )
    transactions = await commits(ledger) - before
    for batch, want, outcome in zip(batches, expected, outcomes, strict=True):
        if want == "ok":
            assert not isinstance(outcome, BaseException), outcome
            assert outcome["accepted"] == [batch[0]["id"]]
        elif want == "skip":
            assert not isinstance(outcome, BaseException), outcome
            assert outcome["accepted"] == [] and outcome["skipped"] == [doc["id"]]
        else:
            assert isinstance(outcome, PublishError), outcome
            assert want in str(outcome), (want, str(outcome))
    assert await stored_ids(ledger, "lab") == good | {doc["id"], *await _setup_ids(ledger)}
    # Judged together: far fewer transactions than batches.
    assert transactions < len(batches) // 2, transactions


async def _setup_ids(ledger: Ledger) -> set[str]:
    rows = await ledger.pool.fetch("SELECT id FROM events WHERE collection = 'lab' AND kind = 4705")
    return {r["id"] for r in rows}


async def test_a_batch_sees_what_the_batches_before_it_in_its_group_stored(
    ledger: Ledger,
) -> None:
    """Evidence accepted in one batch can be quoted by the next one in the same transaction;
    evidence refused in one batch cannot be."""
    await open_collection(ledger, OWNER, "lab")
    first_doc = evidence(OWNER, "lab", DOC)
    first_claim = claim(OWNER, "lab", "DAO explains it.")
    uses_it = link(OWNER, "lab", str(first_doc["id"]), str(first_claim["id"]), "diamine oxidase")
    refused_doc = evidence(STRANGER, "lab", "Text from a stranger.")
    quotes_refused = link(OWNER, "lab", str(refused_doc["id"]), str(first_claim["id"]), "stranger")
    outcomes = await asyncio.gather(
        ledger.submit([first_doc, first_claim], origin=OPERATOR),
        ledger.submit([uses_it], origin=OPERATOR),
        ledger.submit([refused_doc], origin=OPERATOR),
        ledger.submit([quotes_refused], origin=OPERATOR),
        return_exceptions=True,
    )
    assert outcomes[0]["accepted"] == [first_doc["id"], first_claim["id"]]  # type: ignore[index]
    assert outcomes[1]["accepted"] == [uses_it["id"]]  # type: ignore[index]
    assert isinstance(outcomes[2], PublishError)
    assert isinstance(outcomes[3], PublishError) and "does not exist" in str(outcomes[3])
    stored = await stored_ids(ledger, "lab")
    assert {first_doc["id"], first_claim["id"], uses_it["id"]} <= stored
    assert not {refused_doc["id"], quotes_refused["id"]} & stored


async def test_member_lists_in_one_group_end_with_the_newest(ledger: Ledger) -> None:
    await open_collection(ledger, OWNER, "lab")
    lists = [
        members(OWNER, "lab", [MEMBER.pubkey] if n % 2 else [], created_at=1_790_000_100 + n)
        for n in range(6)
    ]
    await asyncio.gather(*(ledger.submit([m], origin=OPERATOR) for m in lists))
    current = await ledger.pool.fetchval(
        "SELECT list_id FROM current_member_lists WHERE collection = 'lab'"
    )
    assert current == lists[-1]["id"]
    assert (
        await ledger.pool.fetchval(
            "SELECT count(*) FROM memberships WHERE collection = 'lab' AND pubkey = $1",
            MEMBER.pubkey,
        )
        == 1
    )


async def advisory_locks(ledger: Ledger) -> int:
    """The advisory locks held once the last group has let go: a group releases its lanes
    just after it answers, so a test that has its answer may look a moment too soon."""
    held = -1
    with anyio.move_on_after(10):
        while held := int(
            await ledger.pool.fetchval("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'")
        ):
            await asyncio.sleep(0.05)
    return held


async def test_two_servers_publishing_to_one_collection_take_turns(
    ledger: Ledger, db_url: str
) -> None:
    """Two servers (two pools) publish to one collection at once, each group locking, reading,
    writing and letting go outside a transaction (tms.ledger.write.writes): every event is stored
    once, each collection's log holds every one of them in seq order, and no lock is left held
    once they are done, refusals included."""
    await open_collection(ledger, OWNER, "lab")
    other = await open_pool(db_url, min_size=1, max_size=4)
    try:
        second = Ledger(other)
        events = [claim(OWNER, "lab", f"Claim {n} from server {n % 2}.") for n in range(120)]
        strangers = [claim(STRANGER, "lab", f"Refused {n}.") for n in range(10)]
        outcomes = await asyncio.gather(
            *(
                (ledger if n % 2 else second).submit([e], origin=OPERATOR)
                for n, e in enumerate(events)
            ),
            *(second.submit([e], origin=OPERATOR) for e in strangers),
            return_exceptions=True,
        )
    finally:
        await other.close()
    assert all(not isinstance(o, BaseException) for o in outcomes[: len(events)]), outcomes
    assert all(isinstance(o, PublishError) for o in outcomes[len(events) :]), outcomes
    stored = await ledger.pool.fetch("SELECT id FROM events WHERE collection = 'lab' ORDER BY seq")
    assert {e["id"] for e in events} <= {r["id"] for r in stored}
    leaves = await ledger.pool.fetch(
        "SELECT encode(event_id, 'hex') AS id FROM tlog_leaves WHERE collection = 'lab' "
        "ORDER BY idx"
    )
    assert [r["id"] for r in leaves] == [r["id"] for r in stored]
    assert await ledger.pool.fetchval(
        "SELECT max(size) FROM tlog_checkpoints WHERE collection = 'lab'"
    ) == len(stored)
    assert await advisory_locks(ledger) == 0


async def test_a_publish_reads_what_the_lock_holder_wrote_before_letting_go(
    ledger: Ledger,
) -> None:
    """The snapshot is read once the lock is held, never before: an event stored by whoever
    held the collection's lock while the publish waited is found stored (and skipped), not
    written twice."""
    await open_collection(ledger, OWNER, "lab")
    event = claim(OWNER, "lab", "Stored by the lock's holder while the publish waited.")
    columns = ("id", "pubkey", "created_at", "kind", "tags", "content", "sig")
    async with ledger.pool.acquire() as conn, conn.transaction():
        await hold_locks(conn, ["lab"])
        waiting = asyncio.create_task(ledger.submit([event], origin=OPERATOR))
        await asyncio.sleep(0.5)
        assert not waiting.done()
        await conn.execute(
            "INSERT INTO events (id, pubkey, created_at, kind, tags, content, sig, collection) "
            "VALUES ($1, $2, $3, $4, $5, $6, $7, 'lab')",
            *(json.dumps(event[c]) if c == "tags" else event[c] for c in columns),
        )
    outcome = await waiting
    assert outcome["accepted"] == [] and outcome["skipped"] == [event["id"]]
    assert await advisory_locks(ledger) == 0
