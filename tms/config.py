"""Settings, all from `TMS_*` environment variables with sane defaults (listed in
docs/operating.md, which a test holds to every name the code reads).

Read once into a frozen object at start-up, so a misconfiguration fails loudly there and not
half-way through a request.
"""

from __future__ import annotations

import dataclasses
import os
import re
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Final

from tms.errors import ConfigError, EmbeddingError, LogError
from tms.guard.clients import Network, parse_networks
from tms.guard.rates import (
    DEFAULT_ADDRESS,
    DEFAULT_FETCH,
    DEFAULT_KEY,
    DEFAULT_LOGIN,
    DEFAULT_READ,
    RateLimits,
    parse_rates,
)
from tms.guard.refusals import DEFAULT_KEEP

if TYPE_CHECKING:
    from tms.tlog.note import LogSigner

DEFAULT_MODEL: Final = "sentence-transformers/all-MiniLM-L6-v2"
DEFAULT_PROFILE_RELAYS: Final = ("wss://relay.damus.io", "wss://relay.primal.net")
SECRET_FILE: Final = "secret"  # TMS_SECRET's generated value, inside TMS_DATA_DIR
MIN_SECRET_CHARS: Final = 32
MAX_THREADS: Final = 4  # default cap: more threads help little on a model this small
DEFAULT_EXPORTS: Final = 2  # exports streamed at once (TMS_MAX_EXPORTS)
MAX_WORKERS: Final = 32  # server processes at most (TMS_WORKERS); `tms.guard.shared` holds 32
DEFAULT_WORKERS_CAP: Final = 8  # the default is the machine's cores, at most this many
DEFAULT_RELAY_CONNECTIONS: Final = 4  # the relay's reads' own pool (TMS_RELAY_CONNECTIONS)
DEFAULT_RELAY_STATEMENT_SECONDS: Final = 10.0  # its statement_timeout (TMS_RELAY_STATEMENT_SECONDS)
DEFAULT_NEG_WARM: Final = 8  # collections whose NIP-77 lists a server loads at start (TMS_NEG_WARM)
DEFAULT_PLUGIN_SECONDS: Final = 5.0  # a policy's or filter's call (TMS_PLUGIN_TIMEOUT_SECONDS)
DEFAULT_HOOK_SECONDS: Final = 30.0  # an after-commit hook's call (TMS_HOOK_TIMEOUT_SECONDS)
DEFAULT_HOOK_QUEUE: Final = 1000  # batches waiting for each hook (TMS_HOOK_QUEUE)
DEFAULT_STRFRY_SECONDS: Final = 10.0  # a batch's, from asked to answered (strfry's, an event's)
STRFRY: Final = "strfry"  # the built-in plugin that runs TMS_STRFRY_COMMAND (tms.extension)
_PLUGIN_NAME: Final = re.compile(r"[a-z][a-z0-9_-]{0,39}")
LOG_KEY_FILE: Final = "log-key"  # TMS_LOG_KEY's generated value, inside TMS_DATA_DIR
MIN_METRICS_TOKEN_CHARS: Final = 24
_BEARER: Final = re.compile(r"[A-Za-z0-9\-._~+/]+=*")  # RFC 6750's b64token


def _default_threads() -> int:
    try:
        cpus = len(os.sched_getaffinity(0))  # the CPUs this process may run on
    except (AttributeError, OSError):  # not on Linux
        cpus = os.cpu_count() or 1
    return max(1, min(cpus, MAX_THREADS))


@dataclass(frozen=True, slots=True)
class EmbeddingConfig:
    """`TMS_EMBED*`: whether vectors are made, by which model, on how many threads."""

    enabled: bool
    model: str
    model_dir: Path | None  # the model's files, instead of the packaged ones or a download
    threads: int  # batches run at once, each on one onnxruntime thread

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> EmbeddingConfig:
        env = os.environ if env is None else env
        switch = env.get("TMS_EMBED", "")
        enabled = switch.strip().lower() or "on"
        if enabled not in ("on", "off"):
            raise EmbeddingError(f"TMS_EMBED must be 'on' or 'off', got {switch!r}")
        threads_text = env.get("TMS_EMBED_THREADS", "").strip()
        if threads_text:
            try:
                threads = int(threads_text)
            except ValueError:
                threads = 0
            if not 1 <= threads <= 256:
                raise EmbeddingError(
                    f"TMS_EMBED_THREADS must be a number of threads from 1 to 256, "
                    f"got {threads_text!r}"
                )
        else:
            threads = _default_threads()
        model_dir = env.get("TMS_EMBED_MODEL_DIR", "").strip()
        return cls(
            enabled=enabled == "on",
            model=env.get("TMS_EMBED_MODEL", "").strip() or DEFAULT_MODEL,
            model_dir=Path(model_dir) if model_dir else None,
            threads=threads,
        )


