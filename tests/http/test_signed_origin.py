"""NIP-98's URL is this server's own, never the client's `Host` (`tms.http.origin`): a header
signed for another site, replayed here with that site's name in `Host`, is refused on every
NIP-98 route (the export, the login, a plugin's route), as the relay refuses such an AUTH; the
honest header works; with `TMS_BASE_URL` set, only that origin does."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import httpx
import pytest
from factories import OWNER, nip98_auth, settings, signed, terms
from publishing import publish
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from tms.app import create_app
from tms.extension import Auth, Plugin, Route
from tms.ledger.service import Ledger
from tms.plugins.loading import BUILT_IN, Extensions, Loaded

pytestmark = pytest.mark.anyio

SERVER = "http://testserver"  # where the ASGI transport says the server listens
EVIL = "http://evil.example"
PUBLIC = "https://tms.example.org"


async def whoami(request: Request, pubkey: str | None) -> Response:
    return JSONResponse({"who": pubkey})


SIGNED = Plugin("signed", routes=[Route("/me", whoami, auth=Auth.NIP98)])

# One request per NIP-98 route: (client, origin it signs for, extra headers) -> response.
Call = Callable[[httpx.AsyncClient, str, dict[str, str]], Awaitable[httpx.Response]]


async def export(http: httpx.AsyncClient, origin: str, headers: dict[str, str]) -> httpx.Response:
    path = "/c/mcas/export.jsonl"
    return await http.get(path, headers={**nip98_auth(OWNER, origin + path), **headers})


async def plugin_route(
    http: httpx.AsyncClient, origin: str, headers: dict[str, str]
) -> httpx.Response:
    path = "/plugins/signed/me"
    return await http.get(path, headers={**nip98_auth(OWNER, origin + path), **headers})


async def login(http: httpx.AsyncClient, origin: str, headers: dict[str, str]) -> httpx.Response:
    """A fresh challenge's nonce, signed at `origin` (the page's own Origin, so that only the
    signature can refuse it)."""
    nonce = (await http.get("/login/challenge")).json()["nonce"]
    path = f"/login?nonce={nonce}"
    auth = nip98_auth(OWNER, origin + path, "POST")
    return await http.post(
        path, headers={**auth, "Origin": headers.get("Origin", origin), **headers}
    )


ROUTES = pytest.mark.parametrize("call", [export, plugin_route, login])


async def client_for(ledger: Ledger, db_url: str, **env: str) -> AsyncIterator[httpx.AsyncClient]:
    await ledger.approve([OWNER.pubkey])
    await publish(ledger, terms(OWNER), signed(OWNER, 4702, {"collection": "mcas", "text": "A."}))
    config = settings(TMS_EMBED="off", **env)
    extensions = Extensions([Loaded(SIGNED, BUILT_IN)], config, environ={})
    app = create_app(config, database_url=db_url, extensions=extensions)
    transport = httpx.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url=SERVER) as http,
    ):
        yield http


@pytest.fixture
async def client(ledger: Ledger, db_url: str) -> AsyncIterator[httpx.AsyncClient]:
    async for http in client_for(ledger, db_url):
        yield http


@pytest.fixture
async def proxied(ledger: Ledger, db_url: str) -> AsyncIterator[httpx.AsyncClient]:
    async for http in client_for(ledger, db_url, TMS_BASE_URL=PUBLIC):
        yield http


@ROUTES
async def test_a_header_signed_for_another_site_is_refused_whatever_host_says(
    client: httpx.AsyncClient, call: Call
) -> None:
    replayed = await call(client, EVIL, {"Host": "evil.example", "Origin": EVIL})
    assert replayed.status_code == 401, replayed.text
    assert f"this request's URL is '{SERVER}/" in replayed.json()["error"]
    honest = await call(client, SERVER, {})
    assert honest.status_code == 200, honest.text


@ROUTES
async def test_behind_a_proxy_only_the_public_origin_is_signed_for(
    proxied: httpx.AsyncClient, call: Call
) -> None:
    for origin, host in ((SERVER, "testserver"), (EVIL, "evil.example")):
        refused = await call(proxied, origin, {"Host": host, "Origin": PUBLIC})
        assert refused.status_code == 401, refused.text
        assert f"this request's URL is '{PUBLIC}/" in refused.json()["error"]
    honest = await call(proxied, PUBLIC, {})
    assert honest.status_code == 200, honest.text
