"""`tms serve` killed with SIGKILL in the middle of 1,000-event batches, five times: every batch
is in the database whole or not at all, and no acknowledged event is missing. The script is
`bench/crash.py` itself (100 cycles there), run with five; it exits 1 on any partial batch or
missing acknowledged event."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from factories import environment

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "crash.py"


def test_five_kills_mid_batch_leave_every_batch_whole_or_absent() -> None:
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--cycles", "5", "--kill-window", "0.3", "2.5"],
        env=environment(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    summary = result.stdout.splitlines()
    assert any(line.endswith("0 partial or missing (target: 0)") for line in summary), summary
