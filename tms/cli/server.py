"""`tms serve` runs the HTTP server; `tms stdio` serves the same MCP tools over stdin and stdout
for a local agent. Both load the plugins `TMS_PLUGINS` names and check the database first
(`tms.cli.database`), so that a plugin that cannot be enabled, a collision (`tms.registry.
Collision`) or a database that cannot be used is one line and exit 1 rather than a traceback from
inside the server."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gc
import ipaddress
import logging
import os
import signal
import socket
import sys
from typing import TYPE_CHECKING, Final

from tms.cli.database import announce, describe, usable_database
from tms.cli.logs import configure as configure_logging
from tms.cli.said import failed
from tms.config import MAX_WORKERS, Settings
from tms.errors import ConfigError, TMSError
from tms.guard.shared import SLOT_ENV
from tms.nostr.events import SecretKey

if TYPE_CHECKING:
    from starlette.applications import Starlette

    from tms.http.protocol import ConnectionLimits
    from tms.plugins.loading import Extensions

log = logging.getLogger("tms.serve")

# The cyclic garbage collector's youngest generation is collected after this many allocations
# (Python's default: 700). A publish allocates a few hundred containers that die young by
# reference counting; at the default, collections took a tenth of the server's CPU under load.
GC_YOUNG_THRESHOLD = 20_000
SHUTDOWN_GRACE_SECONDS = 30  # in-flight requests (a long export) get this long to finish
FILES_BESIDES_CONNECTIONS = 200  # database connections, workers, logs, the model's files


def serve(
    host: str | None,
    port: int | None,
    level: str | None = None,
    *,
    new_log_key: bool = False,
    workers: int | None = None,
) -> int:
    """Check everything that can be checked first, so that a failure is one line rather than a
    traceback from inside the server: the settings, the listen address (bound before the
    database is touched), the plugins (loaded once), the database and its log key; then serve
    until SIGTERM or Ctrl-C, and exit 0 after a clean shutdown (the embedded PostgreSQL stops
    with the last process using it). Everything said from then on is the server's log
    (`tms.cli.logs`)."""
    from tms.app import ROUTES, create_app
    from tms.plugins.loading import load_extensions

    # uvicorn restores these after its graceful shutdown and re-raises the signal: exiting through
    # SystemExit (not the default handler's instant death) lets atexit stop the embedded server.
    signal.signal(signal.SIGTERM, _exit_cleanly)
    signal.signal(signal.SIGINT, _exit_cleanly)
    try:
        # --host and --port are TMS_HOST and TMS_PORT for everything, the log's origin too.
        settings = Settings.from_env().serving(host, port, level=level, new_log_key=new_log_key)
        if workers is not None:
            if not 1 <= workers <= MAX_WORKERS:
                raise ConfigError(f"--workers must be from 1 to {MAX_WORKERS}, got {workers}")
            settings = dataclasses.replace(settings, workers=workers)
    except TMSError as exc:
        return failed(exc)
    configure_logging(settings)
    try:
        warning = origin_warning(settings.base_url, settings.host)
        if warning is not None:
            log.warning("%s", warning)
        if settings.metrics_port is not None:
            free_port(settings.metrics_host, settings.metrics_port, "TMS_METRICS_PORT")
        # Bound now, listened on once the app has started: a port another process holds stops
        # start-up here, before the database is migrated, and nobody connects to a server that
        # is not up yet (a connection is refused until then).
        listener = bind_port(settings.host, settings.port)
        try:
            summary = enabled(settings)
            # The plugins, once: one that cannot be enabled, or whose tool, prompt or route
            # collides with the core's or another's, stops start-up before the database.
            extensions = load_extensions(settings)
            extensions.route_table(ROUTES)  # the app's table, as `create_app` builds it below
            log.info("database: %s", describe(settings))
            asyncio.run(usable_database(settings))
            app = create_app(settings, extensions=extensions)
        except BaseException:
            listener.close()
            raise
    except TMSError as exc:
        return failed(exc)
    limits = _connection_limits(settings)
    quiet_collector()
    log.info("enabled: %s", summary)
    if settings.workers == 1:
        return _run(app, settings, limits, listener)
    from tms.cli.workers import supervise

    def worker(served: Settings) -> int:
        """One worker: the app built anew in it (its settings may lack the metrics port)."""
        return _run(create_app(served, extensions=extensions), served, limits, listener)

    return supervise(settings, listener, worker)


def _run(
    app: Starlette, settings: Settings, limits: ConnectionLimits, listener: socket.socket
) -> int:
    import uvicorn

    from tms.http.protocol import GuardedHttpProtocol
    from tms.http.websocket import uvicorn_options
    from tms.relay.limits import MAX_MESSAGE_BYTES

    class Server(uvicorn.Server):
        """uvicorn's server on the socket bound at start, saying where it serves once it does
        (of `--workers N`, the first worker says it for all: they share the socket)."""

        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets)
            if self.started and os.environ.get(SLOT_ENV, "0") == "0":
                public = settings.base_url
                log.info(
                    "serving on %s%s",
                    _origin(settings.host, settings.port),
                    f" (public URL {public})" if public else "",
                )

    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        lifespan="on",
        http=GuardedHttpProtocol.with_limits(limits),
        **uvicorn_options(limits, MAX_MESSAGE_BYTES),  # the relay's WebSocket connections
        proxy_headers=False,  # X-Forwarded-For is read by the app, from TMS_TRUSTED_PROXIES only
        timeout_graceful_shutdown=SHUTDOWN_GRACE_SECONDS,
        log_config=None,  # the log is set up already (`tms.cli.logs`)
        log_level=None,
        access_log=settings.access_log,
    )
    server = Server(config)
    try:
        server.run(sockets=[listener])
    except KeyboardInterrupt:
        pass
    finally:
        listener.close()
    return 0 if server.started else 1


def _origin(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def enabled(settings: Settings) -> str:
    """The start-up log's one line of what this server runs with, beyond the defaults: the
    plugins by name, vector search, the witnesses its checkpoints go to, the logs it witnesses
    (and its witness key, when made now), the metrics' address, the access log."""
    from tms.witness.settings import WITNESS_KEY_FILE, WitnessSettings

    key_file = settings.data_dir / WITNESS_KEY_FILE
    making_key = settings.witness_logs is not None and settings.witness_key is None
    made = making_key and not key_file.exists()
    witnessing = WitnessSettings.load(settings)  # a file that cannot be read stops start-up
    parts = [f"plugins {', '.join(settings.plugins)}" if settings.plugins else "no plugins"]
    parts.append(
        f"vector search ({settings.embedding.model})"
        if settings.embedding.enabled
        else "no vector search (TMS_EMBED=off)"
    )
    if witnessing.policy is not None:
        count = len(witnessing.policy.witnesses)
        parts.append(f"checkpoints submitted to {count} witness{'es' if count != 1 else ''}")
    if settings.witness_logs is not None:
        logs = len(witnessing.logs.logs)
        said = f"witnessing {logs} log{'s' if logs != 1 else ''}"
        if made:
            said += f" (witness key generated into {key_file})"
        parts.append(said)
    if settings.metrics_port is not None:
        where = settings.metrics_host
        where = f"[{where}]" if ":" in where else where
        parts.append(f"metrics on http://{where}:{settings.metrics_port}/metrics")
    elif settings.metrics_token is not None:
        parts.append("metrics at /metrics with TMS_METRICS_TOKEN")
    parts.append("access log" if settings.access_log else "no access log (TMS_ACCESS_LOG=off)")
    return "; ".join(parts)


