"""`tms`: the operator's command line.

`tms verify` checks an exported JSON Lines file offline, line by line, exactly as a member's own
Nostr library would: envelope, id, signature, and the kind's content schema. `tms verify-export`
checks it against its collection's signed transparency log (`tms.cli.verify_export`).

`tms fetch URL` downloads a page or document as the ledger's `fetch_url` tool does and prints
`{"url", "title", "chars", "text"}` as one JSON line; a refusal is one line on stderr, exit 2.

`tms serve` runs the HTTP server; `tms stdio` serves the same MCP tools over stdin and stdout for
a local agent. `tms migrate [--distribute]` applies the migrations (the server does too, at
start-up) and, on a Citus coordinator, distributes the ledger (`tms.store.citus`). `tms approve`,
`revoke`, `approved`, `collections`, `export` and `refusals` are the operator's: they work on the
same database as the server (`TMS_DATABASE_URL`, else the embedded PostgreSQL in `TMS_DATA_DIR`),
whether or not the server is running. A bad key is one line on stderr and exit 2; a database that
cannot be used, or an unknown collection, one line and exit 1.
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import json
import os
import re
import signal
import sys
from collections.abc import AsyncIterator, Coroutine, Iterable, Sequence
from contextlib import aclosing, asynccontextmanager
from datetime import UTC, datetime, timedelta
from importlib.metadata import version
from typing import TYPE_CHECKING, Any, Final, TextIO

from tms.config import Settings
from tms.errors import DATABASE_UNAVAILABLE, TMSError, one_line
from tms.nostr import nip19
from tms.nostr.events import Event, SecretKey
from tms.types import PubKey

if TYPE_CHECKING:
    from tms.http.protocol import ConnectionLimits
    from tms.ledger.service import Ledger
    from tms.store.database import Pool


def verify_lines(lines: Iterable[str], out: TextIO) -> tuple[int, int]:
    """Print one line per bad event; return (good, bad). Blank lines are skipped."""
    from tms.rules.kinds import validate_content  # here: its schemas cost every other command

    good = bad = 0
    for number, line in enumerate(lines, start=1):
        if not line.strip() or line.startswith('{"checkpoint"'):  # for tms verify-export
            continue
        try:
            event = Event.from_json(line)
            event.verify()
            validate_content(event)
        except TMSError as exc:
            bad += 1
            print(f"line {number}: {exc}", file=out)
        else:
            good += 1
    return good, bad


def _verify(path: str) -> int:
    try:
        stream = sys.stdin if path == "-" else open(path, encoding="utf-8")  # noqa: SIM115
    except OSError as exc:
        print(f"tms: cannot read {path}: {exc.strerror}", file=sys.stderr)
        return 2
    with stream:
        try:
            good, bad = verify_lines(stream, sys.stdout)
        except UnicodeDecodeError:
            print(f"tms: {path} is not UTF-8 text", file=sys.stderr)
            return 2
    print(f"{good} events verified, {bad} invalid")
    return 1 if bad else 0


def _fetch(url: str) -> int:
    from tms.fetch.client import fetch_url  # here, not above: its libraries take a second to import

    try:
        result = asyncio.run(fetch_url(url))
    except TMSError as exc:
        print(f"tms: {exc}", file=sys.stderr)
        return 2
    line = json.dumps(result, ensure_ascii=False) + "\n"
    sys.stdout.flush()
    sys.stdout.buffer.write(line.encode("utf-8"))  # JSON is UTF-8, whatever the locale
    sys.stdout.buffer.flush()
    return 0


# --- the server and the operator's commands: all on the database the server uses ---------------

SHUTDOWN_GRACE_SECONDS = 30  # in-flight requests (a long export) get this long to finish
FILES_BESIDES_CONNECTIONS = 200  # database connections, workers, logs, the model's files


def _serve(host: str | None, port: int | None) -> int:
    """Check the database first, so that a failure is one line rather than a traceback from
    inside the server; then serve until SIGTERM or Ctrl-C, and exit 0 after a clean shutdown
    (the embedded PostgreSQL stops with the last process using it)."""
    import uvicorn

    from tms.http.protocol import GuardedHttpProtocol
    from tms.http.websocket import uvicorn_options
    from tms.relay.limits import MAX_MESSAGE_BYTES
    from tms.web.app import create_app

    # uvicorn restores these after its graceful shutdown and re-raises the signal: exiting through
    # SystemExit (not the default handler's instant death) lets atexit stop the embedded server.
    signal.signal(signal.SIGTERM, _exit_cleanly)
    signal.signal(signal.SIGINT, _exit_cleanly)
    try:
        settings = Settings.from_env()
        host = host or settings.host
        warning = origin_warning(settings.base_url, host)
        if warning is not None:
            print(f"tms: warning: {warning}", file=sys.stderr, flush=True)
        asyncio.run(_usable_database(settings))
    except TMSError as exc:
        print(f"tms: {exc}", file=sys.stderr)
        return 1
    limits = _connection_limits(settings)
    port = settings.port if port is None else port
    origin = f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
    public = f" (public URL {settings.base_url})" if settings.base_url else ""
    if settings.database_url is None:
        data = f"embedded PostgreSQL in {settings.data_dir / 'postgres'}"
    else:
        data = "the PostgreSQL server at TMS_DATABASE_URL"
    print(f"tms: serving on {origin}{public}\ntms: data: {data}", flush=True)
    uvicorn.run(
        create_app(settings),
        host=host,
        port=port,
        lifespan="on",
        http=GuardedHttpProtocol.with_limits(limits),
        **uvicorn_options(limits, MAX_MESSAGE_BYTES),  # the relay's WebSocket connections
        proxy_headers=False,  # X-Forwarded-For is read by the app, from TMS_TRUSTED_PROXIES only
        timeout_graceful_shutdown=SHUTDOWN_GRACE_SECONDS,
    )
    return 0


def origin_warning(base_url: str | None, host: str) -> str | None:
    """What to say at start when no `TMS_BASE_URL` is set and clients from elsewhere can reach
    the server: each request's Host header then names the origin that /docs shows and login
    challenges and NIP-98 checks expect (escaped, but chosen by the client)."""
    if base_url is not None or _loopback(host):
        return None
    return (
        f"TMS_BASE_URL is not set, and the server listens on {host}, beyond this machine: "
        "/docs, the login challenge and NIP-98 checks take this server's origin from each "
        "request's Host header. Set TMS_BASE_URL to the public origin (https://...)."
    )


def _loopback(host: str) -> bool:
    if host.lower() in ("localhost", "localhost.", "ip6-localhost"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:  # a name: it may resolve anywhere
        return False


def _connection_limits(settings: Settings) -> ConnectionLimits:
    """The settings' limits, with as many file descriptors as the system lets this process
    have: connections beyond what descriptors allow would fail where nobody sees it."""
    import resource

    from tms.http.protocol import ConnectionLimits

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = settings.max_connections + FILES_BESIDES_CONNECTIONS
    if soft != resource.RLIM_INFINITY and soft < wanted:
        raised = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (raised, hard))
        soft = raised
    connections = settings.max_connections
    if soft != resource.RLIM_INFINITY and connections > soft - FILES_BESIDES_CONNECTIONS:
        connections = max(10, soft - FILES_BESIDES_CONNECTIONS)
        print(
            f"tms: only {soft} file descriptors allowed: holding at most {connections} "
            "connections (TMS_MAX_CONNECTIONS)",
            file=sys.stderr,
        )
    return ConnectionLimits.of(settings, connections)


def _stdio() -> int:
    """MCP over stdin and stdout against the server's database. stdout carries the protocol
    only: the SDK points fd 1 at stderr while serving, and the database and model are opened
    inside that, so nothing they print can corrupt the stream."""
    from tms.nostr.keys import parse_secret

    try:
        settings = Settings.from_env()
        nsec = os.environ.get("TMS_NSEC", "").strip()
        signer = parse_secret(nsec) if nsec else None
        asyncio.run(_serve_stdio(settings, signer))
    except TMSError as exc:
        print(f"tms: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        pass
    return 0


async def _serve_stdio(settings: Settings, signer: SecretKey | None) -> None:
    from mcp.server.stdio import stdio_server

    from tms.mcp.server import build_server
    from tms.runtime import open_runtime

    async with (
        stdio_server() as (read_stream, write_stream),
        open_runtime(settings, model_first=True) as runtime,
    ):
        server = build_server(runtime.tools(signer))
        await server.run(read_stream, write_stream, server.create_initialization_options())


def _exit_cleanly(signum: int, frame: object) -> None:
    raise SystemExit(0)


async def _usable_database(settings: Settings) -> str:
    """The database URL, once the database is known to start, answer and be migrated."""
    url, pool = await _open_pool(settings, max_size=1)
    await pool.close()
    return url


async def _open_pool(settings: Settings, *, max_size: int) -> tuple[str, Pool]:
    """The database the server uses: `TMS_DATABASE_URL`, else the embedded PostgreSQL in
    `TMS_DATA_DIR` (started if no other process has it running). Failures are `DatabaseError`."""
    from tms.store.database import database_url, open_pool

    url = await database_url(settings.database_url, settings.data_dir)
    return url, await open_pool(url, min_size=1, max_size=max_size)


@asynccontextmanager
async def _ledger() -> AsyncIterator[Ledger]:
    from tms.ledger.service import Ledger

    _, pool = await _open_pool(Settings.from_env(), max_size=2)
    try:
        yield Ledger(pool)
    finally:
        await pool.close()


def _operator(command: Coroutine[Any, Any, int]) -> int:
    """Run an operator command; a refusal or a database that cannot be used is one line on
    stderr and exit 1, in the words every other door uses."""
    from tms.store.database import is_database_down

    try:
        return asyncio.run(command)
    except TMSError as exc:
        print(f"tms: {exc}", file=sys.stderr)
    except Exception as exc:
        if not is_database_down(exc):  # lost mid-command: one line; anything else is a bug
            raise
        print(f"tms: {DATABASE_UNAVAILABLE} ({one_line(exc, 300)})", file=sys.stderr)
    return 1


def _pubkeys(texts: Sequence[str], done: str) -> list[PubKey] | None:
    """Every key parsed, duplicates dropped; or None, after one line on stderr naming the first
    bad one (so that nothing is `done` unless every key is good)."""
    from tms.nostr.keys import parse_pubkey

    keys = []
    for text in texts:
        try:
            keys.append(parse_pubkey(text))
        except TMSError as exc:
            print(f"tms: {text.strip()[:80]!r}: {exc}; nothing was {done}", file=sys.stderr)
            return None
    return list(dict.fromkeys(keys))


async def _migrate(distribute: bool) -> int:
    """Apply what is missing and, with `distribute`, place the tables on the Citus cluster;
    then say where each table lives."""
    import asyncpg

    from tms.errors import DatabaseError
    from tms.store import citus
    from tms.store.database import database_url, migrate

    settings = Settings.from_env()
    url = await database_url(settings.database_url, settings.data_dir)
    try:
        conn = await asyncpg.connect(url)
    except (OSError, asyncpg.InterfaceError, asyncpg.PostgresError) as exc:
        raise DatabaseError(f"cannot connect to the database: {one_line(exc)}") from exc
    try:
        applied = await migrate(conn, distribute=distribute)
        placed = await citus.placements(conn)
        on_citus = await citus.installed(conn)
    finally:
        await conn.close()
    print(f"applied: {', '.join(applied)}" if applied else "applied: none (up to date)")
    if on_citus:
        width = max(len(table) for table in placed)
        for table, where in sorted(placed.items(), key=lambda item: (item[1], item[0])):
            how = " by collection" if where == "distributed" else ""
            print(f"  {table:<{width}}  {where}{how}")
        if placed.get(citus.ANCHOR) != "distributed":
            print("tms: the ledger is not distributed: tms migrate --distribute", file=sys.stderr)
    return 0


async def _approve(keys: list[PubKey]) -> int:
    async with _ledger() as ledger:
        newly = set(await ledger.approve(keys))
    for pubkey in keys:
        note = "" if pubkey in newly else " (already approved)"
        print(f"approved {nip19.npub_encode(pubkey)} {pubkey}{note}")
    return 0


async def _revoke(keys: list[PubKey]) -> int:
    async with _ledger() as ledger:
        revoked = set(await ledger.revoke(keys))
    for pubkey in keys:
        done = "revoked" if pubkey in revoked else "was not approved:"
        print(f"{done} {nip19.npub_encode(pubkey)} {pubkey}")
    return 0


async def _approved() -> int:
    async with _ledger() as ledger:
        rows = await ledger.approved()
    for pubkey, approved_at in rows:
        print(f"{nip19.npub_encode(pubkey)} {pubkey} {approved_at}")
    if not rows:
        print("tms: no keys are approved (tms approve NPUB_OR_HEX...)", file=sys.stderr)
    return 0


COLUMNS: Final = (
    "slug", "owner", "evidence", "claims", "links", "contradictions", "members", "created",
)  # fmt: skip


async def _collections(slugs_only: bool) -> int:
    """Every collection, as an aligned table under a header (or the slugs alone)."""
    async with _ledger() as ledger:
        found = await ledger.collections()
    if not found:
        print(
            "tms: no collections yet (an approved key creates one by naming a new slug)",
            file=sys.stderr,
        )
        return 0
    if slugs_only:
        for row in found:
            print(row.slug)
        return 0
    table = [COLUMNS] + [
        (
            row.slug,
            nip19.npub_encode(row.owner),
            *(f"{n:,}" for n in (row.evidence, row.claims, row.links, row.contradictions)),
            f"{row.members:,}",
            _utc(datetime.fromisoformat(row.created_at)),
        )
        for row in found
    ]
    widths = [max(len(cells[i]) for cells in table) for i in range(len(COLUMNS))]
    for cells in table:
        print(
            "  ".join(
                _aligned(cell, width, i)
                for i, (cell, width) in enumerate(zip(cells, widths, strict=True))
            ).rstrip()
        )
    return 0


def _aligned(cell: str, width: int, column: int) -> str:
    """Counts to the right, text to the left."""
    return cell.rjust(width) if 2 <= column <= 6 else cell.ljust(width)


async def _export(slug: str, checkpoint: bool) -> int:
    """The collection's JSON Lines on stdout, streamed from one consistent snapshot; with
    `checkpoint`, ending with the log's signed checkpoint line (`tms verify-export`)."""
    from tms.ledger.access import Access
    from tms.ledger.export import Exporter
    from tms.rules.content import SLUG_PATTERN

    out = sys.stdout.buffer
    try:
        async with _ledger() as ledger:
            if not SLUG_PATTERN.fullmatch(slug) or not await ledger.collection_exists(slug):
                print(f"tms: no such collection {slug!r}", file=sys.stderr)
                return 1
            readable = Access(ledger.pool).for_operator(slug)
            if checkpoint:
                await ledger.log.build(slug)  # if the start-up back-fill has not reached it
            lines = Exporter(ledger.pool).lines(readable, checkpoint=checkpoint)
            async with aclosing(lines):
                async for line in lines:
                    out.write(f"{line}\n".encode())
        out.flush()
    except BrokenPipeError:  # the reader went away (`tms export x | head`): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    return 0


