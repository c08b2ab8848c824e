"""The dashboard's figures over a reader's collections: activity over time, records by kind,
contributors and sources. The `Reader` says which collections (`tms.ledger.access`); every
statement filters on them.

Counts are retrieval aids for people, like the tools' counts: they say what was recorded,
never what is true.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import Final, Literal

from tms.ledger.access import Reader
from tms.ledger.read import records
from tms.results import (
    Activity,
    ActivityBucket,
    Contributor,
    DashboardStats,
    KindCount,
    SourceCount,
)
from tms.rules.kinds import kind_name
from tms.store.database import Pool
from tms.types import Slug

MAX_BUCKETS: Final = 92  # bars in the activity chart: days, else weeks, else months
TOP: Final = 20  # contributors, sources and domains shown

Unit = Literal["day", "week", "month"]

_SQL_SPAN: Final = """
    SELECT min(received_at) FROM events
    WHERE collection = ANY($1::text[])"""
_SQL_ACTIVITY: Final = """
    SELECT date_trunc($2, received_at AT TIME ZONE 'UTC')::date AS start, count(*) AS events
    FROM events WHERE collection = ANY($1::text[]) GROUP BY 1 ORDER BY 1"""
_SQL_KINDS: Final = """
    SELECT kind, count(*) AS events FROM events WHERE collection = ANY($1::text[])
    GROUP BY kind ORDER BY kind"""
_SQL_CONTRIBUTORS: Final = """
    SELECT pubkey, count(*) AS events FROM events WHERE collection = ANY($1::text[])
    GROUP BY pubkey ORDER BY events DESC, pubkey LIMIT $2"""
_SQL_SOURCES: Final = """
    SELECT source, count(*) AS evidence FROM evidence
    WHERE collection = ANY($1::text[]) AND source IS NOT NULL AND btrim(source) <> ''
    GROUP BY source ORDER BY evidence DESC, source LIMIT $2"""
# The host of an http(s) URL: after the scheme, before any path, query, fragment or port, with
# any user info dropped; lowercased, a leading "www." dropped.
_SQL_DOMAINS: Final = r"""
    SELECT domain AS source, count(*) AS evidence FROM (
        SELECT regexp_replace(lower(substring(url from '^[A-Za-z][A-Za-z0-9+.-]*://(?:[^/?#@]*@)?([^/?#:]+)')),
                              '^www\.', '') AS domain
        FROM evidence WHERE collection = ANY($1::text[]) AND url IS NOT NULL) AS hosts
    WHERE domain IS NOT NULL AND domain <> ''
    GROUP BY domain ORDER BY evidence DESC, domain LIMIT $2"""


class Stats:
    def __init__(self, pool: Pool) -> None:
        self.pool = pool

    async def dashboard(
        self, reader: Reader, only: Slug | None = None, today: date | None = None
    ) -> DashboardStats:
        """The reader's collections, or only `only` among them (all of them when it names one
        the reader may not read)."""
        slugs = [only] if only is not None and reader.may_read(only) else list(reader.slugs)
        today = datetime.now(UTC).date() if today is None else today
        async with self.pool.acquire() as conn:
            oldest = await conn.fetchval(_SQL_SPAN, slugs)
            first = oldest.astimezone(UTC).date() if oldest is not None else today
            unit = _unit(first, today)
            counts = {r["start"]: r["events"] for r in await conn.fetch(_SQL_ACTIVITY, slugs, unit)}
            kinds = await conn.fetch(_SQL_KINDS, slugs)
            people = await conn.fetch(_SQL_CONTRIBUTORS, slugs, TOP)
            names = await records.authors(conn, (r["pubkey"] for r in people))
            sources = await conn.fetch(_SQL_SOURCES, slugs, TOP)
            domains = await conn.fetch(_SQL_DOMAINS, slugs, TOP)
        buckets: list[ActivityBucket] = [
            {"start": start.isoformat(), "events": counts.get(start, 0)}
            for start in _bucket_starts(first, today, unit)
        ]
        activity: Activity = {"unit": unit, "buckets": buckets}
        kind_counts: list[KindCount] = [
            {
                "kind": r["kind"],
                "kind_name": kind_name(r["kind"]),
                "events": r["events"],
            }
            for r in kinds
        ]
        contributors: list[Contributor] = [
            {"pubkey": r["pubkey"], "author": names.get(r["pubkey"]), "events": r["events"]}
            for r in people
        ]
        return {
            "activity": activity,
            "kinds": kind_counts,
            "contributors": contributors,
            "sources": [_source(r["source"], r["evidence"]) for r in sources],
            "domains": [_source(r["source"], r["evidence"]) for r in domains],
        }


def _source(name: str, count: int) -> SourceCount:
    return {"source": name, "evidence": count}


def _unit(first: date, last: date) -> Unit:
    """Days while they fit the chart, else weeks, else months."""
    days = (last - first).days + 1
    if days <= MAX_BUCKETS:
        return "day"
    if days <= MAX_BUCKETS * 7:
        return "week"
    return "month"


def _start(day: date, unit: Unit) -> date:
    """`date_trunc` in Python: weeks start on Monday, as PostgreSQL's do."""
    if unit == "week":
        return day - timedelta(days=day.weekday())
    if unit == "month":
        return day.replace(day=1)
    return day


def _bucket_starts(first: date, last: date, unit: Unit) -> list[date]:
    """Every bucket from the one holding `first` to the one holding `last` (at most the last
    MAX_BUCKETS of them), empty ones included, so the chart's gaps are real gaps."""
    starts: list[date] = []
    current = _start(first, unit)
    end = _start(last, unit)
    while current <= end:
        starts.append(current)
        if unit == "day":
            current += timedelta(days=1)
        elif unit == "week":
            current += timedelta(days=7)
        else:
            current = (current.replace(day=28) + timedelta(days=4)).replace(day=1)
    return starts[-MAX_BUCKETS:]
