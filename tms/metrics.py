"""What an operator watches, in Prometheus' text format (the `prometheus_client` library).

Every server process keeps its own figures in the library's default registry, which also holds
its process metrics (`process_resident_memory_bytes` and the rest, on Linux): with several
`tms serve` processes, Prometheus scrapes each. They are served at `GET /metrics` on the public
port only with `Authorization: Bearer $TMS_METRICS_TOKEN`, and without a token on a port of their
own (`TMS_METRICS_PORT`, on `TMS_METRICS_HOST`, 127.0.0.1 unless set), for a scraper on a
private network. Neither set: no metrics are served (the public `/metrics` is a 404).

The doors, the ledger and the guards count here (a counter's `inc` costs well under a
microsecond); what lives elsewhere is read when a scrape asks: the database pools' use, and
the embedding queue's depth, labelled with the database (`database_label`: the embedded one's data
directory, else `host:port/name`) since every server on it reports the same queue (`refresh`,
also run every `REFRESH_SECONDS` while a metrics port is open, since that listener runs in a
thread of its own and cannot query the database).

The relay door (tms/relay) reports its live connections and subscriptions through
`RELAY_CONNECTIONS` and `RELAY_SUBSCRIPTIONS` (`inc()` when one opens, `dec()` when it closes;
`track(RELAY_CONNECTIONS)` does both around a block), and its WebSocket handshakes are counted
in `REQUESTS` with the door `relay` by the HTTP middleware (`tms.http.metered`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Final
from urllib.parse import parse_qsl, urlsplit

from asyncpg import Pool
from prometheus_client import REGISTRY, Counter, Gauge, Histogram, disable_created_metrics
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from tms.errors import Outcome, Refusal
from tms.rules.kinds import KINDS

log = logging.getLogger(__name__)

# No `*_created` series beside each counter and histogram (a timestamp per label set, about 120
# series that only say when the process started): before any metric below is made.
disable_created_metrics()  # type: ignore[no-untyped-call]

REFRESH_SECONDS: Final = 15.0

DOORS: Final = ("mcp", "pages", "export", "log", "relay", "ops", "static")
# Each counter's outcomes, labelled as `tms.errors.Outcome` names them.
OUTCOMES: Final = (
    Outcome.OK,
    Outcome.REFUSED,
    Outcome.RATE_LIMITED,
    Outcome.UNAVAILABLE,
    Outcome.INTERNAL,
    Outcome.GONE,
)
TOOL_OUTCOMES: Final = (Outcome.OK, Outcome.REFUSED, Outcome.UNAVAILABLE, Outcome.INTERNAL)
PUBLISH_OUTCOMES: Final = (
    Outcome.ACCEPTED,
    Outcome.REFUSED,
    Outcome.UNAVAILABLE,
    Outcome.INTERNAL,
)
BUDGETS: Final = ("address", "key", "fetch", "login")

REQUESTS: Final = Counter(
    "tms_requests",
    "HTTP requests answered and relay handshakes, by door and outcome (refused: 4xx but 429; "
    "gone: the client left before an answer)",
    ["door", "outcome"],
)
TOOL_CALLS: Final = Counter(
    "tms_tool_calls", "MCP tool calls, by tool and outcome", ["tool", "outcome"]
)
PUBLISH_SECONDS: Final = Histogram(
    "tms_publish_seconds",
    "Time to publish a batch, from its arrival at the ledger to its answer (checks, the "
    "commit, the vectors it waits for), by outcome",
    ["outcome"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
)
PUBLISH_EVENTS: Final = Histogram(
    "tms_publish_batch_events",
    "Events in each batch published (accepted or not)",
    buckets=(1, 2, 5, 10, 25, 50, 100, 250, 500, 1000),
)
EVENTS_STORED: Final = Counter("tms_events_stored", "Events stored, by kind", ["kind"])
REFUSALS: Final = Counter("tms_refusals", "Refusals noted in the refusal log, by kind", ["kind"])
RATE_LIMITED: Final = Counter(
    "tms_rate_limited", "Calls over a rate limit (TMS_RATE_*), by budget", ["budget"]
)
EMBEDDING_QUEUE: Final = Gauge(
    "tms_embedding_queue_depth",
    "Events waiting for a vector, by database: one queue that every server on the database "
    "reports alike (aggregate with max by (database), never sum)",
    ["database"],
)
RELAY_CONNECTIONS: Final = Gauge("tms_relay_connections", "Relay WebSocket connections open")
RELAY_SUBSCRIPTIONS: Final = Gauge("tms_relay_subscriptions", "Relay subscriptions open")
RELAY_MEMORY: Final = Gauge(
    "tms_relay_memory_bytes",
    "Bytes the relay's connections hold, as its memory budget counts them (TMS_RELAY_MEMORY_MB), "
    "read when scraped",
)
WITNESS_SUBMISSIONS: Final = Counter(
    "tms_witness_submissions",
    "Checkpoints submitted to witnesses (tms.witness.submit), by witness and outcome: cosigned, "
    "conflict (a 409: the witness held another size), failed",
    ["witness", "outcome"],
)
WITNESSED: Final = Counter(
    "tms_witness_checkpoints",
    "add-checkpoint calls this server answered as a witness, by HTTP status",
    ["status"],
)
# The plugins (tms.extension): labelled by plugin name, made at zero when the plugins load
# (`tms.plugins.loading`), since only then is it known which are enabled.
PLUGIN_VERDICTS: Final = Counter(
    "tms_plugin_verdicts",
    "Write policies' verdicts on events, by plugin and action (accept, reject, shadow_reject); "
    "a policy that failed counts as a reject here and in tms_plugin_failures",
    ["plugin", "action"],
)
PLUGIN_FAILURES: Final = Counter(
    "tms_plugin_failures",
    "Plugin calls that failed, by plugin, seam (write_policy, read_filter, after_commit) and "
    "cause (raised; timeout; exited, protocol: the strfry command died, or answered out of "
    "protocol)",
    ["plugin", "seam", "cause"],
)
PLUGIN_READS_REFUSED: Final = Counter(
    "tms_plugin_reads_refused", "Reads a plugin's read filter refused, by plugin", ["plugin"]
)
PLUGIN_HOOK_BATCHES: Final = Counter(
    "tms_plugin_hook_batches",
    "Committed batches and the after-commit hooks, by plugin and outcome (done; failed: raised "
    "or timed out; dropped: the hook's queue was full, or still held at shutdown)",
    ["plugin", "outcome"],
)
STRFRY_STARTS: Final = Counter(
    "tms_strfry_starts",
    "Times the strfry write-policy command was started: the first, and each restart after it "
    "exited, hung or answered out of protocol",
)

# Every series exists from the start, at zero, so that rates and alerts have a baseline.
for _door in DOORS:
    for _outcome in OUTCOMES:
        REQUESTS.labels(_door, _outcome)
for _outcome in PUBLISH_OUTCOMES:
    PUBLISH_SECONDS.labels(_outcome)
for _kind in KINDS.values():
    if _kind.stored:
        EVENTS_STORED.labels(_kind.name)
for _refusal in Refusal:
    REFUSALS.labels(str(_refusal))
for _budget in BUDGETS:
    RATE_LIMITED.labels(_budget)


def answered(status: int) -> Outcome:
    """An HTTP status as the outcome `REQUESTS` counts: what the client was answered (a 503
    is unavailable whatever it was answered for: the database, or a server too busy to read a
    body), where `tms.errors.outcome_of` says what a failure is."""
    if status == 429:
        return Outcome.RATE_LIMITED
    if status == 503:
        return Outcome.UNAVAILABLE
    if status >= 500:
        return Outcome.INTERNAL
    if status >= 400:
        return Outcome.REFUSED
    return Outcome.OK


@contextlib.contextmanager
def track(gauge: Gauge) -> Iterator[None]:
    """`gauge` one higher for as long as the block runs."""
    gauge.inc()
    try:
        yield
    finally:
        gauge.dec()


class _Pools(Collector):
    """The database pools of this process, read when scraped: connections in use and idle, the
    most each pool may open (a limit, so a gauge of its own rather than a state), and callers
    waiting for one (asyncpg keeps no count of those: the waiters on its queue of free
    connections are read, or 0 should asyncpg ever keep them elsewhere)."""

    def __init__(self) -> None:
        self._pools: dict[int, tuple[str, Pool]] = {}

    def watch(self, pools: Mapping[str, Pool]) -> list[int]:
        handles = []
        for name, pool in pools.items():
            self._pools[id(pool)] = (name, pool)
            handles.append(id(pool))
        return handles

    def forget(self, handles: list[int]) -> None:
        for handle in handles:
            self._pools.pop(handle, None)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        connections = GaugeMetricFamily(
            "tms_db_pool_connections",
            "Database connections of this process's pools, by pool and state (in_use, idle)",
            labels=["pool", "state"],
        )
        limits = GaugeMetricFamily(
            "tms_db_pool_max_connections",
            "The most database connections each of this process's pools opens, by pool",
            labels=["pool"],
        )
        waiting = GaugeMetricFamily(
            "tms_db_pool_waiting",
            "Callers waiting for a database connection, by pool",
            labels=["pool"],
        )
        totals: dict[str, list[int]] = {}
        for name, pool in list(self._pools.values()):
            size, idle = pool.get_size(), pool.get_idle_size()
            queue = getattr(pool, "_queue", None)
            waiters = len(getattr(queue, "_getters", ()) or ())
            row = totals.setdefault(name, [0, 0, 0, 0])
            for i, value in enumerate((size - idle, idle, pool.get_max_size(), waiters)):
                row[i] += value
        for name, (in_use, idle, most, waiters) in sorted(totals.items()):
            connections.add_metric([name, "in_use"], in_use)
            connections.add_metric([name, "idle"], idle)
            limits.add_metric([name], most)
            waiting.add_metric([name], waiters)
        yield connections
        yield limits
        yield waiting


POOLS: Final = _Pools()
REGISTRY.register(POOLS)


_DATABASES: Final[dict[int, str]] = {}  # id of a pool: its database's label (`name_database`)


def database_label(url: str, data_dir: Path | None = None) -> str:
    """What the `database` label says of a database: the embedded one's data directory (every
    embedded database is called `tms`, and lives on its own socket), else `host:port/name` from
    its URL (no user, no password), so that two databases never share a series."""
    if data_dir is not None:
        return str(data_dir)
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query))
    host = parts.hostname or query.get("host", "") or "localhost"
    port = parts.port or query.get("port", "") or 5432
    name = parts.path.lstrip("/") or query.get("dbname", "") or parts.username or ""
    return f"{host}:{port}/{name}"


def name_database(pool: Pool, label: str) -> None:
    """Report `pool`'s database under `label` (`database_label`)."""
    _DATABASES[id(pool)] = label


def forget_database(pool: Pool) -> None:
    _DATABASES.pop(id(pool), None)


async def refresh(pool: Pool) -> None:
    """Figures the database holds: the embedding queue's depth, under the database's label (one
    table, the same for every server on it; `name_database`, else the database's name). A
    database that does not answer leaves the last value."""
    try:
        row = await pool.fetchrow(
            "SELECT current_database() AS name, count(*) AS depth FROM embedding_queue", timeout=5
        )
    except Exception as exc:  # a scrape must not fail for it
        log.debug("metrics: the embedding queue could not be counted: %s", exc)
        return
    if row is not None:
        EMBEDDING_QUEUE.labels(_DATABASES.get(id(pool), row["name"])).set(row["depth"])


async def refresh_forever(pool: Pool) -> None:
    while True:
        await refresh(pool)
        await asyncio.sleep(REFRESH_SECONDS)
