"""The ledger distributed on a real Citus cluster (`TMS_TEST_CITUS_URL`, tests/cluster.py): where
the rows land, the append-only guard on every shard, a publish kept on its collection's worker,
a worker restarted under load, and an export that verifies.

Every other test of the ledger, the reads, search, the log, the doors and the CLI runs against
the same cluster when that variable is set (`.ci/run`); these are the ones only a cluster has.
"""

from __future__ import annotations

import asyncio
import getpass
import hashlib
import json
import os
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import urlsplit

import asyncpg
import cluster
import pytest
from factories import (
    MEMBER,
    OWNER,
    TMS,
    claim,
    contradiction,
    environment,
    evidence,
    link,
    profile,
)
from publishing import join, open_collection, publish

from tms.errors import is_database_down
from tms.ledger.access import Access
from tms.ledger.locks import hold_locks
from tms.ledger.log.reads import LogReads
from tms.ledger.read.export import Exporter
from tms.ledger.read.filters import StoredEvents
from tms.ledger.read.lookups import Lookups
from tms.ledger.read.reads import CLAIM_SORTS, Reads
from tms.ledger.read.stats import Stats
from tms.ledger.service import Ledger
from tms.nostr.filters import parse_filter
from tms.rules.quotes import claim_key
from tms.rules.references import Reference
from tms.search.pgvector import ensure_vector_index
from tms.search.search import Search
from tms.store import citus
from tms.store.database import open_pool

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(not cluster.CITUS_URL, reason="TMS_TEST_CITUS_URL names no Citus cluster"),
]

DOC = "Histamine intolerance is thought to result from reduced diamine oxidase (DAO) activity."
GUARDED = ("events", "evidence", "claims", "links", "contradictions", "contradiction_claims")
GUARDED_ALL = (*GUARDED, "member_lists", "tlog_leaves", "tlog_nodes", "tlog_checkpoints")


def database(url: str) -> str:
    return urlsplit(url).path.lstrip("/")


async def worker_of(conn: asyncpg.Connection, table: str, slug: str) -> tuple[int, int]:
    """The shard of `table` that holds collection `slug`, and the port of its worker."""
    row = await conn.fetchrow(
        """SELECT s.shardid, n.nodeport FROM pg_dist_placement s
           JOIN pg_dist_node n USING (groupid)
           WHERE s.shardid = get_shard_id_for_distribution_column($1::regclass, $2::text)""",
        table,
        slug,
    )
    assert row is not None
    return row["shardid"], row["nodeport"]


async def slugs_on_each_worker(db_url: str, per_worker: int = 1) -> dict[int, list[str]]:
    """Collection names whose shards sit on each worker (by port), `per_worker` of each."""
    found: dict[int, list[str]] = {}
    conn = await asyncpg.connect(db_url)
    try:
        workers = len(await cluster.worker_urls(database(db_url)))
        for n in range(1000):
            _, port = await worker_of(conn, "events", f"c{n}")
            if len(found.setdefault(port, [])) < per_worker:
                found[port].append(f"c{n}")
            if len(found) == workers and all(len(v) == per_worker for v in found.values()):
                return found
    finally:
        await conn.close()
    raise AssertionError("no collection name for some worker")


async def worker_url(db_url: str, port: int) -> str:
    urls = await cluster.worker_urls(database(db_url))
    return next(url for url in urls if urlsplit(url).port == port)


# --- where things live --------------------------------------------------------------------------


async def test_the_schema_is_distributed_as_placed(db_url: str) -> None:
    conn = await asyncpg.connect(db_url)
    try:
        assert await citus.placements(conn) == citus.PLACEMENT
        colocated = await conn.fetchval(
            "SELECT count(DISTINCT colocationid) FROM pg_dist_partition WHERE partmethod = 'h'"
        )
        assert colocated == 1  # every distributed table with `events`
        assert await citus.distribute(conn) == []  # placed already: nothing to do
    finally:
        await conn.close()


async def test_collections_rows_land_on_both_workers(ledger: Ledger, db_url: str) -> None:
    """Each collection's rows sit in its own shard of every table, on the worker that holds
    that shard (read there, from the shard itself); collections spread over both workers."""
    spread = await slugs_on_each_worker(db_url)
    slugs = [slug for names in spread.values() for slug in names]
    for slug in slugs:
        await open_collection(ledger, OWNER, slug)
        doc = evidence(OWNER, slug, DOC)
        said = claim(OWNER, slug, f"DAO explains HIT in {slug}.")
        await publish(ledger, doc, said, link(OWNER, slug, doc["id"], said["id"], "DAO"))
    conn = await asyncpg.connect(db_url)
    try:
        for slug in slugs:
            for table, expected in (("events", 4), ("claims", 1), ("links", 1)):
                shard, port = await worker_of(conn, table, slug)
                assert slug in spread[port]  # co-located: every table's shard on one worker
                worker = await asyncpg.connect(await worker_url(db_url, port))
                try:
                    count = await worker.fetchval(
                        f"SELECT count(*) FROM {table}_{shard} WHERE collection = $1", slug
                    )
                finally:
                    await worker.close()
                assert count == expected, (table, slug)
    finally:
        await conn.close()
    assert len(spread) == 2


