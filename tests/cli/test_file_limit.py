"""`tms serve` and the open-file limit (`tms.cli.server`): it raises its soft limit to the hard
one and says so; when the hard limit is below the connection cap (and what else the process
holds), it holds fewer connections, and says that too. Each case runs in a process of its own,
its limits set first, so that this one's stay as they are."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = """
import resource, sys
resource.setrlimit(resource.RLIMIT_NOFILE, (256, int(sys.argv[1])))
from tms.cli.logs import configure
from tms.cli.server import _connection_limits
from tms.config import Settings
configure(Settings.from_env({}))
limits = _connection_limits(Settings.from_env({"TMS_MAX_CONNECTIONS": sys.argv[2]}))
print(limits.max_connections, limits.websockets, resource.getrlimit(resource.RLIMIT_NOFILE)[0])
"""


def limits_with(hard: int, cap: int) -> tuple[list[int], str]:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(hard), str(cap)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return [int(n) for n in done.stdout.split()], done.stderr


def test_the_soft_limit_is_raised_to_the_hard_one_and_said() -> None:
    (held, sockets, soft), said = limits_with(4000, 1000)
    assert (held, sockets, soft) == (1000, 900, 4000)
    assert "open-file limit raised from 256 to 4,000" in said


def test_a_hard_limit_below_the_cap_lowers_the_cap_and_says_so() -> None:
    (held, sockets, soft), said = limits_with(1200, 10_000)
    assert (held, soft) == (1000, 1200)  # 200 kept for the database, logs and the rest
    assert sockets == 900  # the reserve for HTTP is a tenth of what is held
    assert "holding at most 1,000 connections, not TMS_MAX_CONNECTIONS=10,000" in said
