"""`tms mirror` under the server's default rate limits, as a member meets them: a first copy of a
few thousand events made in one `--once` run (before, each run stopped at `rate-limited:` or a
429 with only `pending.jsonl` to show), and a rerun that fetches no entry tile it holds."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from factories import Live, claim, environment, fresh_database, live_server, settings, terms
from mcp_helpers import Caller, approve
from prometheus_client import REGISTRY

from tms.guard.rates import DEFAULT_ADDRESS, DEFAULT_FETCH, DEFAULT_KEY, DEFAULT_LOGIN
from tms.mirror.copy import PENDING
from tms.nostr.events import SecretKey

BIN = Path(sys.executable).parent
OWNER = SecretKey.generate()
# Enough that the ids' REQs alone (100 ids each) spend the key's budget (20 a second) several
# times over, and the tiles (256 entries each) the address's.
EVENTS = 3000
DEFAULTS = settings(
    TMS_EMBED="off",
    TMS_RATE_ADDRESS=DEFAULT_ADDRESS,
    TMS_RATE_KEY=DEFAULT_KEY,
    TMS_RATE_FETCH=DEFAULT_FETCH,
    TMS_RATE_LOGIN=DEFAULT_LOGIN,
)


@dataclass(frozen=True)
class Servers:
    unlimited: Live  # where the test publishes
    limited: Live  # the same database, served with the default rate limits: what is mirrored


@pytest.fixture(scope="module")
def servers(pg_server_url: str, template_url: str) -> Iterator[Servers]:
    with (
        fresh_database(pg_server_url, template_url) as database,
        live_server(database, settings(TMS_EMBED="off")) as unlimited,
    ):
        approve(database, OWNER)
        bulk = [claim(OWNER, "bulk", f"bulk {i}") for i in range(EVENTS)]
        publish(unlimited, terms(OWNER), *bulk)
        with live_server(database, DEFAULTS) as limited:
            yield Servers(unlimited, limited)


def publish(live: Live, *events: dict[str, object]) -> None:
    caller = Caller(live)
    try:
        for start in range(0, len(events), 1000):
            caller.publish(*events[start : start + 1000])
    finally:
        caller.close()


def mirror(live: Live, directory: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    relay = live.url.replace("http://", "ws://") + "/c/bulk"
    return subprocess.run(
        [str(BIN / "tms"), "mirror", relay, "--dir", str(directory), "--once", *extra],
        env=environment(TMS_NSEC=OWNER.secret.hex()),
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_a_first_copy_completes_under_the_default_limits_and_a_rerun_fetches_no_held_tile(
    servers: Servers, tmp_path: Path
) -> None:
    first = mirror(servers.limited, tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr
    assert f"bulk: {EVENTS} log entries verified" in first.stdout, first.stdout
    assert f"{EVENTS + 1} events fetched" in first.stdout  # and the owner's terms
    assert not (tmp_path / PENDING).exists()

    publish(servers.unlimited, *[claim(OWNER, "bulk", f"later {i}") for i in range(10)])
    before = log_reads()
    second = mirror(servers.limited, tmp_path)
    assert second.returncode == 0, second.stdout + second.stderr
    assert "10 new, 10 events fetched" in second.stdout
    # The copy holds entries 0..2999: of the tiles, only the one it ends in (2816..3071) is read
    # again, after the log key and the checkpoint.
    assert log_reads() - before == 3


def log_reads() -> float:
    """The log's GETs answered 200 so far, by every server of this process."""
    return REGISTRY.get_sample_value("tms_requests_total", {"door": "log", "outcome": "ok"}) or 0
