"""What `publish` tells a key about events and collections it may not see (no existence oracle),
and what it says when a replaceable event loses (`superseded`), on real PostgreSQL."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from factories import (
    APPROVED,
    MEMBER,
    MEMBER2,
    OWNER,
    STRANGER,
    T0,
    EventDict,
    claim,
    contradiction,
    evidence,
    link,
    members,
    profile,
    terms,
)
from publishing import open_collection, publish, refused

from tms.ledger.service import Ledger
from tms.nostr.events import SecretKey

pytestmark = pytest.mark.anyio


async def test_a_stored_event_resent_by_a_key_that_may_not_write_is_refused_not_skipped(
    ledger: Ledger,
) -> None:
    """A removed member re-sending its own stored claim gets the refusal a new claim gets, so
    `skipped` never confirms that an event exists to a key that may not write there."""
    await open_collection(ledger, OWNER, "lab", [MEMBER])
    stored = claim(MEMBER, "lab", "Stored while a member.")
    await publish(ledger, terms(MEMBER), stored)
    await publish(ledger, members(OWNER, "lab", [], created_at=T0 + 10))  # MEMBER removed
    fresh = claim(MEMBER, "lab", "A new claim.")
    old_refusal = await refused(ledger, [stored], "is not approved and is not a member", position=0)
    new_refusal = await refused(ledger, [fresh], "is not approved and is not a member", position=0)
    assert old_refusal.split(": ", 1)[1] == new_refusal.split(": ", 1)[1]


async def test_a_key_removed_from_one_collection_gets_one_answer_there(ledger: Ledger) -> None:
    """Still a member elsewhere, so it may publish at all; in the collection it left, its stored
    claim and a new one get the same refusal."""
    await open_collection(ledger, OWNER, "lab", [MEMBER])
    await open_collection(ledger, APPROVED, "elsewhere", [MEMBER])
    stored = claim(MEMBER, "lab", "Stored while a member.")
    await publish(ledger, terms(MEMBER), stored)
    await publish(ledger, members(OWNER, "lab", [], created_at=T0 + 10))
    fresh = claim(MEMBER, "lab", "A new claim.")
    old_refusal = await refused(ledger, [stored], "not a member of collection 'lab'", position=0)
    new_refusal = await refused(ledger, [fresh], "not a member of collection 'lab'", position=0)
    assert old_refusal.split(": ", 1)[1] == new_refusal.split(": ", 1)[1]


async def test_a_key_that_is_not_approved_cannot_tell_taken_slugs_from_free_ones(
    ledger: Ledger,
) -> None:
    await open_collection(ledger, OWNER, "lab", [MEMBER])
    await publish(ledger, terms(MEMBER))
    taken = await refused(ledger, [claim(MEMBER, "other-lab", "x")], "not a member", position=0)
    await open_collection(ledger, APPROVED, "other-lab")
    free = await refused(ledger, [claim(MEMBER, "free-slug", "x")], "not a member", position=0)
    existing = await refused(ledger, [claim(MEMBER, "other-lab", "x")], "not a member", position=0)
    for message, slug in ((taken, "other-lab"), (free, "free-slug"), (existing, "other-lab")):
        body = message.split(": ", 1)[1].replace(slug, "SLUG")
        assert body == (
            f"pubkey {MEMBER.pubkey} is not a member of collection 'SLUG' (or no such "
            "collection: check the slug for typos, or ask its owner to add your key); only "
            "approved pubkeys create collections"
        )


# One event of each collection kind that `signer` may try to publish into `slug`.
NO_ID = "ab" * 32
EVERY_KIND: dict[int, Callable[[SecretKey, str], EventDict]] = {
    4701: lambda signer, slug: evidence(signer, slug, "A document."),
    4702: lambda signer, slug: claim(signer, slug, "A claim."),
    4703: lambda signer, slug: link(signer, slug, NO_ID, NO_ID, "A document"),
    4704: lambda signer, slug: contradiction(signer, slug, [NO_ID, "cd" * 32]),
    4705: lambda signer, slug: members(signer, slug, [signer.pubkey]),
}


@pytest.mark.parametrize("kind", sorted(EVERY_KIND))
@pytest.mark.parametrize(
    "signer", [pytest.param(MEMBER, id="member-elsewhere"), pytest.param(MEMBER2, id="removed")]
)
async def test_a_key_that_may_not_write_hears_the_same_for_a_taken_and_a_free_slug(
    ledger: Ledger, kind: int, signer: SecretKey
) -> None:
    """Kinds 4701 to 4705, from a key that is not approved and not a member of the slug: the
    refusal before the slug is taken is the refusal after, word for word (a member list used
    to answer "only the owner ... changes its members" for a taken slug only)."""
    await open_collection(ledger, OWNER, "lab", [MEMBER, MEMBER2])
    await publish(ledger, terms(MEMBER), terms(MEMBER2))
    event = EVERY_KIND[kind](signer, "taken")
    free = await refused(ledger, [event], position=0)
    await open_collection(ledger, APPROVED, "taken", [MEMBER2])
    held = evidence(APPROVED, "taken", "A document held here.")
    await publish(ledger, held, claim(APPROVED, "taken", "Held here."))
    await publish(ledger, members(APPROVED, "taken", [], created_at=T0 + 10))  # MEMBER2 removed
    taken = await refused(ledger, [event], position=0)
    assert taken == free
    assert taken.endswith(
        f"pubkey {signer.pubkey} is not a member of collection 'taken' (or no such collection: "
        "check the slug for typos, or ask its owner to add your key); only approved pubkeys "
        "create collections"
    )


async def test_only_keys_that_know_a_collection_hear_only_the_owner_changes_its_members(
    ledger: Ledger,
) -> None:
    """Its members read it and an approved key would create a free slug: both may hear SPEC's
    owner-only row."""
    await open_collection(ledger, OWNER, "lab", [MEMBER])
    await ledger.approve([APPROVED.pubkey])
    await publish(ledger, terms(MEMBER), terms(APPROVED))
    for signer in (MEMBER, APPROVED):
        await refused(
            ledger,
            [members(signer, "lab", [signer.pubkey])],
            "only the owner of collection 'lab' changes its members",
            position=0,
        )


async def test_an_approved_key_refused_by_an_existing_collection_gets_specs_row(
    ledger: Ledger,
) -> None:
    await open_collection(ledger, OWNER, "lab")
    await ledger.approve([APPROVED.pubkey])
    await publish(ledger, terms(APPROVED))
    message = await refused(ledger, [claim(APPROVED, "lab", "x")], "not a member", position=0)
    assert message.endswith(
        f"pubkey {APPROVED.pubkey} is not a member of collection 'lab' (or no such collection: "
        "check the slug for typos, or ask its owner to add your key)"
    )


async def test_unknown_keys_get_one_answer_for_stored_and_new_events(ledger: Ledger) -> None:
    await open_collection(ledger, OWNER, "lab")
    stored = claim(OWNER, "lab", "Stored.")
    await publish(ledger, stored)
    # A stranger cannot re-send OWNER's event (ids bind the signer), but its own events get the
    # one refusal whatever exists.
    message = await refused(ledger, [claim(STRANGER, "lab", "x")], "is not approved", position=0)
    assert "does not exist" not in message


async def test_a_member_list_that_loses_is_stored_and_reported_superseded(ledger: Ledger) -> None:
    await open_collection(ledger, OWNER, "lab")
    current = members(OWNER, "lab", [MEMBER.pubkey], created_at=T0 + 100)
    first = await publish(ledger, current)
    assert "superseded" not in first  # the usual answer stays exactly SPEC's
    behind = members(OWNER, "lab", [], created_at=T0 + 50)  # signed with a clock behind
    result = await publish(ledger, behind)
    assert result["accepted"] == [behind["id"]]
    assert result["superseded"] == [behind["id"]]
    # Two lists in one batch: the newer wins, the other is reported.
    a = members(OWNER, "lab", [], created_at=T0 + 200)
    b = members(OWNER, "lab", [MEMBER.pubkey], created_at=T0 + 300)
    assert (await publish(ledger, a, b))["superseded"] == [a["id"]]
    # Same second: the lowest id wins.
    x = members(OWNER, "lab", [], created_at=T0 + 400)
    y = members(OWNER, "lab", [MEMBER.pubkey, APPROVED.pubkey], created_at=T0 + 400)
    loser = max(x["id"], y["id"])
    assert (await publish(ledger, x, y))["superseded"] == [loser]


async def test_a_profile_that_loses_is_reported_superseded(ledger: Ledger) -> None:
    await ledger.approve([OWNER.pubkey])
    await publish(ledger, terms(OWNER), profile(OWNER, "new name", created_at=T0 + 100))
    older = profile(OWNER, "old name", created_at=T0 + 10)
    assert (await publish(ledger, older))["superseded"] == [older["id"]]
    newer = profile(OWNER, "newest name", created_at=T0 + 200)
    assert "superseded" not in await publish(ledger, newer)
