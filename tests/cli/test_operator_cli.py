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
from factories import (
    TMS,
    claim,
    contradiction,
    environment,
    evidence,
    free_port,
    link,
    members,
    terms,
)
from publishing import publish, readable

from tms.cli.database import without_password
from tms.ledger.read.export import Exporter
from tms.ledger.service import Ledger
from tms.nostr import nip19
from tms.nostr.events import SecretKey
from tms.store import citus
from tms.store.database import load_migrations, newest_schema

pytestmark = pytest.mark.anyio


async def tms(db_url: str, *args: str) -> subprocess.CompletedProcess[bytes]:
    return await anyio.run_process(
        [TMS, *args], env=environment(TMS_DATABASE_URL=db_url), check=False
    )


def lines(output: bytes) -> list[str]:
    return output.decode().splitlines()


def said(result: subprocess.CompletedProcess[bytes], db_url: str) -> list[str]:
    """What a command said on stderr after naming its database, which it always does first
    (`tms serve` in its log: `time INFO tms.serve: database: ...`)."""
    first, *rest = lines(result.stderr)
    named = f"database: {without_password(db_url)} (TMS_DATABASE_URL)"
    assert first == f"tms: {named}" or first.endswith(f" INFO tms.serve: {named}"), first
    return rest


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
    assert said(result, db_url) == ["tms: no keys are approved (tms approve NPUB_OR_HEX...)"]


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
    expected = "".join(
        [
            f"{line}\n"
            async for line in Exporter(ledger.pool).lines(
                await readable(Exporter(ledger.pool), "mcas")
            )
        ]
    )
    assert result.stdout == expected.encode()
    assert len(lines(result.stdout)) == 51


# --- collections ----------------------------------------------------------------------------------


async def test_collections_lists_every_collection_with_its_counts(
    db_url: str, ledger: Ledger
) -> None:
    owner, other, member = SecretKey.generate(), SecretKey.generate(), SecretKey.generate()
    await ledger.approve([owner.pubkey, other.pubkey])
    doc = evidence(owner, "mcas", "Reduced DAO activity is proposed as the mechanism.")
    c1, c2 = claim(owner, "mcas", "DAO explains it."), claim(owner, "mcas", "It does not.")
    await publish(
        ledger,
        terms(owner),
        members(owner, "mcas", [member.pubkey]),
        doc,
        c1,
        c2,
        link(owner, "mcas", doc["id"], c1["id"], "Reduced DAO activity"),
        contradiction(owner, "mcas", [c1["id"], c2["id"]]),
    )
    await publish(ledger, terms(other), claim(other, "b-lab", "Another collection's claim."))

    result = await tms(db_url, "collections")
    assert result.returncode == 0, result.stderr
    header, *rows = lines(result.stdout)
    assert header.split() == [
        "slug", "owner", "evidence", "claims", "links", "contradictions", "members", "created",
    ]  # fmt: skip
    cells = [row.split() for row in rows]
    assert [c[:7] for c in cells] == [  # oldest first
        ["mcas", nip19.npub_encode(owner.pubkey), "1", "2", "1", "1", "1"],
        ["b-lab", nip19.npub_encode(other.pubkey), "0", "1", "0", "0", "0"],
    ]
    for c in cells:
        assert datetime.fromisoformat(c[7]).tzinfo is not None
    # Aligned columns: the times start under "created", the counts end under their names.
    assert {row.index(c[7]) for row, c in zip(rows, cells, strict=True)} == {
        header.index("created")
    }
    end = header.index("members") + len("members")
    assert {row[:end].split()[-1] for row in rows} == {"1", "0"}

    slugs = await tms(db_url, "collections", "--slugs")
    assert (slugs.returncode, lines(slugs.stdout)) == (0, ["mcas", "b-lab"])


async def test_the_operating_guides_backup_loop_exports_every_collection(
    db_url: str, ledger: Ledger, tmp_path: Path
) -> None:
    """docs/operating.md's backup loop, run as written with `tms` on PATH: one verified file a
    collection."""
    owner = SecretKey.generate()
    await ledger.approve([owner.pubkey])
    await publish(ledger, terms(owner), claim(owner, "a", "One."), claim(owner, "b", "Two."))
    guide = (Path(__file__).parents[2] / "docs" / "operating.md").read_text(encoding="utf-8")
    loop = next(
        block for block in guide.split("```") if "tms collections --slugs" in block
    ).removeprefix("bash\n")
    assert "psql" not in loop
    script = loop.replace("uv run tms", "tms")
    env = environment(TMS_DATABASE_URL=db_url)
    env["PATH"] = f"{Path(TMS).parent}:{env.get('PATH', '')}"
    result = await anyio.run_process(["bash", "-ec", script], cwd=tmp_path, env=env, check=False)
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in (tmp_path / "backup").iterdir()) == [
        "a.jsonl", "approved.txt", "b.jsonl",
    ]  # fmt: skip
    for slug in ("a", "b"):
        exported = (tmp_path / "backup" / f"{slug}.jsonl").read_text(encoding="utf-8").splitlines()
        assert exported[-1].startswith('{"checkpoint"')  # ready for tms verify-export


