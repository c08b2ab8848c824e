"""Exports are limited over real HTTP (uvicorn, the real app): one at a time per key (a second
one is a 429 with Retry-After and says why), and at most `TMS_MAX_EXPORTS` at once (one more
waits for a turn, then is a 503 with Retry-After). An export held open by a client that stopped
reading keeps its slot until it ends."""

from __future__ import annotations

import dataclasses
import socket
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from urllib.parse import urlsplit

import anyio
import httpx
import pytest
from factories import live_server, nip98_auth, settings, signed, terms
from publishing import publish

from tms.ledger.service import Ledger
from tms.nostr.events import SecretKey

pytestmark = pytest.mark.anyio

# One export at a time in all, and a short wait for a turn, so that the test is quick.
SETTINGS = dataclasses.replace(settings(TMS_MAX_EXPORTS="1"), export_wait=0.5)
OWNER, MEMBER = SecretKey.generate(), SecretKey.generate()


@pytest.fixture
def origin(db_url: str) -> Iterator[str]:
    with live_server(db_url, SETTINGS) as live:
        yield live.url


@pytest.fixture
async def big(ledger: Ledger) -> str:
    """A collection of 20 MB, more than the sockets between client and server hold: a client
    that stops reading holds its export open."""
    await ledger.approve([OWNER.pubkey])
    text = "Evidence text. " * 70_000
    documents = [
        signed(OWNER, 4701, {"collection": "big", "text": f"{i} {text}"}) for i in range(20)
    ]
    await publish(
        ledger,
        terms(OWNER),
        signed(OWNER, 4705, {"collection": "big", "members": [MEMBER.pubkey]}),
        terms(MEMBER),
        *documents,
    )
    return "big"


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=30) as client:
        yield client


@contextmanager
def held_open(url: str, key: SecretKey) -> Iterator[bytes]:
    """An export whose client reads its first bytes, then stops reading until the block ends,
    on a socket with a small receive buffer (the kernel would otherwise take in most of the
    20 MB for it); yields the status line."""
    parts = urlsplit(url)
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        sock.settimeout(30)
        sock.connect((parts.hostname, parts.port))
        auth = nip98_auth(key, url)["Authorization"]
        head = f"GET {parts.path} HTTP/1.1\r\nHost: {parts.netloc}\r\nAuthorization: {auth}\r\n"
        sock.sendall(f"{head}\r\n".encode())
        answer = sock.recv(4096)
        yield answer.split(b"\r\n", 1)[0]


async def test_a_second_export_by_the_same_key_is_refused_while_the_first_runs(
    origin: str, big: str, http: httpx.AsyncClient
) -> None:
    url = f"{origin}/c/{big}/export.jsonl"
    with held_open(url, OWNER) as first:
        assert first == b"HTTP/1.1 200 OK"
        second = await http.get(url, headers=nip98_auth(OWNER, url))
        assert second.status_code == 429
        assert int(second.headers["Retry-After"]) >= 1
        assert second.json() == {
            "error": "an export by this key is already running: one at a time per key; wait "
            "for it to finish, then try again (in 10 s)"
        }
    # The first one ended (the client hung up, which the server sees within moments): the key
    # may export again, to the end.
    deadline = time.monotonic() + 10
    while (again := await http.get(url, headers=nip98_auth(OWNER, url))).status_code == 429:
        assert time.monotonic() < deadline, "the hung-up export kept its slot"
        await anyio.sleep(0.1)
    assert again.status_code == 200
    assert again.text.count("\n") == 22  # the owner's terms and member list, 20 documents


async def test_past_the_servers_limit_an_export_waits_then_gets_a_503(
    origin: str, big: str, http: httpx.AsyncClient
) -> None:
    url = f"{origin}/c/{big}/export.jsonl"
    with held_open(url, OWNER) as first:
        assert first == b"HTTP/1.1 200 OK"
        other = await http.get(url, headers=nip98_auth(MEMBER, url))  # another key, no slot
        assert other.status_code == 503
        assert int(other.headers["Retry-After"]) >= 1
        assert other.json() == {
            "error": "the server is already streaming 1 exports, the most it runs at once; "
            "try again in 10 s"
        }
    # The slot comes free once the server sees the first client gone (or the wait covers it).
    deadline = time.monotonic() + 10
    while (answer := await http.get(url, headers=nip98_auth(MEMBER, url))).status_code == 503:
        assert time.monotonic() < deadline, "the hung-up export kept its slot"
    assert answer.status_code == 200 and answer.text.count("\n") == 22
