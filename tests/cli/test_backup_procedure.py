"""docs/operating.md's "Backups and restores", run as printed (issue 27 item 9): its shell blocks
are read from the document and run by bash in the directory an operator would use, with `uv run`
standing for this checkout's environment. A server on an embedded data directory holds a
collection whose first checkpoint a member kept; the per-collection loop and `tms backup` run
beside the running server; the restore block brings the dump and the two key files into a fresh
data directory and starts the server there; that server goes on signing the same log with the
same key, so an export it makes verifies against the checkpoint kept before the backup.

The only changes to the printed text: the restore's example data directory (`/srv/tms-data`)
and dated file name become this test's, and `uv run tms serve` listens on a free port in the
background (the block ends by serving)."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import asyncpg
import cluster
import httpx
import psutil
import pytest
from factories import (
    BIN,
    MEMBER,
    OWNER,
    TMS,
    admin,
    claim,
    drop_database,
    environment,
    free_port,
    members,
    terms,
)
from publishing import open_collection

from tms.ledger.service import Ledger
from tms.nostr.events import SecretKey
from tms.store.database import with_database
from tms.store.embedded import client_program

OPERATING: Final = Path(__file__).resolve().parents[2] / "docs" / "operating.md"
FENCE: Final = re.compile(r"^ *```bash\n(.*?)^ *```$", re.MULTILINE | re.DOTALL)
HEADERS: Final = {"Accept": "application/json, text/event-stream"}

# `uv run X` is X from this checkout's environment; `uv run tms serve` serves in the background
# on $TEST_PORT (its pid in serve.pid), as the block's last line would in a terminal of its own.
UV: Final = """
uv() {
  [ "$1" = run ] || { echo "uv: only 'uv run' here" >&2; return 2; }
  shift
  if [ "$1 $2" = "tms serve" ]; then
    shift 2
    tms serve --port "$TEST_PORT" "$@" >"$TEST_LOGS/serve.out" 2>"$TEST_LOGS/serve.err" &
    echo $! >"$TEST_LOGS/serve.pid"
  else
    "$@"
  fi
}
set -euo pipefail
"""


def section_blocks(heading: str) -> list[str]:
    text = OPERATING.read_text("utf-8")
    body = text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    return [
        "\n".join(line.removeprefix("  ") for line in block.splitlines())
        for block in FENCE.findall(body)
    ]


def bash(
    script: str, cwd: Path, logs: Path, PATH: str = "", **env: str
) -> subprocess.CompletedProcess[str]:
    """`script` by bash with `uv run` as above; `PATH` goes before this checkout's programs."""
    path = f"{PATH}{BIN}{os.pathsep}{os.environ.get('PATH', '')}"
    return subprocess.run(
        ["bash", "-c", UV + script],
        cwd=cwd,
        env=environment(PATH=path, TEST_LOGS=str(logs), TMS_EMBED="off", **env),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def wait_for(url: str, server: Any, logs: Path) -> None:
    deadline = time.monotonic() + 90
    with httpx.Client(timeout=2) as http:
        while True:
            assert server_alive(server), (logs / "serve.err").read_text()
            assert time.monotonic() < deadline, "no answer from /healthz within 90 s"
            with contextlib.suppress(httpx.TransportError):
                if http.get(f"{url}/healthz").status_code == 200:
                    return
            time.sleep(0.2)


def server_alive(server: Any) -> bool:
    if isinstance(server, subprocess.Popen):
        return server.poll() is None
    return psutil.pid_exists(server) and psutil.Process(server).status() != psutil.STATUS_ZOMBIE


def publish(url: str, *events: dict[str, Any]) -> dict[str, Any]:
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "publish", "arguments": {"events": list(events)}},
    }
    reply = httpx.post(f"{url}/mcp", json=body, headers=HEADERS, timeout=60).json()
    result: dict[str, Any] = reply["result"]
    assert not result.get("isError"), result["content"][0]["text"]
    structured: dict[str, Any] = result["structuredContent"]
    return structured


