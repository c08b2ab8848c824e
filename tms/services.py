"""The services every door calls, bundled: the MCP tools, the web pages and the CLI get the
same ledger, access module, reads and search, so no door can hold a rule of its own. The relay
takes its own bundle from this one (`tms.relay.shared.Relay`: the same ledger, access, search,
throttle, refusal log and sessions, beside what only it has: its stored-event reads, its hub of
subscriptions and the commit feed)."""

from __future__ import annotations

from dataclasses import dataclass, field

from tms.guard.rates import Throttle
from tms.guard.refusals import RefusalLog
from tms.ledger.access import Access
from tms.ledger.log.cosigned import Cosigned
from tms.ledger.log.reads import LogReads
from tms.ledger.read.keys import Keys
from tms.ledger.read.lookups import Lookups
from tms.ledger.read.reads import Reads
from tms.ledger.read.stats import Stats
from tms.ledger.request_log import RequestLog
from tms.ledger.service import Ledger
from tms.ledger.sessions import Sessions
from tms.rules.admission import Admission, CommitHook, ReadCheck
from tms.search.search import Search
from tms.search.vectors import Vectors
from tms.store.database import Pool
from tms.store.outage import Outage
from tms.tlog.note import LogSigner
from tms.tlog.policy import Policy


@dataclass(frozen=True, slots=True)
class Services:
    """What the tools call: the same services the pages and the CLI use."""

    ledger: Ledger
    access: Access
    reads: Reads
    search: Search
    requests: RequestLog
    keys: Keys  # the pages' reads about keys and member lists
    stats: Stats  # the dashboard's figures
    sessions: Sessions  # browser logins
    tlog: LogReads  # each collection's transparency log: checkpoints, proofs, tiles
    lookups: Lookups  # what the submit page checks before signing: duplicates, pasted ids
    fetch_allow: str | None = None  # TMS_FETCH_ALLOW's format; None reads the variable
    throttle: Throttle = field(default_factory=Throttle)  # rate limits; none by default
    refusals: RefusalLog = field(default_factory=lambda: RefusalLog(None))  # where refusals go
    outage: Outage = field(default_factory=Outage)  # where meeting the database down is told
    read_filter: ReadCheck | None = None  # the plugins' read filters (relay, MCP); None: none

    @classmethod
    def over(
        cls,
        pool: Pool,
        vectors: Vectors | None = None,
        *,
        fetch_allow: str | None = None,
        log: LogSigner | None = None,
        publish_pool: Pool | None = None,
        throttle: Throttle | None = None,
        refusals: RefusalLog | None = None,
        outage: Outage | None = None,
        witnesses: Policy | None = None,
        admission: Admission | None = None,
        read_filter: ReadCheck | None = None,
        after_commit: CommitHook | None = None,
    ) -> Services:
        """Every service on one pool; `vectors` None: no embedding (TMS_EMBED=off); `log`:
        the server's checkpoint key (None: a throwaway one, for tests); `publish_pool`:
        publishes' own connections (None: `pool`'s); no `throttle`: no rate limits; no
        `refusals`: refusals are not written anywhere; no `outage`: one of its own, logging
        without a probe; `witnesses`: the witness policy whose quorum checkpoints are shown
        against (None: no witnesses); `admission`: the operator's write policy, asked on the
        ledger's one path (None: none); `read_filter`: asked before the relay's and the tools'
        reads (None: none); `after_commit`: told of each batch committed (None: nobody)."""
        throttle = throttle or Throttle()
        refusals = refusals or RefusalLog(None)
        ledger = Ledger(
            pool,
            vectors=vectors,
            log=log,
            publish_pool=publish_pool,
            throttle=throttle,
            admission=admission,
            refusals=refusals,
            after_commit=after_commit,
        )
        return cls(
            ledger=ledger,
            access=Access(pool),
            reads=Reads(pool),
            search=Search(pool, vectors),
            requests=RequestLog(pool),
            keys=Keys(pool),
            stats=Stats(pool),
            sessions=Sessions(pool),
            tlog=LogReads(pool, ledger.log, Cosigned(pool, witnesses)),
            lookups=Lookups(pool),
            fetch_allow=fetch_allow,
            throttle=throttle,
            refusals=refusals,
            outage=outage or Outage(),
            read_filter=read_filter,
        )
