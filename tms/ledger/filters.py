"""NIP-01 filters as SQL over the events a reader may see: the stored half of a relay's REQ and
COUNT (the live half matches new events in Python, `tms.nostr.filters.Filter.matches`).

What a reader sees is what export carries: the events of the collections it holds (a `Reader`'s
every collection, or one `ReadableCollection`), and the profiles and terms signed by the people
of those collections: each one's owner and every key its member lists ever named (a superset of
the keys that wrote there, which export's own rule needs a scan of the whole collection to find;
a member list is already visible to every reader, so naming its keys' profiles tells nothing
new). Nothing else: an id of another collection matches nothing, exactly as a missing one.

Newest first means most recently stored (`seq`), the ledger's own order: a TMS event's
`created_at` is its signer's claim, and ordering by it would need an index the publish path pays
for. Results come in pages, keyed by `seq`, so a reader's stored answer never holds a database
connection while a slow client reads; a page's large contents (evidence) are read one at a time.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from tms.ledger.access import ReadableCollection, Reader
from tms.nostr.events import Event
from tms.nostr.filters import Filter
from tms.rules.kinds import unscoped_kinds
from tms.store.database import Pool
from tms.types import UNSCOPED, EventId, PubKey, Slug

PAGE: Final = 100  # events per round trip of a stored answer
BIG_BYTES: Final = 64 * 1024  # contents larger than this are read one by one, not by the page

_COLUMNS: Final = """seq, id, pubkey, created_at, kind, tags, sig, collection,
    CASE WHEN octet_length(content) <= {big} THEN content END AS content"""
_PEOPLE: Final = """(SELECT owner FROM collections WHERE slug = ANY($1::text[])
    UNION SELECT unnest(members) FROM member_lists WHERE collection = ANY($1::text[]))"""
_SQL_PEOPLE: Final = """
    SELECT slug AS collection, owner AS pubkey FROM collections WHERE slug = ANY($1::text[])
    UNION
    SELECT collection, unnest(members) FROM member_lists WHERE collection = ANY($1::text[])"""
_SQL_OWNERS: Final = "SELECT slug, owner FROM collections WHERE slug = ANY($1::text[])"
# $1 the seq, $2 where the event is filed (on Citus: its shard, by its key).
_SQL_CONTENT: Final = "SELECT content FROM events WHERE collection = $2 AND seq = $1"
# Profiles and terms are filed under UNSCOPED (sql/015).
_SQL_BY_IDS: Final = f"""
    SELECT {_COLUMNS.format(big=BIG_BYTES)} FROM events
    WHERE id = ANY($2::text[]) AND (collection = ANY($1::text[])
        OR (collection = '{UNSCOPED}' AND pubkey IN {_PEOPLE}))"""

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
        if wanted.empty or not slugs or size <= 0:
            return []
        query = _Query(slugs)
        parts = query.parts(wanted, before)
        if not parts:
            return []
        sql = " UNION ALL ".join(f"({part} ORDER BY seq DESC LIMIT {size})" for part in parts)
        sql = f"SELECT * FROM ({sql}) AS found ORDER BY seq DESC LIMIT {size}"
        return list(await self.pool.fetch(sql, *query.args))

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
        return Stored(row["seq"], None if filed == UNSCOPED else filed, event_of(row, content))


def event_of(row: Any, content: str | None = None) -> Event:
    tags = [] if row["tags"] == "[]" else json.loads(row["tags"])  # only profiles carry tags
    return Event(
        row["id"],
        row["pubkey"],
        row["created_at"],
        row["kind"],
        tags,
        row["content"] if content is None else content,
        row["sig"],
    )


class _Query:
    """The SQL of filters over one scope; its arguments, numbered as they are added ($1: the
    scope's slugs)."""

    def __init__(self, slugs: list[Slug]) -> None:
        self.args: list[Any] = [slugs]

    def arg(self, value: Any, sql_type: str) -> str:
        self.args.append(value)
        return f"${len(self.args)}::{sql_type}"

    def parts(self, wanted: Filter, before: int | None, columns: str | None = None) -> list[str]:
        """One SELECT for the collections' events and one for the people's profiles and terms,
        each only if the filter can match there (TMS's own kinds carry no tags)."""
        shown = columns or _COLUMNS.format(big=BIG_BYTES)
        common = self._conditions(wanted, before)
        parts = []
        kinds = wanted.kinds
        unscoped = unscoped_kinds()
        if not wanted.tags and (kinds is None or kinds - unscoped):
            where = ["collection = ANY($1::text[])", *common]
            parts.append(f"SELECT {shown} FROM events WHERE {' AND '.join(where)}")
        if kinds is None or kinds & unscoped:
            where = [f"collection = '{UNSCOPED}'", f"pubkey IN {_PEOPLE}", *common]
            for name, values in wanted.tags.items():
                where.append(
                    "EXISTS (SELECT 1 FROM json_array_elements(tags::json) AS t "
                    f"WHERE t->>0 = {self.arg(name, 'text')} "
                    f"AND t->>1 = ANY({self.arg(sorted(values), 'text[]')}))"
                )
            parts.append(f"SELECT {shown} FROM events WHERE {' AND '.join(where)}")
        return parts

    def _conditions(self, wanted: Filter, before: int | None) -> list[str]:
        where = []
        if wanted.ids is not None:
            where.append(f"id = ANY({self.arg(sorted(wanted.ids), 'text[]')})")
        if wanted.authors is not None:
            where.append(f"pubkey = ANY({self.arg(sorted(wanted.authors), 'text[]')})")
        if wanted.kinds is not None:
            where.append(f"kind = ANY({self.arg(sorted(wanted.kinds), 'int[]')})")
        if wanted.since is not None:
            where.append(f"created_at >= {self.arg(wanted.since, 'bigint')}")
        if wanted.until is not None:
            where.append(f"created_at <= {self.arg(wanted.until, 'bigint')}")
        if before is not None:
            where.append(f"seq < {self.arg(before, 'bigint')}")
        return where