def stop(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    with contextlib.suppress(psutil.NoSuchProcess, psutil.TimeoutExpired):
        psutil.Process(pid).wait(timeout=30)


@pytest.fixture
def site(data_root: Path) -> Iterator[Path]:
    """The operator's directory: the server runs there on `./tms-data` (under data_root, where
    the embedded PostgreSQL may live: conftest says why)."""
    where = data_root / "site"
    where.mkdir()
    yield where


def test_the_documented_backup_and_restore_keep_the_log_verifiable(
    site: Path, data_root: Path, tmp_path: Path
) -> None:
    if cluster.CITUS_URL:
        pytest.skip("embedded data directories only: the same run as without the cluster")
    blocks = section_blocks("Backups and restores")
    [per_collection] = [b for b in blocks if "tms collections --slugs" in b]
    [whole] = [b for b in blocks if "tms backup" in b]
    [dump_by_hand] = [b for b in blocks if "tms database-url" in b]
    [restoring] = [b for b in blocks if "tms restore --create" in b]
    owner = SecretKey.generate()
    port = free_port()
    old_url = f"http://127.0.0.1:{port}"
    with (tmp_path / "serve.out").open("wb") as out, (tmp_path / "serve.err").open("wb") as err:
        server = subprocess.Popen(
            [TMS, "serve", "--port", str(port)],
            cwd=site,
            env=environment(TMS_EMBED="off"),
            stdout=out,
            stderr=err,
        )
    restored_pid: int | None = None
    try:
        wait_for(old_url, server, tmp_path)
        approved = subprocess.run(
            [TMS, "approve", owner.pubkey], cwd=site, env=environment(), capture_output=True
        )
        assert approved.returncode == 0, approved.stderr
        first = publish(old_url, terms(owner), members(owner, "lab", []), claim(owner, "lab", "A."))
        kept = tmp_path / "kept.txt"  # what a member kept, before any backup
        kept.write_text(first["checkpoints"][0]["note"], encoding="utf-8")
        publish(old_url, claim(owner, "lab", "B."))
        key = httpx.get(f"{old_url}/log-key", timeout=10).text.strip()

        # Both kinds of backup, beside the running server, in its directory.
        done = bash(per_collection, site, tmp_path)
        assert done.returncode == 0, done.stderr
        assert (site / "backup" / "lab.jsonl").read_text().count("\n") >= 5
        assert owner.pubkey in (site / "backup" / "approved.txt").read_text()
        done = bash(whole, site, tmp_path)
        assert done.returncode == 0, done.stderr
        [dump] = (site / "backup").glob("tms-*.dump")
        for name in ("log-key", "secret"):
            copied = site / "backup" / name
            assert copied.read_bytes() == (site / "tms-data" / name).read_bytes()
            assert copied.stat().st_mode & 0o777 == 0o600
        # The by-hand pg_dump, on the URL `tms database-url` prints (the wheel's pg_dump).
        wheel = client_program("pg_dump").parent
        done = bash(dump_by_hand, site, tmp_path, PATH=f"{wheel}{os.pathsep}")
        assert done.returncode == 0, done.stderr
        [by_hand] = (site / "backup").glob("by-hand-*.dump")
        listed = subprocess.run(
            [str(wheel / "pg_restore"), "--list", str(by_hand)], capture_output=True, text=True
        )
        assert listed.returncode == 0 and "TABLE DATA public events " in listed.stdout
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=60) == 0

        # The restore, into a fresh data directory, then the server there.
        fresh = data_root / "restored"
        assert "/srv/tms-data" in restoring and "backup/tms-2026-12-01.dump" in restoring
        script = restoring.replace("/srv/tms-data", str(fresh)).replace(
            "backup/tms-2026-12-01.dump", f"backup/{dump.name}"
        )
        new_port = free_port()
        done = bash(script, site, tmp_path, TEST_PORT=str(new_port))
        assert done.returncode == 0, done.stderr
        assert "warning" not in done.stderr  # the key files are where the server looks
        restored_pid = int((tmp_path / "serve.pid").read_text())
        new_url = f"http://127.0.0.1:{new_port}"
        wait_for(new_url, restored_pid, tmp_path)
        assert httpx.get(f"{new_url}/log-key", timeout=10).text.strip() == key

        # The restored server extends the same log, with the same key.
        later = publish(new_url, claim(owner, "lab", "C."))
        assert later["checkpoints"][0]["size"] > first["checkpoints"][0]["size"]
        env = environment(TMS_DATA_DIR=str(fresh))
        exported = subprocess.run(
            [TMS, "export", "lab", "--checkpoint"], env=env, capture_output=True, text=True
        )
        assert exported.returncode == 0, exported.stderr
        export = tmp_path / "lab.jsonl"
        export.write_text(exported.stdout, encoding="utf-8")
        proven = subprocess.run(
            [TMS, "verify-export", str(export), "--checkpoint", str(kept), "--key", key],
            env=env,
            capture_output=True,
            text=True,
        )
        assert proven.returncode == 0, proven.stdout + proven.stderr
        assert proven.stdout.splitlines()[-1].endswith(" of 'lab': OK")
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
        if restored_pid is not None:
            stop(restored_pid)