def quiet_collector() -> None:
    """Keep the cyclic garbage collector off what lives as long as the process: every object
    made by the imports and the app so far is moved out of its generations (`gc.freeze`), so
    that no full collection walks them again, and young collections come less often. Memory
    freed by reference counting, nearly all of it, is unaffected."""
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, older, oldest)


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


def bind_port(host: str, port: int) -> socket.socket:
    """A socket bound to the listen address, not yet listening (uvicorn listens on it once the
    app has started); one line naming the setting when it cannot be bound."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host.strip("[]"), port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except (OSError, UnicodeError) as exc:
        raise ConfigError(f"TMS_HOST/--host: cannot listen on {host}: {exc}") from None
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind(address)
    except OSError as exc:
        sock.close()
        raise ConfigError(
            f"TMS_PORT/--port: cannot listen on {host} port {port}: {exc.strerror or exc}"
        ) from None
    sock.set_inheritable(True)
    return sock


def free_port(host: str, port: int, name: str) -> None:
    """Refuse to start, in one line, when `port` cannot be listened on (taken, or an address
    this machine does not have): the listener opens inside the app's start-up, where the
    failure would be a traceback."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the listener will
        try:
            sock.bind((host.strip("[]"), port))
        except OSError as exc:
            raise ConfigError(
                f"{name}: cannot listen on {host} port {port}: {exc.strerror or exc}"
            ) from None


