"""Receipts for one record (issue 37, item 3): a C2SP tlog-proof a member gets from
`GET /c/<slug>/receipt/<id>`, the `get_receipt` tool (through the official MCP SDK client) or
`tms receipt`, and anyone checks offline with `tms verify-receipt`, which names the step that
fails once one byte of the event, the path or the checkpoint changes. With a witness, the
receipt carries the checkpoint its quorum cosigned and `--policy` demands it. A non-member is
refused as the export refuses them. Real servers throughout."""

from __future__ import annotations

import base64
import io
import json
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from factories import (
    LOG_SIGNER,
    TMS,
    Live,
    claim,
    environment,
    evidence,
    free_port,
    fresh_database,
    live_server,
    members,
    nip98_auth,
    request,
    settings,
    terms,
)
from mcp import Client
from mcp_helpers import Caller, approve

from tms.cli.receipts import verify_receipt
from tms.nostr.events import SecretKey
from tms.tlog.cosignature import CosignerKey
from tms.tlog.note import NoteVerifier
from tms.tlog.receipt import HEADER, Receipt, check_receipt

pytestmark = pytest.mark.anyio

SLUG = "lab"
KEY = LOG_SIGNER.verifier().encode()


@dataclass(frozen=True)
class World:
    live: Live
    owner: SecretKey
    member: SecretKey
    stranger: SecretKey
    ids: list[str]  # the evidence, then three claims


@pytest.fixture(scope="module")
def world(pg_server_url: str, template_url: str) -> Iterator[World]:
    owner, member, stranger = SecretKey.generate(), SecretKey.generate(), SecretKey.generate()
    with fresh_database(pg_server_url, template_url) as database, live_server(database) as live:
        approve(database, owner, stranger)
        caller = Caller(live)
        doc = evidence(owner, SLUG, "Serum DAO activity was measured in 60 adults.")
        claims = [claim(owner, SLUG, f"Claim number {i}.") for i in range(3)]
        try:
            caller.publish(terms(owner), members(owner, SLUG, [member.pubkey]), doc, *claims)
            caller.publish(terms(stranger), claim(stranger, "elsewhere", "Not here."))
        finally:
            caller.close()
        yield World(live, owner, member, stranger, [doc["id"], *(c["id"] for c in claims)])


def _get(live: Live, key: SecretKey | None, path: str) -> httpx.Response:
    url = live.url + path
    headers = {} if key is None else nip98_auth(key, url)
    return httpx.get(url, headers=headers, timeout=30)


def _verify(
    tmp_path: Path, event: str, text: str, *, key: str | None = KEY, policy: Path | None = None
) -> tuple[int, str]:
    path = tmp_path / "r.tlog-proof"
    path.write_text(text)
    out = io.StringIO()
    code = verify_receipt(event, str(path), key, None if policy is None else str(policy), out)
    return code, out.getvalue()


def test_a_member_gets_a_receipt_that_checks_offline(world: World, tmp_path: Path) -> None:
    claim_id = world.ids[2]
    response = _get(world.live, world.member, f"/c/{SLUG}/receipt/{claim_id}")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "text/plain; charset=utf-8"
    assert response.headers["content-disposition"] == (
        f'attachment; filename="{claim_id[:16]}.tlog-proof"'
    )
    assert response.headers["tms-quorum"] == "no policy"
    text = response.text
    lines = text.split("\n")
    assert lines[0] == HEADER == "c2sp.org/tlog-proof@v1"
    assert lines[1].startswith("extra ")
    assert json.loads(base64.b64decode(lines[1][6:]))["id"] == claim_id
    # the members list, the evidence, then the claims: the second claim is entry 3 of 5
    assert lines[2] == "index 3"
    receipt = Receipt.parse(text)
    assert receipt.note.startswith(f"127.0.0.1/c/{SLUG}\n5\n")
    assert len(receipt.path) == 3  # a tree of 5 leaves: leaf 3's path has three hashes

    code, said = _verify(tmp_path, claim_id, text)
    assert code == 0, said
    assert said.splitlines() == [
        f"format: ok ({HEADER})",
        f"event: ok (id {claim_id}, signed by {world.owner.pubkey})",
        f"log signature: ok (127.0.0.1/c/{SLUG}, 5 entries)",
        f"entry: ok (kind 4702, filed in collection '{SLUG}')",
        "inclusion: ok (entry 3 of 5)",
        f"the receipt holds: event {claim_id} is entry 3 of 127.0.0.1/c/{SLUG}",
    ]
    # The event may also be given as a file of its JSON, and the log key as a file.
    event_file = tmp_path / "event.json"
    event_file.write_bytes(base64.b64decode(lines[1][6:]))
    key_file = tmp_path / "log-key"
    key_file.write_text(KEY + "\n")
    code, said = _verify(tmp_path, str(event_file), text, key=str(key_file))
    assert code == 0, said
    verified = check_receipt(text, event_id=claim_id, log_keys=[NoteVerifier.parse(KEY)])
    assert (verified.index, verified.checkpoint.size) == (3, 5)