async def test_collections_with_none_yet(db_url: str) -> None:
    result = await tms(db_url, "collections")
    assert (result.returncode, result.stdout) == (0, b"")
    assert said(result, db_url) == [
        "tms: no collections yet (an approved key creates one by naming a new slug)"
    ]


@pytest.mark.parametrize("slug", ["nope", "UPPER"])
async def test_export_of_an_unknown_collection(db_url: str, slug: str) -> None:
    result = await tms(db_url, "export", slug)
    assert result.returncode == 1
    assert result.stdout == b""
    assert said(result, db_url) == [f"tms: no such collection {slug!r}"]


# --- a database that cannot be used ------------------------------------------------------------


@pytest.mark.parametrize(
    "args", [["approved"], ["collections"], ["export", "mcas"], ["serve", "--port", "1"]]
)
async def test_an_unreachable_database_is_one_line(args: list[str]) -> None:
    url = "postgresql://tms@127.0.0.1:1/tms"
    result = await tms(url, *args)
    assert result.returncode == 1
    assert result.stdout == b""
    [line] = said(result, url)
    assert line.startswith("tms: cannot connect to the database: ")


@pytest.mark.parametrize(
    ("host", "base_url", "warned"),
    [
        ("0.0.0.0", None, True),
        ("::", None, True),
        ("tms.example.org", None, True),
        ("0.0.0.0", "https://tms.example.org", False),
        ("127.0.0.1", None, False),
        ("::1", None, False),
        ("localhost", None, False),
    ],
)
async def test_serve_warns_at_start_without_a_public_origin(
    host: str, base_url: str | None, warned: bool
) -> None:
    """Beyond loopback with no TMS_BASE_URL, /docs and the login challenge name whatever Host a
    client sends: said once, at start (here before the database is found unreachable, so that
    nothing listens)."""
    env = environment(TMS_DATABASE_URL="postgresql://tms@127.0.0.1:1/tms")
    if base_url is not None:
        env["TMS_BASE_URL"] = base_url
    result = await anyio.run_process(
        [TMS, "serve", "--host", host, "--port", str(free_port())], env=env, check=False
    )
    assert result.returncode == 1
    said = lines(result.stderr)
    # The server's log (`time level logger: message`), then the failure's one line: the
    # database, or, for a name this machine is not, the listen address (bound first).
    assert said[-1].startswith(
        ("tms: cannot connect to the database: ", f"tms: TMS_HOST/--host: cannot listen on {host}")
    ), said
    warning = [line.split(": ", 1)[1] for line in said[:-1] if " WARNING " in line]
    if warned:
        assert warning == [
            f"TMS_BASE_URL is not set, and the server listens on {host}, beyond "
            "this machine: /docs, the login challenge and NIP-98 checks take this server's "
            "origin from each request's Host header. Set TMS_BASE_URL to the public origin "
            "(https://...)."
        ]
    else:
        assert warning == []


# --- tms serve on the embedded PostgreSQL --------------------------------------------------------


def postgres_processes(data_dir: Path) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["name", "cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if proc.info["name"] == "postgres" and any(str(data_dir) in arg for arg in cmdline):
            found.append(proc)
    return found


def test_serve_starts_the_embedded_database_and_stops_it_on_sigterm(
    tmp_path: Path, data_root: Path
) -> None:
    data_dir = data_root / "data"  # not under tmp_path: conftest's data_root says why
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
        # A new database: every migration applied, each said once; the back-fills, with
        # nothing to do, say nothing.
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=30) == 0
        said = [line.split(": ", 1)[1] for line in (tmp_path / "err").read_text().splitlines()]
        assert f"database: embedded PostgreSQL in {data_dir} (TMS_DATA_DIR)" in said
        assert (
            f"migrating the database to schema {newest_schema():03d}, in one transaction: "
            f"{len(load_migrations())} migrations"
        ) in said
        assert sum(line.startswith("applied 001_ledger.sql (") for line in said) == 1
        assert not [line for line in said if "back-fill" in line]
        assert f"serving on http://127.0.0.1:{port}" in said
        assert (tmp_path / "out").read_text() == ""
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
    assert lines(done.stdout) == [f"schema {newest_schema():03d}: up to date"]
    refused = await tms(db_url, "migrate", "--distribute")
    assert refused.returncode == 1
    assert said(refused, db_url) == [
        "tms: --distribute needs a Citus coordinator: the citus extension is not installed in "
        "this database"
    ]
    assert refused.stdout == b""


