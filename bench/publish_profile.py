"""Where a publish's time goes, inside the server: `uv run python bench/publish_profile.py`.

Runs the app in this process under uvicorn (as `tms serve` does: uvloop, the guarded protocol,
the embedded PostgreSQL in a fresh temporary directory, `TMS_EMBED=off`), with a timer around
each stage of the publish path, and drives it from a client in another process with
`bench/publish.py`'s clients: `--calls` one-claim publishes one after another, or with
`--clients 16` one-claim publishes from 16 clients to one collection for `--seconds`. After a
warm-up the timers are reset; then it prints, per /mcp request, the milliseconds spent in each
stage (stages nest: the whole request holds the ledger's publish, which holds the group
commit's transaction, which holds its statements), how many times each ran, and the sizes of
the groups the committer formed. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import functools
import inspect
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import asyncpg.connection
import asyncpg.transaction
import uvicorn
import uvloop
from serving import UNLIMITED

import tms.ledger.log.tree as tlog
import tms.ledger.service as service
import tms.ledger.write.commits as commits
import tms.ledger.write.snapshots as snapshots
import tms.ledger.write.writes as writes
import tms.mcp.http as mcp_http
from tms.app import create_app
from tms.config import Settings
from tms.http.protocol import ConnectionLimits, GuardedHttpProtocol
from tms.store import database

LABELS: list[str] = []  # in the order they were instrumented: outer stages first
SPENT: collections.Counter[str] = collections.Counter()
CALLS: collections.Counter[str] = collections.Counter()
GROUPS: collections.Counter[int] = collections.Counter()
REQUEST = "the whole /mcp request"


def timed(owner: Any, name: str, label: str) -> None:
    """Wrap `owner.name` with a timer under `label`: until it returns, or, when it returns an
    awaitable (asyncpg's methods are plain functions that return coroutines), until that is
    done."""
    original: Callable[..., Any] = getattr(owner, name)
    LABELS.append(label)

    def record(started: float) -> None:
        SPENT[label] += time.perf_counter() - started
        CALLS[label] += 1

    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            result = original(*args, **kwargs)
        except BaseException:
            record(started)
            raise
        if not inspect.isawaitable(result):
            record(started)
            return result

        async def finish() -> Any:
            try:
                return await result
            finally:
                record(started)

        return finish()

    setattr(owner, name, wrapper)


PLANS: list[str] = []


def explain(after: int) -> None:
    """`EXPLAIN (ANALYZE, BUFFERS)` of the snapshot and the write of one group commit: the
    first after `after` requests (within the same transaction, on the same connection, with the
    same generic plans). The plan of the write is taken by running it under EXPLAIN ANALYZE
    (which inserts and announces as the statement does); the snapshot is read again after its
    plan."""
    original_fetch = asyncpg.connection.Connection.fetch
    original_fetchval = asyncpg.connection.Connection.fetchval
    wanted = {"snapshot": "json_build_object(", "write": "INSERT INTO events"}

    def due(sql: str) -> str | None:
        if CALLS[REQUEST] < after:
            return None
        for name, mark in wanted.items():
            if mark in sql and not any(plan.startswith(name) for plan in PLANS):
                return name
        return None

    async def plan_of(conn: Any, name: str, sql: str, args: tuple[Any, ...]) -> None:
        rows = await original_fetch(conn, f"EXPLAIN (ANALYZE, BUFFERS) {sql}", *args)
        PLANS.append(f"{name}:\n" + "\n".join(row[0] for row in rows))

    async def fetch(self: Any, sql: str, *args: Any, **kwargs: Any) -> Any:
        name = due(sql)
        if name == "write":
            await plan_of(self, name, sql, args)
            return []  # what it wrote is announced by the statement itself
        return await original_fetch(self, sql, *args, **kwargs)

    async def fetchval(self: Any, sql: str, *args: Any, **kwargs: Any) -> Any:
        name = due(sql)
        if name == "snapshot":
            await plan_of(self, name, sql, args)
        return await original_fetchval(self, sql, *args, **kwargs)

    asyncpg.connection.Connection.fetch = fetch  # type: ignore[method-assign]
    asyncpg.connection.Connection.fetchval = fetchval  # type: ignore[method-assign]


def instrument() -> None:
    timed(mcp_http.McpFront, "__call__", REQUEST)
    timed(service.Ledger, "submit", "Ledger.submit")
    timed(service, "_parse_off_loop", "  parse and verify")
    timed(service.Ledger, "_committed", "  group commit (queue + transaction)")
    timed(asyncpg.transaction.Transaction, "start", "    begin (Citus)")
    timed(writes, "hold_locks", "    lock (Citus)")
    timed(asyncpg.connection.Connection, "execute", "    unlock (or begin and commit)")
    timed(snapshots, "snapshot", "    locks and snapshot (with the log's state)")
    timed(snapshots, "quotes", "    quotes")
    timed(commits, "judge", "    judge")
    timed(tlog.TransparencyLog, "prepare", "    the log: hash and sign")
    timed(writes, "write", "    write (with the log's rows)")
    timed(asyncpg.transaction.Transaction, "_Transaction__commit", "    commit (Citus)")
    original = commits.GroupCommitter._commit_group

    async def counted(self: commits.GroupCommitter, group: list[Any]) -> None:
        GROUPS[len(group)] += 1
        await original(self, group)

    commits.GroupCommitter._commit_group = counted  # type: ignore[method-assign]


CLIENT = """
import asyncio, os, subprocess, sys, time
sys.path.insert(0, {bench!r})
import httpx, publish
from serving import Signer, tms_command
from tms.nostr import nip19
url, data, calls, clients, seconds, flag = {args!r}
signer = Signer()
env = {{k: v for k, v in os.environ.items() if not k.startswith("TMS_")}}
env.update(TMS_DATA_DIR=data, TMS_EMBED="off")
subprocess.run([*tms_command(), "approve", nip19.npub_encode(signer.key.pubkey)], env=env,
               check=True, capture_output=True)
terms = httpx.get(url + "/terms").json()
agreed = {{"version": terms["version"], "sha256": terms["sha256"]}}
asyncio.run(publish._setup(url, [signer.sign(4706, agreed), publish.claim(signer, "bench")]))
asyncio.run(publish.one_client(url, signer, 200))  # warm-up
open(flag, "w").close()
time.sleep(0.1)
if clients > 1:
    asyncio.run(publish.many_clients(url, signer, seconds, 1))
else:
    asyncio.run(publish.one_client(url, signer, calls))
os.remove(flag)
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=1000, help="one-client publishes (1000)")
    parser.add_argument("--clients", type=int, choices=(1, 16), default=1)
    parser.add_argument("--seconds", type=float, default=10, help="with --clients 16 (10 s)")
    parser.add_argument(
        "--explain",
        action="store_true",
        help="print the plans of the snapshot and write statements (EXPLAIN ANALYZE, BUFFERS) "
        "of one transaction half-way through",
    )
    ns = parser.parse_args()
    if ns.explain:
        explain(ns.calls // 2)
    instrument()
    with tempfile.TemporaryDirectory(prefix="tms-profile-") as tmp:
        settings = Settings.from_env({"TMS_DATA_DIR": tmp, "TMS_EMBED": "off", **UNLIMITED})
        url = asyncio.run(database.database_url(settings.database_url, settings.data_dir))
        app = create_app(settings, database_url=url)
        port = 18000 + os.getpid() % 1000
        server = uvicorn.Server(
            uvicorn.Config(
                app,
                host="127.0.0.1",
                port=port,
                log_level="warning",
                lifespan="on",
                loop="uvloop",
                http=GuardedHttpProtocol.with_limits(ConnectionLimits()),
            )
        )
        flag = str(Path(tmp) / "measuring")
        args = (f"http://127.0.0.1:{port}", tmp, ns.calls, ns.clients, ns.seconds, flag)
        script = CLIENT.format(bench=str(Path(__file__).resolve().parent), args=args)

        def client() -> None:
            while not server.started:
                time.sleep(0.05)
            result = subprocess.run(
                [sys.executable, "-c", script], capture_output=True, text=True, check=False
            )
            print(result.stdout, end="")
            if result.returncode:
                print(result.stderr[-3000:], file=sys.stderr)
            server.should_exit = True

        async def serve() -> None:
            async def reset() -> None:
                while not os.path.exists(flag):
                    await asyncio.sleep(0.005)
                SPENT.clear()
                CALLS.clear()
                GROUPS.clear()

            resetting = asyncio.create_task(reset())
            await server.serve()
            resetting.cancel()

        threading.Thread(target=client, daemon=True).start()
        uvloop.run(serve())
    requests = CALLS[REQUEST] or 1
    print(f"\nper /mcp request ({requests:,} requests), in ms:")
    for label in LABELS:
        print(f"{SPENT[label] / requests * 1000:9.2f}  {label}  ({CALLS[label]:,} calls)")
    print("groups the committer formed (batches: how many):", dict(sorted(GROUPS.items())))
    for plan in PLANS:
        print(f"\n{plan}")


if __name__ == "__main__":
    main()