# --- the append-only guard ----------------------------------------------------------------------


async def test_every_shard_refuses_update_delete_and_truncate(ledger: Ledger, db_url: str) -> None:
    """Through the coordinator, and on a worker, straight at a shard (even with Citus' own
    guard on shards lifted): the ledger's triggers refuse, on every shard of every table."""
    [slug] = (await slugs_on_each_worker(db_url))[min(await ports(db_url))]
    await open_collection(ledger, OWNER, slug)
    c1, c2 = claim(OWNER, slug, "One."), claim(OWNER, slug, "Two.")
    doc = evidence(OWNER, slug, DOC)
    more = (claim(OWNER, slug, f"Claim {n}.") for n in range(12))  # 16 entries: a subtree
    await publish(ledger, profile(OWNER, "owner"), doc, c1, c2, *more)
    await publish(
        ledger,
        link(OWNER, slug, doc["id"], c1["id"], "DAO"),
        contradiction(OWNER, slug, [c1["id"], c2["id"]]),
    )
    conn = await asyncpg.connect(db_url)
    try:
        for table in (*GUARDED, "collections", "profiles"):
            for sql in (
                f"UPDATE {table} SET {first_column(table)} = {first_column(table)}",
                f"DELETE FROM {table}",
                f"TRUNCATE {table} CASCADE",
            ):
                with pytest.raises(asyncpg.PostgresError, match="append-only"):
                    await conn.execute(sql)
        shards = {table: await worker_of(conn, table, slug) for table in GUARDED_ALL}
    finally:
        await conn.close()
    for table, (shard, port) in shards.items():
        worker = await asyncpg.connect(await worker_url(db_url, port))
        try:
            await worker.execute("SET citus.enable_manual_changes_to_shards = on")
            name = f"{table}_{shard}"
            column = first_column(table)
            for sql in (
                f"UPDATE {name} SET {column} = {column}",
                f"DELETE FROM {name}",
                f"TRUNCATE {name}",
            ):
                with pytest.raises(asyncpg.InsufficientPrivilegeError, match="append-only"):
                    await worker.execute(sql)
                    pytest.fail(f"{sql} was not refused")
        finally:
            await worker.close()
    # And every shard carries both guards, on every worker.
    for url in await cluster.worker_urls(database(db_url)):
        worker = await asyncpg.connect(url)
        try:
            await worker.execute("SET citus.override_table_visibility = off")
            missing = await worker.fetch(
                """SELECT c.relname FROM pg_class c
                   WHERE c.relkind = 'r' AND c.relname ~ ('^(' || $1 || ')_[0-9]+$')
                     AND (SELECT count(*) FROM pg_trigger t
                          WHERE t.tgrelid = c.oid AND NOT t.tgisinternal
                            AND t.tgname ~ '_(append_only|no_truncate)_[0-9]+$') <> 2""",
                "|".join(GUARDED_ALL),
            )
            shards_here = await worker.fetchval(
                "SELECT count(*) FROM pg_class WHERE relkind = 'r' AND relname ~ $1",
                "^(" + "|".join(GUARDED_ALL) + ")_[0-9]+$",
            )
        finally:
            await worker.close()
        assert shards_here > 0
        assert [r["relname"] for r in missing] == []


async def ports(db_url: str) -> list[int]:
    return [urlsplit(url).port or 5432 for url in await cluster.worker_urls(database(db_url))]


# A column each guarded table has, to write an UPDATE with.
_COLUMN = {
    "contradiction_claims": "claim_id",
    "collections": "owner",
    "profiles": "name",
    "tlog_leaves": "idx",
    "tlog_nodes": "idx",
    "tlog_checkpoints": "size",
}


def first_column(table: str) -> str:
    return _COLUMN.get(table, "pubkey")


# --- one collection, one worker ------------------------------------------------------------------


