"""The running service, assembled once for every front door (the HTTP app and `tms stdio`):
database pools, the embedding model, the vector catch-up and the tools over them, with the
enabled plugins wired in (`tms.extension`): their write policies on the ledger's one path, their
read filters before the relay's and the tools' reads, their after-commit hooks told of each
commit, their tools beside the core's.

Start-up fails loudly on a misconfiguration (a database that cannot be reached, a model file
whose checksum is wrong) rather than serving half a product.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

import asyncpg

from tms import metrics
from tms.config import LOG_KEY_FILE, EmbeddingConfig, Settings, load_log_key
from tms.errors import ConfigError, EmbeddingError, is_database_down, one_line
from tms.fetch import pool as fetch_pool
from tms.guard import shared
from tms.guard.exports import Exports
from tms.guard.rates import Throttle
from tms.guard.refusal_store import RefusalStore
from tms.guard.refusals import RefusalLog
from tms.ledger.access import Access
from tms.ledger.read.export import Exporter
from tms.ledger.service import Ledger
from tms.ledger.write import anchors, claim_keys
from tms.mcp.tools import TOOLS, Tool, Tools
from tms.nostr.events import SecretKey
from tms.rules.admission import Admission, CommitHook, Door, ReadCheck
from tms.search.model import Embedder
from tms.search.pgvector import ensure_vector_index
from tms.search.search import VECTORS_STARTING
from tms.search.vectors import Vectors
from tms.services import Services
from tms.store import database
from tms.store.outage import Outage
from tms.types import EventId, Slug
from tms.witness.settings import WitnessSettings
from tms.witness.state import WitnessService
from tms.witness.submit import Submitter

log = logging.getLogger(__name__)

PUBLISH_CONNECTIONS: Final = 8  # publish transactions at once (one per group of collections)
POOL_CLOSE_SECONDS: Final = 10.0
BACKFILL_QUIET_SECONDS: Final = 2.0  # a back-fill still running then says it started
VECTORS_RETRY_SECONDS: Final = 1.0  # starting vector search, while the database is down


class Plugins(Protocol):
    """What the runtime wires in of the enabled plugins (`tms.plugins.loading.Extensions`):
    each seam None when no plugin fills it, and the tools the doors serve."""

    @property
    def write_policy(self) -> Admission | None: ...

    @property
    def reads_check(self) -> ReadCheck | None: ...

    @property
    def commit_hook(self) -> CommitHook | None: ...

    @property
    def tools_served(self) -> Mapping[str, Tool[Any, Any]]: ...


@dataclass(frozen=True, slots=True)
class Runtime:
    ledger: Ledger
    exporter: Exporter
    services: Services
    health: database.HealthCheck
    database_url: str  # for what needs a connection of its own (the relay's commit feed)
    exports: Exports  # the HTTP door's export slots and pace (TMS_MAX_EXPORTS)
    witness: WitnessService  # this server as a witness of other logs (tms.witness)
    registry: Mapping[str, Tool[Any, Any]] = field(default_factory=lambda: TOOLS)  # with plugins'

    @property
    def access(self) -> Access:
        return self.services.access

    def tools(
        self,
        door: Door = Door.MCP,
        signer: SecretKey | None = None,
        *,
        unsigned_hint: str | None = None,
    ) -> Tools:
        """The tools as `door` serves them (MCP over HTTP, or stdio with its `signer` and what
        a call without a `request` is told, `unsigned_hint`)."""
        return Tools(
            self.services,
            signer=signer,
            door=door,
            tools=self.registry,
            unsigned_hint=unsigned_hint,
        )


@functools.cache
def load_embedder(config: EmbeddingConfig) -> Embedder:
    """One model per process: loading costs a second or two and the session is shareable."""
    return Embedder.load(config)


@asynccontextmanager
async def open_runtime(
    settings: Settings,
    database_url: str | None = None,
    *,
    model_first: bool = False,
    extensions: Plugins | None = None,
) -> AsyncIterator[Runtime]:
    """Everything the doors need, for as long as the block lasts. The database is
    `database_url` when given, else `TMS_DATABASE_URL`, else the embedded PostgreSQL in
    `TMS_DATA_DIR`, which is then watched and restarted should it stop. The embedding model
    loads in the background unless `model_first` (a door with no one waiting on it to start,
    such as stdio, may as well have vectors from its first call). `extensions`: the enabled
    plugins, loaded (`tms.extension.load_extensions`); their hooks' workers and strfry command
    run for as long as the caller says (`Extensions.running`), not here."""
    async with AsyncExitStack() as stack:
        # Meeting the database down is one line in the log, and its return another.
        outage = Outage()
        stack.enter_context(outage.folding_asyncpg())
        url = database_url if database_url is not None else settings.database_url
        url_given = url
        if url is None:
            embedded = await database.start_embedded(settings.data_dir)
            url = await database.embedded_url(embedded)
            supervisor = asyncio.create_task(embedded.supervise(outage), name="tms-postgres")
            stack.callback(embedded.adopt)  # last: whichever server runs is the one to stop
            stack.push_async_callback(_cancel, supervisor)
        stack.push_async_callback(fetch_pool.shutdown)  # the extraction workers, if started
        pool = await database.open_pool(url, part="main")
        stack.push_async_callback(close_pool, pool)
        await database.note_older_releases(pool)
        embedded_in = settings.data_dir if url_given is None else None
        metrics.name_database(pool, metrics.database_label(url, embedded_in))
        stack.callback(metrics.forget_database, pool)
        # Exports hold a connection for as long as the download lasts: give them their own
        # few, one for each export allowed at once (TMS_MAX_EXPORTS), so that slow downloaders
        # never take a connection publishing needs.
        export_pool = await database.open_pool(
            url, min_size=0, max_size=settings.max_exports, part="export"
        )
        stack.push_async_callback(close_pool, export_pool)
        # Publishes run the same few statements by key over and over: on connections of their
        # own, PostgreSQL plans each once (generic plans), not at every call as it chose to.
        publish_pool = await database.open_pool(
            url, min_size=1, max_size=PUBLISH_CONNECTIONS, generic_plans=True, part="publish"
        )
        stack.push_async_callback(close_pool, publish_pool)
        watched = metrics.POOLS.watch(
            {"main": pool, "export": export_pool, "publish": publish_pool}
        )
        stack.callback(metrics.POOLS.forget, watched)
        health = database.HealthCheck(url)
        stack.push_async_callback(health.close)
        outage.probe = health.problem
        stack.push_async_callback(outage.close)  # its probe stops before the health check closes
        # Links stored before anchors existed get theirs in the background: reads show
        # `anchor: null` for them meanwhile, and nothing waits.
        anchoring = asyncio.create_task(_anchor_stored_links(pool, outage), name="tms-anchors")
        stack.push_async_callback(_cancel, anchoring)
        # Claims stored before claim keys existed (sql/013) get theirs likewise: until then the
        # submit page's duplicate warning does not know them.
        keying = asyncio.create_task(_key_stored_claims(pool), name="tms-claim-keys")
        stack.push_async_callback(_cancel, keying)
        refusals = RefusalLog(RefusalStore(pool), settings.refusals_keep, outage=outage)
        refusals.start()
        stack.push_async_callback(refusals.close)  # before the pool closes: the last records
        await refuse_new_log_key(pool, settings)
        signer, chosen = load_log_key(settings)
        if chosen is not None:
            log.warning("%s", chosen)
        witnessing = WitnessSettings.load(settings)
        services = Services.over(
            pool,
            None,
            log=signer,
            publish_pool=publish_pool,
            throttle=throttle_of(settings),
            refusals=refusals,
            outage=outage,
            witnesses=witnessing.policy,
            admission=None if extensions is None else extensions.write_policy,
            read_filter=None if extensions is None else extensions.reads_check,
            after_commit=None if extensions is None else extensions.commit_hook,
        )
        if witnessing.policy is not None:
            submitter = Submitter(
                url,
                pool,
                witnessing.policy,
                services.tlog.cosigned,
                services.tlog,
                services.access,
                outage=outage,
            )
            submitter.start()
            stack.push_async_callback(submitter.close)
        # Collections stored before the transparency log existed get their trees in the
        # background: a publish or read that reaches one first builds it there, under the
        # collection's lock, so nothing waits for the whole back-fill (tms.ledger.log.tree).
        building_logs = asyncio.create_task(_backfill_logs(services), name="tms-tlog")
        stack.push_async_callback(_cancel, building_logs)
        if not settings.embedding.enabled:
            services.ledger.without_vectors()
        else:
            # The model loads after the server is up: until then search answers by keyword
            # with a note saying so, and a publish waits for it within its embedding budget.
            services.search.unavailable = VECTORS_STARTING
            starting = StartingVectors(settings.embed_wait)
            services.ledger.vectors = starting
            loading = asyncio.create_task(
                _start_vectors(settings, services, starting), name="tms-model"
            )
            stack.push_async_callback(_stop_vectors, loading, services)
            if model_first:
                await starting.ready.wait()
        yield Runtime(
            services.ledger,
            Exporter(export_pool),
            services,
            health,
            url,
            Exports(settings.max_exports, settings.export_wait),
            WitnessService(pool, witnessing.logs, witnessing.key),
            TOOLS if extensions is None else extensions.tools_served,
        )


def throttle_of(settings: Settings) -> Throttle:
    """The budgets: this process's own, or, in a worker of `tms serve --workers N`, the ones
    its processes share (`tms.guard.shared`)."""
    worker = shared.current()
    return Throttle(settings.rates, None if worker is None else worker.storage())


async def refuse_new_log_key(pool: asyncpg.Pool, settings: Settings) -> None:
    """Refuse, in one line naming the fix, to make a new log key for a database that holds
    signed checkpoints (a restore into a new data directory without the old `log-key`): the
    append-only log would go on under a key no member knows, every checkpoint before it
    reading as another server's. `--new-log-key` (`Settings.new_log_key`) is the operator's
    word that this is meant."""
    path = settings.data_dir / LOG_KEY_FILE
    if settings.log_key is not None or settings.new_log_key or path.is_file():
        return
    if await pool.fetchval("SELECT EXISTS (SELECT 1 FROM tlog_checkpoints)"):
        raise ConfigError(
            f"this database holds signed checkpoints, and there is no log key ({path}, "
            "TMS_LOG_KEY) to go on signing them: copy the old server's log-key there (or set "
            "TMS_LOG_KEY); --new-log-key makes a new one, and every checkpoint signed before "
            "then reads as another server's"
        )


class StartingVectors:
    """What a publish embeds with while the model loads: it waits for the model, within the
    publish's budget, then embeds as usual; past the budget the vectors catch up later."""

    def __init__(self, wait_seconds: float) -> None:
        self.wait_seconds = wait_seconds
        self.vectors: Vectors | None = None
        self.failed: str | None = None
        self.ready = asyncio.Event()

    async def embed_published(self, published: Sequence[tuple[Slug, EventId]]) -> int:
        try:
            await asyncio.wait_for(self.ready.wait(), self.wait_seconds)
        except TimeoutError:
            return 0
        if self.vectors is None:
            raise EmbeddingError(self.failed or "the embedding model did not load")
        return await self.vectors.embed_published(published)


