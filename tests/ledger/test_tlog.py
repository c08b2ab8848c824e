"""Each collection's transparency log on PostgreSQL: extended and signed in the publish
transaction, in `seq` order; built for collections stored before it; never signed when the
stored tree does not extend the last checkpoint; proofs and tiles read back. Every proof is
checked by `rfc6962` (the RFCs read independently), never by the server's own verifier."""

from __future__ import annotations

import asyncio
import base64
import itertools
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pytest
import rfc6962 as rfc
from factories import CITUS_TRIGGERS, MEMBER, OWNER, OWNER2, claim, evidence, link, profile, terms
from publishing import counts, join, open_collection, publish, readable, without_log

from tms.errors import LogError
from tms.ledger.log.reads import LogReads
from tms.ledger.service import Ledger
from tms.tlog import tiles
from tms.tlog.note import open_checkpoint

pytestmark = pytest.mark.anyio

DOC = "Histamine intolerance is thought to result from reduced diamine oxidase (DAO) activity."


def reads(ledger: Ledger) -> LogReads:
    return LogReads(ledger.pool, ledger.log)


async def entries_by_seq(ledger: Ledger, slug: str) -> list[bytes]:
    rows = await ledger.pool.fetch("SELECT id FROM events WHERE collection = $1 ORDER BY seq", slug)
    return [bytes.fromhex(r["id"]) for r in rows]


async def leaves(ledger: Ledger, slug: str) -> list[bytes]:
    rows = await ledger.pool.fetch(
        "SELECT idx, event_id FROM tlog_leaves WHERE collection = $1 ORDER BY idx", slug
    )
    assert [r["idx"] for r in rows] == list(range(len(rows)))  # no gap, no repeat
    return [bytes(r["event_id"]) for r in rows]


def opened(ledger: Ledger, checkpoint: dict[str, Any]) -> tuple[int, bytes]:
    """The checkpoint's signature checked with the server's published key: (size, root)."""
    signed = open_checkpoint(checkpoint["note"], ledger.log.signer.key.verifier())
    assert signed.origin == checkpoint["origin"] == f"tms.invalid/c/{checkpoint['collection']}"
    assert (signed.size, base64.b64encode(signed.root).decode()) == (
        checkpoint["size"],
        checkpoint["root"],
    )
    return signed.size, signed.root


async def assert_consistent(
    ledger: Ledger, slug: str, a: dict[str, Any], b: dict[str, Any]
) -> None:
    (old, old_root), (new, new_root) = opened(ledger, a), opened(ledger, b)
    proof = await reads(ledger).consistency(await readable(reads(ledger), slug), old, new)
    hashes = [base64.b64decode(h) for h in proof["hashes"]]
    assert rfc.verify_consistency(old, new, old_root, new_root, hashes), (old, new)


# --- publishing --------------------------------------------------------------------------------


async def test_publish_returns_each_collections_signed_checkpoint(ledger: Ledger) -> None:
    first = await open_collection(ledger, OWNER, "lab", [MEMBER])
    [created] = first["checkpoints"]
    assert opened(ledger, created)[0] == 1  # the member list; terms are no collection's
    await join(ledger, MEMBER)
    doc = evidence(MEMBER, "lab", DOC)
    c1 = claim(MEMBER, "lab", "DAO explains HIT.")
    supports = link(MEMBER, "lab", doc["id"], c1["id"], "reduced diamine oxidase")
    elsewhere = claim(OWNER, "other", "A claim elsewhere.")
    await ledger.approve([OWNER.pubkey])
    result = await publish(ledger, profile(MEMBER, "bot"), doc, c1, supports, elsewhere)
    assert [c["collection"] for c in result["checkpoints"]] == result["collections"]
    lab, other = result["checkpoints"]
    assert opened(ledger, lab) == (4, rfc.mth(await entries_by_seq(ledger, "lab")))
    assert opened(ledger, other) == (1, rfc.mth([bytes.fromhex(elsewhere["id"])]))
    assert await leaves(ledger, "lab") == await entries_by_seq(ledger, "lab")
    await assert_consistent(ledger, "lab", created, lab)
    assert await reads(ledger).checkpoint(await readable(reads(ledger), "lab")) == lab

    again = await publish(ledger, doc, c1)  # all skipped: nothing new to sign
    assert again["checkpoints"] == []
    assert (await publish(ledger, profile(MEMBER, "bot 2")))["checkpoints"] == []


