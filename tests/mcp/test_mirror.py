"""`tms mirror` against a live server, as a member runs it: NIP-77 down into a directory that
`tms verify-export` reads, ten new events on the next sync, a reordered log caught with the
size and roots that differ (the copy left exactly as it was), and a non-member refused; the
copy equal to the export byte for byte, a `kill -9` mid-sync leaving a directory that resumes,
live following after EOSE, and `--push` restoring a fresh server from the copy."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import httpx
import pytest
from factories import (
    LOG_SIGNER,
    Live,
    claim,
    environment,
    evidence,
    fresh_database,
    live_server,
    members,
    nip98_auth,
    profile,
    settings,
    terms,
)
from mcp_helpers import Caller, approve

from tms.mirror.copy import PENDING, Copy
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


def command(live: Live, directory: Path, slug: str = "lab", *extra: str) -> list[str]:
    relay = live.url.replace("http://", "ws://") + f"/c/{slug}"
    return [str(BIN / "tms"), "mirror", relay, "--dir", str(directory), *extra]


def mirror(
    live: Live, directory: Path, key: SecretKey = OWNER, slug: str = "lab", *extra: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command(live, directory, slug, "--once", *extra),
        env=environment(TMS_NSEC=key.secret.hex()),
        capture_output=True,
        text=True,
        timeout=120,
    )


def publish(live: Live, *events: dict[str, object]) -> None:
    caller = Caller(live)
    try:
        for start in range(0, len(events), 1000):
            caller.publish(*events[start : start + 1000])
    finally:
        caller.close()


def export(live: Live, slug: str, checkpoint: bool = False) -> bytes:
    url = f"{live.url}/c/{slug}/export.jsonl" + ("?checkpoint=1" if checkpoint else "")
    response = httpx.get(url, headers=nip98_auth(OWNER, url), timeout=60)
    assert response.status_code == 200, response.text
    return response.content


def verify(directory: Path, *, file: Path | None = None) -> subprocess.CompletedProcess[str]:
    kept = [] if file is not None else ["--checkpoint", str(directory / "state.json")]
    return subprocess.run(
        [
            str(BIN / "tms"),
            "verify-export",
            str(file or directory / "copy.jsonl"),
            *kept,
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


def test_the_copy_is_the_export_byte_for_byte_and_a_kill_9_resumes(
    live: Live, tmp_path: Path
) -> None:
    events = [profile(OWNER, "owner", created_at=1_790_000_100)]
    events += [claim(OWNER, "big", f"big {i} {os.urandom(4).hex()}") for i in range(2000)]
    events += [evidence(OWNER, "big", "a text", url="https://example.org/t")]
    publish(live, *events)
    # Killed while it fetches (its pending events on disk, nothing verified yet)
    proc = subprocess.Popen(
        command(live, tmp_path, "big", "--once"),
        env=environment(TMS_NSEC=OWNER.secret.hex()),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while proc.poll() is None and time.monotonic() < deadline:
            pending = tmp_path / PENDING
            if pending.exists() and pending.stat().st_size > 0:
                break
            time.sleep(0.005)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(30)
    assert proc.returncode == -signal.SIGKILL, "the mirror ended before it could be killed"
    held = Copy.open(tmp_path)  # a valid directory: it opens, its pending events checked
    assert held.state is None and 0 < len(held.pending) < len(events)
    # It resumes from what it had fetched, then verifies
    resumed = mirror(live, tmp_path, OWNER, "big")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    fetched = int(resumed.stdout.split(" events fetched")[0].rsplit(" ", 1)[1])
    assert fetched == len(events) + 1 - len(held.pending)  # and the owner's terms
    assert not (tmp_path / PENDING).exists()
    assert verify(tmp_path).returncode == 0
    assert (tmp_path / "copy.jsonl").read_bytes() == export(live, "big")
    # A kill between the copy's append and the state's replacement: bytes past what state.json
    # covers, and a pending line cut short, are dropped when it starts again
    publish(live, *[claim(OWNER, "big", f"more {i}") for i in range(5)])
    with open(tmp_path / "copy.jsonl", "ab") as file:
        file.write(b'{"id": "cut sho')
    with open(tmp_path / PENDING, "ab") as file:
        file.write(b'{"id": "cut')
    again = mirror(live, tmp_path, OWNER, "big")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "5 new" in again.stdout
    assert (tmp_path / "copy.jsonl").read_bytes() == export(live, "big")
    assert verify(tmp_path).returncode == 0


def test_it_follows_live_after_eose(live: Live, tmp_path: Path) -> None:
    publish(live, *[claim(OWNER, "live", f"before {i}") for i in range(3)])
    proc = subprocess.Popen(
        command(live, tmp_path, "live"),
        env=environment(TMS_NSEC=OWNER.secret.hex()),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert "the server's log key is" in proc.stdout.readline()  # the first time only
        first = proc.stdout.readline()
        assert "live: 3 log entries verified" in first, first
        publish(live, *[claim(OWNER, "live", f"after {i}") for i in range(10)])
        deadline = time.monotonic() + 60
        while True:
            kept = json.loads((tmp_path / "state.json").read_text())
            if kept["size"] == 13:  # its thirteen claims, verified
                break
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                out, err = proc.communicate(timeout=30)
                raise AssertionError(f"the new events never reached the copy: {out}{err}")
            time.sleep(0.1)
        assert "live: 13 log entries verified" in proc.stdout.readline()
        proc.send_signal(signal.SIGINT)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=30)  # and its pipes closed
    assert (tmp_path / "copy.jsonl").read_bytes() == export(live, "live")
    assert verify(tmp_path).returncode == 0


def test_push_restores_a_fresh_server_from_the_copy(
    live: Live, pg_server_url: str, template_url: str, tmp_path: Path
) -> None:
    publish(live, *[claim(OWNER, "keep", f"kept {i}") for i in range(20)])
    copied = mirror(live, tmp_path, OWNER, "keep")
    assert copied.returncode == 0, copied.stdout + copied.stderr
    with (
        fresh_database(pg_server_url, template_url) as database,
        live_server(database, settings(TMS_EMBED="off")) as fresh,
    ):
        approve(database, OWNER)
        restored = mirror(fresh, tmp_path, OWNER, "keep", "--push")
        assert restored.returncode == 0, restored.stdout + restored.stderr
        lines = (tmp_path / "copy.jsonl").read_bytes().count(b"\n")  # its terms, profile, claims
        assert "20 log entries verified" in restored.stdout
        assert f"{lines} pushed" in restored.stdout, restored.stdout
        # the fresh server's own export: the same lines, and its log checks out whole
        assert export(fresh, "keep") == (tmp_path / "copy.jsonl").read_bytes()
        (tmp_path / "fresh.jsonl").write_bytes(export(fresh, "keep", checkpoint=True))
        checked = verify(tmp_path, file=tmp_path / "fresh.jsonl")
        assert checked.returncode == 0, checked.stdout + checked.stderr
        # and it syncs against it as against the server it came from: nothing to do
        again = mirror(fresh, tmp_path, OWNER, "keep", "--push")
        assert again.returncode == 0 and "0 new, 0 events fetched, 0 pushed" in again.stdout


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


def test_a_copy_changed_by_hand_is_refused_on_opening(live: Live, tmp_path: Path) -> None:
    """Issue 33: a copy opens from its kept digest and tree, without hashing its entries
    again; a changed byte of an old line, even one that keeps its id, is still caught."""
    publish(live, *[claim(OWNER, "kept", f"kept {i}") for i in range(5)])
    assert mirror(live, tmp_path, OWNER, "kept").returncode == 0
    path = tmp_path / "copy.jsonl"
    original = path.read_bytes()
    lines = original.splitlines(keepends=True)
    # an old entry's text changed, its id and length kept: no id, size or root differs
    at = next(n for n, line in enumerate(lines) if b"kept 1" in line)
    changed = lines[at].replace(b"kept 1", b"kept 9")
    assert len(changed) == len(lines[at])
    path.write_bytes(b"".join([*lines[:at], changed, *lines[at + 1 :]]))
    refused = mirror(live, tmp_path, OWNER, "kept")
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "changed by hand" in refused.stderr
    path.write_bytes(original)
    again = mirror(live, tmp_path, OWNER, "kept")
    assert again.returncode == 0, again.stdout + again.stderr
    assert verify(tmp_path).returncode == 0


def test_web_users_terms_and_profiles_take_the_exports_places(live: Live, tmp_path: Path) -> None:
    """Issue 33, item 4: one order, defined once. Profiles and terms stored among entries,
    signed with clocks that disagree with the order they were stored in, are placed in a copy
    where the export places them (the server says where: `GET /c/<slug>/others`), so the copy
    is the export byte for byte, sync after sync, and both verify."""
    ann, bob = SecretKey.generate(), SecretKey.generate()
    T = 1_790_000_000
    publish(live, members(OWNER, "mixed", [ann.pubkey, bob.pubkey], created_at=T))
    publish(live, claim(OWNER, "mixed", "owner 1", created_at=T + 1))
    # Ann's terms, then her profile signed earlier by her clock, then her first claim
    publish(live, terms(ann, created_at=T + 60))
    publish(live, profile(ann, "ann", created_at=T + 5))
    publish(live, claim(ann, "mixed", "ann 1", created_at=T + 70))
    first = mirror(live, tmp_path, OWNER, "mixed")
    assert first.returncode == 0, first.stdout + first.stderr
    assert (tmp_path / "copy.jsonl").read_bytes() == export(live, "mixed")
    # A profile Ann signs later by her clock, stored before entries signed earlier; Bob's
    # terms, late by his clock, before the owner's claims and then his own first one
    publish(live, profile(ann, "ann again", created_at=T + 900))
    publish(live, claim(OWNER, "mixed", "owner 2", created_at=T + 20))
    publish(live, terms(bob, created_at=T + 800))
    publish(live, claim(OWNER, "mixed", "owner 3", created_at=T + 21))
    publish(live, claim(bob, "mixed", "bob 1", created_at=T + 30))
    publish(live, claim(ann, "mixed", "ann 2", created_at=T + 1000))
    publish(live, profile(bob, "bob", created_at=T + 2))  # after his last entry: trailing
    second = mirror(live, tmp_path, OWNER, "mixed")
    assert second.returncode == 0, second.stdout + second.stderr
    copied = (tmp_path / "copy.jsonl").read_bytes()
    assert copied == export(live, "mixed")
    publish(live, claim(OWNER, "mixed", "owner 4", created_at=T + 22))
    third = mirror(live, tmp_path, OWNER, "mixed")
    assert third.returncode == 0, third.stdout + third.stderr
    assert (tmp_path / "copy.jsonl").read_bytes() == export(live, "mixed")
    assert verify(tmp_path).returncode == 0
    exported = tmp_path / "export.jsonl"
    exported.write_bytes(export(live, "mixed", checkpoint=True))
    checked = verify(tmp_path, file=exported)
    assert checked.returncode == 0, checked.stdout + checked.stderr