def _loopback(host: str) -> bool:
    if host.lower() in ("localhost", "localhost.", "ip6-localhost"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:  # a name: it may resolve anywhere
        return False


def _connection_limits(settings: Settings) -> ConnectionLimits:
    """The settings' limits, with as many file descriptors as the system lets this process
    have: connections beyond what descriptors allow would fail where nobody sees it (the
    accept itself fails, and the connection cap, which closes one connection to make room for
    a new one, never gets to run). When the hard limit is below the cap and what else the
    process holds, the cap is lowered to fit, and said."""
    import resource

    from tms.http.protocol import ConnectionLimits

    wanted = settings.max_connections + FILES_BESIDES_CONNECTIONS
    soft = raise_file_limit(wanted)
    connections = settings.max_connections
    if soft != resource.RLIM_INFINITY and connections > soft - FILES_BESIDES_CONNECTIONS:
        connections = max(10, soft - FILES_BESIDES_CONNECTIONS)
        log.warning(
            "only %s file descriptors allowed (the hard limit): holding at most %s connections, "
            "not TMS_MAX_CONNECTIONS=%s; raise the hard limit (ulimit -Hn, LimitNOFILE=) to hold "
            "them all",
            f"{soft:,}",
            f"{connections:,}",
            f"{settings.max_connections:,}",
        )
    return ConnectionLimits.of(settings, connections)


def raise_file_limit(wanted: int) -> int:
    """Raise this process's soft limit on open files to its hard limit (at least `wanted`
    when the hard limit is unlimited), say so, and return the soft limit now in force."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = max(wanted, soft) if hard == resource.RLIM_INFINITY else hard
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError) as exc:  # a container may forbid it
            log.warning("could not raise the open-file limit from %s: %s", f"{soft:,}", exc)
            return soft
        log.info("open-file limit raised from %s to %s", f"{soft:,}", f"{target:,}")
        return target
    return soft


def stdio(*, create: bool = False, new_log_key: bool = False) -> int:
    """MCP over stdin and stdout against the server's database (a new embedded one only with
    `create`: an agent started from another directory would otherwise see an empty ledger).
    stdout carries the protocol only: the SDK points fd 1 at stderr while serving, and the
    database and model are opened inside that, so nothing they print can corrupt the stream."""
    from tms.nostr.keys import parse_secret
    from tms.plugins.loading import load_extensions

    try:
        settings = dataclasses.replace(Settings.from_env(), new_log_key=new_log_key)
        # A plugin that cannot be enabled is one line; one that prints as it loads must not
        # write into the protocol's stream.
        with contextlib.redirect_stdout(sys.stderr):
            extensions = load_extensions(settings)
        nsec = os.environ.get("TMS_NSEC", "").strip()
        try:
            signer = parse_secret(nsec) if nsec else None
        except TMSError as exc:
            raise TMSError(
                f"TMS_NSEC: {exc}; unset it to serve without a key (then every call carries "
                "a signed `request`)"
            ) from None
        print(_signing_notice(signer), file=sys.stderr, flush=True)
        if not announce(settings, create=create):
            return 1
        asyncio.run(_serve_stdio(settings, signer, extensions))
    except TMSError as exc:
        return failed(exc)
    except KeyboardInterrupt:
        pass
    return 0


# What a call refused for want of a `request` says over stdio when no key signs for the agent:
# the agent reads the refusal, not the server's stderr, so the refusal names the way out.
UNSIGNED_HINT: Final = (
    "or have `tms stdio` sign calls for you: start it with TMS_NSEC set to the agent's nsec "
    "or 64 hex characters (`uv run tms-sign keygen` makes one), then pass the arguments directly"
)


def _signing_notice(signer: SecretKey | None) -> str:
    """Said on stderr as `tms stdio` starts (an MCP client shows it in its server log): whose
    key signs the calls, or that none does and what to set. Without it, an agent's first call
    is refused for want of a signed `request`, and nothing says that TMS_NSEC was the way."""
    if signer is None:
        return (
            "tms stdio: TMS_NSEC is not set, so no call is signed for you: each tool call must "
            "carry a signed `request` (kind 4707). To have calls signed with a key, set "
            "TMS_NSEC to its nsec or 64 hex characters (tms-sign keygen makes one)."
        )
    from tms.nostr.nip19 import npub_encode

    return f"tms stdio: signing tool calls as {npub_encode(signer.pubkey)} (TMS_NSEC)."


async def _serve_stdio(
    settings: Settings, signer: SecretKey | None, extensions: Extensions
) -> None:
    from mcp.server.stdio import stdio_server

    from tms.mcp.server import build_server
    from tms.rules.admission import Door
    from tms.runtime import open_runtime

    async with (
        stdio_server() as (read_stream, write_stream),
        extensions.running(),
        open_runtime(settings, model_first=True, extensions=extensions) as runtime,
    ):
        hint = None if signer is not None else UNSIGNED_HINT
        tools = runtime.tools(Door.STDIO, signer, unsigned_hint=hint)
        server = build_server(tools, extensions.prompts_served)
        await server.run(read_stream, write_stream, server.create_initialization_options())


def _exit_cleanly(signum: int, frame: object) -> None:
    raise SystemExit(0)