async def test_racing_publishes_keep_seq_order(ledger: Ledger) -> None:
    """Batches of one collection serialize on its lock; the log follows `seq` whatever order
    they commit in, and every checkpoint extends the one before it."""
    await open_collection(ledger, OWNER, "lab")
    await open_collection(ledger, OWNER2, "two")
    batches = [
        [claim(key, slug, f"claim {slug} {b}.{i}") for i in range(1 + b % 5)]
        for b in range(24)
        for key, slug in [(OWNER, "lab"), (OWNER2, "two")]
    ]
    results = await asyncio.gather(*(publish(ledger, *batch) for batch in batches))
    for slug in ("lab", "two"):
        assert await leaves(ledger, slug) == await entries_by_seq(ledger, slug)
        signed = sorted(
            (c for r in results for c in r["checkpoints"] if c["collection"] == slug),
            key=lambda c: c["size"],
        )
        for a, b in itertools.pairwise(signed):
            await assert_consistent(ledger, slug, a, b)
        assert opened(ledger, signed[-1])[1] == rfc.mth(await entries_by_seq(ledger, slug))


@dataclass(frozen=True)
class _Event:
    id: str


@dataclass(frozen=True)
class _Accepted:
    """What the hook reads of an accepted event: its id and its collection."""

    event: _Event
    collection: str | None


async def append(ledger: Ledger, slug: str, entries: Sequence[bytes]) -> dict[str, Any]:
    """Extend the log directly, as the publish hook does, in a transaction of its own."""
    accepted = [_Accepted(_Event(e.hex()), slug) for e in entries]
    async with ledger.pool.acquire() as conn, conn.transaction():
        checkpoints = await ledger.log.extend(conn, accepted)  # type: ignore[arg-type]
    return checkpoints[slug]


async def test_consistency_holds_across_10000_appends_in_random_batch_sizes(
    ledger: Ledger,
) -> None:
    rng = random.Random(13)
    entries: list[bytes] = []
    signed: list[dict[str, Any]] = []
    while len(entries) < 10_000:
        size = rng.choice([1, 2, 7, 64, 255, 256, 257, 1000])
        batch = [rng.randbytes(32) for _ in range(min(size, 10_000 - len(entries)))]
        entries += batch
        signed.append(await append(ledger, "big", batch))
    assert [c["size"] for c in signed][-1] == 10_000
    assert opened(ledger, signed[-1])[1] == rfc.mth(entries)
    for a, b in itertools.pairwise(signed):
        await assert_consistent(ledger, "big", a, b)
    for _ in range(20):  # and between any two sizes it signed
        a, b = sorted(rng.sample(signed, 2), key=lambda c: c["size"])
        await assert_consistent(ledger, "big", a, b)
    latest = opened(ledger, signed[-1])
    for index in [0, 1, 255, 256, 4095, 8191, 9999, *rng.sample(range(10_000), 20)]:
        proof = await inclusion_of(ledger, "big", entries[index])
        assert proof["leaf_index"] == index and proof["tree_size"] == 10_000
        path = [base64.b64decode(h) for h in proof["hashes"]]
        assert rfc.verify_inclusion(index, latest[0], rfc.leaf(entries[index]), path, latest[1])


async def inclusion_of(ledger: Ledger, slug: str, entry: bytes) -> dict[str, Any]:
    proof = await reads(ledger).inclusion(await readable(reads(ledger), slug), entry.hex())
    assert proof is not None
    return dict(proof)


