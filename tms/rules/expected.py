"""What a page's batch was made against, checked inside the publish's transaction.

A member list is replaceable: the newest signed list wins, whatever it holds. So a page that
signs one from a stale view can undo a change it never saw: the create form of an old home page
signing `members: []` for a collection created since (by its owner, elsewhere) would empty that
collection's list, and a members page open for an hour would drop a member added meanwhile. The
page therefore says what it expects, per collection, and the batch is refused when the ledger
no longer matches, under the collection's lock, so no check-then-publish race remains:

- `None`: the collection does not exist yet (the create form);
- `""`: it exists and has no member list signed yet (the members page of a new collection);
- an event id: that list is the current one (the members page);
- `APPLIES`: each membership change of the batch takes effect (NIP-86's door, which tells the
  owner "ok" only for a change that did: one older than the record in force, a member list
  signed with a clock ahead, would be stored and change nothing).

Only what the signer may learn anyway is told: its own collection's state to its owner, and that
a name is taken to an approved key (which may create collections, so could learn it by trying).
For any other key the expectation is not checked, and the publish rules refuse the batch with
the message every key gets that may not write there.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Final

from tms.errors import PublishError, Refusal
from tms.rules.membership import INVITE, MemberChange, applies
from tms.rules.publish import Parsed, Snapshot
from tms.types import EventId, Slug

# A collection's expected state: None (no such collection yet), "" (no list yet), or a list id.
Expected = Mapping[Slug, EventId | None]
NO_LIST: Final = ""
APPLIES: Final = "*"  # not an id: every membership change must apply


def check_expected(batch: Sequence[Parsed], snapshot: Snapshot, expected: Expected) -> None:
    """Refuse the batch (`PublishError`) if a collection it names is not as its page saw it."""
    for slug, wanted in expected.items():
        items = [p for p in batch if p.collection == slug]
        if not items or all(p.event.id in snapshot.stored_ids for p in items):
            continue  # nothing of this batch goes there, or a retry of a batch already stored
        signer = items[0].event.pubkey
        owner = snapshot.owners.get(slug)
        if wanted == APPLIES:
            _applies(slug, items, snapshot, owner)
            continue
        if wanted is None:
            if owner is None:
                continue
            if owner == signer:
                raise PublishError(
                    f"you already own collection '{slug}': nothing was stored (open it from "
                    "your collections)"
                ).refused_as(None, signer)
            if signer in snapshot.approved:
                raise PublishError(
                    f"the name '{slug}' is taken by another collection: choose another "
                    "(nothing was stored)"
                ).refused_as(Refusal.NOT_MEMBER, signer)
            continue
        if owner is None:
            if signer in snapshot.approved:
                raise PublishError(
                    f"collection '{slug}' does not exist: nothing was stored"
                ).refused_as(None, signer)
            continue
        if owner != signer:
            continue
        head = snapshot.heads.get(slug)
        current = head[1] if head is not None else NO_LIST
        if current != wanted:
            signed = (
                "none is signed now"
                if head is None
                else f"the current one was signed {_when(head[0])}"
            )
            raise PublishError(
                f"the member list of '{slug}' changed since this page was loaded ({signed}): "
                "nothing was stored; reload the page to see it, then make your change again"
            ).refused_as(None, signer)


def _applies(slug: Slug, items: Sequence[Parsed], snapshot: Snapshot, owner: str | None) -> None:
    current = snapshot.heads.get(slug)
    for item in items:
        event = item.event
        content = item.content
        if type(content) is not MemberChange or event.pubkey != owner or current is None:
            continue  # the publish rules refuse what is not the owner's
        if content.method == INVITE:
            continue  # an invite changes no member: it always takes effect
        head = (current[0], current[1], slug not in snapshot.change_heads)
        if not applies(head, event.created_at, event.id, False):
            raise PublishError(
                f"the members of '{slug}' were last changed by a record signed "
                f"{_when(current[0])}, later than this change: it would not take effect, so "
                "nothing was stored; check your clock, then sign the change again"
            ).refused_as(Refusal.STALE, event.pubkey)


def _when(seconds: int) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M UTC")
