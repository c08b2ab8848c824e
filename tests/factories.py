"""What tests are made of, each made one way: keys, signed events, free ports, fresh databases
and live servers. Real keys, real signatures, real PostgreSQL: no fakes.

Events come in two forms: `sign` gives the envelope (`tms.nostr.events.Event`), and `signed` and
the builders after it give the wire form, a dict as a client sends it (`EventDict`).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import socket
import sys
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import urlsplit

import asyncpg
import cluster
import httpx
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from tms.config import Settings
from tms.nostr.events import Event, SecretKey
from tms.rules.terms import current_terms
from tms.search.search import VECTORS_OFF
from tms.store.database import with_database
from tms.tlog.note import NoteSigner

if TYPE_CHECKING:
    from tms.http.protocol import ConnectionLimits

ASSETS: Final = Path(__file__).parent / "assets"
BIN: Final = Path(sys.executable).parent  # where the installed console scripts are
TMS: Final = str(BIN / "tms")

T0: Final = 1_790_000_000  # the default created_at of every event signed here
NOW: Final = T0 + 3600  # the server clock that tests passing `now` judge against
TERMS: Final = current_terms()

EventDict = dict[str, Any]  # an event as sent over the wire


# --- keys --------------------------------------------------------------------------------------


def key(byte: int) -> SecretKey:
    """A fixed key (the secret is `byte` 32 times), so failures are reproducible."""
    return SecretKey(bytes([byte]) * 32)


OWNER: Final = key(0x11)
OWNER2: Final = key(0x22)
MEMBER: Final = key(0x33)
MEMBER2: Final = key(0x44)
STRANGER: Final = key(0x55)  # neither approved nor a member of anything
APPROVED: Final = key(0x66)  # approved, but a member of nobody else's collection


# --- signed events -----------------------------------------------------------------------------


def compact(content: Any) -> str:
    """JSON the way JSON.stringify writes it: no whitespace, UTF-8 as is."""
    return json.dumps(content, separators=(",", ":"), ensure_ascii=False)


def sign(
    signer: SecretKey,
    kind: int,
    content: Any,
    *,
    created_at: int = T0,
    tags: Sequence[Sequence[str]] = (),
) -> Event:
    """`content` signed as given when it is a string, else serialized with `compact` first."""
    text = content if isinstance(content, str) else compact(content)
    return signer.sign(kind, text, created_at, tags)


def signed(
    signer: SecretKey,
    kind: int,
    content: Any,
    *,
    created_at: int = T0,
    tags: Sequence[Sequence[str]] = (),
) -> EventDict:
    """`sign`, in the wire form."""
    return sign(signer, kind, content, created_at=created_at, tags=tags).to_dict()


def terms(
    signer: SecretKey,
    *,
    version: str | None = None,
    sha256: str | None = None,
    created_at: int = T0,
) -> EventDict:
    """The signer's signature of the current terms (or of the version and hash given)."""
    content = {"version": version or TERMS["version"], "sha256": sha256 or TERMS["sha256"]}
    return signed(signer, 4706, content, created_at=created_at)


def profile(
    signer: SecretKey,
    name: str,
    *,
    tags: Sequence[Sequence[str]] = (),
    created_at: int = T0,
    **extra: Any,
) -> EventDict:
    return signed(signer, 0, {"name": name, **extra}, tags=tags, created_at=created_at)


def evidence(
    signer: SecretKey, collection: str, text: str, *, created_at: int = T0, **extra: Any
) -> EventDict:
    content = {"collection": collection, "text": text, **extra}
    return signed(signer, 4701, content, created_at=created_at)


def claim(signer: SecretKey, collection: str, text: str, *, created_at: int = T0) -> EventDict:
    return signed(signer, 4702, {"collection": collection, "text": text}, created_at=created_at)


def link(
    signer: SecretKey,
    collection: str,
    source: str,
    target: str,
    quote: str,
    *,
    relation: str = "SUPPORTS",
    reason: str = "the quote says so",
    created_at: int = T0,
) -> EventDict:
    content = {
        "collection": collection,
        "from": source,
        "to": target,
        "relation": relation,
        "quote": quote,
        "reason": reason,
    }
    return signed(signer, 4703, content, created_at=created_at)


def contradiction(
    signer: SecretKey,
    collection: str,
    claims: list[str],
    reason: str = "both cannot hold",
    *,
    created_at: int = T0,
) -> EventDict:
    content = {"collection": collection, "claims": claims, "reason": reason}
    return signed(signer, 4704, content, created_at=created_at)


def members(
    signer: SecretKey, collection: str, pubkeys: list[str], *, created_at: int = T0
) -> EventDict:
    content = {"collection": collection, "members": pubkeys}
    return signed(signer, 4705, content, created_at=created_at)


