"""NIP-01 filters as SQL over the events a reader may see: the stored half of a relay's REQ and
COUNT (the live half matches new events in Python, `tms.nostr.filters.Filter.matches`).

What a reader sees is what export carries: the events of the collections it holds (a `Reader`'s
every collection, or one `ReadableCollection`), and the profiles and terms signed by the people
of those collections: each one's owner and every key its member lists ever named (a superset of
the keys that wrote there, which export's own rule needs a scan of the whole collection to find;
a member list is already visible to every reader, so naming its keys' profiles tells nothing
new). Nothing else: an id of another collection matches nothing, exactly as a missing one.

Newest first means most recently stored (`seq`), the ledger's own order: a TMS event's
`created_at` is its signer's claim. Results come in pages, keyed by `seq`, so a reader's stored
answer never holds a database connection while a slow client reads; a page's large contents
(evidence) are read one at a time.

A page costs what it returns, not what the collections hold (sql/016): it is asked of each
collection on its own, and a filter naming authors (or, without authors, kinds) is one short
backward walk of the `(collection, pubkey, seq)` (or `(collection, kind, seq)`) index per value,
each stopping after a page, so 10 filters of 1,000 authors over 60,000 events read a few
thousand index entries a page, never the collection. Ids go through the ids' index; a filter
with neither walks the collection's newest events (or its `created_at` index, when the planner
finds the range narrow). A COUNT reads every match through the same indexes, so it costs what
it counts: the relay prices it so (`tms.guard.rates.read_cost`).

A scope of many collections (a key's on the root relay) is asked once of all of them first,
not once of each (sql/024): its page is looked for among the newest `WINDOW` pages of entries
of the `(seq)` index, read from the index alone, whichever collection they belong to; when the
scope's matches there fill the page, it is the page (an older match is older than every entry
of the window); when they do not (a filter naming rare kinds, a scope of few collections among
busy ones), the per-collection arms answer it, and the walk cost a few milliseconds. Filters
naming ids or authors go to the arms at once: their indexes make those arms short. Not on
Citus, where the arms are queries of one shard each and the walk would ask every shard.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from tms.ledger.access import ReadableCollection, Reader
from tms.ledger.read.members import Membership, last_record, membership
from tms.nostr.events import Event
from tms.nostr.filters import Filter
from tms.rules.kinds import unscoped_kinds
from tms.store import citus
from tms.store.database import Pool
from tms.types import (
    KIND_JOIN,
    KIND_LEAVE,
    KIND_MEMBER_CHANGE,
    UNSCOPED,
    EventId,
    PubKey,
    Slug,
)

PAGE: Final = 100  # events per round trip of a stored answer
# The records whose line carries a body (`Event.body`): NIP-86 changes, NIP-43 joins and leaves.
MEMBERSHIP_RECORD_KINDS: Final = frozenset({KIND_MEMBER_CHANGE, KIND_JOIN, KIND_LEAVE})
BIG_BYTES: Final = 64 * 1024  # contents larger than this are read one by one, not by the page
WALK_FROM: Final = 16  # collections in a scope from which a page is first asked of them all
WINDOW: Final = 50  # pages: how many of the newest entries of every collection that walk reads

_COLUMNS: Final = """seq, id, pubkey, created_at, kind, tags, sig, collection,
    CASE WHEN octet_length(content) <= {big} THEN content END AS content,
    octet_length(content) AS size, NULL::text AS body"""
# A large content's size, before it is read. A membership record's body (sql/025), which its
# line carries (`Event.body`), is read with it by `stored`, a statement of the record's own
# collection: a subquery here would send a page's statement to every shard on Citus.
_SQL_BODY: Final = "SELECT body FROM member_changes WHERE collection = $1 AND id = $2"
# {slugs}: where the scope's slugs are.
_PEOPLE: Final = """(SELECT owner FROM collections WHERE slug = ANY({slugs})
    UNION SELECT unnest(members) FROM member_lists WHERE collection = ANY({slugs})
    UNION SELECT target FROM member_changes
        WHERE collection = ANY({slugs}) AND method IN ('allowpubkey', 'join'))"""
_SQL_PEOPLE: Final = """
    SELECT slug AS collection, owner AS pubkey FROM collections WHERE slug = ANY($1::text[])
    UNION
    SELECT collection, unnest(members) FROM member_lists WHERE collection = ANY($1::text[])
    UNION
    SELECT collection, target FROM member_changes
    WHERE collection = ANY($1::text[]) AND method IN ('allowpubkey', 'join')"""
_SQL_OWNERS: Final = "SELECT slug, owner FROM collections WHERE slug = ANY($1::text[])"
# $1 the seq, $2 where the event is filed (on Citus: its shard, by its key).
_SQL_CONTENT: Final = "SELECT content FROM events WHERE collection = $2 AND seq = $1"
# Profiles and terms are filed under UNSCOPED (sql/015).
_SQL_BY_IDS: Final = f"""
    SELECT {_COLUMNS.format(big=BIG_BYTES)} FROM events
    WHERE id = ANY($2::text[]) AND (collection = ANY($1::text[])
        OR (collection = '{UNSCOPED}' AND pubkey IN {_PEOPLE.format(slugs="$1::text[]")}))"""

Scope = Reader | ReadableCollection


def slugs_of(scope: Scope) -> list[Slug]:
    return [scope.slug] if isinstance(scope, ReadableCollection) else list(scope.slugs)


@dataclass(frozen=True, slots=True)
class Stored:
    """An event as the ledger holds it, with where it sits."""

    seq: int
    collection: Slug | None  # None: a profile or terms, which belong to no collection
    event: Event


# Each collection's last seq now, and the unscoped events' (null), by the primary key's order
# (collection, seq): one probe each. Joined through collection_counts, as the feed's positions
# are, so that on Citus each worker answers for its own collections.
_SQL_POSITIONS: Final = f"""
    SELECT n.collection, m.last FROM collection_counts n
    CROSS JOIN LATERAL (SELECT max(seq) AS last FROM events e
                        WHERE e.collection = n.collection) AS m
    WHERE n.collection = ANY($1::text[])
    UNION ALL
    SELECT NULL, (SELECT max(seq) FROM events WHERE collection = '{UNSCOPED}')"""


class StoredEvents:
    def __init__(self, pool: Pool) -> None:
        self.pool = pool
        self._routed: bool | None = None  # learnt once: whether the ledger is on Citus

    async def page(
        self, scope: Scope, wanted: Filter, *, before: int | None, size: int
    ) -> list[Stored]:
        """Up to `size` events matching `wanted` (its `search` aside), newest first, stored
        before `seq` `before` (None: from the newest)."""
        rows = await self.rows(scope, wanted, before=before, size=size)
        return [await self.stored(row) for row in rows]

    async def rows(
        self, scope: Scope, wanted: Filter, *, before: int | None, size: int
    ) -> list[Any]:
        """The rows of `page`, large contents not read yet (`stored` reads each): a relay
        streaming them holds one large content at a time, not a page of them."""
        slugs = slugs_of(scope)
        if len(slugs) >= WALK_FROM and not await self._on_citus():
            walked = walk_sql(slugs, wanted, before=before, size=size)
            if walked is not None:
                rows = await self.pool.fetch(walked[0], *walked[1])
                if rows and rows[0]["walked"] == size:  # the window held the whole page
                    return list(rows)
        found = page_sql(slugs, wanted, before=before, size=size)
        if found is None:
            return []
        sql, args = found
        return list(await self.pool.fetch(sql, *args))

    async def _on_citus(self) -> bool:
        if self._routed is None:
            async with self.pool.acquire() as conn:
                self._routed = await citus.is_distributed(conn)
        return self._routed

    async def count(self, scope: Scope, filters: Sequence[Filter]) -> int:
        """NIP-45: how many stored events match any of `filters`, each counted once."""
        slugs = slugs_of(scope)
        query = _Query(slugs)
        parts = [
            part
            for wanted in filters
            if not wanted.empty and slugs
            for part in query.parts(wanted, None, columns="seq")
        ]
        if not parts:
            return 0
        count = await self.pool.fetchval(
            f"SELECT count(*) FROM ({' UNION '.join(parts)}) AS found", *query.args
        )
        return int(count or 0)

    async def by_ids(self, scope: Scope, ids: Sequence[EventId]) -> list[Stored]:
        """These events, in this order, those the scope holds (search results to send)."""
        rows = await self.pool.fetch(_SQL_BY_IDS, slugs_of(scope), list(ids))
        found = {row["id"]: row for row in rows}
        return [await self.stored(found[i]) for i in ids if i in found]

    async def people(self, slugs: Sequence[Slug]) -> dict[Slug, set[PubKey]]:
        """Each collection's owner and every key its member lists ever named: whose profiles and
        terms its readers see."""
        found: dict[Slug, set[PubKey]] = {slug: set() for slug in slugs}
        for row in await self.pool.fetch(_SQL_PEOPLE, list(slugs)):
            found[row["collection"]].add(row["pubkey"])
        return found

    async def membership(self, slug: Slug) -> Membership | None:
        """The collection's membership records, for what its relay says of its members."""
        return await membership(self.pool, slug)

    async def last_membership_record(self, slug: Slug) -> int:
        """The `seq` of the collection's last membership record (0: none): whether what was
        made of them is still current."""
        return await last_record(self.pool, slug)

    async def owners(self, slugs: Sequence[Slug]) -> dict[Slug, PubKey]:
        rows = await self.pool.fetch(_SQL_OWNERS, list(slugs))
        return {row["slug"]: row["owner"] for row in rows}

    async def positions(self, slugs: Sequence[Slug]) -> dict[Slug | None, int]:
        """Each collection's last `seq` (None: the profiles' and terms'), 0 for none yet: within
        a collection `seq` grows in commit order, so an event at or below it committed before
        this was read."""
        rows = await self.pool.fetch(_SQL_POSITIONS, list(slugs))
        return {row["collection"]: row["last"] or 0 for row in rows}

    async def stored(self, row: Any) -> Stored:
        content = row["content"]
        filed = row["collection"]
        if content is None:  # large: read alone, so that a page never holds many at once
            content = await self.pool.fetchval(_SQL_CONTENT, row["seq"], filed)
        body = row["body"]
        if body is None and row["kind"] in MEMBERSHIP_RECORD_KINDS:
            body = await self.pool.fetchval(_SQL_BODY, filed, row["id"])
        event = event_of(row, content, body)
        return Stored(row["seq"], None if filed == UNSCOPED else filed, event)