@pytest.fixture
async def routed_pool(db_url: str) -> AsyncIterator[asyncpg.Pool]:
    """A pool on which any statement that Citus sends to more than one shard is an error."""
    pool = await open_pool(db_url, min_size=1, max_size=4)
    pool.set_connect_args(db_url, server_settings={"citus.multi_task_query_log_level": "error"})
    await pool.expire_connections()
    try:
        yield pool
    finally:
        await pool.close()


async def test_a_collections_publish_and_reads_each_stay_on_its_worker(
    ledger: Ledger, routed_pool: asyncpg.Pool
) -> None:
    """Publishing into one collection (its lock, snapshot and write), the member's access to
    it, listing, following, the reading pages' excerpts, the submit page's look-ups, searching,
    proving, its log, its dashboard, the relay's stored answers and exporting it: not one
    statement reaches a second shard."""
    await open_collection(ledger, OWNER, "lab", [MEMBER])
    await join(ledger, MEMBER)
    routed = Ledger(routed_pool)
    lab = await Access(routed_pool).collection(MEMBER.pubkey, "lab")  # as a door checks it
    reader = await Access(routed_pool).reader(MEMBER.pubkey)
    assert reader.slugs == ("lab",)
    doc = evidence(MEMBER, "lab", DOC)
    c1, c2 = claim(MEMBER, "lab", "DAO explains HIT."), claim(OWNER, "lab", "It does not.")
    await publish(routed, doc, c1, c2)
    await publish(
        routed,
        link(MEMBER, "lab", doc["id"], c1["id"], "reduced diamine oxidase"),
        link(OWNER, "lab", doc["id"], c2["id"], "DAO", relation="REBUTS"),
        contradiction(OWNER, "lab", [c1["id"], c2["id"]], "Both cannot hold."),
    )
    reads = Reads(routed_pool)
    for sort in CLAIM_SORTS:
        assert len(await reads.list_claims(lab, sort, 10)) == 2
    assert len(await reads.get_links(lab, c1["id"], None, None, 10)) == 1
    assert len(await reads.list_evidence(lab, False, None, 10)) == 1
    assert len(await reads.list_contradictions(lab, 10)) == 1
    assert len(await reads.contradictions_with_claim(lab, c1["id"], 10)) == 1
    assert set(await reads.cited(lab, [c1["id"], doc["id"]])) == {c1["id"], doc["id"]}
    got = await reads.get_event(reader, c1["id"])
    assert got is not None and got["collection"] == "lab"
    assert len(await reads.list_collections(reader)) == 1
    # the reading pages (tms.ledger.read.excerpts)
    shown = await reads.shown_links(lab, to_id=c1["id"], limit=10)
    assert len(shown) == 1
    assert set(await reads.quote_contexts(lab, [s.id for s in shown])) == {shown[0].id}
    assert len(await reads.shown_contradictions(lab, c1["id"], 10)) == 1
    assert len(await reads.claim_choices(lab, "", c2["id"], 10)) == 1
    assert (await reads.evidence_window(lab, doc["id"], 0, 20)) is not None
    # the submit page's look-ups (tms.ledger.read.lookups)
    lookups = Lookups(routed_pool)
    same = await lookups.evidence(lab, hashlib.sha256(DOC.encode()).digest(), None)
    assert [e["id"] for e in same] == [doc["id"]]
    keyed = await lookups.claims(lab, [claim_key("DAO explains  HIT.")])
    assert [c["id"] for found in keyed.values() for c in found] == [c1["id"]]
    assert [
        [f["id"] for f in found] for found in await lookups.targets(lab, [Reference(c1["id"])])
    ] == [[c1["id"]]]
    # the log, the dashboard, the relay's stored answers
    log = LogReads(routed_pool, routed.log)
    checkpoint = await log.checkpoint(lab)
    assert checkpoint["size"] == 7
    assert (await log.inclusion(lab, c1["id"])) is not None
    assert (await log.consistency(lab, 1, None))["new_size"] == 7
    assert (await Stats(routed_pool).dashboard(reader, "lab"))["kinds"]
    claims_only = parse_filter({"kinds": [4702]}, max_limit=10)
    page = await StoredEvents(routed_pool).page(lab, claims_only, before=None, size=10)
    assert {s.event.id for s in page} == {c1["id"], c2["id"]}
    search = Search(routed_pool, None)
    assert [h["id"] for h in await search.claims_by_keyword(lab, "explains", 5)] == [c1["id"]]
    await routed_pool.executemany(  # vectors as the embedder stores them: c1 nearer the query
        "INSERT INTO embeddings (event_id, model, collection, kind, embedding) "
        "VALUES ($1, 'test/model', 'lab', 4702, $2::text::vector)",
        [(c1["id"], "[1,0,0,0]"), (c2["id"], "[0,1,0,0]")],
    )
    await ensure_vector_index(routed_pool, "test/model", 4)
    near = await search.claims_near(lab, [0.9, 0.1, 0.0, 0.0], "test/model", 4, 5)
    assert [h["id"] for h in near] == [c1["id"], c2["id"]]
    assert len(await search.contradictions_by_keyword(lab, "cannot", 5)) == 1
    lines = [line async for line in Exporter(routed_pool).lines(lab, checkpoint=True)]
    assert len(lines) == 10  # 2 terms, the 7 events of lab, the checkpoint
    async with routed_pool.acquire() as conn, conn.transaction():
        await hold_locks(conn, ["lab"])


