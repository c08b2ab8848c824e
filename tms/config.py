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
from typing import TYPE_CHECKING, Any, Final

from tms.envvars import choice, number, parse_number, read_all, setting, switch, text
from tms.errors import ConfigError, EmbeddingError, InvalidKey, LogError
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
from tms.nostr.nip19 import npub_decode

if TYPE_CHECKING:
    from tms.nostr.events import SecretKey
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
STRFRY: Final = "strfry"  # the built-in plugin that runs TMS_STRFRY_COMMAND (tms.extension)
_PLUGIN_NAME: Final = re.compile(r"[a-z][a-z0-9_-]{0,39}")
LOG_KEY_FILE: Final = "log-key"  # TMS_LOG_KEY's generated value, inside TMS_DATA_DIR
RELAY_KEY_FILE: Final = "relay-key"  # TMS_RELAY_KEY's generated value, inside TMS_DATA_DIR
MIN_METRICS_TOKEN_CHARS: Final = 24
_BEARER: Final = re.compile(r"[A-Za-z0-9\-._~+/]+=*")  # RFC 6750's b64token


def _default_threads() -> int:
    try:
        cpus = len(os.sched_getaffinity(0))  # the CPUs this process may run on
    except (AttributeError, OSError):  # not on Linux
        cpus = os.cpu_count() or 1
    return max(1, min(cpus, MAX_THREADS))


def _embed_switch(variable: str, value: str | None, default: Any, got: Mapping[str, Any]) -> Any:
    enabled = (value or "").strip().lower() or "on"
    if enabled not in ("on", "off"):
        raise EmbeddingError(f"{variable} must be 'on' or 'off', got {value or ''!r}")
    return enabled == "on"


def _threads(variable: str, value: str | None, default: Any, got: Mapping[str, Any]) -> Any:
    text = (value or "").strip()
    if not text:
        return default
    try:
        threads = int(text)
    except ValueError:
        threads = 0
    if not 1 <= threads <= 256:
        raise EmbeddingError(f"{variable} must be a number of threads from 1 to 256, got {text!r}")
    return threads


def _path(variable: str, value: str | None, default: Any, got: Mapping[str, Any]) -> Any:
    text = (value or "").strip()
    return Path(text) if text else default


@dataclass(frozen=True, slots=True)
class EmbeddingConfig:
    """`TMS_EMBED*`: whether vectors are made, by which model, on how many threads."""

    enabled: bool = setting("TMS_EMBED", True, _embed_switch, shown="`on`")
    model: str = setting("TMS_EMBED_MODEL", DEFAULT_MODEL, text)
    # the model's files, instead of the packaged ones or a download
    model_dir: Path | None = setting("TMS_EMBED_MODEL_DIR", None, _path)
    # batches run at once, each on one onnxruntime thread
    threads: int = setting(
        "TMS_EMBED_THREADS", 1, _threads, factory=_default_threads, shown="CPUs, at most 4"
    )

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> EmbeddingConfig:
        return cls(**read_all(cls, os.environ if env is None else env))


def _port(variable: str, value: str | None, default: Any, got: Mapping[str, Any]) -> Any:
    text = value if value is not None else str(default)
    try:
        port = int(text)
    except ValueError:
        raise ConfigError(f"{variable} must be a port number, got {text!r}") from None
    if not 0 < port < 65536:
        raise ConfigError(f"{variable} must be between 1 and 65535, got {port}")
    return port


def _base_url(variable: str, value: str | None, default: Any, got: Mapping[str, Any]) -> Any:
    base_url = (value or "").strip().rstrip("/") or None
    if base_url is not None and not base_url.startswith(("http://", "https://")):
        raise ConfigError(f"{variable} must start with http:// or https://, got {base_url!r}")
    return base_url


def _data_dir(variable: str, value: str | None, default: Any, got: Mapping[str, Any]) -> Any:
    return Path((value or "").strip() or default).resolve()


def _workers(variable: str, value: str | None, default: Any, got: Mapping[str, Any]) -> Any:
    """Unset: the machine's cores (`default_workers`), not the one a hand-built object has."""
    return parse_number(variable, value or "", default_workers(), 1, MAX_WORKERS, "")


def _networks(variable: str, value: str | None, default: Any, got: Mapping[str, Any]) -> Any:
    return parse_networks(variable, value or "")


def _level(variable: str, value: str | None, default: Any, got: Mapping[str, Any]) -> Any:
    return log_level(variable, value or "")


LOG_LEVELS: Final = ("debug", "info", "warning", "error")
LOG_FORMATS: Final = ("text", "json")


def log_level(name: str, text: str) -> str:
    """`TMS_LOG_LEVEL` or `--log-level`: the least severe level logged (default info)."""
    level = text.strip().lower() or "info"
    if level not in LOG_LEVELS:
        raise ConfigError(f"{name} must be one of {', '.join(LOG_LEVELS)}, got {text!r:.40}")
    return level


