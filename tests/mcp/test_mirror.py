"""`tms mirror` against a live server, as a member runs it: NIP-77 down into a directory that
`tms verify-export` reads, ten new events on the next sync, a reordered log caught with the
size and roots that differ (the copy left exactly as it was), and a non-member refused."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pytest
from factories import (
    LOG_SIGNER,
    Live,
    claim,
    environment,
    fresh_database,
    live_server,
    settings,
    terms,
)
from mcp_helpers import Caller, approve

from tms.nostr.events import SecretKey

BIN = Path(sys.executable).parent
OWNER = SecretKey.generate()


@pytest.fixture(scope="module")
def live(pg_server_url: str, template_url: str) -> Iterator[Live]:
    with (
        fresh_database(pg_server_url, template_url) as database,
        live_server(database, settings(TMS_EMBED="off")) as server,
    ):
        approve(database, OWNER)
        caller = Caller(server)
        try:
            caller.publish(terms(OWNER), *[claim(OWNER, "lab", f"first {i}") for i in range(3)])
        finally:
            caller.close()
        yield server


def mirror(live: Live, directory: Path, key: SecretKey = OWNER) -> subprocess.CompletedProcess[str]:
    relay = live.url.replace("http://", "ws://") + "/c/lab"
    return subprocess.run(
        [str(BIN / "tms"), "mirror", relay, "--dir", str(directory), "--once"],
        env=environment(TMS_NSEC=key.secret.hex()),
        capture_output=True,
        text=True,
        timeout=120,
    )


def verify(directory: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            str(BIN / "tms"),
            "verify-export",
            str(directory / "copy.jsonl"),
            "--checkpoint",
            str(directory / "state.json"),
            "--key",
            LOG_SIGNER.verifier().encode(),
        ],
        env=environment(),
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_member_keeps_a_verified_copy_and_catches_a_rewritten_log(
    live: Live, tmp_path: Path
) -> None:
    first = mirror(live, tmp_path)
    assert first.returncode == 0, first.stderr + first.stdout
    assert "lab: 3 log entries verified" in first.stdout
    lines = (tmp_path / "copy.jsonl").read_text().splitlines()
    assert len(lines) == 4  # the owner's terms, then its three claims
    checked = verify(tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout.strip().endswith("OK")

    caller = Caller(live)
    try:
        caller.publish(*[claim(OWNER, "lab", f"then {i}") for i in range(10)])
    finally:
        caller.close()
    second = mirror(live, tmp_path)
    assert second.returncode == 0, second.stderr
    assert "lab: 13 log entries verified" in second.stdout and "10 new" in second.stdout
    assert verify(tmp_path).returncode == 0

    # An attacker with the database reorders two entries of the log behind the triggers' back,
    # then signs over it (here: a publish is refused by the ledger's own consistency check, so
    # the tree is read as the tiles serve it): the mirror refuses and keeps its copy.
    before = {name: (tmp_path / name).read_bytes() for name in ("copy.jsonl", "state.json")}
    caller = Caller(live)
    try:
        caller.publish(*[claim(OWNER, "lab", f"later {i}") for i in range(3)])
    finally:
        caller.close()
    asyncio.run(_swap_leaves(live.database_url, 13, 14))
    third = mirror(live, tmp_path)
    assert third.returncode == 1, third.stdout + third.stderr
    assert "STOPPED" in third.stderr and "at size 16" in third.stderr
    assert "root" in third.stderr
    assert {name: (tmp_path / name).read_bytes() for name in before} == before


def test_a_non_member_is_refused(live: Live, tmp_path: Path) -> None:
    stranger = mirror(live, tmp_path, SecretKey.generate())
    assert stranger.returncode == 2
    assert "restricted:" in stranger.stderr
    assert not (tmp_path / "copy.jsonl").exists()


async def _swap_leaves(database_url: str, a: int, b: int) -> None:
    conn = await asyncpg.connect(database_url)
    try:
        async with conn.transaction():
            # no triggers, on Citus's workers too (a plain PostgreSQL takes the setting as a
            # placeholder it ignores)
            await conn.execute("SET LOCAL citus.propagate_set_commands = 'local'")
            await conn.execute("SET LOCAL session_replication_role = replica")
            rows = await conn.fetch(
                "SELECT idx, event_id FROM tlog_leaves WHERE collection = 'lab' "
                "AND idx IN ($1, $2)",
                a,
                b,
            )
            ids = {r["idx"]: r["event_id"] for r in rows}
            await conn.execute(
                "UPDATE tlog_leaves SET event_id = $2 WHERE collection = 'lab' AND idx = $1",
                a,
                os.urandom(32),
            )
            await conn.execute(
                "UPDATE tlog_leaves SET event_id = $2 WHERE collection = 'lab' AND idx = $1",
                b,
                ids[a],
            )
            await conn.execute(
                "UPDATE tlog_leaves SET event_id = $2 WHERE collection = 'lab' AND idx = $1",
                a,
                ids[b],
            )
    finally:
        await conn.close()
