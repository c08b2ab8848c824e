"""NIP-43 join and leave on a collection's relay through nostr-tools, unchanged: the owner's
invite (a NIP-86 `createinvite` holding the SHA-256 of a random code), a join with that code
and a leave, each kept in the collection's log (the export, which `tms verify-export` passes)
and seen in the relay's 13534/8000/8001 views; a wrong or used code refused (`restricted:`), a
second join `duplicate:`, a leave replayed on another collection's relay refused."""

from __future__ import annotations

import asyncio
import hashlib
import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from factories import (
    ASSETS,
    BIN,
    LOG_SIGNER,
    MEMBER,
    MEMBER2,
    OWNER,
    STRANGER,
    Live,
    environment,
    fresh_database,
    live_server,
    members,
    nip98_auth,
    settings,
    terms,
)

from tms.ledger.service import Ledger
from tms.rules.admission import OPERATOR
from tms.store.database import open_pool

RUN_SECONDS = 120
CLUB = "club"
OTHER = "elsewhere"
JOINER = STRANGER  # neither approved nor a member of anything before its join
SECOND = MEMBER2  # a member of OTHER only


@pytest.fixture(scope="module")
def live(pg_server_url: str, template_url: str) -> Iterator[Live]:
    async def seed(url: str) -> None:
        pool = await open_pool(url, min_size=1, max_size=2)
        try:
            ledger = Ledger(pool)
            await ledger.approve([OWNER.pubkey])
            batch = [
                terms(OWNER),
                members(OWNER, CLUB, [MEMBER.pubkey]),
                members(OWNER, OTHER, [SECOND.pubkey, JOINER.pubkey]),
            ]
            await ledger.submit(batch, origin=OPERATOR)
        finally:
            await pool.close()

    with fresh_database(pg_server_url, template_url, "tms_nip43_join") as url:
        asyncio.run(seed(url))
        with live_server(url, settings(TMS_EMBED="off")) as server:
            yield server


def joined(live: Live, packages: Path) -> dict[str, Any]:
    script = "relay_nip43_join.mjs"
    shutil.copyfile(ASSETS / script, packages / script)
    result = subprocess.run(
        ["node", "--experimental-websocket", script],
        cwd=packages,
        env=environment(
            RELAY_BASE=live.url,
            CLUB=CLUB,
            OTHER=OTHER,
            OWNER_HEX=OWNER.secret.hex(),
            JOINER_HEX=JOINER.secret.hex(),
            SECOND_HEX=SECOND.secret.hex(),
            WATCHER_HEX=MEMBER.secret.hex(),
        ),
        capture_output=True,
        text=True,
        timeout=RUN_SECONDS,
    )
    assert result.returncode == 0, result.stderr
    seen: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return seen


def export(live: Live, slug: str) -> str:
    url = f"{live.url}/c/{slug}/export.jsonl?checkpoint=1"
    response = httpx.get(url, headers=nip98_auth(OWNER, url), timeout=60)
    assert response.status_code == 200, response.text
    return response.text


def test_nostr_tools_joins_with_an_invite_and_leaves(
    live: Live, js_current_packages: Path, tmp_path: Path
) -> None:
    seen = joined(live, js_current_packages)
    assert 43 in seen["nips"] and 86 in seen["nips"]
    assert seen["invite"] == {"status": 200, "answer": {"result": True}}
    assert seen["asked"] == {"eose": True, "codes": 0}  # the relay holds no code
    assert not seen["wrong"]["ok"] and seen["wrong"]["reason"].startswith("restricted: ")
    assert seen["join"] == {"ok": True, "reason": ""}
    assert seen["again"]["ok"] and seen["again"]["reason"].startswith("duplicate: ")
    assert not seen["used"]["ok"] and seen["used"]["reason"].startswith("restricted: ")
    assert not seen["replayed"]["ok"] and seen["replayed"]["reason"].startswith("auth-required: ")
    assert not seen["replayedWithAuth"]["ok"]
    assert f"'{CLUB}'" in seen["replayedWithAuth"]["reason"]
    assert seen["leave"] == {"ok": True, "reason": ""}

    # The views, live to a member: the join's 8000 and list, then the leave's 8001 and list;
    # the joiner, once in, reads itself on the member list.
    join_id, leave_id = seen["ids"]["join"], seen["ids"]["leave"]
    assert [(v["kind"], v["tags"][1], v["tags"][-1]) for v in seen["views"]] == [
        (8000, ["p", JOINER.pubkey], ["e", join_id]),
        (13534, ["member", OWNER.pubkey], ["e", join_id]),
        (8001, ["p", JOINER.pubkey], ["e", leave_id]),
        (13534, ["member", OWNER.pubkey], ["e", leave_id]),
    ]
    assert ["member", JOINER.pubkey] in seen["views"][1]["tags"]
    assert ["member", JOINER.pubkey] not in seen["views"][3]["tags"]
    assert ["member", JOINER.pubkey] in seen["stored"][0]["tags"]

    # The log: the invite (never the code), the join and the leave, each with what it signed.
    text = export(live, CLUB)
    assert seen["code"] not in text.replace(f'["claim","{seen["code"]}"]', "")
    lines = [json.loads(line) for line in text.splitlines()]
    by_kind = {line.get("kind"): line for line in lines}
    digest = hashlib.sha256(seen["code"].encode()).hexdigest()
    assert json.loads(by_kind[27235]["body"]) == {"method": "createinvite", "params": [digest]}
    assert by_kind[28934]["id"] == join_id and by_kind[28936]["id"] == leave_id
    assert json.loads(by_kind[28936]["body"])["kind"] == 22242
    path = tmp_path / "club.jsonl"
    path.write_text(text, "utf-8")
    checked = subprocess.run(
        [str(BIN / "tms"), "verify-export", str(path), "--key", LOG_SIGNER.verifier().encode()],
        env=environment(),
        capture_output=True,
        text=True,
        timeout=RUN_SECONDS,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    # A member's mirror keeps them, and its copy verifies against the checkpoint it keeps.
    copy = tmp_path / "copy"
    relay = live.url.replace("http://", "ws://") + f"/c/{CLUB}"
    synced = subprocess.run(
        [str(BIN / "tms"), "mirror", relay, "--dir", str(copy), "--once"],
        env=environment(TMS_NSEC=MEMBER.secret.hex()),
        capture_output=True,
        text=True,
        timeout=RUN_SECONDS,
    )
    assert synced.returncode == 0, synced.stdout + synced.stderr
    kept = (copy / "copy.jsonl").read_text()
    assert join_id in kept and leave_id in kept
    checked = subprocess.run(
        [
            *(str(BIN / "tms"), "verify-export", str(copy / "copy.jsonl")),
            *("--checkpoint", str(copy / "state.json")),
            *("--key", LOG_SIGNER.verifier().encode()),
        ],
        env=environment(),
        capture_output=True,
        text=True,
        timeout=RUN_SECONDS,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    # The other collection kept its members: the replayed leave changed nothing there.
    other = [json.loads(line) for line in export(live, OTHER).splitlines()]
    assert not any(line.get("kind") == 28936 for line in other)