def event_of(row: Any, content: str | None = None, body: str | None = None) -> Event:
    tags = [] if row["tags"] == "[]" else json.loads(row["tags"])  # only profiles carry tags
    return Event(
        row["id"],
        row["pubkey"],
        row["created_at"],
        row["kind"],
        tags,
        row["content"] if content is None else content,
        row["sig"],
        row["body"] if body is None else body,
    )


def page_sql(
    slugs: Sequence[Slug], wanted: Filter, *, before: int | None, size: int
) -> tuple[str, list[Any]] | None:
    """The statement of one page of `wanted` over these collections, and its arguments (None:
    it can match nothing). One arm per collection, each its own newest `size` (on Citus, each
    a query of one shard), then the newest `size` of them all."""
    if wanted.empty or not slugs or size <= 0:
        return None
    query = _Query(list(slugs))
    parts = query.page_parts(wanted, before, size)
    if not parts:
        return None
    sql = " UNION ALL ".join(f"({part})" for part in parts)
    return f"SELECT * FROM ({sql}) AS found ORDER BY seq DESC LIMIT {size}", query.args


def walk_sql(
    slugs: Sequence[Slug], wanted: Filter, *, before: int | None, size: int
) -> tuple[str, list[Any]] | None:
    """The statement of one page of `wanted` over these collections from the newest
    `WINDOW * size` entries of every collection (sql/024), and its arguments (None: a filter
    it does not serve). Each row carries `walked`, how many of the page's rows that window
    gave: the page is exact when it is `size`; otherwise it is asked of each collection
    (`page_sql`). The people's profiles and terms are their own arm, as in `page_sql`."""
    if wanted.empty or not slugs or size <= 0 or wanted.ids is not None:
        return None
    query = _Query(list(slugs))
    if wanted.authors is not None or not query._scoped(wanted):
        return None
    below = "" if before is None else f"WHERE seq < {query.arg(before, 'bigint')} "
    where = [f"w.collection = ANY({query.all_slugs()})", *query._conditions(wanted, None)]
    walk = (
        "SELECT w.collection, w.seq FROM ("
        f"SELECT collection, seq, kind, created_at FROM events {below}"
        f"ORDER BY seq DESC LIMIT {WINDOW * size}) AS w "
        f"WHERE {' AND '.join(where)} ORDER BY w.seq DESC LIMIT {size}"
    )
    shown = _COLUMNS.format(big=BIG_BYTES)
    parts = [
        f"SELECT {shown} FROM events WHERE (collection, seq) IN (SELECT collection, seq FROM walk)"
    ]
    if query._unscoped(wanted):
        common = query._conditions(wanted, before)
        people = query._people_part(wanted, shown, common)
        parts.append(f"({people} ORDER BY seq DESC LIMIT {size})")
    return (
        f"WITH walk AS MATERIALIZED ({walk}) "
        "SELECT found.*, (SELECT count(*) FROM walk) AS walked "
        f"FROM ({' UNION ALL '.join(parts)}) AS found ORDER BY seq DESC LIMIT {size}",
        query.args,
    )