def test_one_changed_byte_is_refused_naming_the_step(world: World, tmp_path: Path) -> None:
    evidence_id = world.ids[0]
    text = _get(world.live, world.member, f"/c/{SLUG}/receipt/{evidence_id}").text
    lines = text.split("\n")
    event = bytearray(base64.b64decode(lines[1][6:]))

    # one byte of the event: its content no longer hashes to its id
    at = event.index(b"Serum")
    event[at] = ord("s")
    changed = "\n".join([lines[0], "extra " + base64.b64encode(bytes(event)).decode(), *lines[2:]])
    code, said = _verify(tmp_path, evidence_id, changed)
    assert code == 1
    assert said.splitlines() == [
        "format: ok",
        "FAILED event: id does not match the sha256 of the serialized event "
        "(was content re-serialized after signing?)",
        "the receipt does not hold: the event step failed",
    ]
    # the same event given as a file, beside an untouched receipt
    (tmp_path / "changed.json").write_bytes(bytes(event))
    code, said = _verify(tmp_path, str(tmp_path / "changed.json"), text)
    assert code == 1
    assert "FAILED event: the receipt carries another event than the one given" in said
    # another id than the receipt's event
    code, said = _verify(tmp_path, world.ids[1], text)
    assert code == 1
    assert f"FAILED event: the event's id is {evidence_id}, not {world.ids[1]}" in said

    # one byte of the inclusion path
    path_line = next(i for i, line in enumerate(lines) if i > 2 and line)
    hashed = bytearray(base64.b64decode(lines[path_line]))
    hashed[0] ^= 1
    bad_path = [*lines]
    bad_path[path_line] = base64.b64encode(bytes(hashed)).decode()
    code, said = _verify(tmp_path, evidence_id, "\n".join(bad_path))
    assert code == 1
    assert said.splitlines()[:4] == [
        "format: ok",
        "event: ok",
        "log signature: ok",
        "entry: ok",
    ]
    assert said.splitlines()[4].startswith("FAILED inclusion: the path does not lead from entry 1")

    # one byte of the checkpoint: its size
    cut = text.index("\n\n") + 2
    note = text[cut:]
    assert note.split("\n")[1] == "5"
    forged = text[:cut] + note.replace("\n5\n", "\n6\n", 1)
    code, said = _verify(tmp_path, evidence_id, forged)
    assert code == 1
    assert f"FAILED log signature: the note's signature by {LOG_SIGNER.name} does not verify" in (
        said
    )
    # another log key altogether
    other = LOG_SIGNER.generate(LOG_SIGNER.name).verifier().encode()
    code, said = _verify(tmp_path, evidence_id, text, key=other)
    assert code == 1
    assert "FAILED log signature: the note carries no signature by the key" in said
    # a receipt that is not one
    code, said = _verify(tmp_path, evidence_id, text.replace(HEADER, "c2sp.org/tlog-proof@v2"))
    assert code == 1
    assert said.splitlines() == [
        f"FAILED format: the first line is not {HEADER}",
        "the receipt does not hold: the format step failed",
    ]
    # no key at all: the command cannot run
    code, said = _verify(tmp_path, evidence_id, text, key=None)
    assert code == 2


