"""A checkpoint a member kept goes on verifying after the operator sets TMS_BASE_URL (as the docs
advise for production): the database keeps the origin its first checkpoint named (sql/018), the
server says at start that its configured one differs, and `tms verify-export` checks a later
export against the kept checkpoint. Through the MCP door of a live server and the commands."""

from __future__ import annotations

import json
import logging
import subprocess
import time
from pathlib import Path

import httpx
import pytest
from factories import (
    BIN,
    LOG_SIGNER,
    OWNER,
    claim,
    environment,
    fresh_database,
    live_server,
    members,
    settings,
    terms,
)
from mcp_helpers import Caller, approve


def test_a_kept_checkpoint_still_verifies_after_tms_base_url_is_set(
    pg_server_url: str, template_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with fresh_database(pg_server_url, template_url, "tms_origin") as database:
        approve(database, OWNER)
        with live_server(database, settings(TMS_EMBED="off")) as live:
            caller = Caller(live)
            try:
                first = caller.publish(
                    terms(OWNER), members(OWNER, "lab", []), claim(OWNER, "lab", "A.")
                )
            finally:
                caller.close()
        [kept] = first["checkpoints"]
        assert kept["origin"] == "127.0.0.1/c/lab"  # no TMS_BASE_URL: the listen host
        kept_file = tmp_path / "kept.json"
        kept_file.write_text(json.dumps(kept), encoding="utf-8")

        public = settings(TMS_EMBED="off", TMS_BASE_URL="https://tms.example.org")
        with (
            caplog.at_level(logging.WARNING, logger="tms.ledger.log.tree"),
            live_server(database, public) as live,
        ):
            caller = Caller(live)
            try:
                later = caller.publish(claim(OWNER, "lab", "B."))
            finally:
                caller.close()
            assert later["checkpoints"][0]["origin"] == "127.0.0.1/c/lab"
            guide = httpx.get(f"{live.url}/docs.md", timeout=30).text
            assert "127.0.0.1/c/mcas" in guide and "tms.example.org/c/mcas" not in guide
            deadline = time.monotonic() + 30
            while not (
                said := [r.getMessage() for r in caplog.records if r.name == "tms.ledger.log.tree"]
            ):
                assert time.monotonic() < deadline, "no warning about the origin at start"
                time.sleep(0.05)
        [warning] = said
        assert "recorded in the database is 127.0.0.1/c/<slug>" in warning
        assert "configured for tms.example.org/c/<slug>" in warning

        env = environment(TMS_DATABASE_URL=database)
        exported = subprocess.run(
            [str(BIN / "tms"), "export", "lab", "--checkpoint"],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            timeout=120,
            check=False,
        )
        assert exported.returncode == 0, exported.stderr
        export = tmp_path / "lab.jsonl"
        export.write_bytes(exported.stdout)
    key = LOG_SIGNER.verifier().encode()
    checked = subprocess.run(
        [
            str(BIN / "tms"),
            "verify-export",
            str(export),
            "--checkpoint",
            str(kept_file),
            "--key",
            key,
        ],
        env=environment(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout.splitlines()[-1].endswith("log entries of 'lab': OK")
