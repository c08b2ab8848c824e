"""The origin a client's signature must name: one rule for NIP-98's `u` tag (the HTTP doors) and
NIP-42's relay tag (the relay).

It is `TMS_BASE_URL` when set (the public origin behind a proxy), else the address the server
listens on, as the connection reached it (uvicorn's `scope["server"]`). Never the client's `Host`
header: the point of naming the URL in a signed header is that it cannot be replayed elsewhere,
and a header signed for `http://evil.example/c/x/export.jsonl`, sent here with
`Host: evil.example`, would otherwise match. A client that names the server by another name
(`localhost` for `127.0.0.1`) is told, in the refusal, the URL it should have signed.
"""

from __future__ import annotations

from typing import Final

from starlette.requests import HTTPConnection

_DEFAULT_PORTS: Final = {"http": 80, "https": 443, "ws": 80, "wss": 443}
_UNKNOWN_SERVER: Final = ("127.0.0.1", None)  # an ASGI server that does not say (never uvicorn)


def signed_origin(connection: HTTPConnection, base_url: str | None) -> str:
    """`scheme://host[:port]` a signature made for this server names (see the module's
    docstring); the scheme is the connection's own (`http(s)` or `ws(s)`), the port left out
    when it is the scheme's default."""
    if base_url is not None:
        return base_url
    server = connection.scope.get("server") or _UNKNOWN_SERVER
    host, port = server
    if ":" in str(host):  # IPv6
        host = f"[{host}]"
    scheme = connection.url.scheme
    default = port is None or port == _DEFAULT_PORTS.get(scheme)
    return f"{scheme}://{host}" if default else f"{scheme}://{host}:{port}"
