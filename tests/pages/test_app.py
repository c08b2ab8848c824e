"""The HTTP app over a real database: through httpx's ASGI transport (lifespan run), and through a
real uvicorn server on a free local port for the streaming export."""

from __future__ import annotations

import base64
import hashlib
import json
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

import anyio
import httpx
import pytest
from factories import (
    allow_connections,
    database_name,
    live_server,
    nip98_auth,
    nip98_header,
    settings,
    signed,
    terms,
)
from publishing import publish, readable

from tms.app import create_app
from tms.ledger.access import Access
from tms.ledger.read.export import Exporter
from tms.ledger.service import Ledger
from tms.nostr.events import Event, SecretKey
from tms.rules.kinds import validate_content
from tms.rules.terms import current_terms
from tms.search.search import VECTORS_OFF, VECTORS_STARTING

pytestmark = pytest.mark.anyio

SETTINGS = settings()
TESTSERVER = "http://testserver"


def export_url(slug: str, origin: str = TESTSERVER) -> str:
    return f"{origin}/c/{slug}/export.jsonl"


@dataclass
class World:
    owner: SecretKey
    member: SecretKey
    outsider: SecretKey


@pytest.fixture
async def world(ledger: Ledger) -> World:
    """`mcas`, owned by `owner`, with `member` on its list and writing in it; `outsider` (approved)
    owns `other` and is not a member of `mcas`."""
    owner, member, outsider = SecretKey.generate(), SecretKey.generate(), SecretKey.generate()
    await ledger.approve([owner.pubkey, outsider.pubkey])
    await publish(
        ledger,
        terms(owner),
        signed(owner, 0, {"name": "owner", "about": "a person"}),
        signed(owner, 4702, {"collection": "mcas", "text": "A claim."}),
        signed(owner, 4705, {"collection": "mcas", "members": [member.pubkey]}),
        terms(outsider),
        signed(outsider, 4702, {"collection": "other", "text": "Elsewhere."}),
    )
    await publish(
        ledger,
        terms(member),
        signed(member, 4702, {"collection": "mcas", "text": "A member's claim."}),
    )
    return World(owner, member, outsider)


@pytest.fixture
async def client(db_url: str) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(SETTINGS, database_url=db_url)
    transport = httpx.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url=TESTSERVER) as client,
    ):
        yield client


async def expected_lines(ledger: Ledger, slug: str) -> list[str]:
    return [
        line
        async for line in Exporter(ledger.pool).lines(await readable(Exporter(ledger.pool), slug))
    ]


# --- /healthz and /terms -----------------------------------------------------------------------


async def test_healthz_reports_a_reachable_database(client: httpx.AsyncClient) -> None:
    response = await client.get("/healthz")
    assert response.status_code == 200
    body = response.json()
    assert body == {"ok": True, "database": "reachable", "vectors": body["vectors"]}
    assert body["vectors"] in ("ready", VECTORS_OFF, VECTORS_STARTING)


async def test_healthz_reports_an_unreachable_database_and_recovers(
    client: httpx.AsyncClient, db_url: str, pg_server_url: str
) -> None:
    await allow_connections(pg_server_url, db_url, False)
    try:
        response = await client.get("/healthz")
        assert response.status_code == 503
        body = response.json()
        assert body["ok"] is False
        assert body["database"].startswith("unreachable: ")
    finally:
        await allow_connections(pg_server_url, db_url, True)
    response = await client.get("/healthz")
    assert (response.status_code, response.json()["ok"]) == (200, True)


async def test_terms_are_served_with_the_hash_of_their_text(client: httpx.AsyncClient) -> None:
    response = await client.get("/terms")
    assert response.status_code == 200
    body = response.json()
    assert set(body) == {"version", "sha256", "text"}
    assert body["version"] == "1"
    assert body["sha256"] == hashlib.sha256(body["text"].encode("utf-8")).hexdigest()
    assert body == current_terms()


# --- export ------------------------------------------------------------------------------------


@pytest.mark.parametrize("who", ["owner", "member"])
async def test_members_export_every_event_as_stored(
    client: httpx.AsyncClient, ledger: Ledger, world: World, who: str
) -> None:
    key = getattr(world, who)
    response = await client.get("/c/mcas/export.jsonl", headers=nip98_auth(key, export_url("mcas")))
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/jsonl"
    assert response.headers["content-disposition"] == 'attachment; filename="mcas.jsonl"'
    assert response.headers["cache-control"] == "no-store"
    assert response.text.endswith("\n")
    lines = response.text.splitlines()
    assert lines == await expected_lines(ledger, "mcas")
    events = [Event.from_json(line) for line in lines]
    for event in events:
        event.verify()
        validate_content(event)
    # the collection's own events, with the terms and profile of each key that wrote in it
    assert [e.kind for e in events] == [4706, 0, 4702, 4705, 4706, 4702]
    assert {e.pubkey for e in events} == {world.owner.pubkey, world.member.pubkey}


