"""Plugins' HTTP routes as Starlette routes, each behind the auth it declared.

A route is served at `/plugins/<name><path>`; before its handler runs, `authenticate` (the
core's, `core_authenticate` unless the app gives another) answers who calls for `Auth.LOGIN` and
`Auth.NIP98`, or raises the refusal the app's exception table answers (401, 403, 429): the
handler is never reached unauthenticated. What the handler raises is answered by the same table
as the core's routes (a refusal by its status, anything else a logged 500).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Final

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route as StarletteRoute

from tms.extension import Auth
from tms.http.login import request_url
from tms.http.statuses import Refused
from tms.nostr import nip98
from tms.pages.door import door_of, services_of
from tms.plugins.registry import PluginRoute

# Who calls: the key `auth` proves, or a refusal raised.
Authenticate = Callable[[Request, Auth], Awaitable[str]]

SAFE_METHODS: Final = frozenset({"GET", "HEAD", "OPTIONS"})


async def core_authenticate(request: Request, auth: Auth) -> str:
    """The core's rules, as its own routes apply them. NIP-98: the header signed for this
    URL (`TMS_BASE_URL`'s origin behind a proxy) and method within 60 s (`AuthError`, a 401).
    The login cookie: a live session (a 401 without one); a state-changing method also needs
    this site's `Origin` and the session's CSRF token in `X-CSRF-Token` (403s), as the pages'
    own forms. The key then spends its rate limit (`TMS_RATE_KEY`; a 429 over it)."""
    if auth is Auth.NIP98:
        pubkey = nip98.check_authorization(
            request.headers.get("authorization"),
            url=request_url(request, request.app.state.settings.base_url),
            method=request.method,
            now=int(time.time()),
        )
    elif auth is Auth.LOGIN:
        door = door_of(request)
        if request.method in SAFE_METHODS:
            session = await door.session(request)
            if session is None:
                raise Refused(401, "not logged in, or the session ended: connect again")
        else:
            session = await door.writer(request)
        pubkey = session.pubkey
    else:
        raise ValueError(f"no authentication for {auth}")
    await services_of(request).throttle.key(pubkey)
    return pubkey


def starlette_route(
    route: PluginRoute, authenticate: Authenticate = core_authenticate
) -> StarletteRoute:
    """One plugin route for the app's route table (`Extensions.route_table`), its handler
    behind the auth it declared."""
    handler, auth = route.route.handler, route.auth

    async def endpoint(request: Request) -> Response:
        pubkey = None if auth is Auth.NONE else await authenticate(request, auth)
        return await handler(request, pubkey)

    return StarletteRoute(
        route.path,
        endpoint,
        methods=list(route.methods),
        name=f"plugin {route.plugin} {route.path}",
    )
