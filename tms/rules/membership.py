"""Who belongs to a collection, folded from the signed records in its log: one rule, used by the
publish rules (`tms.rules.publish`), the export's order (`tms.rules.export_order`), the replay an
audit runs (`tms.tlog.replay`, `tms verify-export`, `tms mirror`).

Two kinds of record change membership (docs/architecture.md, "Membership records"):

- a member list (kind 4705): the owner's signature over the whole set, `Replace`;
- a membership change: a NIP-98 event (kind 27235) the owner signed for a NIP-86 call
  (`allowpubkey`, `unallowpubkey`) on the collection's relay URL, kept with the JSON-RPC body its
  `payload` tag hashes, `Add` or `Remove` of one key. The collection is the path of its `u` tag.

The fold takes records in log order. Record R applies iff there is no head yet, or R is signed
in a later second than the head, or in the same second and one of them is a change (log order),
or both are lists and R's id is lower (NIP-01's replaceable rule). A record that does not apply
changes nothing; the owner always belongs.

Pure: no database, no web.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Final, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict

from tms.errors import InvalidEvent
from tms.nostr.events import Event, is_hex64, loads_strict
from tms.types import KIND_MEMBER_CHANGE, KIND_MEMBERS, EventId, PubKey, Slug

ALLOW: Final = "allowpubkey"
UNALLOW: Final = "unallowpubkey"
CHANGE_METHODS: Final = (ALLOW, UNALLOW)
_SLUG_CHARS: Final = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-_")


class MemberChange(BaseModel):
    """A kind 27235 record, read from its tags and body (its `content` says nothing)."""

    model_config = ConfigDict(strict=True, frozen=True)
    collection: str
    method: Literal["allowpubkey", "unallowpubkey"]
    pubkey: str
    reason: str | None = None


def _tag(event: Event, name: str) -> str:
    values = [tag[1] for tag in event.tags if len(tag) >= 2 and tag[0] == name]
    if len(values) != 1:
        raise InvalidEvent(
            f"field 'tags' is invalid: a membership change needs exactly one '{name}' tag", "tags"
        )
    return values[0]


def collection_of_url(url: str) -> Slug | None:
    """The collection a relay URL names (`…/c/<slug>`, nothing after), else None."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    if parts.scheme not in ("http", "https", "ws", "wss") or parts.query or parts.fragment:
        return None
    prefix, _, slug = parts.path.rpartition("/")
    if prefix != "/c" or not 1 <= len(slug) <= 64 or not set(slug) <= _SLUG_CHARS:
        return None
    return slug


def payload_hash(body: str) -> str:
    """What a NIP-98 `payload` tag holds for `body`: the hex SHA-256 of its UTF-8 bytes."""
    return hashlib.sha256(body.encode("utf-8")).hexdigest()


def parse_change(event: Event) -> MemberChange:
    """A kind 27235 event as a membership change, checked: the body is there and is what the
    signed `payload` tag hashes, `method` is POST, `u` names one collection's relay URL, and the
    body asks for `allowpubkey` or `unallowpubkey` of one key."""
    if event.body is None:
        raise InvalidEvent(
            "field 'body' is missing: a membership change (kind 27235) carries the request "
            "body its 'payload' tag hashes",
            "body",
        )
    if _tag(event, "method") != "POST":
        raise InvalidEvent("field 'tags' is invalid: a membership change is a POST", "tags")
    if _tag(event, "payload") != payload_hash(event.body):
        raise InvalidEvent(
            "field 'body' is invalid: its SHA-256 is not the signed 'payload' tag", "body"
        )
    slug = collection_of_url(_tag(event, "u"))
    if slug is None:
        raise InvalidEvent(
            "field 'tags' is invalid: the 'u' tag must be a collection's relay URL, "
            "<origin>/c/<slug>",
            "tags",
        )
    try:
        request = loads_strict(event.body)
    except ValueError:
        raise InvalidEvent("field 'body' is invalid: not JSON", "body") from None
    method = request.get("method") if isinstance(request, dict) else None
    params = request.get("params") if isinstance(request, dict) else None
    if method not in CHANGE_METHODS or not isinstance(params, list):
        raise InvalidEvent(
            "field 'body' is invalid: must be a JSON-RPC request "
            f'{{"method": "{ALLOW}" or "{UNALLOW}", "params": [pubkey, reason?]}}',
            "body",
        )
    if not 1 <= len(params) <= 2 or not is_hex64(params[0]):
        raise InvalidEvent(
            "field 'body' is invalid: params must be [pubkey (64 lowercase hex), reason?]", "body"
        )
    reason = params[1] if len(params) == 2 else None
    if reason is not None and not isinstance(reason, str):
        raise InvalidEvent("field 'body' is invalid: the reason must be a string", "body")
    return MemberChange(collection=slug, method=method, pubkey=params[0], reason=reason)


@dataclass(frozen=True, slots=True)
class Op:
    """What one record does to the member set: `replace` it, `add` or `remove` one key."""

    action: Literal["replace", "add", "remove"]
    keys: frozenset[PubKey]


def change_op(change: MemberChange) -> Op:
    return Op("add" if change.method == ALLOW else "remove", frozenset((change.pubkey,)))


def list_op(members: list[PubKey]) -> Op:
    return Op("replace", frozenset(members))


Head = tuple[int, EventId, bool]  # the last applied record's created_at, id, and "is a list"


def applies(head: Head | None, created_at: int, event_id: EventId, is_list: bool) -> bool:
    """Whether a record, next in log order, changes membership after `head` (module doc)."""
    if head is None or created_at > head[0]:
        return True
    if created_at < head[0]:
        return False
    return not is_list or not head[2] or event_id < head[1]


def applied(members: set[PubKey], op: Op) -> set[PubKey]:
    """The member set after `op`."""
    if op.action == "replace":
        return set(op.keys)
    if op.action == "add":
        return members | op.keys
    return members - op.keys


def is_membership_kind(kind: int) -> bool:
    return kind in (KIND_MEMBERS, KIND_MEMBER_CHANGE)


class Membership:
    """Who belongs to one collection as its entries go by, in log order: the owner, and the
    member set the fold has made so far."""

    def __init__(self, owner: PubKey | None) -> None:
        self.owner = owner
        self.members: set[PubKey] = set()
        self.head: Head | None = None

    def apply(self, created_at: int, event_id: EventId, op: Op) -> bool:
        """A membership record, next in log order; whether it applied."""
        is_list = op.action == "replace"
        if not applies(self.head, created_at, event_id, is_list):
            return False
        self.head = (created_at, event_id, is_list)
        self.members = applied(self.members, op)
        return True

    def apply_stored(
        self, kind: int, created_at: int, event_id: EventId, content: str, body: str | None
    ) -> bool:
        """A stored record as its row holds it: a list's content, a change's body."""
        if kind == KIND_MEMBERS:
            return self.apply(created_at, event_id, list_op(json.loads(content)["members"]))
        if kind == KIND_MEMBER_CHANGE and body is not None:
            request = json.loads(body)
            op = Op(
                "add" if request["method"] == ALLOW else "remove",
                frozenset((request["params"][0],)),
            )
            return self.apply(created_at, event_id, op)
        return False

    def includes(self, pubkey: PubKey) -> bool:
        return pubkey == self.owner or pubkey in self.members