def test_a_non_member_is_refused_as_the_export_refuses(world: World) -> None:
    claim_id = world.ids[1]
    for key in (world.stranger, None):
        receipt = _get(world.live, key, f"/c/{SLUG}/receipt/{claim_id}")
        export = _get(world.live, key, f"/c/{SLUG}/export.jsonl")
        assert receipt.status_code == export.status_code, (receipt.text, export.text)
        assert receipt.status_code in (401, 404)
        assert receipt.json() == export.json()
        assert "tlog-proof" not in receipt.text
    missing = _get(world.live, world.stranger, f"/c/nosuch/receipt/{claim_id}")
    assert missing.json() == _get(world.live, world.stranger, "/c/nosuch/export.jsonl").json()
    # a member asking for an event of another collection, or for no id, gets a 404
    for event_id in ("0" * 64, "not-an-id"):
        absent = _get(world.live, world.member, f"/c/{SLUG}/receipt/{event_id}")
        assert absent.status_code == 404
        assert absent.json()["error"].startswith("no event")


async def test_get_receipt_through_the_mcp_sdk(world: World, tmp_path: Path) -> None:
    claim_id = world.ids[3]

    async def call(key: SecretKey, **args: Any) -> Any:
        async with Client(world.live.mcp) as client:
            signed = request(key, "get_receipt", **args)
            return await client.call_tool("get_receipt", {"request": signed})

    result = await call(world.member, collection=SLUG, id=claim_id)
    assert not result.is_error, result.content[0].text
    info = result.structured_content["result"]
    assert {k: v for k, v in info.items() if k != "receipt"} == {
        "collection": SLUG,
        "event_id": claim_id,
        "leaf_index": 4,
        "tree_size": 5,
        "witnessed_by": [],
        "quorum": None,
    }
    http = _get(world.live, world.member, f"/c/{SLUG}/receipt/{claim_id}").text
    assert info["receipt"] == http
    code, said = _verify(tmp_path, claim_id, info["receipt"])
    assert code == 0, said

    missing = await call(world.member, collection=SLUG, id="0" * 64)
    assert not missing.is_error
    assert missing.structured_content == {"result": None}
    refused = await call(world.stranger, collection=SLUG, id=claim_id)
    assert refused.is_error
    assert refused.content[0].text.startswith(f"not a member of collection '{SLUG}' (or no such")