async def _start_vectors(settings: Settings, services: Services, starting: StartingVectors) -> None:
    pool = services.ledger.pool
    try:
        embedder = await asyncio.to_thread(load_embedder, settings.embedding)
        while True:  # a database outage while the model loaded only delays vector search
            try:
                await ensure_vector_index(pool, embedder.model_id, embedder.dims)
                vectors = Vectors(
                    pool, embedder, wait_seconds=settings.embed_wait, outage=services.outage
                )
                await vectors.start()
                break
            except Exception as exc:
                if not is_database_down(exc):
                    raise
                services.outage.failed("vector search, starting", exc)
                await asyncio.sleep(VECTORS_RETRY_SECONDS)
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        log.error("vector search is unavailable: %s", one_line(exc))
        starting.failed = f"the embedding model did not load ({one_line(exc, 300)})"
        services.search.unavailable = (
            f"vector search is unavailable ({one_line(exc, 300)}): keyword results"
        )
        starting.ready.set()
        return
    starting.vectors = vectors
    services.ledger.vectors = vectors
    services.search.vectors = vectors
    starting.ready.set()
    log.info("vector search is ready (%s)", embedder.model_id)


async def _backfill_logs(services: Services) -> None:
    try:
        await services.ledger.log.check_origin()
        await services.ledger.log.check_key()
        built = await _told("transparency logs", "collections", services.ledger.log.backfill())
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # each collection's log is built when first needed instead
        if is_database_down(exc):
            services.outage.failed("building the transparency logs", exc)
        else:
            log.error("building the transparency logs failed: %s", one_line(exc))
        return
    if built:
        log.info("transparency logs built for %d collections stored before them", built)