async def test_every_event_has_an_inclusion_proof(ledger: Ledger) -> None:
    await open_collection(ledger, OWNER, "lab")
    batch = [claim(OWNER, "lab", f"claim {i}") for i in range(37)]
    await publish(ledger, *batch[:20])
    await publish(ledger, *batch[20:])
    checkpoint = await reads(ledger).checkpoint(await readable(reads(ledger), "lab"))
    size, root = opened(ledger, checkpoint)
    entries = await entries_by_seq(ledger, "lab")
    for index, entry in enumerate(entries):
        proof = await inclusion_of(ledger, "lab", entry)
        assert proof["leaf_index"] == index and proof["checkpoint"] == checkpoint
        path = [base64.b64decode(h) for h in proof["hashes"]]
        assert rfc.verify_inclusion(index, size, rfc.leaf(entry), path, root)
        assert path == rfc.path(index, entries)
    assert await reads(ledger).inclusion(await readable(reads(ledger), "lab"), "0" * 64) is None
    await publish(ledger, claim(OWNER, "other", "elsewhere"))
    assert (
        await reads(ledger).inclusion(await readable(reads(ledger), "other"), entries[0].hex())
        is None
    )  # not that log's


async def test_consistency_asks_for_sizes_the_log_had(ledger: Ledger) -> None:
    await open_collection(ledger, OWNER, "lab")
    await publish(ledger, *(claim(OWNER, "lab", f"c{i}") for i in range(5)))
    log = reads(ledger)
    whole = await log.consistency(await readable(log, "lab"), 0, None)
    assert (whole["old_size"], whole["new_size"], whole["hashes"]) == (0, 6, [])
    assert whole["checkpoint"] == await log.checkpoint(await readable(log, "lab"))
    unsigned = await log.consistency(
        await readable(log, "lab"), 2, 3
    )  # no checkpoint was signed at 3
    assert unsigned["checkpoint"] is None and unsigned["hashes"]
    for old, new in [(4, 3), (0, 7), (7, None), (-1, 2)]:
        with pytest.raises(LogError, match="no consistency proof"):
            await log.consistency(await readable(log, "lab"), old, new)


# --- the log is never rewritten ----------------------------------------------------------------


async def test_a_tree_that_no_longer_extends_its_checkpoint_is_never_signed(
    ledger: Ledger,
) -> None:
    """Should a stored subtree change (here by an operator switching the guards off), the next
    publish finds that no consistency proof holds, and stores and signs nothing."""
    await open_collection(ledger, OWNER, "lab")
    await publish(
        ledger, *(claim(OWNER, "lab", f"c{i}") for i in range(2))
    )  # size 3: (1,0), leaf 2
    async with ledger.pool.acquire() as conn, conn.transaction():
        # The append-only guard off for a moment, as the tables' owner may (no superuser needed)
        await conn.execute(CITUS_TRIGGERS)
        await conn.execute("ALTER TABLE tlog_leaves DISABLE TRIGGER USER")
        await conn.execute(  # a leaf's entry: the first two no longer hash as signed
            "UPDATE tlog_leaves SET event_id = sha256(event_id) "
            "WHERE collection = 'lab' AND idx = 0"
        )
        await conn.execute("ALTER TABLE tlog_leaves ENABLE TRIGGER USER")
    before = await counts(ledger)
    with pytest.raises(LogError, match="no longer extends its checkpoint of size 3") as fault:
        await publish(ledger, claim(OWNER, "lab", "one more"))
    assert fault.value.refusal is None  # the server's fault: not filed as the caller's refusal
    assert await counts(ledger) == before
    await publish(ledger, claim(OWNER, "elsewhere", "other logs go on"))