@dataclass(frozen=True, slots=True)
class Settings:
    database_url: str | None  # None: start the embedded PostgreSQL in data_dir
    data_dir: Path
    host: str
    port: int
    base_url: str | None  # the public origin, e.g. https://tms.example.org, when behind a proxy
    embedding: EmbeddingConfig
    embed_wait: float  # seconds a publish waits for its batch's vectors; the rest catch up later
    head_seconds: float = 10.0  # a request's head must arrive within this
    body_seconds: float = 60.0  # and its body within this after the head
    max_connections: int = 10_000  # connections held at once
    max_connections_per_address: int = 64  # of them, by one client address (trusted proxies: any)
    http_reserve: int | None = None  # of them, never WebSocket ones; None: a tenth
    body_min_rate: int = 1024  # bytes a second a request body keeps up after its first seconds
    log_key: str | None = None  # TMS_LOG_KEY; None: generated into data_dir (`load_log_key`)
    secret: str | None = None  # TMS_SECRET; None: generated into data_dir (`load_secret`)
    profile_relays: tuple[str, ...] = DEFAULT_PROFILE_RELAYS  # where the pages look up profiles
    rates: RateLimits = field(default_factory=RateLimits)  # TMS_RATE_*; none when built by hand
    trusted_proxies: tuple[Network, ...] = ()  # peers whose X-Forwarded-For is believed
    refusals_keep: int = DEFAULT_KEEP  # rows the refusal log keeps of each kind
    relay_idle_seconds: float = 300.0  # a relay connection with no subscription, unused, ends
    relay_memory_mb: int = 128  # TMS_RELAY_MEMORY_MB: what every relay connection holds, in all
    relay_behind_seconds: float = 15.0  # TMS_RELAY_BEHIND_SECONDS: a live event unread this long
    max_exports: int = DEFAULT_EXPORTS  # exports streamed at once, per process
    relay_connections: int = DEFAULT_RELAY_CONNECTIONS  # the relay's reads' pool, per process
    workers: int = 1  # server processes of `tms serve` (TMS_WORKERS; default: the cores, at most 8)
    relay_statement_seconds: float = DEFAULT_RELAY_STATEMENT_SECONDS  # one relay read, at most
    neg_warm: int = DEFAULT_NEG_WARM  # TMS_NEG_WARM: NIP-77 lists loaded at start (0: none)
    export_wait: float = 10.0  # seconds an export waits for a slot (no variable: tests set it)
    metrics_token: str | None = None  # TMS_METRICS_TOKEN: GET /metrics with it as a bearer token
    metrics_port: int | None = None  # TMS_METRICS_PORT: metrics on a port of their own
    metrics_host: str = "127.0.0.1"  # TMS_METRICS_HOST: where that port listens
    witness_policy: str | None = None  # TMS_WITNESS_POLICY: a tlog-policy file (tms.witness)
    witness_logs: str | None = None  # TMS_WITNESS_LOGS: the logs this server witnesses
    witness_key: str | None = None  # TMS_WITNESS_KEY; None: generated into data_dir if needed
    plugins: tuple[str, ...] = ()  # TMS_PLUGINS: the plugins enabled, in the order asked
    plugin_seconds: float = DEFAULT_PLUGIN_SECONDS  # TMS_PLUGIN_TIMEOUT_SECONDS
    hook_seconds: float = DEFAULT_HOOK_SECONDS  # TMS_HOOK_TIMEOUT_SECONDS
    hook_queue: int = DEFAULT_HOOK_QUEUE  # TMS_HOOK_QUEUE
    strfry_command: str | None = None  # TMS_STRFRY_COMMAND: run by the plugin `strfry`
    strfry_seconds: float = DEFAULT_STRFRY_SECONDS  # TMS_STRFRY_TIMEOUT_SECONDS
    log_level: str = "info"  # TMS_LOG_LEVEL (`tms serve --log-level`): debug, info, warning, error
    log_format: str = "text"  # TMS_LOG_FORMAT: text, or json (one object a line)
    access_log: bool = False  # TMS_ACCESS_LOG: a line per HTTP request answered
    new_log_key: bool = False  # `--new-log-key`: make a log key for a database with checkpoints

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        port_text = env.get("TMS_PORT", "8000")
        try:
            port = int(port_text)
        except ValueError:
            raise ConfigError(f"TMS_PORT must be a port number, got {port_text!r}") from None
        if not 0 < port < 65536:
            raise ConfigError(f"TMS_PORT must be between 1 and 65535, got {port}")
        base_url = env.get("TMS_BASE_URL", "").strip().rstrip("/") or None
        if base_url is not None and not base_url.startswith(("http://", "https://")):
            raise ConfigError(f"TMS_BASE_URL must start with http:// or https://, got {base_url!r}")
        embed_wait = _number(env, "TMS_EMBED_WAIT", 10, 0, 600, "seconds")
        max_connections = int(_number(env, "TMS_MAX_CONNECTIONS", 10_000, 10, 1_000_000, ""))
        plugins = _plugins(env)
        strfry_command = env.get("TMS_STRFRY_COMMAND", "").strip() or None
        if strfry_command is not None and STRFRY not in plugins:
            raise ConfigError(
                f"TMS_STRFRY_COMMAND is set but TMS_PLUGINS does not name '{STRFRY}': add it "
                "to run the command as a write policy, or unset TMS_STRFRY_COMMAND"
            )
        return cls(
            database_url=env.get("TMS_DATABASE_URL", "").strip() or None,
            data_dir=Path(env.get("TMS_DATA_DIR", "").strip() or "tms-data").resolve(),
            host=env.get("TMS_HOST", "").strip() or "127.0.0.1",
            port=port,
            base_url=base_url,
            embedding=EmbeddingConfig.from_env(env),
            embed_wait=embed_wait,
            head_seconds=_number(env, "TMS_HEAD_SECONDS", 10, 0.1, 3600, "seconds"),
            body_seconds=_number(env, "TMS_BODY_SECONDS", 60, 0.1, 3600, "seconds"),
            max_connections=max_connections,
            max_connections_per_address=int(
                _number(env, "TMS_MAX_CONNECTIONS_PER_ADDRESS", 64, 1, 1_000_000, "")
            ),
            http_reserve=_http_reserve(env, max_connections),
            body_min_rate=int(_number(env, "TMS_BODY_MIN_RATE", 1024, 0, 1_000_000_000, "")),
            log_key=env.get("TMS_LOG_KEY", "").strip() or None,
            secret=_secret(env),
            profile_relays=_relays(env),
            rates=RateLimits(
                address=parse_rates(
                    "TMS_RATE_ADDRESS", env.get("TMS_RATE_ADDRESS", DEFAULT_ADDRESS)
                ),
                key=parse_rates("TMS_RATE_KEY", env.get("TMS_RATE_KEY", DEFAULT_KEY)),
                fetch=parse_rates("TMS_RATE_FETCH", env.get("TMS_RATE_FETCH", DEFAULT_FETCH)),
                login=parse_rates("TMS_RATE_LOGIN", env.get("TMS_RATE_LOGIN", DEFAULT_LOGIN)),
                read=parse_rates("TMS_RATE_READ", env.get("TMS_RATE_READ", DEFAULT_READ)),
            ),
            trusted_proxies=parse_networks(
                "TMS_TRUSTED_PROXIES", env.get("TMS_TRUSTED_PROXIES", "")
            ),
            refusals_keep=int(
                _number(env, "TMS_REFUSALS_KEEP", DEFAULT_KEEP, 100, 100_000_000, "")
            ),
            relay_idle_seconds=_number(env, "TMS_RELAY_IDLE_SECONDS", 300, 1, 86400, "seconds"),
            relay_memory_mb=int(_number(env, "TMS_RELAY_MEMORY_MB", 128, 16, 1_000_000, "")),
            relay_behind_seconds=_number(env, "TMS_RELAY_BEHIND_SECONDS", 15, 1, 3600, "seconds"),
            max_exports=int(_number(env, "TMS_MAX_EXPORTS", DEFAULT_EXPORTS, 1, 64, "")),
            relay_connections=int(
                _number(env, "TMS_RELAY_CONNECTIONS", DEFAULT_RELAY_CONNECTIONS, 1, 64, "")
            ),
            workers=int(_number(env, "TMS_WORKERS", default_workers(), 1, MAX_WORKERS, "")),
            relay_statement_seconds=_number(
                env,
                "TMS_RELAY_STATEMENT_SECONDS",
                DEFAULT_RELAY_STATEMENT_SECONDS,
                0.001,
                3600,
                "seconds",
            ),
            neg_warm=int(_number(env, "TMS_NEG_WARM", DEFAULT_NEG_WARM, 0, 1000, "")),
            metrics_token=_metrics_token(env),
            metrics_port=_metrics_port(env, port),
            metrics_host=env.get("TMS_METRICS_HOST", "").strip() or "127.0.0.1",
            witness_policy=env.get("TMS_WITNESS_POLICY", "").strip() or None,
            witness_logs=env.get("TMS_WITNESS_LOGS", "").strip() or None,
            witness_key=env.get("TMS_WITNESS_KEY", "").strip() or None,
            plugins=plugins,
            plugin_seconds=_number(
                env, "TMS_PLUGIN_TIMEOUT_SECONDS", DEFAULT_PLUGIN_SECONDS, 0.01, 600, "seconds"
            ),
            hook_seconds=_number(
                env, "TMS_HOOK_TIMEOUT_SECONDS", DEFAULT_HOOK_SECONDS, 0.01, 3600, "seconds"
            ),
            hook_queue=int(_number(env, "TMS_HOOK_QUEUE", DEFAULT_HOOK_QUEUE, 1, 1_000_000, "")),
            strfry_command=strfry_command,
            strfry_seconds=_number(
                env, "TMS_STRFRY_TIMEOUT_SECONDS", DEFAULT_STRFRY_SECONDS, 0.01, 600, "seconds"
            ),
            log_level=log_level("TMS_LOG_LEVEL", env.get("TMS_LOG_LEVEL", "")),
            log_format=_choice(env, "TMS_LOG_FORMAT", LOG_FORMATS),
            access_log=_choice(env, "TMS_ACCESS_LOG", ("off", "on")) == "on",
        )

    def serving(
        self,
        host: str | None,
        port: int | None,
        *,
        level: str | None = None,
        new_log_key: bool = False,
    ) -> Settings:
        """These settings as `tms serve --host/--port/--log-level/--new-log-key` override them:
        one listen address for everything that reads it (the log's origin as well as the
        listener), whichever of the flag or `TMS_HOST`/`TMS_PORT` gave it. The metrics port may
        not be that port either."""
        served = dataclasses.replace(
            self,
            host=host or self.host,
            port=self.port if port is None else port,
            log_level=self.log_level if level is None else log_level("--log-level", level),
            new_log_key=new_log_key or self.new_log_key,
        )
        if not 0 < served.port < 65536:
            raise ConfigError(f"--port must be between 1 and 65535, got {served.port}")
        if served.metrics_port == served.port:
            raise ConfigError(
                f"TMS_METRICS_PORT must not be the public port ({served.port}): metrics are private"
            )
        return served

    @property
    def log_host(self) -> str:
        """The host this server would name the transparency logs after: `TMS_BASE_URL` without
        its scheme (the public address), else the listen host (`--host`, else `TMS_HOST`). Only
        the first checkpoint a database signs takes it; later ones keep the host recorded then
        (sql/018, `tms.ledger.log.tree`)."""
        if self.base_url is not None:
            return self.base_url.split("://", 1)[1]
        return self.host