def _secret(variable: str, text: str | None, default: Any, got: Mapping[str, Any]) -> Any:
    value = (text or "").strip()
    if value and len(value) < MIN_SECRET_CHARS:
        raise ConfigError(
            f"TMS_SECRET must be at least {MIN_SECRET_CHARS} characters (it signs login "
            f"cookies); got {len(value)}. `python -c 'import secrets; print(secrets.token_hex())'`"
            " makes one"
        )
    return value or None


def _metrics_token(variable: str, text: str | None, default: Any, got: Mapping[str, Any]) -> Any:
    """`TMS_METRICS_TOKEN`: what a scraper sends as `Authorization: Bearer ...` for the public
    port's /metrics. Long enough not to be guessed, and of the characters a bearer token may
    hold (RFC 6750), so that it reads the same in a header and in a scrape config."""
    value = (text or "").strip()
    if not value:
        return None
    if len(value) < MIN_METRICS_TOKEN_CHARS or not _BEARER.fullmatch(value):
        raise ConfigError(
            f"TMS_METRICS_TOKEN must be at least {MIN_METRICS_TOKEN_CHARS} characters of letters, "
            "digits and -._~+/ (got one that is not); `python -c 'import secrets; "
            "print(secrets.token_urlsafe())'` makes one"
        )
    return value


def _metrics_port(variable: str, text: str | None, default: Any, got: Mapping[str, Any]) -> Any:
    """`TMS_METRICS_PORT`: a port of its own for the metrics, never the public one."""
    if not (text or "").strip():
        return None
    port = parse_number(variable, text or "", 0, 1, 65535, "")
    public = got["port"]
    if port == public:
        raise ConfigError(f"TMS_METRICS_PORT must not be TMS_PORT ({public}): metrics are private")
    return port


def _plugins(variable: str, text: str | None, default: Any, got: Mapping[str, Any]) -> Any:
    """`TMS_PLUGINS`: comma-separated plugin names, each once. Their order is the order their
    write policies and read filters are asked in (tms.extension)."""
    names: list[str] = []
    for item in (text or "").split(","):
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


def _operator_keys(variable: str, text: str | None, default: Any, got: Mapping[str, Any]) -> Any:
    """`TMS_OPERATOR_KEYS`: comma-separated keys (npub or 64 hex) that may use the operator's
    NIP-86 methods on the root relay URL (tms.relay.operator). Unset: nobody, and `/` offers
    no NIP-86 method but `supportedmethods`."""
    keys: list[str] = []
    for item in (text or "").split(","):
        word = item.strip()
        if not word:
            continue
        try:
            key = npub_decode(word) if word.startswith("npub1") else word.lower()
        except ValueError:
            key = ""
        if len(key) != 64 or any(c not in "0123456789abcdef" for c in key):
            raise ConfigError(
                f"TMS_OPERATOR_KEYS must be comma-separated keys (npub or 64 hex), got {word!r:.80}"
            )
        if key not in keys:
            keys.append(key)
    return tuple(keys)


def _relays(variable: str, text: str | None, default: Any, got: Mapping[str, Any]) -> Any:
    """`TMS_PROFILE_RELAYS`: comma-separated ws:// or wss:// origins (ws:// is for a relay on
    this machine, as the tests run one). They go into the pages' Content-Security-Policy, so
    nothing that could widen it is accepted: no paths with spaces, quotes or semicolons. Unset:
    the two public relays; set but empty: none, and the pages contact no other origin."""
    if text is None:
        return default
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