def test_migrate_help_promises_the_placements_only_on_citus(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Issue 27 item 10: the help said it prints where each table lives, which it does only on
    a Citus coordinator (the two tests around this one)."""
    from tms.cli.main import main

    with pytest.raises(SystemExit):
        main(["migrate", "--help"])
    said = " ".join(capsys.readouterr().out.split())
    assert "Prints each migration applied, and on Citus where each table lives." in said


async def test_migrate_on_citus_lists_where_tables_live(db_url: str) -> None:
    """On a distributed ledger, `tms migrate` (with or without `--distribute`, which has
    nothing left to do) says where every table lives."""
    if not cluster.CITUS_URL:
        pytest.skip("TMS_TEST_CITUS_URL names no Citus cluster")
    for args in (["migrate"], ["migrate", "--distribute"]):
        done = await tms(db_url, *args)
        assert done.returncode == 0, done.stderr
        shown = lines(done.stdout)
        assert shown[0] == f"schema {newest_schema():03d}: up to date"
        placed = {line.split()[0]: " ".join(line.split()[1:]) for line in shown[1:]}
        assert placed == {
            table: where + (" by collection" if where == "distributed" else "")
            for table, where in citus.PLACEMENT.items()
        }
        assert said(done, db_url) == []


# --- which database ------------------------------------------------------------------------------


async def test_a_command_in_the_wrong_directory_refuses_to_make_a_new_database(
    tmp_path: Path,
) -> None:
    """`./tms-data` is relative to the working directory: one directory off, `tms approve` said
    "approved" against a brand-new database while the server went on refusing the key, and the
    backup loop's `tms collections --slugs` printed nothing and exited 0. Each now refuses in
    one line naming the data directory it looked in and `--create`, and makes nothing."""
    key = SecretKey.generate().pubkey
    env = environment()
    refusal = (
        f"tms: no database in {tmp_path / 'tms-data'} (TMS_DATA_DIR, relative to the working "
        "directory unless absolute): run this where the server's data directory is, or set "
        "TMS_DATA_DIR to it; --create makes a new, empty one there"
    )
    for args in (["approve", key], ["collections", "--slugs"], ["stdio"]):
        result = await anyio.run_process([TMS, *args], cwd=tmp_path, env=env, check=False)
        assert (result.returncode, result.stdout) == (1, b""), args
        said = lines(result.stderr)  # stdio says first whether it signs for you
        assert said[-1:] == [refusal] and len(said) <= 2, args
    assert list(tmp_path.iterdir()) == []


def test_create_makes_the_embedded_database_and_every_command_names_it(data_root: Path) -> None:
    """With `--create` the new database is made (and named); the next command finds it."""
    data_dir = data_root / "data"
    env = environment(TMS_DATA_DIR=str(data_dir))
    key = SecretKey.generate().pubkey
    named = f"tms: database: embedded PostgreSQL in {data_dir} (TMS_DATA_DIR)"
    made = subprocess.run([TMS, "approve", "--create", key], env=env, capture_output=True)
    assert made.returncode == 0, made.stderr
    assert lines(made.stderr)[0] == named
    listed = subprocess.run([TMS, "approved"], env=env, capture_output=True)
    assert listed.returncode == 0, listed.stderr
    assert lines(listed.stderr)[0] == named
    assert lines(listed.stdout)[0].split()[1] == key


def test_a_database_url_is_named_without_its_password() -> None:
    assert (
        without_password("postgresql://tms:s3cret@db.internal:5432/tms?sslmode=require")
        == "postgresql://tms@db.internal:5432/tms?sslmode=require"
    )
    assert (
        without_password("postgresql://db.internal/tms?user=tms&password=s3cret")
        == "postgresql://db.internal/tms?user=tms"
    )
    assert without_password("postgresql://h1,h2/tms") == "postgresql://h1,h2/tms"
