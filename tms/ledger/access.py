"""Who may read what, and who may use the service, asked once per request by every door.

The rule "a collection's owner or a key on its current member list may read it" lives in the
`readers` view (sql/003_access.sql), which this module asks for the doors (the publish snapshot,
`tms.ledger.write.snapshots`, reads it too, to judge writes). Reading is done with a capability only
this module makes: a `Reader` (a key and the collections it may read, as checked when it was made),
a `ReadableCollection` (a key and one collection it may read), or an `OwnedCollection` (a key and a
collection it owns: what the owner's member list editor reads with). The read services take one of
them instead of a key or a slug, and filter their SQL by what it holds, so a door that forgets to
ask has nothing to pass them: where the door's code is typed, mypy refuses it, and nothing leaks at
run time. An MCP tool is generic over what it reads (`tms.mcp.tools.Tool`), so its declared `reads`
and its handler's parameter are checked together.

The one way to read without asking is named for what it is: `Access.unsafe_for_operator`, for
the operator's commands and the server's own background work (submitting checkpoints to
witnesses), which run with the database's credentials anyway and answer no caller.

A collection the caller may not read and one that does not exist get the same answer, the same
message and the same number of round trips, so no door can become an oracle for which slugs or
ids exist.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from tms.errors import NotAReader, NotAUser, Refusal
from tms.rules.content import SLUG_PATTERN
from tms.store.database import Pool
from tms.types import PubKey, Slug

_SQL_CAN_READ: Final = "SELECT EXISTS (SELECT 1 FROM readers WHERE collection = $1 AND pubkey = $2)"
_SQL_READABLE: Final = "SELECT collection FROM readers WHERE pubkey = $1 ORDER BY collection"
_SQL_OWNS: Final = "SELECT EXISTS (SELECT 1 FROM collections WHERE slug = $1 AND owner = $2)"
_SQL_APPROVED: Final = "SELECT EXISTS (SELECT 1 FROM approvals WHERE pubkey = $1)"
_SQL_MAY_USE: Final = """
    SELECT EXISTS (SELECT 1 FROM approvals WHERE pubkey = $1)
        OR EXISTS (SELECT 1 FROM readers WHERE pubkey = $1)"""

_MINTED: Final = object()  # what only this module hands a capability it makes


def not_a_reader(slug: str) -> NotAReader:
    """The one refusal for a collection that is closed to the caller or does not exist."""
    shown = slug if SLUG_PATTERN.fullmatch(slug) else slug[:64].encode("ascii", "replace").decode()
    return NotAReader(
        f"not a member of collection '{shown}' (or no such collection): "
        "ask its owner to add your key"
    )


class _Minted:
    """Refuses to be made anywhere but here: a capability is the proof that the check ran."""

    def __post_init__(self) -> None:
        if getattr(self, "minted", None) is not _MINTED:
            raise TypeError(f"only tms.ledger.access makes a {type(self).__name__}")


@dataclass(frozen=True, slots=True)
class ReadableCollection(_Minted):
    """A key, and one collection it may read (`Access.collection`, `Reader.collection`)."""

    pubkey: PubKey
    slug: Slug
    minted: object = field(default=None, repr=False, compare=False)

    def reader(self) -> Reader:
        """The same right as a `Reader` of this one collection (for reads by id, which take
        one: an event elsewhere is then simply not found)."""
        return Reader(self.pubkey, (self.slug,), _MINTED)


@dataclass(frozen=True, slots=True)
class OwnedCollection(ReadableCollection):
    """A key, and one collection it owns (`Access.owned`): its owner reads it, and is who edits
    its member list."""


@dataclass(frozen=True, slots=True)
class Reader(_Minted):
    """A key, and the collections it may read, in slug order (`Access.reader`). Held by a
    long-lived connection, it says what was true when it was made: make a new one when
    membership may have changed."""

    pubkey: PubKey
    slugs: tuple[Slug, ...]
    minted: object = field(default=None, repr=False, compare=False)

    def may_read(self, slug: Slug) -> bool:
        return slug in self.slugs

    def collection(self, slug: Slug) -> ReadableCollection:
        """One of its collections, or `NotAReader` for any other name."""
        if slug not in self.slugs:
            raise not_a_reader(slug)
        return ReadableCollection(self.pubkey, slug, _MINTED)


class Access:
    def __init__(self, pool: Pool) -> None:
        self.pool = pool

    async def reader(self, pubkey: PubKey) -> Reader:
        """What the key may read now: one query."""
        rows = await self.pool.fetch(_SQL_READABLE, pubkey)
        return Reader(pubkey, tuple(row["collection"] for row in rows), _MINTED)

    async def collection(self, pubkey: PubKey, slug: Slug) -> ReadableCollection:
        """The collection if the key may read it (owner or current member); else `NotAReader`,
        the same for one that does not exist or whose name no collection can have."""
        if not await self.can_read(pubkey, slug):
            raise not_a_reader(slug).refused_as(Refusal.NOT_MEMBER, pubkey)
        return ReadableCollection(pubkey, slug, _MINTED)

    async def owned(self, pubkey: PubKey, slug: Slug) -> OwnedCollection:
        """The collection if the key owns it; else `NotAReader`, the same refusal as for one it
        may not read or that does not exist."""
        if not await self.owns(pubkey, slug):
            raise not_a_reader(slug).refused_as(Refusal.NOT_MEMBER, pubkey)
        return OwnedCollection(pubkey, slug, _MINTED)

    def unsafe_for_operator(self, slug: Slug) -> ReadableCollection:
        """UNSAFE: any collection, asking no one. For the operator's own commands (`tms
        export`) and the server's background work on every collection (witnesses), which run
        with the database's credentials and so could read it anyway; no key is named. Never
        for what a caller asks."""
        if not SLUG_PATTERN.fullmatch(slug):
            raise not_a_reader(slug)
        return ReadableCollection("", slug, _MINTED)

    async def can_read(self, pubkey: PubKey, slug: Slug) -> bool:
        """Owner or current member. A name no collection can have is simply not readable."""
        if not SLUG_PATTERN.fullmatch(slug):
            return False
        return bool(await self.pool.fetchval(_SQL_CAN_READ, slug, pubkey))

    async def owns(self, pubkey: PubKey, slug: Slug) -> bool:
        """The collection's owner: who changes its members (the publish rules say so again).
        To read as the owner, take `owned`'s capability."""
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
            raise NotAUser(
                f"pubkey {pubkey} is not approved and is not a member of any collection"
            ).refused_as(Refusal.NOT_MEMBER, pubkey)
