"""The publish rules: one batch judged, event by event, against a snapshot of the ledger.

Pure: the ledger service fetches the snapshot inside its transaction (after taking the locks),
and this module decides. Each event sees the effects of the ones before it in the batch: a terms
signature, a new collection, a replaced member list, an event it references. The first broken
rule stops the whole batch, naming the event by position and id.

Events outside the batch's collection are invisible here: a reference to an event of another
collection gets exactly the message of a reference to nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Final

from tms.errors import InvalidEvent, PublishError
from tms.nostr.events import Event
from tms.rules.kinds import (
    Content,
    Contradiction,
    Evidence,
    Link,
    Members,
    Terms,
    check_created_at,
    validate_content,
)
from tms.rules.quotes import PreparedText
from tms.rules.terms import current_terms
from tms.types import (
    KIND_CLAIM,
    KIND_CONTRADICTION,
    KIND_EVIDENCE,
    KIND_LINK,
    KIND_NAMES,
    KIND_REQUEST,
    EventId,
    PubKey,
    Slug,
)

MAX_BATCH: Final = 1000
LINK_TARGETS: Final = frozenset({KIND_CLAIM, KIND_LINK, KIND_CONTRADICTION, KIND_EVIDENCE})


def short(event_id: str) -> str:
    return f"{event_id[:12]}…"


def _where(position: int, event_id: str | None) -> str:
    return f"events[{position}]" + (f" ({short(event_id)})" if event_id else "")


@dataclass(frozen=True, slots=True)
class Parsed:
    event: Event
    content: Content

    @property
    def collection(self) -> Slug | None:
        return getattr(self.content, "collection", None)


def check_batch_shape(raw: object) -> list[object]:
    if not isinstance(raw, list):
        raise PublishError("events must be a list of signed events")
    if not raw:
        raise PublishError("events is empty: send at least one signed event")
    if len(raw) > MAX_BATCH:
        raise PublishError(f"at most {MAX_BATCH} events per batch; this one has {len(raw)}")
    return raw


def parse_events(raw: Sequence[object], now: int, offset: int = 0) -> list[Parsed]:
    """Check every envelope, signature and content schema; `offset` is the position of
    `raw[0]` in the whole batch, for the error message. CPU-bound: run it off the loop."""
    parsed = []
    for position, obj in enumerate(raw, start=offset):
        event_id = obj.get("id") if isinstance(obj, dict) else None
        label = _where(position, event_id if isinstance(event_id, str) else None)
        try:
            event = Event.from_dict(obj)
            event.verify()
            if event.kind == KIND_REQUEST:
                raise InvalidEvent(
                    "kind 4707 requests are never stored; pass one as a tool's `request` argument"
                )
            content = validate_content(event)
            check_created_at(event, now)
        except InvalidEvent as exc:
            raise PublishError(f"{label}: {exc}") from None
        parsed.append(Parsed(event, content))
    return parsed


def parse_batch(raw: object, now: int) -> list[Parsed]:
    return parse_events(check_batch_shape(raw), now)


@dataclass(frozen=True, slots=True)
class Ref:
    """What the rules need of a referenced event: its kind and collection."""

    kind: int
    collection: Slug


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
    heads: dict[Slug, tuple[int, EventId]] = field(default_factory=dict)  # current list's key
    refs: dict[EventId, Ref] = field(default_factory=dict)  # stored events the batch cites
    evidence_texts: dict[EventId, str] = field(default_factory=dict)  # stored, quoted evidence


@dataclass(slots=True)
class Plan:
    """What to write: the accepted events in order, and the state they change."""

    accepted: list[Parsed] = field(default_factory=list)
    skipped: list[EventId] = field(default_factory=list)
    new_collections: list[tuple[Slug, PubKey, EventId]] = field(default_factory=list)
    member_lists: dict[Slug, tuple[int, EventId, list[PubKey]]] = field(default_factory=dict)

    @property
    def collections(self) -> list[Slug]:
        return sorted({p.collection for p in self.accepted if p.collection is not None})


def newer(key: tuple[int, EventId], head: tuple[int, EventId]) -> bool:
    """NIP-01's replaceable rule on (created_at, id): the newest wins; ties go to the lowest id."""
    return key[0] > head[0] or (key[0] == head[0] and key[1] < head[1])


def referenced_ids(batch: Iterable[Parsed]) -> set[EventId]:
    ids: set[EventId] = set()
    for item in batch:
        content = item.content
        if isinstance(content, Link):
            ids.update((content.from_, content.to))
        elif isinstance(content, Contradiction):
            ids.update(content.claims)
    return ids


def quoted_evidence_ids(batch: Iterable[Parsed]) -> set[EventId]:
    return {item.content.from_ for item in batch if isinstance(item.content, Link)}