def request(
    signer: SecretKey, tool: str, *, created_at: int | None = None, **args: Any
) -> EventDict:
    """A kind 4707 request for `tool` with `args`, signed now (or at `created_at`)."""
    when = int(time.time()) if created_at is None else created_at
    return signed(signer, 4707, {"tool": tool, "args": args}, created_at=when)


def ids(events: Sequence[EventDict]) -> list[str]:
    return [event["id"] for event in events]


def where(position: int, event: EventDict) -> str:
    """How a refused batch names the event that failed: its position and its id's prefix."""
    return f"events[{position}] ({event['id'][:12]}…)"


def nip98_header(event: Event) -> str:
    """An `Authorization` header value as a NIP-98 client writes it: `Nostr <base64 event>`."""
    return "Nostr " + base64.b64encode(event.to_json().encode("utf-8")).decode("ascii")


def nip98_auth(
    signer: SecretKey, url: str, method: str = "GET", *, created_at: int | None = None
) -> dict[str, str]:
    """The headers of a request signed for `url` and `method`, now (or at `created_at`)."""
    when = int(time.time()) if created_at is None else created_at
    event = signer.sign(27235, "", when, [["u", url], ["method", method]])
    return {"Authorization": nip98_header(event)}


# --- processes ---------------------------------------------------------------------------------


def free_port() -> int:
    """A TCP port nobody listens on right now (for a subprocess told which port to take)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def environment(**values: str) -> dict[str, str]:
    """This environment without `TMS_*` (a subprocess's settings are the test's alone), plus
    `values`; local addresses never go through a proxy. `tms serve` runs one process unless
    `values` say `TMS_WORKERS`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TMS_")}
    no_proxy = ",".join(filter(None, [env.get("NO_PROXY"), "127.0.0.1,localhost"]))
    return {**env, "NO_PROXY": no_proxy, "no_proxy": no_proxy, "TMS_WORKERS": "1", **values}


# --- databases ---------------------------------------------------------------------------------


def database_name(url: str) -> str:
    return urlsplit(url).path.lstrip("/")


# Before a test switches the append-only guard off and on (ALTER TABLE ... DISABLE TRIGGER): on
# Citus, changing a distributed table's triggers takes this setting (tms.store.citus); anywhere
# else it is a name nothing reads.
CITUS_TRIGGERS: Final = "SELECT set_config('citus.enable_unsafe_triggers', 'on', true)"


async def admin(server_url: str, *sql: str) -> None:
    """Run statements one by one on the server's maintenance database."""
    conn = await asyncpg.connect(server_url)
    try:
        for statement in sql:
            await conn.execute(statement)
    finally:
        await conn.close()


async def create_database(server_url: str, template_url: str, prefix: str = "tms_test") -> str:
    """A database of its own, copied from the migrated template; returns its URL (on the Citus
    cluster, a copy on every node: tests/cluster.py)."""
    name = f"{prefix}_{uuid.uuid4().hex[:16]}"
    if cluster.is_citus(server_url):
        return await cluster.copy(database_name(template_url), name)
    await admin(server_url, f'CREATE DATABASE "{name}" TEMPLATE "{database_name(template_url)}"')
    return with_database(server_url, name)


async def drop_database(server_url: str, database_url: str) -> None:
    """Ends this role's own connections to it, then drops it. Not `WITH (FORCE)`: that must
    also end an autovacuum worker that happens to be there, which takes `pg_signal_backend`;
    a plain DROP waits for autovacuum by itself, so the tests' role needs no such grant."""
    name = database_name(database_url)
    if cluster.is_citus(server_url):
        await cluster.drop(name)
        return
    await admin(server_url, _terminate_own(name), f'DROP DATABASE IF EXISTS "{name}"')


def _terminate_own(name: str) -> str:
    """End the connections this role holds to database `name` (a role may always end its own)."""
    return (
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
        f"WHERE datname = '{name}' AND usename = current_user AND pid <> pg_backend_pid()"
    )


@contextmanager
def fresh_database(server_url: str, template_url: str, prefix: str = "tms_test") -> Iterator[str]:
    """`create_database` for a block outside any event loop (module-scoped fixtures); dropped
    at the end of the block."""
    url = asyncio.run(create_database(server_url, template_url, prefix))
    try:
        yield url
    finally:
        asyncio.run(drop_database(server_url, url))


