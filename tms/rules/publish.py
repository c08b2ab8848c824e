"""The publish rules: one batch judged, event by event, against a snapshot of the ledger.

Pure: the ledger service fetches the snapshot inside its transaction (after taking the locks),
and this module decides. Each event sees the effects of the ones before it in the batch: a terms
signature, a new collection, a replaced member list, an event it references. The first broken
rule stops the whole batch, naming the event by position and id.

Events outside the batch's collection are invisible here: a reference to an event of another
collection gets exactly the message of a reference to nothing.
"""

from __future__ import annotations

import functools
from collections import ChainMap
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from tms.errors import InvalidEvent, PublishError, QuoteNotFound, Refusal, UnknownSigner
from tms.nostr.events import Event
from tms.rules.anchors import Anchor, Miss, Verdict, nearest, verdict
from tms.rules.content import check_created_at
from tms.rules.kinds import (
    KINDS,
    Content,
    Evidence,
    Link,
    Members,
    Profile,
    Terms,
    a_kind,
    collection_of,
    validate_content,
)
from tms.rules.membership import (
    INVITE,
    Head,
    MemberChange,
    MemberRequest,
    Op,
    applied,
    applies,
    change_op,
    code_hash,
    list_op,
    request_op,
)
from tms.rules.quotes import PreparedText
from tms.rules.terms import current_terms
from tms.types import KIND_CLAIM, KIND_REQUEST, EventId, PubKey, Slug

MAX_BATCH: Final = 1000


def short(event_id: str) -> str:
    return f"{event_id[:12]}…"


def located_at(position: int, event_id: str | None) -> str:
    """Where an event sits in its batch, as a refusal names it: `events[3] (ab12…)`."""
    return f"events[{position}]" + (f" ({short(event_id)})" if event_id else "")


# The content models are compared by type (`type(c) is Link`), not with `isinstance`: pydantic's
# models are ABCs, whose isinstance goes through ABCMeta at several times the cost, on every
# event of a batch, several times each. No content model has a subclass.


@dataclass(frozen=True, slots=True)
class Parsed:
    """A checked event, its content parsed once, and the collection it is filed in (`None`: a
    kind of no collection, `Kind.scoped`)."""

    event: Event
    content: Content
    collection: Slug | None


def check_batch_shape(raw: object) -> list[object]:
    if not isinstance(raw, list):
        raise PublishError("events must be a list of signed events")
    if not raw:
        raise PublishError("events is empty: send at least one signed event")
    if len(raw) > MAX_BATCH:
        raise PublishError(
            f"at most {MAX_BATCH} events per batch; this one has {len(raw)}"
        ).refused_as(Refusal.TOO_LARGE)
    return raw


def parse_events(raw: Sequence[object], now: int, offset: int = 0) -> list[Parsed]:
    """Check every envelope, signature and content schema; `offset` is the position of
    `raw[0]` in the whole batch, for the error message. CPU-bound: run it off the loop."""
    parsed = []
    for position, obj in enumerate(raw, start=offset):
        event_id = obj.get("id") if isinstance(obj, dict) else None
        label = located_at(position, event_id if isinstance(event_id, str) else None)
        try:
            event = Event.from_dict(obj)
            event.verify()
            known = KINDS.get(event.kind)
            if known is not None and not known.stored:  # `Kind.stored`
                raise InvalidEvent(
                    "kind 4707 requests are never stored; pass one as a tool's `request` argument"
                    if event.kind == KIND_REQUEST
                    else f"kind {event.kind} ({known.name}) events are never stored"
                )
            content = validate_content(event)
            check_created_at(event, now)
        except InvalidEvent as exc:
            raise PublishError(str(exc)).located(label).refused_as(exc.refusal) from None
        parsed.append(Parsed(event, content, collection_of(event.kind, content)))
    return parsed


@dataclass(frozen=True, slots=True)
class Ref:
    """What the rules need of a referenced event: its kind and collection."""

    kind: int
    collection: Slug | None  # None for events outside collections (profiles, terms)


