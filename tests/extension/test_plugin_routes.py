"""Plugins' routes in the real app over a real database: served under /plugins/<name>, each
behind its declared auth (none, the login cookie, NIP-98) checked by the core's rules before the
handler runs, and answered by the app's one table when the handler fails."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import httpx
import pytest
from factories import OWNER, STRANGER, nip98_auth, nip98_header, settings
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from tms.app import create_app
from tms.extension import Auth, Plugin, Route
from tms.ledger.service import Ledger
from tms.plugins.loading import BUILT_IN, Extensions, Loaded

pytestmark = pytest.mark.anyio

ORIGIN = "http://testserver"
CALLS: list[str | None] = []


async def who(request: Request, pubkey: str | None) -> Response:
    CALLS.append(pubkey)
    return JSONResponse({"who": pubkey, "id": request.path_params.get("id")})


async def broken(request: Request, pubkey: str | None) -> Response:
    raise RuntimeError("a plugin's bug")


DEMO = Plugin(
    "demo",
    routes=[
        Route("/open", who),
        Route("/mine/{id}", who, auth=Auth.NIP98),
        Route("/me", who, ("GET", "POST"), auth=Auth.LOGIN),
        Route("/broken", broken),
    ],
)


@pytest.fixture
async def client(ledger: Ledger, db_url: str) -> AsyncIterator[httpx.AsyncClient]:
    await ledger.approve([OWNER.pubkey])
    config = settings(TMS_EMBED="off")
    extensions = Extensions([Loaded(DEMO, BUILT_IN)], config, environ={})
    app = create_app(config, database_url=db_url, extensions=extensions)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url=ORIGIN) as http,
    ):
        CALLS.clear()
        yield http


async def test_a_route_without_auth(client: httpx.AsyncClient) -> None:
    response = await client.get("/plugins/demo/open")
    assert (response.status_code, response.json()) == (200, {"who": None, "id": None})
    assert (await client.post("/plugins/demo/open")).status_code == 405
    assert (await client.get("/plugins/other/open")).status_code == 404


async def test_a_nip98_route_refuses_before_its_handler(client: httpx.AsyncClient) -> None:
    url = f"{ORIGIN}/plugins/demo/mine/7"
    response = await client.get(url)
    assert response.status_code == 401 and response.headers["www-authenticate"] == "Nostr"
    assert response.json()["error"].startswith("missing Authorization header")
    response = await client.get(url, headers=nip98_auth(OWNER, f"{ORIGIN}/plugins/demo/open"))
    assert response.status_code == 401
    assert CALLS == []
    response = await client.get(url, headers=nip98_auth(STRANGER, url))
    assert (response.status_code, response.json()) == (200, {"who": STRANGER.pubkey, "id": "7"})


async def test_a_login_route_takes_the_session_and_its_csrf_token(
    client: httpx.AsyncClient,
) -> None:
    response = await client.get("/plugins/demo/me")
    assert response.status_code == 401
    assert response.json() == {"error": "not logged in, or the session ended: connect again"}
    challenge = (await client.get("/login/challenge")).json()
    signed = OWNER.sign(27235, "", int(time.time()), [["u", challenge["url"]], ["method", "POST"]])
    login = await client.post(
        challenge["url"], headers={"Authorization": nip98_header(signed), "Origin": ORIGIN}
    )
    assert login.status_code == 200, login.text
    response = await client.get("/plugins/demo/me")
    assert response.json() == {"who": OWNER.pubkey, "id": None}
    # a state-changing method: this site's Origin and the session's CSRF token, as the pages
    response = await client.post("/plugins/demo/me", headers={"Origin": ORIGIN})
    assert response.status_code == 403
    home = (await client.get("/")).text
    csrf = home.split('name="tms-csrf" content="')[1].split('"')[0]
    response = await client.post(
        "/plugins/demo/me", headers={"Origin": "https://evil.example", "X-CSRF-Token": csrf}
    )
    assert response.status_code == 403
    response = await client.post(
        "/plugins/demo/me", headers={"Origin": ORIGIN, "X-CSRF-Token": csrf}
    )
    assert response.json() == {"who": OWNER.pubkey, "id": None}
    assert [OWNER.pubkey, OWNER.pubkey] == CALLS


async def test_a_failing_handler_is_the_apps_500_without_a_traceback(
    client: httpx.AsyncClient,
) -> None:
    response = await client.get("/plugins/demo/broken")
    assert response.status_code == 500
    assert "a plugin's bug" not in response.text and "Traceback" not in response.text