BY_HAND: Final = re.compile(r"By hand, `tms restore` is `([^`]+)`\s+then `([^`]+)`")


def as_role(url: str, role: str) -> str:
    """The same server URL, logging in as `role`."""
    scheme, _, rest = url.partition("://")
    authority, slash, tail = rest.partition("/")
    return f"{scheme}://{role}:{role}@{authority.rpartition('@')[2]}{slash}{tail}"


def restore_by_hand(
    commands: str, archive: Path, url: str, cwd: Path
) -> subprocess.CompletedProcess[str]:
    """Shell commands run with FILE and $URL filled in and the wheel's programs on the PATH."""
    wheel = client_program("pg_restore").parent
    return subprocess.run(
        ["bash", "-c", "set -euo pipefail\n" + commands.replace("FILE", str(archive))],
        cwd=cwd,
        env=environment(PATH=f"{wheel}{os.pathsep}{os.environ.get('PATH', '')}", URL=url),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.mark.anyio
async def test_the_by_hand_restore_is_exactly_what_it_says(
    db_url: str, ledger: Ledger, pg_server_url: str, tmp_path: Path
) -> None:
    """The two `pg_restore` commands the section gives for restoring by hand, as printed (FILE and
    $URL filled in), run as a role that owns a new database in which a superuser created
    `vector` (the managed-PostgreSQL case): exit 0 and the ledger whole; where a plain
    `pg_restore --no-owner --role=...` exits 1 on `COMMENT ON EXTENSION`, as the section says."""
    if cluster.CITUS_URL:
        pytest.skip("tms backup refuses on Citus (test_backups_cli)")
    match = BY_HAND.search(" ".join(OPERATING.read_text("utf-8").split()))
    assert match is not None, "the section no longer gives the by-hand commands"
    await open_collection(ledger, OWNER, "lab", [MEMBER])
    archive = tmp_path / "tms.dump"
    made = subprocess.run(
        [TMS, "backup", str(archive)],
        env=environment(TMS_DATABASE_URL=db_url),
        capture_output=True,
        text=True,
        check=False,
    )
    assert made.returncode == 0, made.stderr
    conn = await asyncpg.connect(pg_server_url)
    try:
        superuser = await conn.fetchval(
            "SELECT rolsuper FROM pg_roles WHERE rolname = current_user"
        )
    finally:
        await conn.close()
    if not superuser:
        pytest.skip("needs a role that may create roles (the embedded test server's)")
    suffix = uuid.uuid4().hex[:12]
    role, names = f"tms_restore_{suffix}", [f"tms_by_hand_{suffix}", f"tms_plain_{suffix}"]
    await admin(pg_server_url, f"CREATE ROLE \"{role}\" LOGIN PASSWORD '{role}'")
    targets = []
    try:
        for name in names:
            await admin(pg_server_url, f'CREATE DATABASE "{name}" OWNER "{role}"')
            targets.append(with_database(pg_server_url, name))
            conn = await asyncpg.connect(targets[-1])
            try:
                await conn.execute("CREATE EXTENSION vector")  # by a superuser, as it says
            finally:
                await conn.close()
        by_hand, plain = (as_role(url, role) for url in targets)
        done = restore_by_hand("\n".join(match.groups()), archive, by_hand, tmp_path)
        assert done.returncode == 0, done.stderr
        conn = await asyncpg.connect(by_hand)
        try:
            restored = await conn.fetchval("SELECT count(*) FROM events")
        finally:
            await conn.close()
        assert restored == await ledger.pool.fetchval("SELECT count(*) FROM events") > 0
        refused = restore_by_hand(
            f'pg_restore --no-owner --role={role} -d "$URL" FILE', archive, plain, tmp_path
        )
        assert refused.returncode == 1 and "COMMENT ON EXTENSION" in refused.stderr
    finally:
        for url in targets:
            await drop_database(pg_server_url, url)
        await admin(pg_server_url, f'DROP ROLE "{role}"')
