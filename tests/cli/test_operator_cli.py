"""The operator's `tms` commands as an operator runs them: the installed console script in a
subprocess, on the test's own database (`TMS_DATABASE_URL`), or on an embedded PostgreSQL in a
temporary data directory for `tms serve`."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import time
from datetime import datetime
from pathlib import Path

import anyio
import cluster
import httpx
import psutil
import pytest
from factories import TMS, claim, environment, free_port, terms
from publishing import publish

from tms.ledger.export import Exporter
from tms.ledger.service import Ledger
from tms.nostr import nip19
from tms.nostr.events import SecretKey
from tms.store import citus

pytestmark = pytest.mark.anyio


async def tms(db_url: str, *args: str) -> subprocess.CompletedProcess[bytes]:
    return await anyio.run_process(
        [TMS, *args], env=environment(TMS_DATABASE_URL=db_url), check=False
    )


def lines(output: bytes) -> list[str]:
    return output.decode().splitlines()


# --- approve, revoke, approved -----------------------------------------------------------------


async def test_approve_by_npub_or_hex_then_list(db_url: str, ledger: Ledger) -> None:
    a, b = SecretKey.generate(), SecretKey.generate()
    npub_a, npub_b = nip19.npub_encode(a.pubkey), nip19.npub_encode(b.pubkey)
    result = await tms(db_url, "approve", npub_a, b.pubkey.upper())
    assert result.returncode == 0, result.stderr
    assert lines(result.stdout) == [
        f"approved {npub_a} {a.pubkey}",
        f"approved {npub_b} {b.pubkey}",
    ]
    assert {pubkey for pubkey, _ in await ledger.approved()} == {a.pubkey, b.pubkey}

    again = await tms(db_url, "approve", a.pubkey)
    assert lines(again.stdout) == [f"approved {npub_a} {a.pubkey} (already approved)"]

    listed = await tms(db_url, "approved")
    assert listed.returncode == 0
    rows = [line.split(" ") for line in lines(listed.stdout)]
    assert sorted((npub, pubkey) for npub, pubkey, _ in rows) == sorted(
        [(npub_a, a.pubkey), (npub_b, b.pubkey)]
    )
    for _, _, approved_at in rows:
        assert datetime.fromisoformat(approved_at).tzinfo is not None


async def test_approved_with_nobody_approved(db_url: str) -> None:
    result = await tms(db_url, "approved")
    assert (result.returncode, result.stdout) == (0, b"")
    assert lines(result.stderr) == ["tms: no keys are approved (tms approve NPUB_OR_HEX...)"]


async def test_revoke_says_which_keys_were_not_approved(db_url: str, ledger: Ledger) -> None:
    a, b = SecretKey.generate(), SecretKey.generate()
    await ledger.approve([a.pubkey])
    result = await tms(db_url, "revoke", a.pubkey, nip19.npub_encode(b.pubkey))
    assert result.returncode == 0, result.stderr
    assert lines(result.stdout) == [
        f"revoked {nip19.npub_encode(a.pubkey)} {a.pubkey}",
        f"was not approved: {nip19.npub_encode(b.pubkey)} {b.pubkey}",
    ]
    assert await ledger.approved() == []


@pytest.mark.parametrize("command", ["approve", "revoke"])
async def test_one_bad_key_refuses_them_all(db_url: str, ledger: Ledger, command: str) -> None:
    good = SecretKey.generate().pubkey
    if command == "revoke":
        await ledger.approve([good])
    result = await tms(db_url, command, good, "npub1notakey")
    assert result.returncode == 2
    assert result.stdout == b""
    [line] = lines(result.stderr)
    assert line.startswith("tms: 'npub1notakey': ")
    assert line.endswith(f"; nothing was {command}d")
    assert [pubkey for pubkey, _ in await ledger.approved()] == (
        [] if command == "approve" else [good]
    )


# --- export ------------------------------------------------------------------------------------


async def test_export_writes_exactly_what_the_ledger_exports(db_url: str, ledger: Ledger) -> None:
    owner = SecretKey.generate()
    await ledger.approve([owner.pubkey])
    await publish(
        ledger,
        terms(owner),
        *(claim(owner, "mcas", f"Claim {i}: naïve “quotes”.") for i in range(50)),
        claim(owner, "other", "Not in mcas."),
    )

    result = await tms(db_url, "export", "mcas")
    assert result.returncode == 0, result.stderr
    expected = "".join([f"{line}\n" async for line in Exporter(ledger.pool).lines("mcas")])
    assert result.stdout == expected.encode()
    assert len(lines(result.stdout)) == 51


@pytest.mark.parametrize("slug", ["nope", "UPPER"])
async def test_export_of_an_unknown_collection(db_url: str, slug: str) -> None:
    result = await tms(db_url, "export", slug)
    assert result.returncode == 1
    assert result.stdout == b""
    assert lines(result.stderr) == [f"tms: no such collection {slug!r}"]


# --- a database that cannot be used ------------------------------------------------------------


@pytest.mark.parametrize("args", [["approved"], ["export", "mcas"], ["serve", "--port", "1"]])
async def test_an_unreachable_database_is_one_line(args: list[str]) -> None:
    result = await tms("postgresql://tms@127.0.0.1:1/tms", *args)
    assert result.returncode == 1
    assert result.stdout == b""
    [line] = lines(result.stderr)
    assert line.startswith("tms: cannot connect to the database: ")


# --- tms serve on the embedded PostgreSQL --------------------------------------------------------


def postgres_processes(data_dir: Path) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["name", "cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if proc.info["name"] == "postgres" and any(str(data_dir) in arg for arg in cmdline):
            found.append(proc)
    return found


def test_serve_starts_the_embedded_database_and_stops_it_on_sigterm(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    port = free_port()
    with (tmp_path / "out").open("wb") as out, (tmp_path / "err").open("wb") as err:
        server = subprocess.Popen(
            [TMS, "serve", "--port", str(port)],
            env=environment(TMS_DATA_DIR=str(data_dir)),
            stdout=out,
            stderr=err,
        )
    try:
        deadline = time.monotonic() + 60
        with httpx.Client(timeout=2) as http:
            while True:
                assert server.poll() is None, (tmp_path / "err").read_text()
                assert time.monotonic() < deadline, "no answer from /healthz within 60 s"
                try:
                    health = http.get(f"http://127.0.0.1:{port}/healthz")
                except httpx.TransportError:
                    time.sleep(0.1)
                    continue
                break
        assert health.status_code == 200
        assert health.json()["ok"] is True and health.json()["database"] == "reachable"
        assert postgres_processes(data_dir)

        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=30) == 0
        output = (tmp_path / "out").read_text()
        assert f"tms: serving on http://127.0.0.1:{port}\n" in output
        assert f"tms: data: embedded PostgreSQL in {data_dir / 'postgres'}\n" in output
        deadline = time.monotonic() + 10
        while postgres_processes(data_dir) or (data_dir / "postgres" / "postmaster.pid").exists():
            assert time.monotonic() < deadline, "the embedded PostgreSQL is still running"
            time.sleep(0.1)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
        for proc in postgres_processes(data_dir):
            with contextlib.suppress(psutil.NoSuchProcess):
                proc.kill()


# --- migrate -----------------------------------------------------------------------------------


async def test_migrate_on_plain_postgresql_changes_nothing(db_url: str) -> None:
    """The server migrates at start-up; `tms migrate` does the same by hand. `--distribute`
    needs a Citus coordinator: on a plain PostgreSQL it says so and touches nothing."""
    if cluster.CITUS_URL:
        pytest.skip("a plain PostgreSQL's (test_migrate_on_citus_lists_where_tables_live)")
    done = await tms(db_url, "migrate")
    assert done.returncode == 0, done.stderr
    assert lines(done.stdout) == ["applied: none (up to date)"]
    refused = await tms(db_url, "migrate", "--distribute")
    assert refused.returncode == 1
    assert lines(refused.stderr) == [
        "tms: --distribute needs a Citus coordinator: the citus extension is not installed in "
        "this database"
    ]
    assert refused.stdout == b""


async def test_migrate_on_citus_lists_where_tables_live(db_url: str) -> None:
    """On a distributed ledger, `tms migrate` (with or without `--distribute`, which has
    nothing left to do) says where every table lives."""
    if not cluster.CITUS_URL:
        pytest.skip("TMS_TEST_CITUS_URL names no Citus cluster")
    for args in (["migrate"], ["migrate", "--distribute"]):
        done = await tms(db_url, *args)
        assert done.returncode == 0, done.stderr
        shown = lines(done.stdout)
        assert shown[0] == "applied: none (up to date)"
        placed = {line.split()[0]: " ".join(line.split()[1:]) for line in shown[1:]}
        assert placed == {
            table: where + (" by collection" if where == "distributed" else "")
            for table, where in citus.PLACEMENT.items()
        }
        assert done.stderr == b""
