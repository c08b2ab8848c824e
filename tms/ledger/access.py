"""Who may read what, and who may use the service: asked by every door, written once.

The rule "a collection's owner or a key on its current member list may read it" lives in the
`readers` view (sql/003_access.sql) and is asked only here. A collection the caller may not read
and one that does not exist get the same answer, the same message and the same number of round
trips, so no door can become an oracle for which slugs or ids exist.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from tms.errors import NotAReader, NotAUser
from tms.rules.kinds import SLUG_PATTERN
from tms.store.database import Pool
from tms.types import PubKey, Slug

_SQL_CAN_READ: Final = "SELECT EXISTS (SELECT 1 FROM readers WHERE collection = $1 AND pubkey = $2)"
_SQL_READABLE: Final = "SELECT collection FROM readers WHERE pubkey = $1 ORDER BY collection"
_SQL_OWNS: Final = "SELECT EXISTS (SELECT 1 FROM collections WHERE slug = $1 AND owner = $2)"
_SQL_APPROVED: Final = "SELECT EXISTS (SELECT 1 FROM approvals WHERE pubkey = $1)"
_SQL_MAY_USE: Final = """
    SELECT EXISTS (SELECT 1 FROM approvals WHERE pubkey = $1)
        OR EXISTS (SELECT 1 FROM readers WHERE pubkey = $1)"""


def not_a_reader(slug: str) -> NotAReader:
    """The one refusal for a collection that is closed to the caller or does not exist."""
    shown = slug if SLUG_PATTERN.fullmatch(slug) else slug[:64].encode("ascii", "replace").decode()
    return NotAReader(
        f"not a member of collection '{shown}' (or no such collection): "
        "ask its owner to add your key"
    )


_MADE_HERE: Final = object()  # the token only `Access` holds: the capabilities below are its


@dataclass(frozen=True, slots=True)
class ReadableCollection:
    """One collection a key may read, as checked when this was made: what a read service of one
    collection takes instead of a bare slug, so that a door cannot forget to ask."""

    pubkey: PubKey
    slug: Slug
    _token: object = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self._token is not _MADE_HERE:
            raise TypeError("a ReadableCollection is made only by tms.ledger.access.Access")


@dataclass(frozen=True, slots=True)
class Reader:
    """A key and every collection it may read (sorted), as checked when this was made. A
    long-lived holder (a relay connection) makes a new one when membership may have changed."""

    pubkey: PubKey
    slugs: tuple[Slug, ...]
    _token: object = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self._token is not _MADE_HERE:
            raise TypeError("a Reader is made only by tms.ledger.access.Access")

    def may_read(self, slug: Slug) -> bool:
        return slug in self.slugs

    def collection(self, slug: Slug) -> ReadableCollection:
        """The one collection, or `NotAReader` (the same for a missing and a closed one)."""
        if slug not in self.slugs:
            raise not_a_reader(slug)
        return ReadableCollection(self.pubkey, slug, _MADE_HERE)


class Access:
    def __init__(self, pool: Pool) -> None:
        self.pool = pool

    async def reader(self, pubkey: PubKey) -> Reader:
        """The key's read capability: every collection it may read now (one query)."""
        return Reader(pubkey, tuple(await self.readable(pubkey)), _MADE_HERE)

    async def collection(self, pubkey: PubKey, slug: Slug) -> ReadableCollection:
        """One collection the key may read, or `NotAReader`."""
        await self.require_reader(pubkey, slug)
        return ReadableCollection(pubkey, slug, _MADE_HERE)

    async def can_read(self, pubkey: PubKey, slug: Slug) -> bool:
        """Owner or current member. A name no collection can have is simply not readable."""
        if not SLUG_PATTERN.fullmatch(slug):
            return False
        return bool(await self.pool.fetchval(_SQL_CAN_READ, slug, pubkey))

    async def require_reader(self, pubkey: PubKey, slug: Slug) -> None:
        if not await self.can_read(pubkey, slug):
            raise not_a_reader(slug)

    async def readable(self, pubkey: PubKey) -> list[Slug]:
        """The slugs the key may read, in slug order."""
        return [row["collection"] for row in await self.pool.fetch(_SQL_READABLE, pubkey)]

    async def owns(self, pubkey: PubKey, slug: Slug) -> bool:
        """The collection's owner: who changes its members (the publish rules say so again)."""
        if not SLUG_PATTERN.fullmatch(slug):
            return False
        return bool(await self.pool.fetchval(_SQL_OWNS, slug, pubkey))

    async def may_create(self, pubkey: PubKey) -> bool:
        """Approved by the operator: who may create collections (the pages offer it only then;
        the publish rules decide)."""
        return bool(await self.pool.fetchval(_SQL_APPROVED, pubkey))

    async def may_use(self, pubkey: PubKey) -> bool:
        """Approved by the operator, or owner or member of some collection: who may publish, log
        in, and spend the service's own resources (fetching)."""
        return bool(await self.pool.fetchval(_SQL_MAY_USE, pubkey))

    async def require_user(self, pubkey: PubKey) -> None:
        if not await self.may_use(pubkey):
            raise NotAUser(f"pubkey {pubkey} is not approved and is not a member of any collection")