_AGO = re.compile(r"(\d+)\s*([smhdw])")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def since_when(text: str, now: datetime) -> datetime | None:
    """`--since`: an age (`90s`, `15m`, `1h`, `2d`, `1w`) or an ISO 8601 time (UTC unless it
    says otherwise); None when it is neither."""
    text = text.strip().lower()
    match = _AGO.fullmatch(text)
    if match:
        return now - timedelta(**{_UNITS[match.group(2)]: int(match.group(1))})
    try:
        when = datetime.fromisoformat(text.upper())
    except ValueError:
        return None
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


async def _refusals(since: datetime, pubkey: PubKey | None, limit: int) -> int:
    from tms.ledger.refusals import RefusalStore

    settings = Settings.from_env()
    _, pool = await _open_pool(settings, max_size=1)
    try:
        store = RefusalStore(pool)
        counts = await store.counts(since, pubkey)
        newest = await store.newest(since, pubkey, limit) if limit else []
        dropped = await store.dropped()
    finally:
        await pool.close()
    whose = f" by {nip19.npub_encode(pubkey)}" if pubkey else ""
    print(f"refusals{whose} since {_utc(since)}: {sum(counts.values()):,}")
    width = max((len(kind) for kind in counts), default=0)
    for kind, count in counts.items():
        print(f"  {kind:<{width}}  {count:>9,}")
    print(
        f"dropped so far: {dropped:,} (each kind keeps its newest {settings.refusals_keep:,} "
        "rows; TMS_REFUSALS_KEEP)"
    )
    if newest:
        print(
            f"the newest {len(newest):,} rows, oldest first (time, kind, count, tool, address, "
            "key); a rate_limited row counts a minute's refusals of one route, address and key, "
            "from the minute's start:"
        )
    for record in newest:
        key = nip19.npub_encode(record.pubkey) if record.pubkey else "-"
        print(
            f"{_utc(record.at)}  {record.kind}  {record.count:,}  {record.tool}  "
            f"{record.address or '-'}  {key}"
        )
    return 0