def test_tms_receipt_makes_the_same_receipt_from_the_database(world: World, tmp_path: Path) -> None:
    claim_id = world.ids[1]
    env = environment(TMS_DATABASE_URL=world.live.database_url)
    made = subprocess.run(
        [TMS, "receipt", SLUG, claim_id],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert made.returncode == 0, made.stderr
    assert made.stdout == _get(world.live, world.member, f"/c/{SLUG}/receipt/{claim_id}").text
    (tmp_path / "r.tlog-proof").write_text(made.stdout)
    checked = subprocess.run(
        [TMS, "verify-receipt", claim_id, str(tmp_path / "r.tlog-proof"), "--key", KEY],
        env=environment(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "inclusion: ok (entry 2 of 5)" in checked.stdout
    unknown = subprocess.run(
        [TMS, "receipt", SLUG, "0" * 64],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert unknown.returncode == 1
    assert f"no event '{'0' * 64}' in collection '{SLUG}'" in unknown.stderr


def test_a_cosigned_receipt_and_the_policy_quorum(
    pg_server_url: str, template_url: str, tmp_path: Path
) -> None:
    witness = CosignerKey.generate("w.example/witness")
    (tmp_path / "logs").write_text(f"log 127.0.0.1/c/ {KEY}\n")
    port_w = free_port()
    policy = tmp_path / "policy"
    policy.write_text(
        f"log {KEY}\n"
        f"witness W {witness.verifier().encode()} http://127.0.0.1:{port_w}/witness\nquorum W\n"
    )
    config_w = settings(
        TMS_EMBED="off", TMS_WITNESS_LOGS=str(tmp_path / "logs"), TMS_WITNESS_KEY=witness.encode()
    )
    config_a = settings(TMS_EMBED="off", TMS_WITNESS_POLICY=str(policy))
    owner = SecretKey.generate()
    first = [claim(owner, SLUG, f"c {i}") for i in range(3)]
    later = claim(owner, SLUG, "later")
    with (
        fresh_database(pg_server_url, template_url) as db_w,
        fresh_database(pg_server_url, template_url) as db_a,
    ):
        w = live_server(db_w, config_w, port=port_w)
        w.__enter__()
        try:
            with live_server(db_a, config_a) as a:
                approve(db_a, owner)
                caller = Caller(a)
                try:
                    caller.publish(terms(owner), *first)
                    url = f"{a.url}/c/{SLUG}/checkpoint"
                    deadline = time.monotonic() + 30
                    while True:
                        shown = httpx.get(url, headers=nip98_auth(owner, url), timeout=10)
                        if shown.headers["tms-quorum"] == "met" and "\n3\n" in shown.text:
                            break
                        assert time.monotonic() < deadline, shown.headers
                        time.sleep(0.1)
                    cosigned = _get(a, owner, f"/c/{SLUG}/receipt/{first[1]['id']}")
                    w.__exit__(None, None, None)  # the witness goes down
                    caller.publish(later)
                finally:
                    caller.close()
                uncosigned = _get(a, owner, f"/c/{SLUG}/receipt/{later['id']}")
                still = _get(a, owner, f"/c/{SLUG}/receipt/{first[1]['id']}")
        finally:
            w.__exit__(None, None, None)

    assert cosigned.headers["tms-witnessed-by"] == "W"
    assert cosigned.headers["tms-quorum"] == "met"
    note = cosigned.text[cosigned.text.index("\n\n") + 2 :]
    assert note == shown.text  # the checkpoint /checkpoint serves, cosignature and all
    assert f"\n— {witness.name} " in note
    code, said = _verify(tmp_path, first[1]["id"], cosigned.text, policy=policy)
    assert code == 0, said
    assert said.splitlines()[-2] == "quorum: ok (witness W; cosigned by W)"
    # the policy's log line is key enough
    code, said = _verify(tmp_path, first[1]["id"], cosigned.text, key=None, policy=policy)
    assert code == 0, said
    # a cosignature changed by one byte is a forged line: refused, naming the witness
    line = next(x for x in note.split("\n") if x.startswith(f"— {witness.name} "))
    raw = bytearray(base64.b64decode(line.split(" ")[2]))
    raw[-1] ^= 1
    forged_line = f"— {witness.name} {base64.b64encode(bytes(raw)).decode()}"
    code, said = _verify(
        tmp_path, first[1]["id"], cosigned.text.replace(line, forged_line), policy=policy
    )
    assert code == 1
    assert "FAILED quorum: witness W: the cosignature by witness w.example/witness does not" in (
        said
    )

    # an event newer than any cosigned checkpoint: proved against the latest signed one, which
    # the policy refuses; its log signature and inclusion hold all the same
    assert uncosigned.headers["tms-quorum"] == "not met"
    code, said = _verify(tmp_path, later["id"], uncosigned.text, policy=policy)
    assert code == 1
    assert said.splitlines()[-2] == (
        "FAILED quorum: the checkpoint is cosigned by no witness of the policy; the policy "
        "needs witness W"
    )
    assert "inclusion: ok" in said
    code, said = _verify(tmp_path, later["id"], uncosigned.text)
    assert code == 0, said
    # the earlier event's receipt still carries the cosigned checkpoint
    assert still.text == cosigned.text