# --- locks on their workers ----------------------------------------------------------------------


async def test_a_publish_does_not_wait_for_another_workers_collection(
    ledger: Ledger, db_url: str
) -> None:
    """A collection's lock is taken on the worker that holds it: while one collection's lock
    is held (a transaction in the middle of its publish), a publish into a collection on the
    other worker goes through, and one into the same collection waits for it."""
    spread = await slugs_on_each_worker(db_url)
    (port_a, [a]), (port_b, [b]) = sorted(spread.items())
    for slug in (a, b):
        await open_collection(ledger, OWNER, slug)
    holder = await asyncpg.connect(db_url)
    try:
        async with holder.transaction():
            await hold_locks(holder, [a])
            worker = await asyncpg.connect(await worker_url(db_url, port_a))
            try:  # the lock is on a's worker, held by the coordinator's connection to it
                held = await worker.fetchval(
                    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted"
                )
            finally:
                await worker.close()
            assert held >= 1
            other = await asyncio.wait_for(publish(ledger, claim(OWNER, b, "Not held.")), 30)
            assert len(other["accepted"]) == 1
            same = asyncio.create_task(publish(ledger, claim(OWNER, a, "Waits.")))
            await asyncio.sleep(1.0)
            assert not same.done()
        assert len((await asyncio.wait_for(same, 30))["accepted"]) == 1
    finally:
        await holder.close()
    assert port_a != port_b


# --- a worker restarted under load --------------------------------------------------------------


def _pg_ctl(data: str, bindir: str, *args: str) -> None:
    """pg_ctl on a worker's data directory, as its owner (CI runs as root; the cluster's
    servers run as the directory's owner)."""
    owner = Path(data).owner()
    command = [f"{bindir}/pg_ctl", "-D", data, "-l", f"{data}.log", "-w", "-t", "120", *args]
    if owner != getpass.getuser():
        command = ["runuser", "-u", owner, "--", *command]
    subprocess.run(command, check=True, capture_output=True, timeout=150)


async def test_a_worker_restarted_mid_publish_loses_nothing_acknowledged(
    ledger: Ledger, db_url: str
) -> None:
    """Publishes run into collections on both workers while one worker is killed (an
    immediate stop: no shutdown checkpoint, as in a crash) and started again. Each publish is
    either acknowledged or refused as "database unavailable"; after the restart every
    acknowledged event is there, in its collection's log, and publishing goes on."""
    spread = await slugs_on_each_worker(db_url, per_worker=2)
    slugs = [slug for names in spread.values() for slug in names]
    victim = await worker_url(db_url, sorted(spread)[0])
    conn = await asyncpg.connect(victim)
    try:
        data = await conn.fetchval("SHOW data_directory")
        bindir = await conn.fetchval("SELECT setting FROM pg_config WHERE name = 'BINDIR'")
    finally:
        await conn.close()
    if os.geteuid() != 0 and Path(data).owner() != getpass.getuser():
        pytest.skip("restarting a worker takes root or the owner of its data directory")
    for slug in slugs:
        await open_collection(ledger, OWNER, slug)

    acknowledged: list[tuple[str, str]] = []
    unavailable: list[str] = []
    stop = asyncio.Event()

    async def writer(slug: str) -> None:
        n = 0
        while not stop.is_set():
            n += 1
            event = claim(OWNER, slug, f"claim {n} in {slug}")
            try:
                result = await publish(ledger, event)
            except Exception as exc:
                assert is_database_down(exc), repr(exc)  # never a bug's 500
                unavailable.append(type(exc).__name__)
                await asyncio.sleep(0.05)
                continue
            acknowledged.extend((slug, event_id) for event_id in result["accepted"])

    writers = [asyncio.create_task(writer(slug)) for slug in slugs]
    await asyncio.sleep(1.0)
    await asyncio.to_thread(_pg_ctl, data, bindir, "-m", "immediate", "stop")
    await asyncio.sleep(1.0)
    await asyncio.to_thread(_pg_ctl, data, bindir, "start")
    await asyncio.sleep(2.0)
    stop.set()
    await asyncio.gather(*writers)
    assert unavailable, "the restart was not noticed: nothing ran during it"

    async with ledger.pool.acquire() as conn:
        await conn.execute("SELECT recover_prepared_transactions()")
        stored = {
            (r["collection"], r["id"])
            for r in await conn.fetch("SELECT collection, id FROM events WHERE kind = 4702")
        }
        logged = {r["event_id"].hex() for r in await conn.fetch("SELECT event_id FROM tlog_leaves")}
    assert set(acknowledged) <= stored
    assert {event_id for _, event_id in acknowledged} <= logged
    for slug in slugs:  # and it goes on, on both workers
        after = await publish(ledger, claim(OWNER, slug, "after the restart"))
        assert len(after["accepted"]) == 1