@dataclass(slots=True)
class Snapshot:
    """The ledger as the batch finds it, limited to what the batch touches."""

    stored_ids: set[EventId] = field(default_factory=set)
    approved: set[PubKey] = field(default_factory=set)
    terms_signed: set[PubKey] = field(default_factory=set)
    # The collections each signer owns or belongs to; empty (or absent): none.
    belongs_to: dict[PubKey, set[Slug]] = field(default_factory=dict)
    owners: dict[Slug, PubKey] = field(default_factory=dict)
    members: dict[Slug, set[PubKey]] = field(default_factory=dict)  # current lists
    # The last membership record that applied (`tms.rules.membership`): (created_at, id), and
    # the collections where it is a membership change rather than a member list.
    heads: dict[Slug, tuple[int, EventId]] = field(default_factory=dict)
    change_heads: set[Slug] = field(default_factory=set)
    # The code hashes of each collection's invites that no join used yet (sql/026).
    invites: dict[Slug, set[str]] = field(default_factory=dict)
    profiles: dict[PubKey, tuple[int, EventId]] = field(default_factory=dict)  # current profile
    refs: dict[EventId, Ref] = field(default_factory=dict)  # stored events the batch cites
    # Each link of the batch: where its quote sits in its `from` evidence (an anchor), or a
    # miss. The service looks them up beforehand, one evidence at a time (`quotes_found`); for a
    # link it did not, the judge reads the evidence's text from the batch or from
    # `evidence_texts` itself (and then looks for the nearest passage of a miss too).
    quotes: dict[EventId, Verdict] = field(default_factory=dict)
    evidence_texts: dict[EventId, str] = field(default_factory=dict)  # stored, quoted evidence


@dataclass(slots=True)
class Plan:
    """What to write: the accepted events in order, and the state they change."""

    accepted: list[Parsed] = field(default_factory=list)
    skipped: list[EventId] = field(default_factory=list)
    # Joins of a key that already belongs: not stored, their invite not used (NIP-43's
    # `duplicate:`); also in `skipped`.
    already_members: list[EventId] = field(default_factory=list)
    new_collections: list[tuple[Slug, PubKey, EventId]] = field(default_factory=list)
    member_lists: dict[Slug, tuple[int, EventId, list[PubKey]]] = field(default_factory=dict)
    # Member lists and profiles stored but not current: they lost the replaceable rule, to an
    # event stored before or to a later one in the batch.
    superseded: list[EventId] = field(default_factory=list)
    anchors: dict[EventId, Anchor] = field(default_factory=dict)  # each accepted link's quote

    @property
    def collections(self) -> list[Slug]:
        return sorted({p.collection for p in self.accepted if p.collection is not None})


def newer(key: tuple[int, EventId], head: tuple[int, EventId]) -> bool:
    """NIP-01's replaceable rule on (created_at, id): the newest wins; ties go to the lowest id."""
    return key[0] > head[0] or (key[0] == head[0] and key[1] < head[1])


def referenced_ids(batch: Iterable[Parsed]) -> set[EventId]:
    """Every event id the batch's contents name (`Kind.references`)."""
    ids: set[EventId] = set()
    for item in batch:
        for reference in KINDS[item.event.kind].references:
            ids.update(reference.ids(item.content))
    return ids


def quotes_by_evidence(batch: Iterable[Parsed]) -> dict[EventId, list[tuple[EventId, str]]]:
    """The links of the batch grouped by the evidence they quote: (link id, quote) pairs, so
    that each evidence text is read and normalized once, then let go."""
    grouped: dict[EventId, list[tuple[EventId, str]]] = {}
    for item in batch:
        if type(item.content) is Link:
            grouped.setdefault(item.content.from_, []).append((item.event.id, item.content.quote))
    return grouped


def batch_texts(batch: Iterable[Parsed]) -> dict[EventId, str]:
    """The texts of the evidence the batch itself carries."""
    return {p.event.id: p.content.text for p in batch if type(p.content) is Evidence}


def quotes_found(text: str, quotes: Sequence[tuple[EventId, str]]) -> dict[EventId, Verdict]:
    """Where each of these links' quotes sits in the evidence text (its anchor), or a miss.
    CPU-bound for long texts: the service runs it off the event loop, one evidence at a time."""
    prepared = PreparedText(text)
    return {link_id: verdict(prepared, quote) for link_id, quote in quotes}


def with_nearest(refusal: QuoteNotFound, text: str) -> QuoteNotFound:
    """A refusal for a missing quote, with the passage of its evidence text nearest the quote
    added: looked for only for the link a refusal names (bounded, but dearer than finding a
    quote). CPU-bound: run it off the event loop."""
    found = nearest(PreparedText(text), refusal.quote)
    if found is None:
        return refusal
    return refusal.with_hint(found.describe())


