"""The transparency log over HTTP: the public verifier key, and for members the checkpoint,
consistency proofs, tlog-tiles and the export's checkpoint line; a non-member and a missing
collection get the same 404; bad input is a 4xx, never a 500."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass

import anyio
import httpx
import pytest
import rfc6962 as rfc
from factories import LOG_SIGNER, nip98_auth, settings, signed, terms
from publishing import publish, without_log

from tms.app import create_app
from tms.ledger.service import Ledger
from tms.nostr.events import SecretKey
from tms.tlog.audit import audit
from tms.tlog.export_lines import read_line
from tms.tlog.note import LogSigner, NoteVerifier, open_checkpoint

pytestmark = pytest.mark.anyio

SETTINGS = settings()
BASE = "http://testserver"


@dataclass
class World:
    ledger: Ledger
    member: SecretKey
    outsider: SecretKey
    ids: list[str]  # the entries of mcas's log, in order


@pytest.fixture
async def world(ledger: Ledger) -> World:
    """`mcas` with 300 entries over two publishes, signed with the app's own log key."""
    signing = Ledger(ledger.pool, log=LogSigner(LOG_SIGNER, SETTINGS.log_host))
    owner, member, outsider = SecretKey.generate(), SecretKey.generate(), SecretKey.generate()
    await signing.approve([owner.pubkey, outsider.pubkey])
    listed = signed(owner, 4705, {"collection": "mcas", "members": [member.pubkey]})
    claims = [signed(owner, 4702, {"collection": "mcas", "text": f"c{i}"}) for i in range(299)]
    await publish(signing, terms(owner), listed, *claims[:100])
    await publish(signing, *claims[100:])
    await publish(
        signing, terms(outsider), signed(outsider, 4702, {"collection": "x", "text": "."})
    )
    return World(signing, member, outsider, [listed["id"], *(c["id"] for c in claims)])


@pytest.fixture
async def client(db_url: str) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(SETTINGS, database_url=db_url)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE) as client,
    ):
        yield client


async def get(client: httpx.AsyncClient, key: SecretKey, path: str) -> httpx.Response:
    return await client.get(path, headers=nip98_auth(key, BASE + path))


async def test_the_log_key_is_public(client: httpx.AsyncClient) -> None:
    response = await client.get("/log-key")
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/plain; charset=utf-8"
    assert NoteVerifier.parse(response.text) == LOG_SIGNER.verifier()
    assert response.text == LOG_SIGNER.verifier().encode() + "\n"


async def test_a_member_reads_the_checkpoint_and_proofs(
    client: httpx.AsyncClient, world: World
) -> None:
    key = NoteVerifier.parse((await client.get("/log-key")).text)
    response = await get(client, world.member, "/c/mcas/checkpoint")
    assert response.status_code == 200
    assert response.headers["cache-control"] == "no-store"
    checkpoint = open_checkpoint(response.text, key)
    entries = [bytes.fromhex(i) for i in world.ids]
    assert (checkpoint.origin, checkpoint.size) == ("127.0.0.1/c/mcas", 300)
    assert checkpoint.root == rfc.mth(entries)

    proof = (await get(client, world.member, "/c/mcas/consistency?old=101")).json()
    assert (proof["old_size"], proof["new_size"]) == (101, 300)
    assert proof["checkpoint"]["note"] == response.text
    hashes = [base64.b64decode(h) for h in proof["hashes"]]
    assert rfc.verify_consistency(101, 300, rfc.mth(entries[:101]), checkpoint.root, hashes)
    partial = (await get(client, world.member, "/c/mcas/consistency?old=7&new=50")).json()
    assert partial["checkpoint"] is None  # no checkpoint was signed at 50
    for query in ["", "?old=", "?old=-1", "?old=1&new=x", "?old=301", "?old=" + "9" * 30]:
        bad = await get(client, world.member, f"/c/mcas/consistency{query}")
        assert bad.status_code == 400, query
        assert bad.json()["error"]


async def test_tiles_let_standard_tooling_mirror_the_log(
    client: httpx.AsyncClient, world: World
) -> None:
    entries = [bytes.fromhex(i) for i in world.ids]
    full = await get(client, world.member, "/c/mcas/tile/0/000")
    assert full.status_code == 200
    assert full.headers["content-type"] == "application/octet-stream"
    assert "immutable" in full.headers["cache-control"]
    assert full.content == b"".join(rfc.leaf(e) for e in entries[:256])
    partial = await get(client, world.member, "/c/mcas/tile/0/001.p/44")
    assert partial.content == b"".join(rfc.leaf(e) for e in entries[256:300])
    bundle = await get(client, world.member, "/c/mcas/tile/entries/001.p/44")
    assert bundle.content == b"".join(b"\x00\x20" + e for e in entries[256:])
    assert (await get(client, world.member, "/c/mcas/tile/1/000.p/1")).content == rfc.mth(
        entries[:256]
    )
    for path in ["0/001", "0/001.p/45", "0/x000/000", "0/000.p/0", "0/0", "64/000", "x/000", ""]:
        missing = await get(client, world.member, f"/c/mcas/tile/{path}")
        assert (missing.status_code, missing.json()) == (404, {"error": "no such tile"}), path


