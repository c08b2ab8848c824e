"""Who belongs to a collection, folded from the signed records in its log: one rule, used by the
publish rules (`tms.rules.publish`), the export's order (`tms.rules.export_order`), the replay an
audit runs (`tms.tlog.replay`, `tms verify-export`, `tms mirror`).

Two kinds of record change membership (docs/architecture.md, "Membership records"):

- a member list (kind 4705): the owner's signature over the whole set, `Replace`;
- a membership change: a NIP-98 event (kind 27235) the owner signed for a NIP-86 call
  (`allowpubkey`, `unallowpubkey`) on the collection's relay URL, kept with the JSON-RPC body its
  `payload` tag hashes, `Add` or `Remove` of one key. The collection is the path of its `u` tag.
  The same record with the method `createinvite` is an *invite*: the owner's consent to one join,
  holding the SHA-256 of a random single-use code (never the code); it changes no member;
- a join (kind 28934, NIP-43) signed by the joining key with `["claim", code]`: `Add` of its
  signer, valid only when the SHA-256 of the code is an invite earlier in the log that no join
  used yet (the owner's authority, delegated by the invite); it uses the invite up;
- a leave (kind 28936, NIP-43) signed by the leaving key: `Remove` of its signer (never the
  owner). NIP-43's requests name no relay: each keeps, in the extra `body` field, the signer's
  NIP-42 AUTH event (kind 22242) whose `relay` tag names the collection's relay URL, signed
  within `REQUEST_WINDOW` seconds of the request, so it cannot be replayed into another one.

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
from tms.types import KIND_JOIN, KIND_LEAVE, KIND_MEMBER_CHANGE, KIND_MEMBERS, EventId, PubKey, Slug

ALLOW: Final = "allowpubkey"
UNALLOW: Final = "unallowpubkey"
INVITE: Final = "createinvite"
CHANGE_METHODS: Final = (ALLOW, UNALLOW, INVITE)
KIND_AUTH: Final = 22242  # NIP-42's AUTH event, kept with a join or leave
REQUEST_WINDOW: Final = 600  # seconds between a join or leave and its AUTH event (NIP-42's)
MAX_CODE_CHARS: Final = 200
_SLUG_CHARS: Final = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-_")


class MemberChange(BaseModel):
    """A kind 27235 record, read from its tags and body (its `content` says nothing).
    `pubkey`: the key allowed or unallowed; for an invite, the SHA-256 (hex) of its code."""

    model_config = ConfigDict(strict=True, frozen=True)
    collection: str
    method: Literal["allowpubkey", "unallowpubkey", "createinvite"]
    pubkey: str
    reason: str | None = None


class MemberRequest(BaseModel):
    """A NIP-43 join (kind 28934) or leave (kind 28936), read from its tags and the AUTH event
    kept with it. `pubkey`: its signer, who joins or leaves; `code`: a join's claim."""

    model_config = ConfigDict(strict=True, frozen=True)
    collection: str
    method: Literal["join", "leave"]
    pubkey: str
    code: str | None = None


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
            f'{{"method": "{ALLOW}" or "{UNALLOW}", "params": [pubkey, reason?]}} '
            f'or {{"method": "{INVITE}", "params": [sha256 of the code]}}',
            "body",
        )
    if method == INVITE and (len(params) != 1 or not is_hex64(params[0])):
        raise InvalidEvent(
            "field 'body' is invalid: an invite's params are [the SHA-256 of its code, 64 "
            "lowercase hex]; never the code itself",
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


def code_hash(code: str) -> str:
    """What an invite holds for its code: the hex SHA-256 of the code's UTF-8 bytes."""
    return hashlib.sha256(code.encode("utf-8")).hexdigest()


def _request_tag(event: Event, name: str, what: str) -> str:
    values = [tag[1] for tag in event.tags if len(tag) >= 2 and tag[0] == name]
    if len(values) != 1:
        raise InvalidEvent(
            f"field 'tags' is invalid: {what} needs exactly one '{name}' tag", "tags"
        )
    return values[0]


def parse_request(event: Event) -> MemberRequest:
    """A kind 28934 or 28936 event as a join or leave, checked: the AUTH event kept in `body`
    verifies, is kind 22242 by the same key, signed within `REQUEST_WINDOW` seconds of the
    request, and its `relay` tag names one collection's relay URL; a join has one claim."""
    what = (
        "a join request (kind 28934)" if event.kind == KIND_JOIN else "a leave request (kind 28936)"
    )
    if event.body is None:
        raise InvalidEvent(
            f"field 'body' is missing: {what} is kept with its signer's NIP-42 AUTH event "
            "(kind 22242) naming the collection's relay: authenticate on that relay first",
            "body",
        )
    try:
        auth = Event.from_json(event.body)
        auth.verify()
    except InvalidEvent as exc:
        raise InvalidEvent(f"field 'body' is invalid: its AUTH event: {exc}", "body") from None
    if auth.kind != KIND_AUTH or auth.pubkey != event.pubkey:
        raise InvalidEvent(
            f"field 'body' is invalid: must be a NIP-42 AUTH event (kind {KIND_AUTH}) signed by "
            "the request's own key",
            "body",
        )
    if abs(auth.created_at - event.created_at) > REQUEST_WINDOW:
        raise InvalidEvent(
            f"field 'body' is invalid: its AUTH event was signed more than {REQUEST_WINDOW} s "
            "from the request: authenticate again, then send the request",
            "body",
        )
    slug = collection_of_url(_request_tag(auth, "relay", "its AUTH event"))
    if slug is None:
        raise InvalidEvent(
            "field 'body' is invalid: its AUTH event's 'relay' tag must be a collection's "
            "relay URL, <origin>/c/<slug>",
            "body",
        )
    if event.kind == KIND_LEAVE:
        return MemberRequest(collection=slug, method="leave", pubkey=event.pubkey)
    code = _request_tag(event, "claim", what)
    if not 1 <= len(code) <= MAX_CODE_CHARS:
        raise InvalidEvent(
            f"field 'tags' is invalid: the claim must be an invite code of 1 to "
            f"{MAX_CODE_CHARS} characters",
            "tags",
        )
    return MemberRequest(collection=slug, method="join", pubkey=event.pubkey, code=code)


@dataclass(frozen=True, slots=True)
class Op:
    """What one record does to the member set: `replace` it, `add` or `remove` one key; or
    `invite`: none, it makes the code whose hash is its one key usable by one join. `claim`: a
    join's code hash, the invite it uses up."""

    action: Literal["replace", "add", "remove", "invite"]
    keys: frozenset[PubKey]
    claim: str | None = None


def change_op(change: MemberChange) -> Op:
    if change.method == INVITE:
        return Op("invite", frozenset((change.pubkey,)))
    return Op("add" if change.method == ALLOW else "remove", frozenset((change.pubkey,)))


def request_op(request: MemberRequest) -> Op:
    signer = frozenset((request.pubkey,))
    if request.code is not None:
        return Op("add", signer, claim=code_hash(request.code))
    return Op("remove", signer)


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


MEMBERSHIP_KINDS: Final = frozenset((KIND_MEMBERS, KIND_MEMBER_CHANGE, KIND_JOIN, KIND_LEAVE))


def is_membership_kind(kind: int) -> bool:
    return kind in MEMBERSHIP_KINDS


def stored_op(
    kind: int, pubkey: PubKey, tags: list[list[str]], content: str, body: str | None
) -> Op | None:
    """What a stored membership record does, read from its row as the ledger checked it at
    write (a list's content, a change's body, a request's signer and claim)."""
    if kind == KIND_MEMBERS:
        return list_op(json.loads(content)["members"])
    if kind == KIND_MEMBER_CHANGE and body is not None:
        request = json.loads(body)
        method, target = request["method"], request["params"][0]
        if method == INVITE:
            return Op("invite", frozenset((target,)))
        return Op("add" if method == ALLOW else "remove", frozenset((target,)))
    if kind == KIND_JOIN:
        codes = [tag[1] for tag in tags if len(tag) >= 2 and tag[0] == "claim"]
        return Op("add", frozenset((pubkey,)), claim=code_hash(codes[0]) if codes else "")
    if kind == KIND_LEAVE:
        return Op("remove", frozenset((pubkey,)))
    return None


class Membership:
    """Who belongs to one collection as its entries go by, in log order: the owner, and the
    member set the fold has made so far."""

    def __init__(self, owner: PubKey | None) -> None:
        self.owner = owner
        self.members: set[PubKey] = set()
        self.head: Head | None = None
        self.invites: set[str] = set()  # the code hashes of invites no join used yet

    def authorized(self, op: Op) -> bool:
        """Whether a join's invite is there, unused (other records: always; who signed them
        is checked by the caller)."""
        return op.claim is None or op.claim in self.invites

    def apply(self, created_at: int, event_id: EventId, op: Op) -> bool:
        """A membership record, next in log order; whether it applied. An invite is only
        remembered; a join uses its invite up, whether or not it applies."""
        if op.action == "invite":
            self.invites |= op.keys
            return False
        if op.claim is not None:
            self.invites.discard(op.claim)
        is_list = op.action == "replace"
        if not applies(self.head, created_at, event_id, is_list):
            return False
        self.head = (created_at, event_id, is_list)
        self.members = applied(self.members, op)
        return True

    def apply_stored(
        self,
        kind: int,
        created_at: int,
        event_id: EventId,
        content: str,
        body: str | None,
        pubkey: PubKey = "",
        tags: list[list[str]] | None = None,
    ) -> bool:
        """A stored record as its row holds it (`stored_op`)."""
        op = stored_op(kind, pubkey, tags or [], content, body)
        return op is not None and self.apply(created_at, event_id, op)

    def includes(self, pubkey: PubKey) -> bool:
        return pubkey == self.owner or pubkey in self.members