async def test_a_missing_subtree_is_named(ledger: Ledger) -> None:
    await open_collection(ledger, OWNER, "lab")
    await publish(ledger, *(claim(OWNER, "lab", f"c{i}") for i in range(15)))  # 16: node (4, 0)
    assert await ledger.pool.fetchval("SELECT count(*) FROM tlog_nodes") == 1
    async with ledger.pool.acquire() as conn, conn.transaction():
        await conn.execute(CITUS_TRIGGERS)
        await conn.execute("ALTER TABLE tlog_nodes DISABLE TRIGGER USER")
        await conn.execute("DELETE FROM tlog_nodes WHERE collection = 'lab'")
        await conn.execute("ALTER TABLE tlog_nodes ENABLE TRIGGER USER")
    with pytest.raises(LogError, match=r"lacks the subtree \(4, 0\)") as fault:
        await publish(ledger, claim(OWNER, "lab", "one more"))
    assert fault.value.refusal is None


# --- collections stored before the log ---------------------------------------------------------


async def test_backfill_builds_old_collections_in_seq_order(ledger: Ledger) -> None:
    await ledger.approve([OWNER.pubkey, OWNER2.pubkey])
    await without_log(
        ledger,
        [terms(OWNER), terms(OWNER2), claim(OWNER, "a", "a1"), claim(OWNER2, "b", "b1")],
        [claim(OWNER, "a", f"a{i}") for i in range(2, 9)],
        [claim(OWNER2, "b", "b2"), claim(OWNER, "a", "a9")],
    )
    assert await ledger.log.backfill() == 2
    assert await ledger.log.backfill() == 0  # once
    for slug in ("a", "b"):
        assert await leaves(ledger, slug) == await entries_by_seq(ledger, slug)
        opened(ledger, await reads(ledger).checkpoint(await readable(ledger, slug)))
    assert await ledger.log.check_key()
    assert not await Ledger(ledger.pool).log.check_key()  # another key: said loudly


async def test_a_publish_or_read_that_reaches_an_old_collection_first_builds_it(
    ledger: Ledger,
) -> None:
    await ledger.approve([OWNER.pubkey])
    old = [claim(OWNER, slug, f"{slug} {i}") for slug in ("a", "b") for i in range(3)]
    await without_log(ledger, [terms(OWNER), *old])
    new = claim(OWNER, "a", "after the upgrade")
    [checkpoint] = (await publish(ledger, new))["checkpoints"]
    assert opened(ledger, checkpoint)[0] == 4
    assert await leaves(ledger, "a") == await entries_by_seq(ledger, "a")
    assert (await reads(ledger).checkpoint(await readable(reads(ledger), "b")))[
        "size"
    ] == 3  # a read builds it too
    assert await ledger.log.backfill() == 0


# --- tiles -------------------------------------------------------------------------------------


async def test_tiles_hold_the_trees_hashes(ledger: Ledger) -> None:
    rng = random.Random(6962)
    entries = [rng.randbytes(32) for _ in range(600)]
    await append(ledger, "t", entries[:300])
    await append(ledger, "t", entries[300:])
    log = reads(ledger)

    async def tile(path: str) -> bytes | None:
        parsed = tiles.parse_tile_path(path)
        assert parsed is not None, path
        return await log.tile(await readable(log, "t"), parsed)

    level0 = [rfc.leaf(e) for e in entries]
    assert await tile("0/000") == b"".join(level0[:256])
    assert await tile("0/001") == b"".join(level0[256:512])
    assert await tile("0/002.p/88") == b"".join(level0[512:600])
    assert await tile("0/002.p/5") == b"".join(level0[512:517])  # any width it holds
    assert await tile("0/002") is None  # not full yet
    assert await tile("0/002.p/89") is None
    assert await tile("1/000.p/2") == rfc.mth(entries[:256]) + rfc.mth(entries[256:512])
    assert await tile("1/000.p/3") is None
    assert await tile("1/000") is None
    assert await tile("2/000.p/1") is None
    bundle = await tile("entries/001")
    assert bundle == b"".join(b"\x00\x20" + e for e in entries[256:512])
    assert await tile("entries/002.p/88") == b"".join(b"\x00\x20" + e for e in entries[512:])