# --- export and verify-export -------------------------------------------------------------------


async def test_an_export_from_the_cluster_verifies(
    ledger: Ledger, db_url: str, tmp_path: Path
) -> None:
    """`tms export --checkpoint` from the coordinator, and `tms verify-export` of that file with
    the server's log key, agree: every event of the collection, in its log's order."""
    await open_collection(ledger, OWNER, "lab", [MEMBER])
    await join(ledger, MEMBER)
    doc = evidence(MEMBER, "lab", DOC)
    c1 = claim(MEMBER, "lab", "DAO explains HIT.")
    await publish(ledger, profile(MEMBER, "bot"), doc, c1)
    await publish(ledger, link(OWNER, "lab", doc["id"], c1["id"], "reduced diamine oxidase"))
    env = environment(TMS_DATABASE_URL=db_url)
    exported = subprocess.run(
        [TMS, "export", "lab", "--checkpoint"], env=env, capture_output=True, timeout=120
    )
    assert exported.returncode == 0, exported.stderr
    path = tmp_path / "lab.jsonl"
    path.write_bytes(exported.stdout)
    lines = exported.stdout.decode().splitlines()
    assert len(lines) == 8 and json.loads(lines[-1]).keys() == {"checkpoint", "entries", "others"}
    key = ledger.log.signer.key.verifier().encode()
    verified = subprocess.run(
        [TMS, "verify-export", str(path), "--key", key], env=env, capture_output=True, timeout=120
    )
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert verified.stdout.endswith(b"7 events verified, 4 log entries of 'lab': OK\n")


# --- a shard moved -------------------------------------------------------------------------------


async def test_a_shard_moved_to_another_worker_keeps_its_rows_and_its_guard(
    ledger: Ledger, db_url: str
) -> None:
    """What an operator does after adding a worker (citus_move_shard_placement, which the
    rebalancer runs): the collection's shards, moved with their co-located ones, keep every row
    and both triggers on the new worker, and publishing there goes on."""
    spread = await slugs_on_each_worker(db_url)
    (source, [slug]), (target, _) = sorted(spread.items())
    await open_collection(ledger, OWNER, slug)
    await publish(ledger, *(claim(OWNER, slug, f"Claim {n}.") for n in range(5)))
    conn = await asyncpg.connect(db_url)
    try:
        shard, port = await worker_of(conn, "events", slug)
        assert port == source
        hosts = {port: host for host, port in await cluster.nodes()}
        await conn.execute(
            "SELECT citus_move_shard_placement($1, $2, $3, $4, $5, "
            "shard_transfer_mode => 'block_writes')",
            shard,
            hosts[source],
            source,
            hosts[target],
            target,
        )
        moved = {table: await worker_of(conn, table, slug) for table in GUARDED_ALL}
    finally:
        await conn.close()
    assert {port for _, port in moved.values()} == {target}
    worker = await asyncpg.connect(await worker_url(db_url, target))
    try:
        await worker.execute("SET citus.override_table_visibility = off")
        for table, (shard, _) in moved.items():
            triggers = await worker.fetchval(
                "SELECT count(*) FROM pg_trigger WHERE tgrelid = $1::regclass AND NOT tgisinternal",
                f"{table}_{shard}",
            )
            assert triggers == 2, table
        events_shard = moved["events"][0]
        assert (
            await worker.fetchval(
                f"SELECT count(*) FROM events_{events_shard} WHERE collection = $1", slug
            )
            == 6
        )
        with pytest.raises(asyncpg.InsufficientPrivilegeError, match="append-only"):
            await worker.execute(f"DELETE FROM events_{events_shard}")
    finally:
        await worker.close()
    after = await publish(ledger, claim(OWNER, slug, "After the move."))
    assert len(after["accepted"]) == 1
