"""`tms backup` and `tms restore` as an operator runs them (the console script in subprocesses):
the whole database backed up from the running ledger's database, restored into a fresh data
directory, and the collection exported there proven whole, by `tms verify-export`, against a
checkpoint a member kept before the backup was made."""

from __future__ import annotations

import subprocess
from pathlib import Path

import cluster
import pytest
from factories import MEMBER, OWNER, TMS, claim, environment, evidence, link
from publishing import join, open_collection, publish, readable

from tms.ledger.read.export import Exporter
from tms.ledger.service import Ledger

pytestmark = pytest.mark.anyio


def run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [TMS, *args], env=env, capture_output=True, text=True, timeout=180, check=False
    )


async def test_backup_restore_into_a_fresh_data_directory_then_verify_export(
    db_url: str, ledger: Ledger, tmp_path: Path, data_root: Path
) -> None:
    source = environment(TMS_DATABASE_URL=db_url)
    archive = tmp_path / "tms.dump"
    if cluster.CITUS_URL:
        refused = run(source, "backup", str(archive))
        assert refused.returncode == 1
        assert refused.stderr.splitlines()[-1].startswith("tms: this is a Citus cluster: ")
        assert not archive.exists()
        return
    first = await open_collection(ledger, OWNER, "lab", [MEMBER])
    kept = tmp_path / "kept.txt"  # what a member kept, before the backup
    kept.write_text(first["checkpoints"][0]["note"], encoding="utf-8")
    await join(ledger, MEMBER)
    doc = evidence(MEMBER, "lab", "Reduced diamine oxidase (DAO) activity is the mechanism.")
    said = claim(MEMBER, "lab", "DAO explains it.")
    await publish(ledger, doc, said, link(MEMBER, "lab", doc["id"], said["id"], "diamine oxidase"))
    original = [
        line
        async for line in Exporter(ledger.pool).lines(
            await readable(Exporter(ledger.pool), "lab"), checkpoint=True
        )
    ]

    made = run(source, "backup", str(archive))
    assert made.returncode == 0, made.stderr
    assert made.stdout.startswith(f"backed up to {archive} (")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept.txt", "tms.dump"]  # no leftovers
    again = run(source, "backup", str(archive))
    assert (again.returncode, again.stderr.splitlines()[-1]) == (
        1,
        f"tms: {archive} exists: back up to a new file",
    )

    fresh = data_root / "restored"
    target = environment(TMS_DATA_DIR=str(fresh))
    restored = run(target, "restore", "--create", str(archive))
    assert restored.returncode == 0, restored.stderr
    assert restored.stdout == f"restored {archive}\n"
    assert any(
        "copy the old server's log-key there" in line for line in restored.stderr.splitlines()
    )
    twice = run(target, "restore", str(archive))
    assert twice.returncode == 1
    assert twice.stderr.splitlines()[-1].startswith("tms: this database already holds a ledger")

    exported = run(target, "export", "lab", "--checkpoint")
    assert exported.returncode == 0, exported.stderr
    assert exported.stdout.splitlines() == original  # the same file, byte for byte
    export = tmp_path / "lab.jsonl"
    export.write_text(exported.stdout, encoding="utf-8")
    key = ledger.log.signer.key.verifier().encode()
    proven = run(target, "verify-export", str(export), "--checkpoint", str(kept), "--key", key)
    assert proven.returncode == 0, proven.stdout + proven.stderr
    assert proven.stdout.splitlines()[-1].endswith(" of 'lab': OK")

    # And from the embedded database, with no server running: the same archive tools.
    second = tmp_path / "again.dump"
    copied = run(target, "backup", str(second))
    assert copied.returncode == 0, copied.stderr
    assert second.stat().st_size > 0