class _Judge:
    def __init__(self, snapshot: Snapshot) -> None:
        self.s = snapshot
        self.plan = Plan()
        self.refs = dict(snapshot.refs)
        self.texts: dict[EventId, str] = dict(snapshot.evidence_texts)
        self.prepared: dict[EventId, PreparedText] = {}
        terms = current_terms()
        self.terms = (terms["version"], terms["sha256"])

    def judge(self, batch: Sequence[Parsed]) -> Plan:
        seen: set[EventId] = set()
        for position, item in enumerate(batch):
            event_id = item.event.id
            if event_id in self.s.stored_ids or event_id in seen:
                self.plan.skipped.append(event_id)
                continue
            seen.add(event_id)
            try:
                self._one(item)
            except PublishError as exc:
                raise PublishError(f"{_where(position, event_id)}: {exc}") from None
            self.plan.accepted.append(item)
        return self.plan

    def _one(self, item: Parsed) -> None:
        event, content = item.event, item.content
        signer = event.pubkey
        s = self.s
        if signer not in s.approved and not s.belongs_to.get(signer):
            raise PublishError(
                f"pubkey {signer} is not approved and is not a member of any collection"
            )
        if isinstance(content, Terms):
            if (content.version, content.sha256) != self.terms:
                raise PublishError(
                    "these are not the current terms: sign the current terms first "
                    f"(version {self.terms[0]}, sha256 {self.terms[1]}; see GET /terms)"
                )
            s.terms_signed.add(signer)
        elif signer not in s.terms_signed:
            raise PublishError(
                f"pubkey {signer} must sign the current terms first (kind 4706, version "
                f"{self.terms[0]}, sha256 {self.terms[1]}), earlier in this batch or before it"
            )
        slug = item.collection
        if slug is None:
            return
        self._authorize(
            signer, slug, creating_event=event.id, is_members=isinstance(content, Members)
        )
        if isinstance(content, Link):
            self._link(slug, content)
        elif isinstance(content, Contradiction):
            self._contradiction(slug, content)
        elif isinstance(content, Members):
            self._members(slug, event, content)
        elif isinstance(content, Evidence):
            self.texts[event.id] = content.text
        self.refs[event.id] = Ref(event.kind, slug)

    def _authorize(
        self, signer: PubKey, slug: Slug, creating_event: EventId, is_members: bool
    ) -> None:
        s = self.s
        owner = s.owners.get(slug)
        if owner is None:
            if signer not in s.approved:
                raise PublishError(
                    f"collection '{slug}' does not exist, and only approved pubkeys create "
                    "collections (check the slug for typos)"
                )
            s.owners[slug] = signer
            s.belongs_to.setdefault(signer, set()).add(slug)
            self.plan.new_collections.append((slug, signer, creating_event))
        elif is_members:
            if signer != owner:
                raise PublishError(f"only the owner of collection '{slug}' changes its members")
        elif signer != owner and signer not in s.members.get(slug, ()):
            raise PublishError(f"pubkey {signer} is not a member of collection '{slug}'")

    def _ref(self, slug: Slug, event_id: EventId, role: str) -> Ref:
        ref = self.refs.get(event_id)
        if ref is None or ref.collection != slug:
            raise PublishError(f"{role} {event_id} does not exist in collection '{slug}'")
        return ref

    def _link(self, slug: Slug, link: Link) -> None:
        source = self._ref(slug, link.from_, "from")
        if source.kind != KIND_EVIDENCE:
            raise PublishError(
                f"from must be an evidence event; {link.from_} is a {KIND_NAMES[source.kind]}"
            )
        target = self._ref(slug, link.to, "to")
        if target.kind not in LINK_TARGETS:
            raise PublishError(
                f"to must be a claim, link, contradiction or evidence; {link.to} is a "
                f"{KIND_NAMES[target.kind]} event"
            )
        if link.relation == "QUALIFIES" and target.kind != KIND_CLAIM:
            raise PublishError(
                f"QUALIFIES may only target a claim; {link.to} is a {KIND_NAMES[target.kind]}"
            )
        prepared = self.prepared.get(link.from_)
        if prepared is None:
            prepared = self.prepared[link.from_] = PreparedText(self.texts[link.from_])
        if not prepared.contains(link.quote):
            raise PublishError(
                f"quote not found verbatim in evidence {link.from_}; copy it exactly from the "
                "evidence text (case, whitespace, quote and dash styles may differ; nothing else)"
            )

    def _contradiction(self, slug: Slug, contradiction: Contradiction) -> None:
        for claim_id in contradiction.claims:
            if self._ref(slug, claim_id, "claim").kind != KIND_CLAIM:
                raise PublishError(f"{claim_id} is not a claim in collection '{slug}'")

    def _members(self, slug: Slug, event: Event, members: Members) -> None:
        key = (event.created_at, event.id)
        head = self.s.heads.get(slug)
        if head is None or newer(key, head):
            old, new = self.s.members.get(slug, set()), set(members.members)
            owner = self.s.owners[slug]
            for pubkey in old - new - {owner}:
                self.s.belongs_to.get(pubkey, set()).discard(slug)
            for pubkey in new - old:
                self.s.belongs_to.setdefault(pubkey, set()).add(slug)
            self.s.heads[slug] = key
            self.s.members[slug] = new
            self.plan.member_lists[slug] = (event.created_at, event.id, list(members.members))


def judge(batch: Sequence[Parsed], snapshot: Snapshot) -> Plan:
    """Decide the whole batch against `snapshot` (which it updates as the batch goes)."""
    return _Judge(snapshot).judge(batch)