class _Query:
    """The SQL of filters over one scope; its arguments, numbered as they are added (the
    scope's slugs once, when a part names them all)."""

    def __init__(self, slugs: list[Slug]) -> None:
        self.slugs = slugs
        self.args: list[Any] = []
        self._all: str | None = None

    def all_slugs(self) -> str:
        if self._all is None:
            self._all = self.arg(self.slugs, "text[]")
        return self._all

    def arg(self, value: Any, sql_type: str) -> str:
        self.args.append(value)
        return f"${len(self.args)}::{sql_type}"

    def parts(self, wanted: Filter, before: int | None, columns: str | None = None) -> list[str]:
        """One SELECT for the collections' events and one for the people's profiles and terms,
        each only if the filter can match there (TMS's own kinds carry no tags): every match,
        as a COUNT reads them."""
        shown = columns or _COLUMNS.format(big=BIG_BYTES)
        common = self._conditions(wanted, before)
        parts = []
        if self._scoped(wanted):
            where = [f"collection = ANY({self.all_slugs()})", *common]
            parts.append(f"SELECT {shown} FROM events WHERE {' AND '.join(where)}")
        if self._unscoped(wanted):
            parts.append(self._people_part(wanted, shown, common))
        return parts

    def page_parts(self, wanted: Filter, before: int | None, size: int) -> list[str]:
        """The arms of a page, each its newest `size`: one per collection, walking the index
        of the filter's most selective field, and one for the people's profiles and terms
        (few: the members' own)."""
        shown = _COLUMNS.format(big=BIG_BYTES)
        parts = []
        if self._scoped(wanted):
            # Each field's array is one argument, shared by every arm.
            walk: tuple[str, str, str] | None  # the column walked, its values, their collation
            if wanted.ids is not None:
                walk = None  # the ids' own index (id, collection): at most one row per id
            elif wanted.authors is not None:
                # The index's collation ("C"), named: an unnest's column has the default one.
                walk = ("pubkey", self.arg(sorted(wanted.authors), "text[]"), ' COLLATE "C"')
            elif wanted.kinds is not None:
                walk = ("kind", self.arg(sorted(wanted.kinds), "int[]"), "")
            else:
                walk = None
            common = self._conditions(wanted, before, skip=walk[0] if walk else None)
            for slug in self.slugs:
                here = [f"collection = {self.arg(slug, 'text')}", *common]
                if walk is None:
                    parts.append(
                        f"SELECT {shown} FROM events WHERE {' AND '.join(here)} "
                        f"ORDER BY seq DESC LIMIT {size}"
                    )
                    continue
                column, values, collate = walk
                # One backward walk of the index per value, each stopping after `size`, reading
                # index entries only (the other fields' conditions are on the index's INCLUDE
                # columns); then the page's rows, `size` at most, by their key.
                parts.append(
                    f"SELECT {shown} FROM events WHERE {here[0]} AND seq IN ("
                    f"SELECT w.seq FROM unnest({values}) AS v(value) CROSS JOIN LATERAL ("
                    f"SELECT seq FROM events WHERE {' AND '.join(here)} "
                    f"AND {column} = v.value{collate} ORDER BY seq DESC LIMIT {size}) AS w "
                    f"ORDER BY w.seq DESC LIMIT {size}) ORDER BY seq DESC LIMIT {size}"
                )
        if self._unscoped(wanted):
            common = self._conditions(wanted, before)
            part = self._people_part(wanted, shown, common)
            parts.append(f"{part} ORDER BY seq DESC LIMIT {size}")
        return parts

    def _scoped(self, wanted: Filter) -> bool:
        kinds = wanted.kinds
        return not wanted.tags and (kinds is None or bool(kinds - unscoped_kinds()))

    def _unscoped(self, wanted: Filter) -> bool:
        kinds = wanted.kinds
        return kinds is None or bool(kinds & unscoped_kinds())

    def _people_part(self, wanted: Filter, shown: str, common: list[str]) -> str:
        people = _PEOPLE.format(slugs=self.all_slugs())
        where = [f"collection = '{UNSCOPED}'", f"pubkey IN {people}", *common]
        for name, values in wanted.tags.items():
            where.append(
                "EXISTS (SELECT 1 FROM json_array_elements(tags::json) AS t "
                f"WHERE t->>0 = {self.arg(name, 'text')} "
                f"AND t->>1 = ANY({self.arg(sorted(values), 'text[]')}))"
            )
        return f"SELECT {shown} FROM events WHERE {' AND '.join(where)}"

    def _conditions(
        self, wanted: Filter, before: int | None, *, skip: str | None = None
    ) -> list[str]:
        """The filter's conditions; `skip`: the column a walk already fixes."""
        where = []
        if wanted.ids is not None:
            where.append(f"id = ANY({self.arg(sorted(wanted.ids), 'text[]')})")
        if wanted.authors is not None and skip != "pubkey":
            where.append(f"pubkey = ANY({self.arg(sorted(wanted.authors), 'text[]')})")
        if wanted.kinds is not None and skip != "kind":
            where.append(f"kind = ANY({self.arg(sorted(wanted.kinds), 'int[]')})")
        if wanted.since is not None:
            where.append(f"created_at >= {self.arg(wanted.since, 'bigint')}")
        if wanted.until is not None:
            where.append(f"created_at <= {self.arg(wanted.until, 'bigint')}")
        if before is not None:
            where.append(f"seq < {self.arg(before, 'bigint')}")
        return where