def _utc(when: datetime) -> str:
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _command(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    name: str,
    summary: str,
    details: str = "",
) -> argparse.ArgumentParser:
    """A subcommand whose `--help` says what it does (`help` alone shows only in `tms -h`)."""
    description = summary[0].upper() + summary[1:] + "." + (f" {details}" if details else "")
    return commands.add_parser(name, help=summary, description=description)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tms", description="TMS, the evidence ledger.")
    parser.add_argument("--version", action="version", version=f"tms {version('tms')}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    verify = _command(
        commands,
        "verify",
        "check every line of a JSON Lines export: envelope, id, signature, schema",
        "Offline, line by line, as any Nostr library would. Exit 1 if a line is invalid. "
        "To prove the file holds its whole collection, use tms verify-export.",
    )
    verify.add_argument("file", help="the .jsonl file, or - for standard input")
    fetch = _command(
        commands,
        "fetch",
        "download a page or PDF as evidence text; print {url, title, chars, text} as JSON",
        "Exactly as the fetch_url tool and the Fetch button do (same size, time and address "
        "rules). A refusal is one line on stderr, exit 2.",
    )
    fetch.add_argument("url", help="an http or https URL")
    serve = _command(
        commands,
        "serve",
        "run the HTTP server (TMS_HOST and TMS_PORT, default 127.0.0.1:8000)",
        "Pages, /mcp, the relay and exports, on TMS_DATABASE_URL or the embedded PostgreSQL in "
        "TMS_DATA_DIR. Set TMS_BASE_URL to the public URL in production. Stops cleanly on "
        "SIGTERM or Ctrl-C.",
    )
    serve.add_argument("--host", help="address to listen on (overrides TMS_HOST)")
    serve.add_argument("--port", type=int, help="port to listen on (overrides TMS_PORT)")
    _command(
        commands,
        "stdio",
        "serve the MCP tools over stdin/stdout, for a local agent",
        "The same tools as /mcp, on the server's database. With TMS_NSEC set (an nsec or 64 "
        "hex), tool calls without a request are signed with that key; events for publish still "
        "need signing (tms-sign event).",
    )
    migrate = _command(
        commands,
        "migrate",
        "apply the database migrations (the server does at start-up)",
        "On a Citus coordinator, --distribute spreads the ledger over the workers by collection "
        "(once: later migrations' tables follow by themselves). Prints where each table lives.",
    )
    migrate.add_argument(
        "--distribute",
        action="store_true",
        help="distribute the tables by collection over the Citus cluster",
    )
    approve = _command(
        commands,
        "approve",
        "approve keys: they may log in, use the service and create collections",
        "Keys as npub or 64 hex. Members of a collection need no approval: its owner adds them "
        "on the members page. Works whether or not the server is running.",
    )
    approve.add_argument("keys", nargs="+", metavar="NPUB_OR_HEX", help="a key: npub or 64 hex")
    revoke = _command(
        commands,
        "revoke",
        "withdraw approvals",
        "The keys may no longer create collections, nor log in unless a collection lists them; "
        "what they signed stays, and collections they own stay theirs. Keys as npub or 64 hex.",
    )
    revoke.add_argument("keys", nargs="+", metavar="NPUB_OR_HEX", help="a key: npub or 64 hex")
    _command(commands, "approved", "list approved keys: npub, hex, approved_at")
    collections = _command(
        commands,
        "collections",
        "list every collection: slug, owner, record counts, members, created",
        "One line a collection, oldest first, after a header. --slugs prints the slugs alone, "
        "for a backup loop: for s in $(tms collections --slugs); do tms export $s --checkpoint "
        "> $s.jsonl; done",
    )
    collections.add_argument(
        "--slugs", action="store_true", help="print only the slugs, one a line, no header"
    )
    export = _command(
        commands,
        "export",
        "write a collection as JSON Lines to stdout, from the database (backups)",
        "Every event of the collection in ledger order, with its authors' terms and profiles; "
        "tms collections lists the slugs.",
    )
    export.add_argument("slug", help="the collection")
    export.add_argument(
        "--checkpoint",
        action="store_true",
        help="end with the log's signed checkpoint line, for tms verify-export",
    )
    audit = _command(
        commands,
        "verify-export",
        "prove offline that an export holds its collection's whole log, unaltered and in "
        "order, against signed checkpoints",
        "Without any checkpoint (an export taken without --checkpoint or ?checkpoint=1, and "
        "none given), every line and the file against itself are still checked, but nothing "
        "proves it whole: exit 1. Exit 2 if it cannot run.",
    )
    audit.add_argument("file", help="the export (.jsonl), ideally ending with its checkpoint line")
    audit.add_argument(
        "--checkpoint",
        metavar="FILE",
        help="a checkpoint you kept (a signed note, or JSON holding one): the export must "
        "extend it",
    )
    audit.add_argument(
        "--key",
        required=True,
        metavar="VERIFIER_KEY",
        help="the server's log key (GET /log-key), or a file holding it",
    )
    refusals = _command(
        commands,
        "refusals",
        "what was refused (bad signatures, non-members, replays, rate limits, SSRF...): "
        "counts by kind, then the newest records",
    )
    refusals.add_argument(
        "--since", default="24h", help="an age (15m, 1h, 7d) or an ISO 8601 time; default 24h"
    )
    refusals.add_argument("--key", metavar="NPUB_OR_HEX", help="only this key's refusals")
    refusals.add_argument(
        "--limit", type=int, default=50, help="newest records to list (default 50; 0: counts only)"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    parser = build_parser()
    ns = parser.parse_args(argv)
    if ns.command == "verify":
        raise SystemExit(_verify(ns.file))
    if ns.command == "fetch":
        raise SystemExit(_fetch(ns.url))
    if ns.command == "serve":
        raise SystemExit(_serve(ns.host, ns.port))
    if ns.command == "stdio":
        raise SystemExit(_stdio())
    if ns.command == "migrate":
        raise SystemExit(_operator(_migrate(ns.distribute)))
    if ns.command in ("approve", "revoke"):
        keys = _pubkeys(ns.keys, f"{ns.command}d")
        if keys is None:
            raise SystemExit(2)
        raise SystemExit(_operator((_approve if ns.command == "approve" else _revoke)(keys)))
    if ns.command == "approved":
        raise SystemExit(_operator(_approved()))
    if ns.command == "collections":
        raise SystemExit(_operator(_collections(ns.slugs)))
    if ns.command == "export":
        raise SystemExit(_operator(_export(ns.slug, ns.checkpoint)))
    if ns.command == "verify-export":
        from tms.cli.verify_export import run

        raise SystemExit(run(ns.file, ns.checkpoint, ns.key, sys.stdout))
    if ns.command == "refusals":
        since = since_when(ns.since, datetime.now(UTC))
        if since is None:
            print(
                f"tms: --since {ns.since!r}: give an age (15m, 1h, 7d) or an ISO 8601 time",
                file=sys.stderr,
            )
            raise SystemExit(2)
        keys = _pubkeys([ns.key], "shown") if ns.key is not None else []
        if keys is None:
            raise SystemExit(2)
        if not 0 <= ns.limit <= 100_000:
            print("tms: --limit must be from 0 to 100000", file=sys.stderr)
            raise SystemExit(2)
        raise SystemExit(_operator(_refusals(since, keys[0] if keys else None, ns.limit)))
