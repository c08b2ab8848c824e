"""What the pages need to know about a key and a collection's members, beside the tools' reads:
whether the key signed the current terms, its current profile, the names of a page's keys, and
a collection's current member list with its head (id and created_at), against which a page
tells whether a newer list stands.

A collection's member list is read with a capability (`tms.ledger.access`): a
`ReadableCollection` (its members read it beside its records) or the owner's `OwnedCollection`
(the editor's head). The rest take a bare key or slug: a key's terms and profile are its own,
names are shown beside records the caller may already read, and whether a name is taken
(`taken_by`) is what the create form asks for keys approved to create collections, which could
learn the same by publishing into the slug.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from tms.ledger.access import ReadableCollection
from tms.ledger.read import records
from tms.results import MemberListInfo, ProfileInfo
from tms.rules.terms import current_terms
from tms.store.database import Pool
from tms.types import UNSCOPED, PubKey, Slug

_SQL_TERMS_SIGNED: Final = """
    SELECT EXISTS (SELECT 1 FROM terms_signatures
                   WHERE pubkey = $1 AND version = $2 AND sha256 = $3)"""
# The replaceable rule: newest created_at, ties to the lowest id.
_SQL_PROFILE: Final = f"""
    WITH p AS (
        SELECT id, pubkey, created_at, name, about FROM profiles WHERE pubkey = $1
        ORDER BY created_at DESC, id LIMIT 1)
    SELECT p.*, e.content, e.tags FROM p
    JOIN events e ON e.id = p.id AND e.collection = '{UNSCOPED}'"""
_SQL_MEMBER_LIST: Final = """
    SELECT c.slug, c.owner, h.list_id, h.created_at,
           ARRAY(SELECT m.pubkey FROM memberships m WHERE m.collection = c.slug
                 ORDER BY m.pubkey) AS members,
           (SELECT l.members FROM member_lists l
            WHERE l.id = h.list_id AND l.collection = $1) AS signed
    FROM collections c LEFT JOIN current_member_lists h ON h.collection = c.slug
    WHERE c.slug = $1"""
# When a key was added: the created_at of the first stored member list (or allowing change,
# sql/025) that named it, in each
# collection (a key removed and added again is a member since the first time).
_SQL_OWNER: Final = "SELECT owner FROM collections WHERE slug = $1"
_SQL_MEMBER_SINCE: Final = """
    SELECT DISTINCT ON (collection) collection, created_at FROM (
        SELECT collection, created_at, seq FROM member_lists
        WHERE collection = ANY($2::text[]) AND $1 = ANY(members)
        UNION ALL
        SELECT collection, created_at, seq FROM member_changes
        WHERE collection = ANY($2::text[]) AND target = $1
          AND method IN ('allowpubkey', 'join')) AS added
    ORDER BY collection, seq"""


class Keys:
    def __init__(self, pool: Pool) -> None:
        self.pool = pool

    async def terms_signed(self, pubkey: PubKey) -> bool:
        """Whether the key signed the current terms (version and sha256): what publish asks
        before a key's first write, so the pages show the terms until then."""
        terms = current_terms()
        return bool(
            await self.pool.fetchval(_SQL_TERMS_SIGNED, pubkey, terms["version"], terms["sha256"])
        )

    async def profile(self, pubkey: PubKey) -> ProfileInfo | None:
        row = await self.pool.fetchrow(_SQL_PROFILE, pubkey)
        if row is None:
            return None
        return {
            "id": row["id"],
            "pubkey": row["pubkey"],
            "created_at": row["created_at"],
            "name": row["name"],
            "about": row["about"],
            # as signed: an edit keeps what other clients put there (picture, nip05, lud16)
            "content": row["content"],
            "tags": row["tags"],
        }

    async def names(self, pubkeys: Iterable[PubKey]) -> dict[PubKey, str]:
        """Current profile names; keys without a profile are absent."""
        async with self.pool.acquire() as conn:
            return await records.authors(conn, pubkeys)

    async def taken_by(self, slug: Slug) -> PubKey | None:
        """Who owns the collection of this name (None: the name is free)."""
        owner: PubKey | None = await self.pool.fetchval(_SQL_OWNER, slug)
        return owner

    async def member_since(self, pubkey: PubKey, slugs: Iterable[Slug]) -> dict[Slug, int]:
        """When the key was added to each of `slugs` (the created_at of the first member list
        naming it): the home page's "Member since", which the collection's own creation time
        is not. Collections whose lists never named the key are absent."""
        rows = await self.pool.fetch(_SQL_MEMBER_SINCE, pubkey, list(slugs))
        return {row["collection"]: row["created_at"] for row in rows}

    async def member_list(self, readable: ReadableCollection) -> MemberListInfo | None:
        """The current list in the order it was signed, with its head; None for no such
        collection. Without a list yet, `members` is empty and the head null."""
        row = await self.pool.fetchrow(_SQL_MEMBER_LIST, readable.slug)
        if row is None:
            return None
        signed = row["signed"]
        return {
            "collection": row["slug"],
            "owner": row["owner"],
            "members": list(signed) if signed is not None else list(row["members"]),
            "list_id": row["list_id"],
            "list_created_at": row["created_at"],
        }