def _http_reserve(variable: str, text: str | None, default: Any, got: Mapping[str, Any]) -> Any:
    """`TMS_HTTP_RESERVE`: connections kept for HTTP, from 1 to half the cap (the WebSocket
    connections keep the rest); None, unset: a tenth of `TMS_MAX_CONNECTIONS`."""
    if not (text or "").strip():
        return None
    return parse_number(variable, text or "", 1, 1, got["max_connections"] // 2, "")


def _strfry_command(variable: str, text: str | None, default: Any, got: Mapping[str, Any]) -> Any:
    """`TMS_STRFRY_COMMAND`: set only with the plugin `strfry` enabled (`TMS_PLUGINS`)."""
    command = (text or "").strip() or None
    if command is not None and STRFRY not in got["plugins"]:
        raise ConfigError(
            f"TMS_STRFRY_COMMAND is set but TMS_PLUGINS does not name '{STRFRY}': add it "
            "to run the command as a write policy, or unset TMS_STRFRY_COMMAND"
        )
    return command


# The `TMS_RATE_*` settings (`Settings.rates`): each `RateLimits` field's variable and default.
RATES: Final = {
    "address": ("TMS_RATE_ADDRESS", DEFAULT_ADDRESS),
    "key": ("TMS_RATE_KEY", DEFAULT_KEY),
    "fetch": ("TMS_RATE_FETCH", DEFAULT_FETCH),
    "login": ("TMS_RATE_LOGIN", DEFAULT_LOGIN),
    "read": ("TMS_RATE_READ", DEFAULT_READ),
}


@dataclass(frozen=True, slots=True)
class Settings:
    """Every setting, each declared once on its field (`setting`: its variable, its default, how
    it is read), from which `from_env` reads them and tests/test_settings_docs.py holds the
    documentation's table."""

    # None: start the embedded PostgreSQL in data_dir
    database_url: str | None = setting("TMS_DATABASE_URL", None, text)
    data_dir: Path = setting("TMS_DATA_DIR", Path("tms-data"), _data_dir, shown="`./tms-data`")
    host: str = setting("TMS_HOST", "127.0.0.1", text)
    port: int = setting("TMS_PORT", 8000, _port)
    # the public origin, e.g. https://tms.example.org, when behind a proxy
    base_url: str | None = setting("TMS_BASE_URL", None, _base_url)
    embedding: EmbeddingConfig = field(default_factory=EmbeddingConfig)  # TMS_EMBED*
    # seconds a publish waits for its batch's vectors; the rest catch up later
    embed_wait: float = setting("TMS_EMBED_WAIT", 10.0, number(0, 600, "seconds"))
    # a request's head must arrive within this; and its body within this after the head
    head_seconds: float = setting("TMS_HEAD_SECONDS", 10.0, number(0.1, 3600, "seconds"))
    body_seconds: float = setting("TMS_BODY_SECONDS", 60.0, number(0.1, 3600, "seconds"))
    max_connections: int = setting("TMS_MAX_CONNECTIONS", 10_000, number(10, 1_000_000))
    # of them, by one client address (trusted proxies: any)
    max_connections_per_address: int = setting(
        "TMS_MAX_CONNECTIONS_PER_ADDRESS", 64, number(1, 1_000_000)
    )
    # of them, never WebSocket ones; None: a tenth
    http_reserve: int | None = setting(
        "TMS_HTTP_RESERVE", None, _http_reserve, shown="a tenth of `TMS_MAX_CONNECTIONS`"
    )
    # bytes a second a request body keeps up after its first seconds
    body_min_rate: int = setting("TMS_BODY_MIN_RATE", 1024, number(0, 1_000_000_000))
    # None: generated into data_dir (`load_log_key`)
    log_key: str | None = setting("TMS_LOG_KEY", None, text, shown="generated")
    # None: generated into data_dir (`load_relay_key`)
    relay_key: str | None = setting("TMS_RELAY_KEY", None, text, shown="generated")
    # None: generated into data_dir (`load_secret`)
    secret: str | None = setting("TMS_SECRET", None, _secret, shown="generated")
    # where the pages look up profiles
    profile_relays: tuple[str, ...] = setting("TMS_PROFILE_RELAYS", DEFAULT_PROFILE_RELAYS, _relays)
    rates: RateLimits = field(default_factory=RateLimits)  # TMS_RATE_* (`RATES`); none by hand
    # peers whose X-Forwarded-For is believed
    trusted_proxies: tuple[Network, ...] = setting("TMS_TRUSTED_PROXIES", (), _networks)
    # rows the refusal log keeps of each kind
    refusals_keep: int = setting("TMS_REFUSALS_KEEP", DEFAULT_KEEP, number(100, 100_000_000))
    # a relay connection with no subscription, unused, ends
    relay_idle_seconds: float = setting(
        "TMS_RELAY_IDLE_SECONDS", 300.0, number(1, 86400, "seconds")
    )
    # what every relay connection holds, in all
    relay_memory_mb: int = setting("TMS_RELAY_MEMORY_MB", 128, number(16, 1_000_000))
    # a live event unread this long
    relay_behind_seconds: float = setting(
        "TMS_RELAY_BEHIND_SECONDS", 15.0, number(1, 3600, "seconds")
    )
    # exports streamed at once, per process
    max_exports: int = setting("TMS_MAX_EXPORTS", DEFAULT_EXPORTS, number(1, 64))
    # the relay's reads' pool, per process
    relay_connections: int = setting(
        "TMS_RELAY_CONNECTIONS", DEFAULT_RELAY_CONNECTIONS, number(1, 64)
    )
    # one relay read, at most
    relay_statement_seconds: float = setting(
        "TMS_RELAY_STATEMENT_SECONDS",
        DEFAULT_RELAY_STATEMENT_SECONDS,
        number(0.001, 3600, "seconds"),
    )
    # server processes of `tms serve`; built by hand, one
    workers: int = setting("TMS_WORKERS", 1, _workers, shown="the machine's cores, at most 8")
    # NIP-77 lists loaded at start (0: none)
    neg_warm: int = setting("TMS_NEG_WARM", DEFAULT_NEG_WARM, number(0, 1000))
    export_wait: float = 10.0  # seconds an export waits for a slot (no variable: tests set it)
    # GET /metrics with it as a bearer token
    metrics_token: str | None = setting("TMS_METRICS_TOKEN", None, _metrics_token)
    # metrics on a port of their own
    metrics_port: int | None = setting("TMS_METRICS_PORT", None, _metrics_port)
    # where that port listens
    metrics_host: str = setting("TMS_METRICS_HOST", "127.0.0.1", text)
    # a tlog-policy file (tms.witness)
    witness_policy: str | None = setting("TMS_WITNESS_POLICY", None, text)
    # the logs this server witnesses
    witness_logs: str | None = setting("TMS_WITNESS_LOGS", None, text)
    # None: generated into data_dir if needed
    witness_key: str | None = setting("TMS_WITNESS_KEY", None, text, shown="generated")
    # who may use the operator's NIP-86 methods on `/`
    operator_keys: tuple[str, ...] = setting("TMS_OPERATOR_KEYS", (), _operator_keys)
    # the plugins enabled, in the order asked
    plugins: tuple[str, ...] = setting("TMS_PLUGINS", (), _plugins)
    plugin_seconds: float = setting("TMS_PLUGIN_TIMEOUT_SECONDS", 5.0, number(0.01, 600, "seconds"))
    hook_seconds: float = setting("TMS_HOOK_TIMEOUT_SECONDS", 30.0, number(0.01, 3600, "seconds"))
    hook_queue: int = setting("TMS_HOOK_QUEUE", 1000, number(1, 1_000_000))
    # run by the plugin `strfry`
    strfry_command: str | None = setting("TMS_STRFRY_COMMAND", None, _strfry_command)
    strfry_seconds: float = setting(
        "TMS_STRFRY_TIMEOUT_SECONDS", 10.0, number(0.01, 600, "seconds")
    )
    # (`tms serve --log-level`): debug, info, warning, error
    log_level: str = setting("TMS_LOG_LEVEL", "info", _level)
    # text, or json (one object a line)
    log_format: str = setting("TMS_LOG_FORMAT", "text", choice(*LOG_FORMATS))
    # a line per HTTP request answered
    access_log: bool = setting("TMS_ACCESS_LOG", False, switch, shown="`off`")
    new_log_key: bool = False  # `--new-log-key`: make a log key for a database with checkpoints

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        rates = {
            name: parse_rates(variable, env.get(variable, default))
            for name, (variable, default) in RATES.items()
        }
        return cls(
            **read_all(cls, env),
            embedding=EmbeddingConfig.from_env(env),
            rates=RateLimits(**rates),
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
    "the database the same TMS_SECRET, TMS_LOG_KEY and TMS_RELAY_KEY"
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


def load_relay_key(settings: Settings) -> tuple[SecretKey, str | None]:
    """The relay's own Nostr key (NIP-11 `self`), which signs what a collection's relay says of
    its members (NIP-43: kinds 13534, 8000, 8001, 28935), and a line to log when it was chosen
    here. `TMS_RELAY_KEY` (an nsec or 64 hex characters) when set; otherwise the file
    `TMS_DATA_DIR/relay-key`, by the data directory's rule (`generated`): clients keep a relay's
    `self` as its identity, so it must not change at each restart, and every process on one
    database must sign with the same one. What it signs are views of the log, never its records:
    losing it loses no history."""
    from tms.nostr.events import SecretKey
    from tms.nostr.keys import parse_secret

    if settings.relay_key is not None:
        try:
            return parse_secret(settings.relay_key), None
        except (InvalidKey, ValueError) as exc:
            raise ConfigError(f"TMS_RELAY_KEY: {exc}") from None
    path = settings.data_dir / RELAY_KEY_FILE
    text, made = generated(
        settings, RELAY_KEY_FILE, "the relay key", lambda: SecretKey.generate().secret.hex()
    )
    try:
        key = parse_secret(text)
    except (InvalidKey, ValueError) as exc:
        raise ConfigError(f"{path}: {exc}") from None
    said = None
    if made:
        said = (
            f"TMS_RELAY_KEY is unset: generated the relay key {key.pubkey} into {path}; "
            f"{KEEP_DATA_DIR}"
        )
    return key, said


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


def default_workers() -> int:
    """`TMS_WORKERS` unset: one server process a core this process may run on, at most
    `DEFAULT_WORKERS_CAP` (each holds its own database connections, `tms.cli.workers`)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return max(1, min(cores, DEFAULT_WORKERS_CAP))