def load_log_key(settings: Settings) -> tuple[LogSigner, str | None]:
    """The key that signs every collection's checkpoints, and a line to log when it was chosen
    here. `TMS_LOG_KEY` when set; otherwise the file `TMS_DATA_DIR/log-key`, generated on first
    use under the name `Settings.log_host` (`generated`: the data directory's rule). The key
    must outlive the process: members check checkpoints with its public half (GET /log-key), so
    one that changed at each restart would disown every checkpoint signed before. A key that
    cannot be read or made stops start-up."""
    from tms.tlog.note import LogSigner, NoteSigner

    if settings.log_key is not None:
        try:
            return LogSigner(NoteSigner.parse(settings.log_key), settings.log_host), None
        except LogError as exc:
            raise ConfigError(f"TMS_LOG_KEY: {exc}") from None
    path = settings.data_dir / LOG_KEY_FILE
    try:
        text, made = generated(
            settings,
            LOG_KEY_FILE,
            "the log key",
            lambda: NoteSigner.generate(settings.log_host).encode(),
        )
        key = NoteSigner.parse(text)
    except LogError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    said = None
    if made:
        said = (
            f"TMS_LOG_KEY is unset: generated the checkpoint key {key.verifier().encode()} into "
            f"{path}; {KEEP_DATA_DIR}"
        )
    return LogSigner(key, settings.log_host), said


