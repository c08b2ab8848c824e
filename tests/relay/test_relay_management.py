"""NIP-86 relay management through clients nobody here wrote: welshman's relay management as
published (what Flotilla speaks it with), and nostr-tools' NIP-98 signing each JSON-RPC call
(its body hashed into the `payload` tag), POSTed to a live server's relay URLs.
On a collection's URL its owner allows, lists and unallows a key; a member, a stranger, a
forged body and a replayed authorization are refused; each change is on the members page, in
the export (which `tms verify-export` passes) and in the copy `tms mirror` keeps. On `/` the
operator (TMS_OPERATOR_KEYS) approves keys, blocks and unblocks an address, and renames the
relay; NIP-11 lists 86 where it works."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from factories import (
    APPROVED,
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
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from tms.ledger.service import Ledger
from tms.nostr.nip19 import npub_encode
from tms.rules.admission import OPERATOR
from tms.store.database import open_pool

RUN_SECONDS = 120
SLUG = "nip"
TARGET = MEMBER2  # the key the owner lets in and out
WELSHMAN = "wel"  # the collection welshman's client manages
FAR = "203.0.113.7"  # an address the operator blocks (sent through a trusted proxy's header)


@pytest.fixture(scope="module")
def live(pg_server_url: str, template_url: str) -> Iterator[Live]:
    async def seed(url: str) -> None:
        pool = await open_pool(url, min_size=1, max_size=2)
        try:
            ledger = Ledger(pool)
            await ledger.approve([OWNER.pubkey])
            batch = [
                terms(OWNER),
                members(OWNER, SLUG, [MEMBER.pubkey]),
                members(OWNER, WELSHMAN, [MEMBER.pubkey]),
                terms(MEMBER),
            ]
            await ledger.submit(batch, origin=OPERATOR)
        finally:
            await pool.close()

    with fresh_database(pg_server_url, template_url, "tms_nip86") as url:
        asyncio.run(seed(url))
        env = settings(
            TMS_EMBED="off",
            TMS_OPERATOR_KEYS=npub_encode(APPROVED.pubkey),
            TMS_TRUSTED_PROXIES="127.0.0.1/32",
        )
        with live_server(url, env) as server:
            yield server


def calls(
    live: Live, packages: Path, *wanted: dict[str, Any], script: str = "nip86_calls.mjs"
) -> dict[str, Any]:
    shutil.copyfile(ASSETS / script, packages / script)
    result = subprocess.run(
        ["node", script],
        cwd=packages,
        env=environment(RELAY_BASE=live.url, CALLS=json.dumps(list(wanted))),
        capture_output=True,
        text=True,
        timeout=RUN_SECONDS,
    )
    assert result.returncode == 0, result.stderr
    seen: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return seen


def call(
    name: str, key: Any, method: str, *params: str, path: str = f"/c/{SLUG}", **more: Any
) -> dict[str, Any]:
    return {
        "name": name,
        "path": path,
        "key": key.secret.hex(),
        "method": method,
        "params": list(params),
        **more,
    }


def export(live: Live) -> list[dict[str, Any]]:
    url = f"{live.url}/c/{SLUG}/export.jsonl?checkpoint=1"
    response = httpx.get(url, headers=nip98_auth(OWNER, url), timeout=60)
    assert response.status_code == 200, response.text
    return [json.loads(line) for line in response.text.splitlines()]


def verified(path: Path, *kept: str) -> subprocess.CompletedProcess[str]:
    key = LOG_SIGNER.verifier().encode()
    return subprocess.run(
        [str(BIN / "tms"), "verify-export", str(path), *kept, "--key", key],
        env=environment(),
        capture_output=True,
        text=True,
        timeout=RUN_SECONDS,
    )


def mirrored(live: Live, directory: Path) -> subprocess.CompletedProcess[str]:
    relay = live.url.replace("http://", "ws://") + f"/c/{SLUG}"
    return subprocess.run(
        [str(BIN / "tms"), "mirror", relay, "--dir", str(directory), "--once"],
        env=environment(TMS_NSEC=MEMBER.secret.hex()),
        capture_output=True,
        text=True,
        timeout=RUN_SECONDS,
    )


def members_page(live: Live) -> str:
    with httpx.Client(base_url=live.url) as client:
        challenge = client.get("/login/challenge").json()
        signed = nip98_auth(OWNER, challenge["url"], "POST")
        answer = client.post(challenge["url"], headers={**signed, "Origin": live.url})
        assert answer.status_code == 200, answer.text
        client.cookies = answer.cookies
        page = client.get(f"/c/{SLUG}/members")
        assert page.status_code == 200
        return page.text


def test_the_owner_manages_members_and_every_change_is_verifiable(
    live: Live, js_current_packages: Path, tmp_path: Path
) -> None:
    target = TARGET.pubkey
    seen = calls(
        live,
        js_current_packages,
        call("supported", OWNER, "supportedmethods"),
        call("allow", OWNER, "allowpubkey", target, replay=True),
        call("list", OWNER, "listallowedpubkeys"),
        call("member", MEMBER, "allowpubkey", STRANGER.pubkey),
        call("stranger", STRANGER, "allowpubkey", STRANGER.pubkey),
        call("forged", OWNER, "allowpubkey", target, forge=[STRANGER.pubkey]),
        call("bad signature", OWNER, "allowpubkey", STRANGER.pubkey, badSig=True),
        call("unknown", OWNER, "banpubkey", STRANGER.pubkey),
    )
    assert seen["supported"] == {
        "status": 200,
        "answer": {
            "result": [
                "supportedmethods",
                "allowpubkey",
                "unallowpubkey",
                "listallowedpubkeys",
                "createinvite",
            ]
        },
    }
    assert seen["allow"] == {"status": 200, "answer": {"result": True}}
    assert seen["allow again"]["status"] == 400
    assert "already used" in seen["allow again"]["answer"]["error"]
    assert seen["list"]["answer"]["result"] == [
        {"pubkey": OWNER.pubkey},
        *sorted(({"pubkey": k} for k in (MEMBER.pubkey, target)), key=lambda d: d["pubkey"]),
    ]
    assert seen["member"]["status"] == 403
    assert seen["member"]["answer"] == {
        "result": None,
        "error": f"only the owner of collection '{SLUG}' manages its members",
    }
    assert seen["stranger"]["status"] == 404  # as a collection that does not exist
    assert seen["stranger"]["answer"]["result"] is None
    assert seen["forged"]["status"] == 401
    assert "payload" in seen["forged"]["answer"]["error"]
    assert seen["bad signature"]["status"] == 401
    assert "signature does not verify" in seen["bad signature"]["answer"]["error"]
    assert seen["unknown"]["answer"]["result"] is None
    assert "method not supported: 'banpubkey'" in seen["unknown"]["answer"]["error"]

    assert npub_encode(target) in members_page(live)
    lines = export(live)
    changes = [line for line in lines if line.get("kind") == 27235]
    assert len(changes) == 1 and json.loads(changes[0]["body"]) == {
        "method": "allowpubkey",
        "params": [target],
    }
    first = tmp_path / "first.jsonl"
    first.write_text(
        "".join(
            json.dumps(line, ensure_ascii=False, separators=(",", ":")) + "\n" for line in lines
        )
    )
    checked = verified(first)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    copy = tmp_path / "copy"
    synced = mirrored(live, copy)
    assert synced.returncode == 0, synced.stdout + synced.stderr
    assert '"kind":27235' in (copy / "copy.jsonl").read_text()

    seen = calls(
        live,
        js_current_packages,
        call("unallow", OWNER, "unallowpubkey", target),
        call("owner", OWNER, "unallowpubkey", OWNER.pubkey),
        call("list", OWNER, "listallowedpubkeys"),
    )
    assert seen["unallow"] == {"status": 200, "answer": {"result": True}}
    assert "always belongs" in seen["owner"]["answer"]["error"]
    assert seen["list"]["answer"]["result"] == [{"pubkey": OWNER.pubkey}, {"pubkey": MEMBER.pubkey}]
    assert npub_encode(target) not in members_page(live)
    synced = mirrored(live, copy)
    assert synced.returncode == 0, synced.stdout + synced.stderr
    assert (copy / "copy.jsonl").read_text().count('"kind":27235') == 2
    checked = verified(copy / "copy.jsonl", "--checkpoint", str(copy / "state.json"))
    assert checked.returncode == 0, checked.stdout + checked.stderr


async def relay_refused(live: Live, address: str) -> bool:
    """Whether a relay connection from `address` (through the trusted proxy) is turned away."""
    url = live.url.replace("http://", "ws://") + f"/c/{SLUG}"
    try:
        async with connect(url, additional_headers={"X-Forwarded-For": address}) as ws:
            await ws.recv()
    except (InvalidStatus, ConnectionClosed):
        return True
    return False


def test_the_operator_manages_the_server_from_the_root_url(
    live: Live, js_current_packages: Path
) -> None:
    root = {"path": "/"}
    seen = calls(
        live,
        js_current_packages,
        call("supported", APPROVED, "supportedmethods", **root),
        call("owner", OWNER, "allowpubkey", STRANGER.pubkey, **root),
        call("approve", APPROVED, "allowpubkey", STRANGER.pubkey, **root),
        call("approved", APPROVED, "listallowedpubkeys", **root),
        call("block", APPROVED, "blockip", FAR, "probing", **root),
        call("blocked", APPROVED, "listblockedips", **root),
        call("from far", APPROVED, "listblockedips", forwarded=FAR, **root),
        call("rename", APPROVED, "changerelayname", "Evidence desk", **root),
        call("describe", APPROVED, "changerelaydescription", "Our ledger.", **root),
    )
    assert "blockip" in seen["supported"]["answer"]["result"]
    assert seen["owner"]["status"] == 403
    assert seen["approve"]["answer"] == {"result": True}
    assert {"pubkey": STRANGER.pubkey} in seen["approved"]["answer"]["result"]
    assert seen["blocked"]["answer"]["result"] == [{"ip": f"{FAR}/32", "reason": "probing"}]
    assert seen["from far"]["status"] == 403
    assert "blocked" in seen["from far"]["answer"]["error"]
    assert asyncio.run(relay_refused(live, FAR))  # the relay turns it away too
    # A browser's preflight, as a Nostr app in a page makes it before the call.
    preflight = httpx.options(
        live.url + "/",
        headers={
            "Origin": "https://app.example",
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization, content-type",
        },
    )
    assert preflight.status_code == 204
    assert preflight.headers["access-control-allow-origin"] == "*"
    assert "Authorization" in preflight.headers["access-control-allow-headers"]
    info = httpx.get(live.url, headers={"Accept": "application/nostr+json"}).json()
    assert (info["name"], info["description"]) == ("Evidence desk", "Our ledger.")
    assert 86 in info["supported_nips"]
    page = httpx.get(f"{live.url}/c/{SLUG}", headers={"Accept": "application/nostr+json"}).json()
    assert 86 in page["supported_nips"]

    seen = calls(
        live,
        js_current_packages,
        call("unblock", APPROVED, "unblockip", FAR, **root),
        call("from far", APPROVED, "listblockedips", forwarded=FAR, **root),
        call("revoke", APPROVED, "unallowpubkey", STRANGER.pubkey, **root),
        call("approved", APPROVED, "listallowedpubkeys", **root),
    )
    assert seen["from far"] == {"status": 200, "answer": {"result": []}}
    assert not asyncio.run(relay_refused(live, FAR))
    assert {"pubkey": STRANGER.pubkey} not in seen["approved"]["answer"]["result"]


def test_welshman_manages_members_unchanged(live: Live, welshman_packages: Path) -> None:
    """The client Flotilla speaks NIP-86 with, as published: the owner allows, lists and
    unallows; a member is refused in NIP-86's error shape."""
    path = {"path": f"/c/{WELSHMAN}"}
    target = TARGET.pubkey
    seen = calls(
        live,
        welshman_packages,
        call("allow", OWNER, "allowpubkey", target, **path),
        call("list", OWNER, "listallowedpubkeys", **path),
        call("member", MEMBER, "unallowpubkey", target, **path),
        call("unallow", OWNER, "unallowpubkey", target, **path),
        call("after", OWNER, "listallowedpubkeys", **path),
        script="nip86_welshman.mjs",
    )
    assert seen["allow"] == {"result": True}
    assert {"pubkey": target} in seen["list"]["result"]
    assert seen["member"] == {
        "result": None,
        "error": f"only the owner of collection '{WELSHMAN}' manages its members",
    }
    assert seen["unallow"] == {"result": True}
    assert seen["after"]["result"] == [{"pubkey": OWNER.pubkey}, {"pubkey": MEMBER.pubkey}]
