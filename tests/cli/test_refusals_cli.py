"""`tms refusals`: the operator's view of the refusal log, counts by kind and the newest records,
over the test's own database as `tms` runs it (a subprocess)."""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime, timedelta

import anyio
import pytest
from factories import TMS, environment

from tms.cli.notation import since_when
from tms.guard.refusal_store import Record, RefusalStore
from tms.nostr import nip19
from tms.store.database import open_pool

pytestmark = pytest.mark.anyio

KEY = "d" * 64
NOW = datetime.now(UTC)
MINUTE = (NOW - timedelta(minutes=5)).replace(second=0, microsecond=0)


async def tms(db_url: str, *args: str) -> subprocess.CompletedProcess[bytes]:
    return await anyio.run_process(
        [TMS, "refusals", *args], env=environment(TMS_DATABASE_URL=db_url), check=False
    )


async def seed(db_url: str) -> None:
    pool = await open_pool(db_url, max_size=1)
    try:
        records = [
            Record(NOW - timedelta(hours=3), "bad_signature", "publish", None, "192.0.2.1"),
            Record(NOW - timedelta(minutes=30), "rate_limited", "list_claims", KEY, "192.0.2.2"),
            Record(NOW - timedelta(minutes=20), "rate_limited", "mcp", None, "192.0.2.2"),
            Record(NOW - timedelta(minutes=10), "ssrf", "fetch_url", KEY, "192.0.2.3"),
        ]
        await RefusalStore(pool).write(records, keep=100, lost=2)
        # A flood from one address, written in two batches: one row, the minute's count.
        flood = Record(MINUTE, "rate_limited", "mcp", None, "198.51.100.7", count=4000)
        await RefusalStore(pool).write([flood], keep=100)
        await RefusalStore(pool).write([flood, flood], keep=100)
    finally:
        await pool.close()


async def test_counts_by_kind_then_the_newest(db_url: str) -> None:
    await seed(db_url)
    result = await tms(db_url, "--since", "1h")
    assert result.returncode == 0, result.stderr
    out = result.stdout.decode().splitlines()
    assert out[0].startswith("refusals since ") and out[0].endswith(": 12,003")
    assert [line.split() for line in out[1:3]] == [["rate_limited", "12,002"], ["ssrf", "1"]]
    assert out[3] == (
        "dropped so far: 2 (each kind keeps its newest 100,000 rows; TMS_REFUSALS_KEEP)"
    )
    assert out[4].startswith("the newest 4 rows, oldest first (time, kind, count, tool, ")
    npub = nip19.npub_encode(KEY)
    assert [line.split()[1:] for line in out[5:]] == [
        ["rate_limited", "1", "list_claims", "192.0.2.2", npub],
        ["rate_limited", "1", "mcp", "192.0.2.2", "-"],
        ["ssrf", "1", "fetch_url", "192.0.2.3", npub],
        ["rate_limited", "12,000", "mcp", "198.51.100.7", "-"],
    ]
    assert out[-1].split()[0] == MINUTE.strftime("%Y-%m-%dT%H:%M:00Z")


async def test_one_keys_refusals_over_a_day(db_url: str) -> None:
    await seed(db_url)
    result = await tms(db_url, "--key", nip19.npub_encode(KEY), "--limit", "0")
    assert result.returncode == 0, result.stderr
    out = result.stdout.decode().splitlines()
    assert out[0].startswith(f"refusals by {nip19.npub_encode(KEY)} since ")
    assert [line.split() for line in out[1:3]] == [["rate_limited", "1"], ["ssrf", "1"]]
    assert len(out) == 4  # no records listed


async def test_bad_arguments_are_one_line_and_exit_2(db_url: str) -> None:
    for args in (["--since", "yesterday"], ["--key", "npub1nope"], ["--limit", "-1"]):
        result = await tms(db_url, *args)
        assert result.returncode == 2, args
        assert result.stdout == b"" and len(result.stderr.decode().splitlines()) == 1


def test_since_takes_an_age_or_a_time() -> None:
    now = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    assert since_when("90s", now) == now - timedelta(seconds=90)
    assert since_when("15m", now) == now - timedelta(minutes=15)
    assert since_when("2d", now) == now - timedelta(days=2)
    assert since_when("1W", now) == now - timedelta(weeks=1)
    assert since_when("2026-11-30T08:00", now) == datetime(2026, 11, 30, 8, 0, tzinfo=UTC)
    assert since_when("2026-11-30T08:00:00+02:00", now) == datetime(2026, 11, 30, 6, 0, tzinfo=UTC)
    assert since_when("last week", now) is None