async def test_head_answers_like_get_without_a_body(
    client: httpx.AsyncClient, world: World
) -> None:
    url = export_url("mcas")
    response = await client.head(
        "/c/mcas/export.jsonl", headers=nip98_auth(world.owner, url, "HEAD")
    )
    assert response.status_code == 200
    assert response.content == b""
    assert response.headers["content-type"] == "application/jsonl"


async def test_not_a_member_missing_and_invalid_slugs_look_the_same(
    client: httpx.AsyncClient, world: World
) -> None:
    answers = []
    for path in [
        "/c/mcas/export.jsonl",  # exists, but not the outsider's
        "/c/nope/export.jsonl",  # does not exist
        "/c/UPPER/export.jsonl",  # cannot exist
        f"/c/{'a' * 65}/export.jsonl",
        "/c/a%2Fb/export.jsonl",
        "/c/a/b/export.jsonl",
        "/c//export.jsonl",
    ]:
        response = await client.get(path, headers=nip98_auth(world.outsider, TESTSERVER + path))
        answers.append((response.status_code, response.headers.raw, response.content))
    assert answers[0][0] == 404
    assert answers[0][2] == b'{"error":"no such collection"}'
    assert all(answer == answers[0] for answer in answers)
    # while the outsider's own collection is theirs to export
    own = await client.get(
        "/c/other/export.jsonl", headers=nip98_auth(world.outsider, export_url("other"))
    )
    assert own.status_code == 200
    assert [Event.from_json(line).kind for line in own.text.splitlines()] == [4706, 4702]


async def test_a_signed_url_under_tms_base_url(db_url: str, world: World) -> None:
    app = create_app(settings(TMS_BASE_URL="https://tms.example.org/"), database_url=db_url)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=TESTSERVER) as client,
    ):
        public = "https://tms.example.org/c/mcas/export.jsonl"
        ok = await client.get("/c/mcas/export.jsonl", headers=nip98_auth(world.owner, public))
        assert ok.status_code == 200
        local = await client.get(
            "/c/mcas/export.jsonl", headers=nip98_auth(world.owner, export_url("mcas"))
        )
        assert local.status_code == 401
        assert f"but this request's URL is {public!r}" in local.json()["error"]


def tampered(key: SecretKey, url: str) -> dict:
    event = key.sign(27235, "", int(time.time()), [["u", url], ["method", "GET"]]).to_dict()
    event["content"] = "changed"
    return {"Authorization": "Nostr " + base64.b64encode(json.dumps(event).encode()).decode()}


async def test_every_authentication_failure_is_a_401_naming_it(
    client: httpx.AsyncClient, world: World
) -> None:
    url = export_url("mcas")
    key = world.owner
    now = int(time.time())
    cases = {
        "missing Authorization header": {},
        "its scheme is 'Bearer'": {"Authorization": "Bearer abc"},
        "the event is not valid base64": {"Authorization": "Nostr %%%"},
        "event is not valid JSON": {"Authorization": "Nostr bm90IGpzb24="},
        "id does not match": tampered(key, url),
        "must be kind 27235, not kind 1": {
            "Authorization": nip98_header(key.sign(1, "", now, [["u", url], ["method", "GET"]]))
        },
        "more than 60s from server time": nip98_auth(key, url, created_at=now - 120),
        "no 'u' tag": {
            "Authorization": nip98_header(key.sign(27235, "", now, [["method", "GET"]]))
        },
        f"but this request's URL is {url!r}": nip98_auth(key, export_url("mcas", "http://other")),
        "no 'method' tag": {"Authorization": nip98_header(key.sign(27235, "", now, [["u", url]]))},
        "'method' tag is 'POST', but this request's method is 'GET'": nip98_auth(key, url, "POST"),
    }
    for fragment, headers in cases.items():
        response = await client.get("/c/mcas/export.jsonl", headers=headers)
        assert response.status_code == 401, fragment
        assert response.headers["www-authenticate"] == "Nostr"
        assert response.headers["content-type"] == "application/json"
        assert fragment in response.json()["error"]
    # the same 401 whether or not the collection exists: no existence oracle without a key
    missing = await client.get("/c/nope/export.jsonl")
    assert missing.status_code == 401