async def test_non_members_get_what_a_missing_collection_gets(
    client: httpx.AsyncClient, world: World
) -> None:
    paths = ["/checkpoint", "/consistency?old=1", "/tile/0/000", "/export.jsonl?checkpoint=1"]
    for path in paths:
        closed = await get(client, world.outsider, f"/c/mcas{path}")
        missing = await get(client, world.outsider, f"/c/nothing-here{path}")
        odd = await get(client, world.outsider, f"/c/a/b{path}")
        assert closed.status_code == missing.status_code == odd.status_code == 404, path
        assert closed.content == missing.content == odd.content, path
        unsigned = await client.get(f"/c/mcas{path}")
        assert unsigned.status_code == 401


async def test_the_export_can_end_with_its_checkpoint_line(
    client: httpx.AsyncClient, world: World
) -> None:
    response = await get(client, world.member, "/c/mcas/export.jsonl?checkpoint=1")
    assert response.status_code == 200
    lines = response.text.split("\n")[:-1]
    last = json.loads(lines[-1])
    assert last["entries"] == world.ids
    items = [read_line(n, line.encode()) for n, line in enumerate(lines, start=1)]
    report = audit(items, LOG_SIGNER.verifier())
    assert report.ok, report.problems
    plain = await get(client, world.member, "/c/mcas/export.jsonl")
    assert plain.text == "".join(f"{line}\n" for line in lines[:-1])
    bad = await get(client, world.member, "/c/mcas/export.jsonl?checkpoint=yes")
    assert bad.status_code == 400


async def test_the_guide_gives_the_log_key_and_the_command(client: httpx.AsyncClient) -> None:
    guide = (await client.get("/docs.md")).text
    key = LOG_SIGNER.verifier().encode()
    assert f"uv run tms verify-export mcas.jsonl --key '{key}'" in guide
    assert f"```\n{key}\n```" in guide
    assert "127.0.0.1/c/mcas\n5\n" in guide  # the example checkpoint names this server's logs
    assert "| `get_checkpoint` |" in guide and "| `get_consistency` |" in guide


async def test_the_server_builds_the_logs_of_older_collections_at_start_up(
    db_url: str, ledger: Ledger
) -> None:
    owner = SecretKey.generate()
    await ledger.approve([owner.pubkey])
    old = [signed(owner, 4702, {"collection": s, "text": s}) for s in ("a", "b", "c")]
    await without_log(ledger, [terms(owner), *old])
    assert await ledger.pool.fetchval("SELECT count(*) FROM tlog_checkpoints") == 0
    app = create_app(SETTINGS, database_url=db_url)
    async with app.router.lifespan_context(app):
        for _ in range(200):  # in the background, once the server is up
            if await ledger.pool.fetchval("SELECT count(*) FROM tlog_checkpoints") == 3:
                break
            await anyio.sleep(0.05)
    notes = await ledger.pool.fetch("SELECT note FROM tlog_checkpoints ORDER BY collection")
    assert [open_checkpoint(r["note"], LOG_SIGNER.verifier()).size for r in notes] == [1, 1, 1]


async def test_others_states_the_exports_places(client: httpx.AsyncClient, world: World) -> None:
    """`GET /c/<slug>/others` lists what the export's checkpoint line lists, from `held`: the
    profile and terms lines and the entry each follows (issue 33, item 4)."""
    export = await get(client, world.member, "/c/mcas/export.jsonl?checkpoint=1")
    listed = json.loads(export.text.splitlines()[-1])["others"]
    placed = (await get(client, world.member, "/c/mcas/others?held=0&size=300")).json()
    assert placed == {"others": listed} and listed
    later = (await get(client, world.member, "/c/mcas/others?held=300&size=300")).json()
    assert later == {"others": [p for p in listed if p[1] == world.ids[-1]]}
    for query in ["", "?held=1", "?held=x&size=1", "?held=2&size=1", "?held=-1&size=3"]:
        bad = await get(client, world.member, f"/c/mcas/others{query}")
        assert bad.status_code == 400, query
        assert bad.json()["error"]
    closed = await get(client, world.outsider, "/c/mcas/others?held=0&size=1")
    assert closed.status_code == 404
