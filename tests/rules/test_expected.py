"""What a page's batch expected of its collections (`tms.rules.expected`), against snapshots
made by hand: a create form over an existing collection, a members page over a list that
changed, and what each key is told (its own collection's state to its owner, "taken" to an
approved key, nothing to anyone else: the publish rules refuse them as usual).

That the ledger checks it under the collection's lock is tested in
tests/ledger/test_publish_expected.py.
"""

from __future__ import annotations

import pytest
from factories import APPROVED, MEMBER, NOW, OWNER, OWNER2, STRANGER, T0, claim, members

from tms.errors import PublishError, Refusal
from tms.rules.expected import NO_LIST, check_expected
from tms.rules.publish import Parsed, Snapshot, parse_events

LIST_ID = "a" * 64
NEWER_ID = "b" * 64


def parsed(*events: dict[str, object]) -> list[Parsed]:
    return parse_events(list(events), NOW)


def existing(owner: str = OWNER.pubkey, head: tuple[int, str] | None = (T0, LIST_ID)) -> Snapshot:
    snapshot = Snapshot(approved={OWNER.pubkey, OWNER2.pubkey, APPROVED.pubkey})
    snapshot.owners["lab"] = owner
    if head is not None:
        snapshot.heads["lab"] = head
    return snapshot


def test_a_new_collection_passes_when_it_does_not_exist() -> None:
    batch = parsed(members(OWNER, "lab", []))
    check_expected(batch, Snapshot(approved={OWNER.pubkey}), {"lab": None})


def test_creating_over_your_own_collection_is_refused_as_yours() -> None:
    batch = parsed(members(OWNER, "lab", []))
    with pytest.raises(PublishError, match="you already own collection 'lab'") as refused:
        check_expected(batch, existing(), {"lab": None})
    assert "nothing was stored" in str(refused.value)
    assert refused.value.refusal is None  # a stale page, not a probe


def test_creating_over_another_owners_collection_tells_an_approved_key_it_is_taken() -> None:
    batch = parsed(members(APPROVED, "lab", []))
    with pytest.raises(PublishError, match="the name 'lab' is taken") as refused:
        check_expected(batch, existing(), {"lab": None})
    assert refused.value.refusal is Refusal.NOT_MEMBER


def test_a_key_that_may_not_create_learns_nothing_here() -> None:
    """Not approved: the expectation is not checked, and the publish rules refuse the batch
    with the message any key gets that may not write there."""
    for key in (MEMBER, STRANGER):
        check_expected(parsed(members(key, "lab", [])), existing(), {"lab": None})
        check_expected(parsed(members(key, "lab", [])), Snapshot(), {"lab": LIST_ID})


def test_the_members_page_saves_over_the_list_it_showed() -> None:
    batch = parsed(members(OWNER, "lab", [MEMBER.pubkey], created_at=T0 + 5))
    check_expected(batch, existing(), {"lab": LIST_ID})
    check_expected(batch, existing(head=None), {"lab": NO_LIST})


def test_a_list_that_changed_since_the_page_loaded_is_refused() -> None:
    batch = parsed(members(OWNER, "lab", [MEMBER.pubkey], created_at=T0 + 5))
    with pytest.raises(PublishError, match="changed since this page was loaded") as refused:
        check_expected(batch, existing(head=(T0 + 1, NEWER_ID)), {"lab": LIST_ID})
    assert "2026-09-21 14:13 UTC" in str(refused.value)  # when the current one was signed
    with pytest.raises(PublishError, match="none is signed now"):
        check_expected(batch, existing(head=None), {"lab": LIST_ID})
    with pytest.raises(PublishError, match="changed since"):
        check_expected(batch, existing(), {"lab": NO_LIST})


def test_only_the_owner_hears_about_the_list() -> None:
    """Another key's members event is refused by the rules (owner only), not here."""
    batch = parsed(members(OWNER2, "lab", []))
    check_expected(batch, existing(head=(T0 + 1, NEWER_ID)), {"lab": LIST_ID})


def test_a_list_expected_for_a_missing_collection_is_refused_to_an_approved_key() -> None:
    batch = parsed(members(APPROVED, "lab", []))
    with pytest.raises(PublishError, match="collection 'lab' does not exist"):
        check_expected(batch, Snapshot(approved={APPROVED.pubkey}), {"lab": LIST_ID})


def test_a_retried_batch_already_stored_passes() -> None:
    """A page that sends its batch again after a lost answer: the collection exists because of
    this very event, which the ledger then skips."""
    created = members(OWNER, "lab", [])
    snapshot = existing(head=(T0, str(created["id"])))
    snapshot.stored_ids.add(str(created["id"]))
    check_expected(parsed(created), snapshot, {"lab": None})


def test_collections_the_batch_does_not_touch_are_not_checked() -> None:
    batch = parsed(claim(OWNER, "elsewhere", "A claim."))
    check_expected(batch, existing(), {"lab": None})