# What a generated secret's log line adds: the rule for the data directory, said once.
KEEP_DATA_DIR: Final = (
    "it is kept there and used at every start: keep TMS_DATA_DIR, and give every server sharing "
    "the database the same TMS_SECRET and TMS_LOG_KEY"
)


def generated(
    settings: Settings, name: str, what: str, make: Callable[[], str]
) -> tuple[str, bool]:
    """The data directory's one rule for a secret whose variable is unset (`TMS_SECRET`,
    `TMS_LOG_KEY`): it is the file `TMS_DATA_DIR/<name>`, made by `make` on first use with
    owner-only permissions (the directory created if need be, whether or not the database is
    the embedded one), and read at every later start. Returns its text and whether it was made
    now (the caller logs that, once: later starts have nothing to say)."""
    path = settings.data_dir / name
    try:
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        try:
            descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            return path.read_text("ascii").strip(), False
        value = make()
        with os.fdopen(descriptor, "w", encoding="ascii") as file:
            file.write(value + "\n")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read or create {what} {path}: {exc}") from None
    return value, True


LOG_LEVELS: Final = ("debug", "info", "warning", "error")
LOG_FORMATS: Final = ("text", "json")


def log_level(name: str, text: str) -> str:
    """`TMS_LOG_LEVEL` or `--log-level`: the least severe level logged (default info)."""
    level = text.strip().lower() or "info"
    if level not in LOG_LEVELS:
        raise ConfigError(f"{name} must be one of {', '.join(LOG_LEVELS)}, got {text!r:.40}")
    return level


