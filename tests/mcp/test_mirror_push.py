"""`tms mirror --push` restoring a third server (same log key) from a copy, as an operator runs
it: under a rate limit that refuses events mid-push, SIGKILLed at random points and run again,
it ends with the original log, root and all; onto a target whose log is not a prefix of the
copy's it sends nothing; at a refusal that is not about its rate it stops there, naming it,
and nothing after it is stored. (issue 33, item 2: events sent before the previous one was
answered were stored past a refused one, a history the append-only ledger cannot undo.)"""

from __future__ import annotations

import asyncio
import json
import random
import shlex
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
    Live,
    claim,
    environment,
    fresh_database,
    live_server,
    members,
    nip98_auth,
    profile,
    settings,
    terms,
)
from mcp_helpers import Caller, approve

from tms.nostr.events import SecretKey

BIN = Path(sys.executable).parent
OWNER = SecretKey.generate()
STRFRY_SCRIPT = Path(__file__).parent.parent / "extension" / "strfry_script.py"
T = 1_790_000_000


@pytest.fixture(scope="module")
def source(pg_server_url: str, template_url: str) -> Iterator[Live]:
    with (
        fresh_database(pg_server_url, template_url) as database,
        live_server(database, settings(TMS_EMBED="off")) as server,
    ):
        approve(database, OWNER)
        yield server


def publish(live: Live, *batches: list[dict[str, object]]) -> None:
    caller = Caller(live)
    try:
        for batch in batches:
            caller.publish(*batch)
    finally:
        caller.close()


def history(live: Live, slug: str, claims: int, *, odd: str | None = None) -> SecretKey:
    """Three writers taking turns, one of them removed part-way (her terms must stay before
    the list that removed her), `odd` as one claim's text in the middle; returns a member who
    reads and writes nothing (the key the pushes run as: its budget is not the writers')."""
    a, b, reader = SecretKey.generate(), SecretKey.generate(), SecretKey.generate()
    writers = [OWNER, a, b]
    everyone = [a.pubkey, b.pubkey, reader.pubkey]
    publish(
        live,
        [terms(OWNER), claim(OWNER, slug, "founding", created_at=T)],
        [members(OWNER, slug, everyone, created_at=T + 1)],
        [terms(a), profile(a, "a", created_at=T + 2), terms(b), profile(b, "b", created_at=T + 3)],
        [
            claim(
                writers[i % 3],
                slug,
                odd if odd and i == claims // 2 else f"c {i}",
                created_at=T + 10 + i,
            )
            for i in range(claims)
        ],
        [members(OWNER, slug, [a.pubkey, reader.pubkey], created_at=T + 10 + claims)],
        [
            claim(writers[i % 2], slug, f"after {i}", created_at=T + 20 + claims + i)
            for i in range(20)
        ],
    )
    return reader


def command(live: Live, directory: Path, slug: str, *extra: str) -> list[str]:
    relay = live.url.replace("http://", "ws://") + f"/c/{slug}"
    return [str(BIN / "tms"), "mirror", relay, "--dir", str(directory), "--once", *extra]


def mirror(
    live: Live, directory: Path, key: SecretKey, slug: str, *extra: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command(live, directory, slug, *extra),
        env=environment(TMS_NSEC=key.secret.hex()),
        capture_output=True,
        text=True,
        timeout=300,
    )


def root_of(live: Live, slug: str, who: SecretKey = OWNER) -> tuple[int, str]:
    url = f"{live.url}/c/{slug}/checkpoint?witnessed=0"
    response = httpx.get(url, headers=nip98_auth(who, url), timeout=60)
    assert response.status_code == 200, response.text
    lines = response.text.splitlines()
    return int(lines[1]), lines[2]


async def stored(database_url: str) -> list[str]:
    conn = await asyncpg.connect(database_url)
    try:
        return [r["id"] for r in await conn.fetch("SELECT id FROM events ORDER BY seq")]
    finally:
        await conn.close()


async def kill_once_stored(proc: subprocess.Popen[bytes], database_url: str, count: int) -> bool:
    """SIGKILL `proc` once the target holds `count` events; False if it ended first."""
    conn = await asyncpg.connect(database_url)
    try:
        while proc.poll() is None:
            if await conn.fetchval("SELECT count(*) FROM events") >= count:
                proc.send_signal(signal.SIGKILL)
                proc.wait(30)
                return True
            await asyncio.sleep(0.005)
        return False
    finally:
        await conn.close()


def copy_ids(directory: Path) -> list[str]:
    return [json.loads(line)["id"] for line in (directory / "copy.jsonl").read_text().splitlines()]