async def allow_connections(server_url: str, database_url: str, allowed: bool) -> None:
    """Open or close a database to new connections; closing also ends the open ones: an outage
    the server must live through."""
    name = database_name(database_url)
    statements = [f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS {str(allowed).lower()}']
    if not allowed:
        statements.append(_terminate_own(name))
    await admin(server_url, *statements)


# --- a live server -----------------------------------------------------------------------------


UNLIMITED: Final = {
    f"TMS_RATE_{budget}": "off" for budget in ("ADDRESS", "KEY", "FETCH", "LOGIN", "READ")
}

# The live servers' checkpoint key (TMS_LOG_KEY), fixed so that failures are reproducible.
LOG_SIGNER: Final = NoteSigner("127.0.0.1", Ed25519PrivateKey.from_private_bytes(bytes([7]) * 32))


# The live servers' relay key (TMS_RELAY_KEY, NIP-11 `self`), fixed likewise.
RELAY_KEY: Final = SecretKey(bytes([9]) * 32)


def settings(**env: str) -> Settings:
    """Settings from `env` alone, never from the test's environment or a data directory. Rate
    limits are off unless `env` sets them: every test client comes from 127.0.0.1, often with
    one key, faster than anyone would (tests/pages/test_rate_limits.py tests the limits)."""
    defaults = {
        "TMS_DATA_DIR": "/nonexistent-tms-data",  # every key is set: it is never written
        "TMS_LOG_KEY": LOG_SIGNER.encode(),
        "TMS_RELAY_KEY": RELAY_KEY.secret.hex(),
        "TMS_SECRET": "tests-" * 8,
    }
    return Settings.from_env({**defaults, **UNLIMITED, **env})


@dataclass(frozen=True)
class Live:
    url: str  # e.g. http://127.0.0.1:12345
    database_url: str
    app: Any = field(default=None, compare=False, repr=False)  # its state, once started

    @property
    def mcp(self) -> str:
        return f"{self.url}/mcp"


def wait_until_ready(url: str, deadline: float) -> None:
    """Until the model has loaded (it loads after the server is up), so that tests of vector
    search meet it ready; a server without vectors is ready at once."""
    with httpx.Client(timeout=5) as http:
        while (status := http.get(f"{url}/healthz").json().get("vectors")) not in (
            "ready",
            VECTORS_OFF,
        ):
            if time.monotonic() > deadline:
                raise RuntimeError(f"vector search did not get ready: {status}")
            time.sleep(0.05)


@contextmanager
def live_server(
    database_url: str,
    config: Settings | None = None,
    limits: ConnectionLimits | None = None,
    port: int = 0,
) -> Iterator[Live]:
    """The real app under uvicorn with the connection limits `tms serve` sets (`limits`, or
    those of `config`), in a thread of its own, on a port the OS picks, until the block ends."""
    import uvicorn  # here: the pure tests need neither it nor the app

    from tms.app import create_app
    from tms.http.protocol import ConnectionLimits, GuardedHttpProtocol
    from tms.http.websocket import uvicorn_options
    from tms.relay.limits import MAX_MESSAGE_BYTES

    config = config or settings()
    app = create_app(config, database_url=database_url)
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            host="127.0.0.1",
            port=port,  # 0: one the OS picks
            log_level="warning",
            lifespan="on",
            http=GuardedHttpProtocol.with_limits(limits or ConnectionLimits.of(config)),
            **uvicorn_options(limits or ConnectionLimits.of(config), MAX_MESSAGE_BYTES),
            proxy_headers=False,  # as `tms serve`: X-Forwarded-For only via TMS_TRUSTED_PROXIES
        )
    )
    thread = threading.Thread(target=server.run, name="tms-live", daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 60
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the live server did not start")
            time.sleep(0.02)
        port = server.servers[0].sockets[0].getsockname()[1]
        live = Live(f"http://127.0.0.1:{port}", database_url, app)
        wait_until_ready(live.url, deadline)
        yield live
    finally:
        server.should_exit = True
        thread.join(30)
        assert not thread.is_alive(), "the live server did not stop"


def member_change(
    signer: SecretKey,
    collection: str,
    method: str,
    pubkey: str,
    *,
    created_at: int = T0,
    origin: str = "http://testserver",
    body: str | None = None,
) -> EventDict:
    """A membership change as a NIP-86 client makes it: the NIP-98 event (kind 27235) signed
    for a JSON-RPC POST to the collection's relay URL, with the body its `payload` tag hashes,
    in the wire form an export line has (the NIP-01 fields plus `body`)."""
    text = compact({"method": method, "params": [pubkey]}) if body is None else body
    tags = [
        ["u", f"{origin}/c/{collection}"],
        ["method", "POST"],
        ["payload", hashlib.sha256(text.encode("utf-8")).hexdigest()],
    ]
    return {**signed(signer, 27235, "", created_at=created_at, tags=tags), "body": text}