def _choice(env: Mapping[str, str], name: str, choices: tuple[str, ...]) -> str:
    """One of `choices` (the first when unset)."""
    text = env.get(name, "")
    value = text.strip().lower() or choices[0]
    if value not in choices:
        raise ConfigError(f"{name} must be {' or '.join(choices)}, got {text!r:.40}")
    return value


def _secret(env: Mapping[str, str]) -> str | None:
    value = env.get("TMS_SECRET", "").strip()
    if value and len(value) < MIN_SECRET_CHARS:
        raise ConfigError(
            f"TMS_SECRET must be at least {MIN_SECRET_CHARS} characters (it signs login "
            f"cookies); got {len(value)}. `python -c 'import secrets; print(secrets.token_hex())'`"
            " makes one"
        )
    return value or None


def _metrics_token(env: Mapping[str, str]) -> str | None:
    """`TMS_METRICS_TOKEN`: what a scraper sends as `Authorization: Bearer ...` for the public
    port's /metrics. Long enough not to be guessed, and of the characters a bearer token may
    hold (RFC 6750), so that it reads the same in a header and in a scrape config."""
    value = env.get("TMS_METRICS_TOKEN", "").strip()
    if not value:
        return None
    if len(value) < MIN_METRICS_TOKEN_CHARS or not _BEARER.fullmatch(value):
        raise ConfigError(
            f"TMS_METRICS_TOKEN must be at least {MIN_METRICS_TOKEN_CHARS} characters of letters, "
            "digits and -._~+/ (got one that is not); `python -c 'import secrets; "
            "print(secrets.token_urlsafe())'` makes one"
        )
    return value