async def _stop_vectors(loading: asyncio.Task[None], services: Services) -> None:
    await _cancel(loading)
    vectors = services.search.vectors
    if vectors is not None:
        await vectors.close()


async def _anchor_stored_links(pool: asyncpg.Pool, outage: Outage) -> None:
    """The one-off back-fill of anchors (tms.ledger.write.anchors); a failure is logged, never
    raised: the links stay without anchors until the next start-up tries again."""
    try:
        await _told("link anchors", "rows", anchors.backfill(pool))
    except Exception as exc:
        if is_database_down(exc):
            outage.failed("anchoring the stored links (the next start-up tries again)", exc)
            return
        log.warning(
            "anchoring the stored links failed: %s; the next start-up tries again", one_line(exc)
        )


async def _key_stored_claims(pool: asyncpg.Pool) -> None:
    """The one-off back-fill of claim keys (tms.ledger.read.lookups); a failure is logged, never
    raised: the next start-up tries again."""
    try:
        await _told("claim keys", "claims", claim_keys.backfill(pool))
    except Exception as exc:
        log.warning(
            "keying the stored claims failed: %s; the next start-up tries again", one_line(exc)
        )


async def _told(what: str, unit: str, backfill: Awaitable[int]) -> int:
    """A start-up back-fill, told in the upgrade log (which the commands print) only when it
    has work: after a migration, one may run for minutes, so one still running after
    `BACKFILL_QUIET_SECONDS` says it started, and one that wrote rows says how many. One with
    nothing to do, as at nearly every start, says nothing."""
    started = time.monotonic()
    running = asyncio.ensure_future(backfill)
    try:
        done = await asyncio.wait_for(asyncio.shield(running), BACKFILL_QUIET_SECONDS)
    except TimeoutError:
        database.upgrade.info("back-fill of %s: started", what)
        done = await running
    except BaseException:
        running.cancel()
        raise
    if done:
        database.upgrade.info(
            "back-fill of %s: done, %s %s in %.1f s",
            what,
            f"{done:,}",
            unit,
            time.monotonic() - started,
        )
    return done


async def _cancel(task: asyncio.Task[None]) -> None:
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def close_pool(pool: asyncpg.Pool) -> None:
    """Close the pool, waiting a little for connections still lent out (an export in flight)."""
    try:
        await asyncio.wait_for(pool.close(), POOL_CLOSE_SECONDS)
    except TimeoutError:
        log.warning("database connections still busy after %ss; closing them", POOL_CLOSE_SECONDS)
        pool.terminate()
