"""A split view caught by members who demand the witnesses' quorum, with real servers: server A
and server A2 hold two different histories of one collection, signed by the same log key under
the same origin (a stolen key, a second database); witness W cosigns A's. A2 submits its own
and W refuses it (it does not extend what W cosigned: 422). `tms mirror --policy` takes A's
copy, witnessed by W, and refuses A2's checkpoint, naming the witnesses it lacks; a member
whose copy came from A and who is later served A2 is stopped even without a policy, with the
size and roots that differ, and the copy is left as it was."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import httpx
import pytest
from factories import (
    LOG_SIGNER,
    Live,
    claim,
    environment,
    fresh_database,
    live_server,
    nip98_auth,
    settings,
    terms,
)
from mcp_helpers import Caller, approve

from tms.nostr.events import SecretKey
from tms.tlog.cosignature import CosignerKey
from tms.tlog.witness import origin_hash

BIN = Path(sys.executable).parent
OWNER = SecretKey.generate()
ORIGIN = "127.0.0.1/c/lab"  # both servers listen on 127.0.0.1 and name their logs after it


@pytest.fixture(scope="module")
def servers(
    pg_server_url: str, template_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, object]]:
    tmp = tmp_path_factory.mktemp("split")
    witness = CosignerKey.generate("w.example/witness")
    (tmp / "logs").write_text(f"log 127.0.0.1/c/ {LOG_SIGNER.verifier().encode()}\n")
    with (
        fresh_database(pg_server_url, template_url) as db_w,
        live_server(
            db_w,
            settings(
                TMS_EMBED="off",
                TMS_WITNESS_LOGS=str(tmp / "logs"),
                TMS_WITNESS_KEY=witness.encode(),
            ),
        ) as w,
    ):
        policy = tmp / "policy"
        policy.write_text(
            f"log {LOG_SIGNER.verifier().encode()}\n"
            f"witness W {witness.verifier().encode()} {w.url}/witness\n"
            "quorum W\n"
        )
        config = settings(TMS_EMBED="off", TMS_WITNESS_POLICY=str(policy))
        with (
            fresh_database(pg_server_url, template_url) as db_a,
            fresh_database(pg_server_url, template_url) as db_a2,
            live_server(db_a, config) as a,
        ):
            approve(db_a, OWNER)
            publish(a, terms(OWNER), *[claim(OWNER, "lab", f"history A {i}") for i in range(3)])
            wait_for_quorum(a, 3)  # W holds A's history before A2 shows up
            with live_server(db_a2, config) as a2:
                approve(db_a2, OWNER)
                publish(
                    a2, terms(OWNER), *[claim(OWNER, "lab", f"history B {i}") for i in range(4)]
                )
                yield {"w": w, "a": a, "a2": a2, "policy": policy, "witness": witness}


def publish(live: Live, *events: dict[str, object]) -> None:
    caller = Caller(live)
    try:
        caller.publish(*events)
    finally:
        caller.close()


def wait_for_quorum(live: Live, size: int) -> None:
    url = f"{live.url}/c/lab/checkpoint"
    deadline = time.monotonic() + 30  # the bound is 10 s; generous under a loaded machine
    while True:
        answer = httpx.get(url, headers=nip98_auth(OWNER, url), timeout=10)
        if answer.headers.get("tms-quorum") == "met" and f"\n{size}\n" in answer.text:
            return
        assert time.monotonic() < deadline, f"no quorum: {answer.headers} {answer.text}"
        time.sleep(0.2)


def mirror(live: Live, directory: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    relay = live.url.replace("http://", "ws://") + "/c/lab"
    key = ["--nsec", OWNER.secret.hex()]  # as the issue spells it (TMS_NSEC works too)
    return subprocess.run(
        [str(BIN / "tms"), "mirror", relay, *key, "--dir", str(directory), "--once", *extra],
        env=environment(),
        capture_output=True,
        text=True,
        timeout=120,
    )


async def _last_error(database_url: str) -> str | None:
    conn = await asyncpg.connect(database_url)
    try:
        said: str | None = await conn.fetchval(
            "SELECT last_error FROM tlog_witness_state WHERE collection = 'lab'"
        )
        return said
    finally:
        await conn.close()


def test_the_witness_refuses_the_second_history(servers: dict[str, object]) -> None:
    a2 = servers["a2"]
    assert isinstance(a2, Live)
    deadline = time.monotonic() + 30
    while not (said := asyncio.run(_last_error(a2.database_url))):
        assert time.monotonic() < deadline, "A2 never heard from the witness"
        time.sleep(0.2)
    assert "answered 422" in said and "consistency proof" in said, said
    # W still holds A's history: its monitoring view serves A's checkpoint, cosigned
    w = servers["w"]
    assert isinstance(w, Live)
    view = httpx.get(f"{w.url}/witness/{origin_hash(ORIGIN)}/checkpoint", timeout=10)
    assert view.status_code == 200 and view.text.startswith(f"{ORIGIN}\n3\n")


def test_a_mirror_demanding_the_quorum_refuses_the_history_the_witness_did_not_cosign(
    servers: dict[str, object], tmp_path: Path
) -> None:
    a, a2, policy = servers["a"], servers["a2"], servers["policy"]
    assert isinstance(a, Live) and isinstance(a2, Live)
    honest = mirror(a, tmp_path / "from-a", "--policy", str(policy))
    assert honest.returncode == 0, honest.stdout + honest.stderr
    assert "lab: 3 log entries verified" in honest.stdout and "witnessed by W" in honest.stdout

    split = mirror(a2, tmp_path / "from-a2", "--policy", str(policy))
    assert split.returncode == 1, split.stdout + split.stderr
    assert "STOPPED" in split.stderr
    assert "(size 4, root " in split.stderr
    assert (
        "is cosigned by no witness of the policy, not the policy's quorum (witness W): refused"
        in (split.stderr)
    )
    assert not (tmp_path / "from-a2" / "copy.jsonl").exists()  # nothing kept of it

    # The member whose copy came from A, served A2 later: refused with the quorum demanded,
    # and without it the copy's own log says what differs; the copy is left as it was.
    kept = tmp_path / "from-a"
    before = {name: (kept / name).read_bytes() for name in ("copy.jsonl", "state.json")}
    assert mirror(a2, kept, "--policy", str(policy)).returncode == 1
    unwitnessed = mirror(a2, kept)
    assert unwitnessed.returncode == 1, unwitnessed.stdout + unwitnessed.stderr
    assert "STOPPED" in unwitnessed.stderr and "at size 4" in unwitnessed.stderr
    assert {name: (kept / name).read_bytes() for name in before} == before
