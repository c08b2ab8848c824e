"""Talking to a peer over HTTP (a witness, a relay a mirror reads) that may not be honest.

A peer can answer with a body that never ends, or trickle one byte every few seconds so that
no single read ever times out. httpx's `timeout=` bounds each read, not the call, and
`response.text` reads whole. So every call to a peer goes through `request`: the body is
streamed as sent (identity encoding asked for, anything else refused, so no decompression can
multiply what a few bytes cost), reading stops (and the call fails) as soon as it exceeds
`max_bytes` (a declared Content-Length over it is refused before reading), and the whole call,
connect to last byte, must finish within `deadline` seconds. What comes back is the status,
the headers and the body as bytes, already read and closed: nothing of the peer stays open
behind the caller.

`fetch_url` has its own, stricter path (addresses, redirects, decompression bombs:
`tms.fetch.client`); this one is for peers the operator or member named themselves.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import httpx

from tms.errors import TMSError


class PeerError(TMSError):
    """A peer's answer was too large, too slow, or never came: the message says which."""


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    headers: httpx.Headers
    body: bytes

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")


async def request(
    client: httpx.AsyncClient,
    method: str,
    url: str,
    *,
    max_bytes: int,
    deadline: float,
    headers: dict[str, str] | None = None,
    content: bytes | None = None,
) -> Answer:
    """One call to a peer, read whole but never more than `max_bytes`, done within `deadline`
    seconds or failed with a `PeerError` that names the URL and what went wrong."""
    try:
        async with asyncio.timeout(deadline):
            asked = {"Accept-Encoding": "identity", **(headers or {})}
            async with client.stream(method, url, headers=asked, content=content) as response:
                encoding = response.headers.get("content-encoding", "identity").strip().lower()
                if encoding not in ("", "identity"):
                    raise PeerError(
                        f"{method} {url}: the answer is {encoding}-encoded; asked for identity"
                    )
                declared = response.headers.get("content-length", "")
                if declared.isascii() and declared.isdigit() and int(declared) > max_bytes:
                    raise PeerError(
                        f"{method} {url}: the answer declares {int(declared):,} bytes, more than "
                        f"the {max_bytes:,} allowed"
                    )
                body = bytearray()
                async for chunk in response.aiter_raw():
                    body += chunk
                    if len(body) > max_bytes:
                        raise PeerError(
                            f"{method} {url}: the answer went past {max_bytes:,} bytes; stopped"
                        )
                return Answer(response.status_code, response.headers, bytes(body))
    except TimeoutError:
        raise PeerError(f"{method} {url}: no complete answer within {deadline:g} s") from None
    except httpx.HTTPError as exc:
        raise PeerError(f"{method} {url}: {exc or type(exc).__name__}") from None