def test_a_push_killed_at_random_points_under_the_rate_limit_ends_with_the_original_root(
    source: Live, pg_server_url: str, template_url: str, tmp_path: Path
) -> None:
    reader = history(source, "kept", 150)
    copied = mirror(source, tmp_path, reader, "kept")
    assert copied.returncode == 0, copied.stdout + copied.stderr
    ids = copy_ids(tmp_path)
    original = root_of(source, "kept")
    kills = sorted(random.sample(range(5, len(ids) - 5), 3))
    with (
        fresh_database(pg_server_url, template_url) as database,
        # the key budget low enough that every writer is refused part-way, again and again
        live_server(database, settings(TMS_EMBED="off", TMS_RATE_KEY="30/second")) as target,
    ):
        approve(database, OWNER)
        for count in kills:
            proc = subprocess.Popen(
                command(target, tmp_path, "kept", "--push"),
                env=environment(TMS_NSEC=reader.secret.hex()),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            try:
                asyncio.run(kill_once_stored(proc, database, count))
            finally:
                if proc.poll() is None:
                    proc.kill()
                proc.wait(30)
            # whatever it had stored is the copy's order, with nothing missing before it
            held = asyncio.run(stored(database))
            assert held == ids[: len(held)], f"stored out of order (killed at {count})"
        resumed = mirror(target, tmp_path, reader, "kept", "--push")
        assert resumed.returncode == 0, resumed.stdout + resumed.stderr
        assert root_of(target, "kept") == original
        assert asyncio.run(stored(database)) == ids


def test_a_push_of_2000_events_under_the_default_limits_takes_seconds_not_minutes(
    source: Live, pg_server_url: str, template_url: str, tmp_path: Path
) -> None:
    """Issue 33, item 2's pricing: one relay EVENT at a time, each a unit of its signer's
    `TMS_RATE_KEY` (600 a minute by default), restored 20,000 events in 2,010 s; these 2,000
    took over three minutes. The push now sends ordered batches through `publish`, priced as any
    member's batch (a unit per signer per batch): the same root, in seconds."""
    owner, reader = SecretKey.generate(), SecretKey.generate()
    first = [terms(owner), members(owner, "many", [reader.pubkey], created_at=T)]
    texts = [claim(owner, "many", f"m {i}", created_at=T + 1 + i) for i in range(2000)]
    approve(source.database_url, owner)
    publish(source, first, *(texts[n : n + 1000] for n in range(0, 2000, 1000)))
    assert mirror(source, tmp_path, reader, "many").returncode == 0
    original = root_of(source, "many", owner)
    defaults = {
        "TMS_RATE_KEY": "20/second;600/minute",
        "TMS_RATE_ADDRESS": "40/second;1200/minute",
    }
    with (
        fresh_database(pg_server_url, template_url) as database,
        live_server(database, settings(TMS_EMBED="off", **defaults)) as target,
    ):
        approve(database, owner)
        started = time.monotonic()
        pushed = mirror(target, tmp_path, reader, "many", "--push")
        took = time.monotonic() - started
        assert pushed.returncode == 0, pushed.stdout + pushed.stderr
        assert "2002 pushed" in pushed.stdout, pushed.stdout
        assert took < 30, f"{took:.1f} s"
        assert root_of(target, "many", owner) == original


def test_a_target_whose_log_is_not_a_prefix_is_refused_before_anything_is_sent(
    source: Live, pg_server_url: str, template_url: str, tmp_path: Path
) -> None:
    reader = history(source, "forked", 6)
    assert mirror(source, tmp_path, reader, "forked").returncode == 0
    with (
        fresh_database(pg_server_url, template_url) as database,
        live_server(database, settings(TMS_EMBED="off")) as target,
    ):
        approve(database, OWNER)
        publish(target, [terms(OWNER), claim(OWNER, "forked", "another history")])
        before = asyncio.run(stored(database))
        pushed = mirror(target, tmp_path, OWNER, "forked", "--push")
        assert pushed.returncode == 1, pushed.stdout + pushed.stderr
        assert "is not a prefix of the copy's" in pushed.stderr
        assert "Nothing was pushed" in pushed.stderr
        assert asyncio.run(stored(database)) == before


def test_a_refusal_stops_the_push_there_naming_it(
    source: Live, pg_server_url: str, template_url: str, tmp_path: Path
) -> None:
    reader = history(source, "policed", 10, odd="reject:not on this server")
    assert mirror(source, tmp_path, reader, "policed").returncode == 0
    ids = copy_ids(tmp_path)
    refused = next(
        json.loads(line)["id"]
        for line in (tmp_path / "copy.jsonl").read_text().splitlines()
        if "reject:" in line
    )
    strfry = f"{shlex.quote(sys.executable)} {STRFRY_SCRIPT} {tmp_path / 'notes.jsonl'}"
    config = settings(TMS_EMBED="off", TMS_PLUGINS="strfry", TMS_STRFRY_COMMAND=strfry)
    with (
        fresh_database(pg_server_url, template_url) as database,
        live_server(database, config) as target,
    ):
        approve(database, OWNER)
        pushed = mirror(target, tmp_path, OWNER, "policed", "--push")
        assert pushed.returncode == 2, pushed.stdout + pushed.stderr
        assert asyncio.run(stored(database)) == ids[: ids.index(refused)]
        assert f"refused event {refused}" in pushed.stderr
        assert "not on this server" in pushed.stderr  # the write policy's words, through `publish`
        assert "nothing after it was sent" in pushed.stderr