async def test_unknown_routes_and_methods_answer_json(client: httpx.AsyncClient) -> None:
    response = await client.get("/nope")
    assert (response.status_code, response.json()) == (404, {"error": "not found"})
    response = await client.post("/terms")
    assert (response.status_code, response.json()) == (405, {"error": "method not allowed"})
    assert "GET" in response.headers["allow"]


async def test_an_mcp_server_that_cannot_be_built_says_so_rather_than_starting(
    db_url: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import tms.mcp.server

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("no tools today")

    monkeypatch.setattr(tms.mcp.server, "build_server", broken)
    app = create_app(SETTINGS, database_url=db_url)
    transport = httpx.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url=TESTSERVER) as client,
    ):
        response = await client.post(
            "/mcp",
            json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
            headers={"Accept": "application/json, text/event-stream"},
        )
    assert response.status_code == 503
    said = response.json()["error"]["message"]
    assert said == "MCP is unavailable on this server: no tools today"
    assert "the MCP server could not be built" in caplog.text


async def test_an_unforeseen_error_is_a_bare_500(
    db_url: str, world: World, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async def broken(self: Access, pubkey: str, slug: str) -> bool:
        raise RuntimeError("secret detail")

    monkeypatch.setattr(Access, "can_read", broken)
    app = create_app(SETTINGS, database_url=db_url)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url=TESTSERVER) as client,
    ):
        response = await client.get(
            "/c/mcas/export.jsonl", headers=nip98_auth(world.owner, export_url("mcas"))
        )
    assert response.status_code == 500
    assert response.content == b'{"error":"internal error"}'
    assert "secret detail" in caplog.text  # logged for the operator, never sent


# --- a real uvicorn server ---------------------------------------------------------------------


@pytest.fixture
def origin(db_url: str) -> Iterator[str]:
    """The app under uvicorn (see `factories.live_server`); yields its origin."""
    with live_server(db_url, SETTINGS) as live:
        yield live.url


async def publish_many(ledger: Ledger, owner: SecretKey, count: int) -> None:
    await ledger.approve([owner.pubkey])
    events = [terms(owner)] + [
        signed(owner, 4702, {"collection": "big", "text": f"Claim number {i}."})
        for i in range(count - 1)
    ]
    for start in range(0, len(events), 1000):
        await publish(ledger, *events[start : start + 1000])


async def test_a_big_export_streams_complete_over_real_http(origin: str, ledger: Ledger) -> None:
    owner = SecretKey.generate()
    await publish_many(ledger, owner, 3000)
    url = export_url("big", origin)
    async with httpx.AsyncClient(timeout=30) as http:
        assert (await http.get(f"{origin}/healthz")).json()["ok"] is True
        async with http.stream("GET", url, headers=nip98_auth(owner, url)) as response:
            assert response.status_code == 200
            assert "content-length" not in response.headers  # streamed, not buffered
            assert response.headers["transfer-encoding"] == "chunked"
            chunks = [chunk async for chunk in response.aiter_raw()]
    assert len(chunks) > 1
    lines = b"".join(chunks).decode().splitlines()
    assert len(lines) == 3000
    assert lines == await expected_lines(ledger, "big")
    for line in lines:
        Event.from_json(line).verify()


async def test_a_client_hanging_up_mid_export_frees_its_connection(
    origin: str, ledger: Ledger, db_url: str
) -> None:
    owner = SecretKey.generate()
    await ledger.approve([owner.pubkey])
    text = "Evidence text. " * 70_000  # about 1 MB per event, 20 MB in all
    documents = [
        signed(owner, 4701, {"collection": "big", "text": f"{i} {text}"}) for i in range(20)
    ]
    await publish(ledger, terms(owner), *documents)
    url = export_url("big", origin)
    async with (
        httpx.AsyncClient(timeout=30) as http,
        http.stream("GET", url, headers=nip98_auth(owner, url)) as response,
    ):
        assert response.status_code == 200
        async for _ in response.aiter_raw():
            break  # hang up after the first chunk
    name = database_name(db_url)
    deadline = time.monotonic() + 10
    while True:
        busy = await ledger.pool.fetchval(
            """SELECT count(*) FROM pg_stat_activity
               WHERE datname = $1 AND pid <> pg_backend_pid() AND state <> 'idle'""",
            name,
        )
        if busy == 0:
            break
        assert time.monotonic() < deadline, f"{busy} connections still busy after the hang-up"
        await anyio.sleep(0.05)