class _Judge:
    def __init__(self, snapshot: Snapshot) -> None:
        self.s = snapshot
        # How to take back each change made to the snapshot so far, should the batch be
        # refused: a refused batch leaves the snapshot as it found it.
        self._undo: list[Callable[[], object]] = []
        self.plan = Plan()
        # The batch's own events are added in front (a refused batch leaves the snapshot's as
        # they were), without copying the snapshot's: a group's grows with every batch.
        self.refs: ChainMap[EventId, Ref] = ChainMap({}, snapshot.refs)
        self.texts: dict[EventId, str] = {}  # the batch's own evidence, as the judge reaches it
        self.prepared: dict[EventId, PreparedText] = {}
        terms = current_terms()
        self.terms = (terms["version"], terms["sha256"])
        self.replaceable: dict[tuple[Slug | PubKey, bool], EventId] = {}  # current, per name
        self.applied_changes: set[EventId] = set()  # the batch's membership changes that applied

    def judge(self, batch: Sequence[Parsed]) -> Plan:
        try:
            return self._judge(batch)
        except BaseException:
            for undo in reversed(self._undo):
                undo()
            raise

    def _judge(self, batch: Sequence[Parsed]) -> Plan:
        seen: set[EventId] = set()
        for position, item in enumerate(batch):
            event_id = item.event.id
            try:
                self._signer_may_write(item)
                if event_id in self.s.stored_ids or event_id in seen:
                    # Checked for events already stored too: a key that may not write here gets
                    # the same refusal whether or not the event exists.
                    self._may_write_in(item)
                    self.plan.skipped.append(event_id)
                    continue
                seen.add(event_id)
                if self._already_member(item):
                    self.plan.skipped.append(event_id)
                    self.plan.already_members.append(event_id)
                    continue
                self._one(item)
            except PublishError as exc:
                # Every event here has verified: the refusal is its signer's.
                located = exc.located(located_at(position, event_id))
                raise located.refused_as(exc.refusal, item.event.pubkey) from None
            self.plan.accepted.append(item)
        self.plan.superseded = [
            p.event.id
            for p in self.plan.accepted
            if (
                type(p.content) in (Members, Profile)
                and p.event.id not in self.replaceable.values()
            )
            or (
                type(p.content) in (MemberChange, MemberRequest)
                and p.event.id not in self.applied_changes
                and getattr(p.content, "method", None) != INVITE
            )
        ]
        return self.plan

    def _already_member(self, item: Parsed) -> bool:
        """A join by a key that already belongs to the collection (NIP-43: `duplicate:`)."""
        content, slug = item.content, item.collection
        if type(content) is not MemberRequest or content.method != "join" or slug is None:
            return False
        signer = item.event.pubkey
        return signer == self.s.owners.get(slug) or signer in self.s.members.get(slug, ())

    def _signer_may_write(self, item: Parsed) -> None:
        signer = item.event.pubkey
        if type(item.content) is MemberRequest and item.content.method == "join":
            return  # a key new to the ledger joins by an invite (`_request`)
        if signer not in self.s.approved and not self.s.belongs_to.get(signer):
            raise UnknownSigner(
                f"pubkey {signer} is not approved and is not a member of any collection"
            )

    def _may_write_in(self, item: Parsed) -> None:
        """The signer may write to the collection the event names: its owner, or (except for
        member lists) a current member. A missing collection may be created by an approved
        key, and reads to any other key exactly like a collection it may not write to.

        Only keys that know a collection exists anyway hear that it does: its members (they
        read it) and approved keys (naming a missing slug would create it). Every other key
        gets one refusal, whatever the kind and whether or not the slug is taken."""
        signer, slug = item.event.pubkey, item.collection
        if slug is None:
            return
        s = self.s
        owner = s.owners.get(slug)
        if signer == owner:
            return
        approved, member = signer in s.approved, signer in s.members.get(slug, ())
        if type(item.content) is MemberRequest:
            if owner is not None and (item.content.method == "join" or member):
                return  # a join's authority is its invite (`_request`); a member may leave
            raise _not_a_member(signer, slug, approved=True)  # and never makes a collection
        if owner is None:
            if not approved:
                raise _not_a_member(signer, slug, approved=False)
        elif not approved and not member:
            raise _not_a_member(signer, slug, approved=False)
        elif type(item.content) in (Members, MemberChange):
            raise PublishError(
                f"only the owner of collection '{slug}' changes its members"
            ).refused_as(Refusal.NOT_MEMBER)
        elif not member:
            raise _not_a_member(signer, slug, approved=True)

    def _one(self, item: Parsed) -> None:
        event, content = item.event, item.content
        signer = event.pubkey
        s = self.s
        if type(content) is Terms:
            if (content.version, content.sha256) != self.terms:
                raise PublishError(
                    "these are not the current terms: sign the current terms first "
                    f"(version {self.terms[0]}, sha256 {self.terms[1]}; see GET /terms)"
                )
            self._add(s.terms_signed, signer)
        elif signer not in s.terms_signed and type(content) is not MemberRequest:
            # A join or a leave needs no terms: it writes nothing but the key's membership.
            raise PublishError(
                f"pubkey {signer} must sign the current terms first (kind 4706, version "
                f"{self.terms[0]}, sha256 {self.terms[1]}), earlier in this batch or before it"
            )
        if type(content) is Profile:
            self._profile(event)
        slug = item.collection
        if slug is None:
            return
        self._may_write_in(item)
        if s.owners.get(slug) is None:  # an approved key names a new collection: it creates it
            self._put(s.owners, slug, signer)
            self._belong(signer, slug)
            self.plan.new_collections.append((slug, signer, event.id))
        for reference in KINDS[event.kind].references:
            for cited in reference.ids(content):
                found = self._ref(slug, cited, reference.role)
                if found.kind not in reference.kinds:
                    raise PublishError(
                        reference.wrong.format(id=cited, a_kind=a_kind(found.kind), slug=slug)
                    )
        if type(content) is Link:
            self._link(slug, event.id, content)
        elif type(content) is Members:
            if self._members(slug, event, list_op(content.members), content.members):
                self.replaceable[(slug, True)] = event.id
        elif type(content) is MemberChange and content.method == INVITE:
            self._add(self._invites(slug), content.pubkey)
        elif type(content) is MemberRequest:
            self._request(slug, event, content)
        elif type(content) is MemberChange:
            if content.method == "unallowpubkey" and content.pubkey == s.owners[slug]:
                raise PublishError(
                    f"the owner of collection '{slug}' always belongs to it: it cannot be unallowed"
                )
            if self._members(slug, event, change_op(content)):
                self.applied_changes.add(event.id)
        elif type(content) is Evidence:
            self.texts[event.id] = content.text
        self.refs[event.id] = Ref(event.kind, slug)

    def _invites(self, slug: Slug) -> set[str]:
        invites = self.s.invites.get(slug)
        if invites is None:
            invites = set()
            self._put(self.s.invites, slug, invites)
        return invites

    def _request(self, slug: Slug, event: Event, request: MemberRequest) -> None:
        """A NIP-43 join or leave: a join uses up an unused invite of the collection whose code
        it claims; the owner never leaves."""
        if request.method == "leave" and event.pubkey == self.s.owners[slug]:
            raise PublishError(
                f"the owner of collection '{slug}' always belongs to it: it cannot leave"
            ).refused_as(Refusal.NOT_MEMBER)
        if request.code is not None:
            invites, claimed = self._invites(slug), code_hash(request.code)
            if claimed not in invites:
                raise PublishError(
                    f"this invite code is not one of collection '{slug}''s, or it was used "
                    "already: ask its owner for a new one"
                ).refused_as(Refusal.NOT_MEMBER)
            self._discard(invites, claimed)
        if self._members(slug, event, request_op(request)):
            self.applied_changes.add(event.id)

    def _ref(self, slug: Slug, event_id: EventId, role: str) -> Ref:
        ref = self.refs.get(event_id)
        if ref is None or ref.collection != slug:
            raise PublishError(f"{role} {event_id} does not exist in collection '{slug}'")
        return ref

    def _link(self, slug: Slug, link_id: EventId, link: Link) -> None:
        """Beyond its references: QUALIFIES targets claims only, and the quote is there."""
        target = self.refs[link.to]
        if link.relation == "QUALIFIES" and target.kind != KIND_CLAIM:
            raise PublishError(
                f"QUALIFIES may only target a claim; {link.to} is {a_kind(target.kind)}"
            )
        found = self._quote(link_id, link)
        if isinstance(found, Miss):
            hint = f"; {found.nearest.describe()}" if found.nearest is not None else ""
            raise QuoteNotFound(
                f"quote not found verbatim in evidence {link.from_}; copy it exactly from the "
                "evidence text (case, whitespace, quote and dash styles may differ; nothing else)"
                + hint,
                link.from_,
                link.quote,
                hinted=found.looked,
            )
        self.plan.anchors[link_id] = found

    def _quote(self, link_id: EventId, link: Link) -> Verdict:
        found = self.s.quotes.get(link_id)
        if found is None:
            prepared = self.prepared.get(link.from_)
            if prepared is None:
                text = self.texts.get(link.from_) or self.s.evidence_texts.get(link.from_, "")
                prepared = self.prepared[link.from_] = PreparedText(text)
            found = verdict(prepared, link.quote)
            if isinstance(found, Miss):  # the batch stops here: worth the nearest passage
                found = Miss(nearest(prepared, link.quote), looked=True)
        return found

    def _profile(self, event: Event) -> None:
        key = (event.created_at, event.id)
        head = self.s.profiles.get(event.pubkey)
        if head is None or newer(key, head):
            self._put(self.s.profiles, event.pubkey, key)
            self.replaceable[(event.pubkey, False)] = event.id

    def _members(
        self, slug: Slug, event: Event, op: Op, signed: list[PubKey] | None = None
    ) -> bool:
        """A membership record (`tms.rules.membership`): folded into the collection's members
        if it applies after the current head; whether it did. `signed`: a member list's keys
        in the order it lists them (the plan keeps them so)."""
        is_list = op.action == "replace"
        current = self.s.heads.get(slug)
        head: Head | None = None
        if current is not None:
            head = (current[0], current[1], slug not in self.s.change_heads)
        if applies(head, event.created_at, event.id, is_list):
            old = self.s.members.get(slug, set())
            new = applied(old, op)
            owner = self.s.owners[slug]
            for pubkey in old - new - {owner}:
                slugs = self.s.belongs_to.get(pubkey)
                if slugs is not None and slug in slugs:
                    slugs.discard(slug)
                    self._undo.append(functools.partial(slugs.add, slug))
            for pubkey in new - old:
                self._belong(pubkey, slug)
            self._put(self.s.heads, slug, (event.created_at, event.id))
            if is_list:
                self._discard(self.s.change_heads, slug)
            else:
                self._add(self.s.change_heads, slug)
            self._put(self.s.members, slug, new)
            listed = list(signed) if signed is not None else sorted(new)
            self.plan.member_lists[slug] = (event.created_at, event.id, listed)
            return True
        return False

    # --- changes to the snapshot, each recorded with its undoing ------------------------------

    def _add(self, values: set[Any], value: Any) -> None:
        if value not in values:
            values.add(value)
            self._undo.append(functools.partial(values.discard, value))

    def _discard(self, values: set[Any], value: Any) -> None:
        if value in values:
            values.discard(value)
            self._undo.append(functools.partial(values.add, value))

    def _put(self, mapping: dict[Any, Any], key: Any, value: Any) -> None:
        if key in mapping:
            self._undo.append(functools.partial(mapping.__setitem__, key, mapping[key]))
        else:
            self._undo.append(functools.partial(mapping.pop, key, None))
        mapping[key] = value

    def _belong(self, pubkey: PubKey, slug: Slug) -> None:
        """`pubkey` belongs to `slug` (`Snapshot.belongs_to`)."""
        slugs = self.s.belongs_to.get(pubkey)
        if slugs is None:
            self._put(self.s.belongs_to, pubkey, {slug})
        else:
            self._add(slugs, slug)


def _not_a_member(signer: PubKey, slug: Slug, *, approved: bool) -> PublishError:
    """One refusal for a collection the key may not write to and one that does not exist: a key
    that is not approved learns nothing about which slugs are taken. (An approved key creates
    a missing collection by naming it, so it learns that a slug is taken, never what the
    collection holds.)"""
    message = (
        f"pubkey {signer} is not a member of collection '{slug}' (or no such collection: check "
        "the slug for typos, or ask its owner to add your key)"
    )
    return PublishError(
        message if approved else f"{message}; only approved pubkeys create collections"
    ).refused_as(Refusal.NOT_MEMBER)


def judge(batch: Sequence[Parsed], snapshot: Snapshot) -> Plan:
    """Decide the whole batch against `snapshot`, which it updates as the batch goes: a batch
    that passes leaves it as later batches must find it (terms signed, collections created,
    member lists and profiles made current); a refused one leaves it as it was."""
    return _Judge(snapshot).judge(batch)
