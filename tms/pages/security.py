"""Security headers on every response, as plain ASGI middleware.

The Content-Security-Policy allows scripts, styles, images and fonts from this origin only and
no inline script or style at all, so even text that escaped escaping could not run; the only
outside origins are the profile relays, in `connect-src`, where the Connect page looks up a
key's profile. The reading pages' own WebSocket (their collection's relay, `static/live.js`) is
this origin: CSP Level 3 lets `'self'` cover its ws(s) scheme, and where the public origin is
known (`TMS_BASE_URL`) it is also named outright, for browsers that read `'self'` the older way.
Pages cannot be framed, and no referrer leaves the site.
"""

from __future__ import annotations

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send


def content_security_policy(relays: tuple[str, ...], base_url: str | None = None) -> str:
    own = [] if base_url is None else [own_socket_origin(base_url)]
    connect = " ".join(["'self'", *own, *relays])
    return (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        f"connect-src {connect}; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
    )


def own_socket_origin(base_url: str) -> str:
    """`https://tms.example.org/` -> `wss://tms.example.org` (ws:// for http)."""
    scheme, rest = base_url.split("://", 1)
    return f"{'wss' if scheme == 'https' else 'ws'}://{rest.split('/', 1)[0]}"


class SecurityHeaders:
    def __init__(self, app: ASGIApp, relays: tuple[str, ...], base_url: str | None = None) -> None:
        self.app = app
        self.headers = {
            "content-security-policy": content_security_policy(relays, base_url),
            "x-content-type-options": "nosniff",
            "referrer-policy": "same-origin",
            "x-frame-options": "DENY",
        }

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in self.headers.items():
                    if name not in headers:
                        headers.append(name, value)
            await send(message)

        await self.app(scope, receive, send_with_headers)