def _metrics_port(env: Mapping[str, str], public: int) -> int | None:
    """`TMS_METRICS_PORT`: a port of its own for the metrics, never the public one."""
    if not env.get("TMS_METRICS_PORT", "").strip():
        return None
    port = int(_number(env, "TMS_METRICS_PORT", 0, 1, 65535, ""))
    if port == public:
        raise ConfigError(f"TMS_METRICS_PORT must not be TMS_PORT ({public}): metrics are private")
    return port


def _plugins(env: Mapping[str, str]) -> tuple[str, ...]:
    """`TMS_PLUGINS`: comma-separated plugin names, each once. Their order is the order their
    write policies and read filters are asked in (tms.extension)."""
    names: list[str] = []
    for item in env.get("TMS_PLUGINS", "").split(","):
        name = item.strip()
        if not name:
            continue
        if not _PLUGIN_NAME.fullmatch(name):
            raise ConfigError(
                f"TMS_PLUGINS must be comma-separated plugin names (a lowercase letter, then up "
                f"to 39 lowercase letters, digits, '-' or '_'), got {name!r:.60}"
            )
        if name in names:
            raise ConfigError(f"TMS_PLUGINS names the plugin '{name}' twice")
        names.append(name)
    return tuple(names)


def _relays(env: Mapping[str, str]) -> tuple[str, ...]:
    """`TMS_PROFILE_RELAYS`: comma-separated ws:// or wss:// origins (ws:// is for a relay on
    this machine, as the tests run one). They go into the pages' Content-Security-Policy, so
    nothing that could widen it is accepted: no paths with spaces, quotes or semicolons. Unset:
    the two public relays; set but empty: none, and the pages contact no other origin."""
    text = env.get("TMS_PROFILE_RELAYS")
    if text is None:
        return DEFAULT_PROFILE_RELAYS
    relays = []
    for item in text.split(","):
        relay = item.strip().rstrip("/")
        if not relay:
            continue
        if not relay.startswith(("wss://", "ws://")) or any(c in relay for c in " ;,'\"*"):
            raise ConfigError(
                f"TMS_PROFILE_RELAYS must be comma-separated wss:// addresses, got {relay!r:.100}"
            )
        relays.append(relay)
    return tuple(relays)


def load_secret(settings: Settings) -> tuple[bytes, str | None]:
    """The key that signs login cookies and nonces, and a line to log when it was chosen here.
    `TMS_SECRET` when set; otherwise the file `TMS_DATA_DIR/secret`, by the same rule as the
    log key (`generated`), so that logins survive a restart and every process on that data
    directory agrees."""
    if settings.secret is not None:
        return settings.secret.encode(), None
    path = settings.data_dir / SECRET_FILE
    value, made = generated(
        settings, SECRET_FILE, "the login secret", lambda: secrets.token_hex(32)
    )
    if len(value) < MIN_SECRET_CHARS:
        raise ConfigError(
            f"{path} holds a secret shorter than {MIN_SECRET_CHARS} characters; delete "
            "it to have a new one generated (every browser is logged out)"
        )
    said = f"TMS_SECRET is unset: generated the login secret into {path}; {KEEP_DATA_DIR}"
    return value.encode(), said if made else None


def _http_reserve(env: Mapping[str, str], max_connections: int) -> int | None:
    """`TMS_HTTP_RESERVE`: connections kept for HTTP, from 1 to half the cap (the WebSocket
    connections keep the rest); None, unset: a tenth of `TMS_MAX_CONNECTIONS`."""
    if not env.get("TMS_HTTP_RESERVE", "").strip():
        return None
    return int(_number(env, "TMS_HTTP_RESERVE", 1, 1, max_connections // 2, ""))


def default_workers() -> int:
    """`TMS_WORKERS` unset: one server process a core this process may run on, at most
    `DEFAULT_WORKERS_CAP` (each holds its own database connections, `tms.cli.workers`)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return max(1, min(cores, DEFAULT_WORKERS_CAP))


def _number(
    env: Mapping[str, str], name: str, default: float, low: float, high: float, unit: str
) -> float:
    text = env.get(name, "").strip()
    if not text:
        return float(default)
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not low <= value <= high or (not unit and value != int(value)):
        what = unit or "a whole number"
        raise ConfigError(f"{name} must be {what} from {low:g} to {high:g}, got {text!r}")
    return value
