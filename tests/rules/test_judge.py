"""The publish rules alone: `parse_events` and `judge(batch, snapshot)` against snapshots made by
hand, with no database. Every rule of SPEC "Publishing", the plan the judge makes, the message
naming the failing event, and properties over random batches.

That the ledger hands the judge the right snapshot, writes the plan all or nothing, and races
safely is tested against PostgreSQL in tests/ledger/test_publish.py.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import pytest
from factories import (
    APPROVED,
    MEMBER,
    MEMBER2,
    NOW,
    OWNER,
    OWNER2,
    STRANGER,
    T0,
    TERMS,
    EventDict,
    claim,
    compact,
    contradiction,
    evidence,
    ids,
    link,
    members,
    profile,
    signed,
    terms,
    where,
)
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from junk import junk_strategies

from tms.nostr.events import SecretKey
from tms.rules.kinds import Claim, Evidence
from tms.rules.publish import (
    MAX_BATCH,
    Parsed,
    Plan,
    PublishError,
    Ref,
    Snapshot,
    check_batch_shape,
    judge,
    newer,
    parse_events,
)
from tms.rules.quotes import normalize
from tms.types import (
    KIND_CLAIM,
    KIND_CONTRADICTION,
    KIND_EVIDENCE,
    KIND_LINK,
    KIND_MEMBERS,
    KIND_TERMS,
)

TEXT: Final = (
    "Histamine intolerance is thought to result from reduced diamine oxidase (DAO) activity. "
    "Serum DAO levels, however, correlate poorly with symptoms."
)
MISSING: Final = "f" * 64  # an event id nobody stored

# --- the world most tests start from -------------------------------------------------------------
#
# OWNER owns "lab", whose current member list names MEMBER; OWNER2 owns "other", listing nobody.
# APPROVED is approved and signed the terms, but belongs nowhere. MEMBER2 and STRANGER are nobody.
# Stored in lab: evidence DOC (of TEXT), claims C1 and C2, link L1 (DOC to C1), contradiction X1
# (C1, C2) and the list itself; in other: evidence and a claim. OWNER's profile is stored too.

DOC: Final = evidence(OWNER, "lab", TEXT)
C1: Final = claim(OWNER, "lab", "DAO activity explains HIT.")
C2: Final = claim(OWNER, "lab", "DAO activity does not explain HIT.")
L1: Final = link(OWNER, "lab", DOC["id"], C1["id"], "reduced diamine oxidase")
X1: Final = contradiction(OWNER, "lab", [C1["id"], C2["id"]])
LISTED: Final = members(OWNER, "lab", [MEMBER.pubkey])
OTHER_LIST: Final = members(OWNER2, "other", [])
OTHER_DOC: Final = evidence(OWNER2, "other", TEXT)
OTHER_CLAIM: Final = claim(OWNER2, "other", "A claim elsewhere.")
OWNER_PROFILE: Final = profile(OWNER, "owner")
STORED: Final = [DOC, C1, C2, L1, X1, LISTED, OTHER_LIST, OTHER_DOC, OTHER_CLAIM, OWNER_PROFILE]


def content_of(event: EventDict) -> dict[str, Any]:
    content: dict[str, Any] = json.loads(event["content"])
    return content


def collection_of(event: EventDict) -> str | None:
    return content_of(event).get("collection")


def ref(event: EventDict) -> Ref:
    """An event as the snapshot's `refs` hold it; one naming no collection (a profile, terms)
    comes back from the database with none."""
    return Ref(event["kind"], collection_of(event))  # type: ignore[arg-type]


def world() -> Snapshot:
    return Snapshot(
        stored_ids=set(ids(STORED)),
        approved={OWNER.pubkey, OWNER2.pubkey, APPROVED.pubkey},
        terms_signed={OWNER.pubkey, OWNER2.pubkey, APPROVED.pubkey, MEMBER.pubkey},
        belongs_to={OWNER.pubkey: {"lab"}, OWNER2.pubkey: {"other"}, MEMBER.pubkey: {"lab"}},
        owners={"lab": OWNER.pubkey, "other": OWNER2.pubkey},
        members={"lab": {MEMBER.pubkey}, "other": set()},
        heads={"lab": (T0, LISTED["id"]), "other": (T0, OTHER_LIST["id"])},
        refs={e["id"]: ref(e) for e in STORED},
        evidence_texts={DOC["id"]: TEXT, OTHER_DOC["id"]: TEXT},
    )


def parsed(events: Sequence[EventDict]) -> list[Parsed]:
    return parse_events(list(events), NOW)


def accepted(snapshot: Snapshot, *events: EventDict) -> Plan:
    """Judge `events`, expecting every one of them accepted."""
    plan = judge(parsed(events), snapshot)
    assert [p.event.id for p in plan.accepted] == ids(events), plan.skipped
    assert plan.skipped == []
    return plan


def refused(snapshot: Snapshot, events: Sequence[EventDict], *fragments: str, position: int) -> str:
    """Judge `events`, expecting a PublishError that names the event at `position` (by its
    position and id prefix) and holds every fragment."""
    with pytest.raises(PublishError) as caught:
        judge(parsed(events), snapshot)
    message = str(caught.value)
    assert message.startswith(where(position, events[position]) + ": "), message
    for fragment in fragments:
        assert fragment in message, (fragment, message)
    return message


# --- the plan ------------------------------------------------------------------------------------


def test_the_plan_lists_the_accepted_in_order_and_what_they_change() -> None:
    s = world()
    doc = evidence(APPROVED, "fresh", TEXT, title="HIT review")
    c = claim(APPROVED, "fresh", "HIT results from reduced DAO activity.")
    supports = link(APPROVED, "fresh", doc["id"], c["id"], "reduced diamine oxidase (DAO) activity")
    mine = claim(OWNER, "lab", "One more claim.")
    batch = [profile(APPROVED, "approved"), doc, c, supports, mine]
    plan = accepted(s, *batch)
    assert plan.collections == ["fresh", "lab"]  # the slugs written, sorted
    assert plan.new_collections == [("fresh", APPROVED.pubkey, doc["id"])]  # by its first event
    assert plan.member_lists == {}
    # The snapshot now holds the batch's effects, as the next batch would find them.
    assert s.owners["fresh"] == APPROVED.pubkey
    assert s.belongs_to[APPROVED.pubkey] == {"fresh"}


def test_a_batch_of_terms_and_profiles_writes_no_collection() -> None:
    s = world()
    plan = accepted(s, terms(APPROVED, created_at=T0 + 1), profile(APPROVED, "me"))
    assert (plan.collections, plan.new_collections, plan.member_lists) == ([], [], {})


# --- terms first ---------------------------------------------------------------------------------


def unsigned() -> Snapshot:
    """The world, where OWNER and OWNER2 have not signed the terms yet."""
    s = world()
    s.terms_signed -= {OWNER.pubkey, OWNER2.pubkey}
    return s


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda: [claim(OWNER, "lab", "No terms yet.")], id="no-terms"),
        pytest.param(
            lambda: [claim(OWNER, "lab", "Terms come too late."), terms(OWNER)], id="terms-later"
        ),
        pytest.param(lambda: [profile(OWNER, "owner2"), terms(OWNER)], id="profile-first"),
        pytest.param(lambda: [terms(OWNER, version="2")], id="wrong-version"),
        pytest.param(lambda: [terms(OWNER, sha256="0" * 64)], id="wrong-sha256"),
        pytest.param(lambda: [terms(OWNER, version="1 ")], id="version-spaces"),
    ],
)
def test_terms_must_be_signed_before_the_first_write(
    make: Callable[[], list[EventDict]],
) -> None:
    refused(unsigned(), make(), "sign the current terms first", TERMS["sha256"], position=0)


def test_the_message_says_which_terms_to_sign() -> None:
    words = f"(kind 4706, version {TERMS['version']}, sha256 {TERMS['sha256']})"
    refused(
        unsigned(),
        [claim(OWNER, "lab", "x")],
        f"pubkey {OWNER.pubkey} must sign",
        words,
        position=0,
    )
    wrong = (
        f"these are not the current terms: sign the current terms first (version {TERMS['version']}"
    )
    refused(unsigned(), [terms(OWNER, version="2")], wrong, "see GET /terms", position=0)


def test_another_keys_terms_do_not_count() -> None:
    batch = [terms(OWNER2), claim(OWNER, "lab", "Whose terms?")]
    refused(unsigned(), batch, "sign the current terms first", position=1)


def test_terms_earlier_in_the_batch_or_before_it_count() -> None:
    s = unsigned()
    accepted(s, terms(OWNER), profile(OWNER, "the owner"), claim(OWNER, "lab", "Fine."))
    assert OWNER.pubkey in s.terms_signed  # for the next batch too
    accepted(world(), claim(OWNER, "lab", "Terms signed in an earlier batch count."))


def test_terms_may_be_signed_again() -> None:
    accepted(world(), terms(OWNER, created_at=T0 + 1))


# --- who may write -------------------------------------------------------------------------------


def test_an_unknown_key_is_turned_away_whatever_it_sends() -> None:
    words = f"pubkey {STRANGER.pubkey} is not approved and is not a member of any collection"
    for batch in (
        [terms(STRANGER)],
        [terms(STRANGER), profile(STRANGER, "x")],
        [claim(STRANGER, "lab", "x")],
        [members(STRANGER, "mine", [])],
    ):
        refused(world(), batch, words, position=0)


def test_a_member_writes_without_approval() -> None:
    doc = evidence(MEMBER, "lab", TEXT)
    c = claim(MEMBER, "lab", "Reduced DAO activity causes HIT.")
    accepted(
        world(),
        terms(MEMBER, created_at=T0 + 1),
        profile(MEMBER, "bot"),
        doc,
        c,
        link(MEMBER, "lab", doc["id"], c["id"], "DAO"),
        contradiction(MEMBER, "lab", [c["id"], C1["id"]]),
    )


def test_a_list_earlier_in_the_batch_lets_a_new_member_in() -> None:
    batch = [
        members(OWNER, "lab", [MEMBER.pubkey, STRANGER.pubkey], created_at=T0 + 1),
        terms(STRANGER),
        claim(STRANGER, "lab", "Just let in."),
    ]
    accepted(world(), *batch)


def test_a_key_that_belongs_to_nothing_is_unknown() -> None:
    s = world()
    s.belongs_to[STRANGER.pubkey] = set()  # e.g. removed from its only collection
    refused(s, [terms(STRANGER)], "is not approved and is not a member of any", position=0)


def test_only_approved_keys_create_collections() -> None:
    for event in (claim(MEMBER, "lab-2", "A new collection?"), members(MEMBER, "lab-2", [])):
        refused(
            world(),
            [event],
            f"pubkey {MEMBER.pubkey} is not a member of collection 'lab-2' (or no such "
            "collection: check the slug for typos, or ask its owner to add your key); only "
            "approved pubkeys create collections",
            position=0,
        )
    plan = accepted(world(), members(APPROVED, "lab-2", [MEMBER.pubkey]))
    assert plan.new_collections == [("lab-2", APPROVED.pubkey, plan.accepted[0].event.id)]


def test_the_first_event_naming_a_collection_makes_its_signer_the_owner() -> None:
    first = claim(APPROVED, "fresh", "Mine.")
    refused(
        world(),
        [first, claim(OWNER, "fresh", "Also mine?")],
        f"pubkey {OWNER.pubkey} is not a member of collection 'fresh'",
        position=1,
    )
    s = world()
    accepted(s, first, members(APPROVED, "fresh", [OWNER.pubkey]), claim(OWNER, "fresh", "In."))
    assert s.owners["fresh"] == APPROVED.pubkey


@pytest.mark.parametrize(
    ("signer", "slug"),
    [
        pytest.param(APPROVED, "lab", id="approved-but-not-listed"),
        pytest.param(OWNER2, "lab", id="owner-of-another"),
        pytest.param(MEMBER, "other", id="member-of-another"),
    ],
)
def test_a_non_member_is_refused(signer: SecretKey, slug: str) -> None:
    refused(
        world(),
        [claim(signer, slug, "Let me in.")],
        f"pubkey {signer.pubkey} is not a member of collection '{slug}'",
        position=0,
    )


@pytest.mark.parametrize(
    ("signer", "listed"),
    [
        pytest.param(APPROVED, [APPROVED], id="approved-naming-itself"),
        pytest.param(MEMBER, [MEMBER, MEMBER2], id="member"),
        pytest.param(OWNER2, [], id="owner-of-another"),
    ],
)
def test_only_the_owner_changes_the_members(signer: SecretKey, listed: list[SecretKey]) -> None:
    event = members(signer, "lab", [k.pubkey for k in listed], created_at=T0 + 5)
    refused(world(), [event], "only the owner of collection 'lab' changes its members", position=0)


# --- member lists: the replaceable rule ----------------------------------------------------------


def test_a_newer_list_replaces_the_whole_list() -> None:
    s = world()
    newer_list = members(OWNER, "lab", [MEMBER2.pubkey], created_at=T0 + 10)
    plan = accepted(s, newer_list)
    assert plan.member_lists == {"lab": (T0 + 10, newer_list["id"], [MEMBER2.pubkey])}
    assert s.heads["lab"] == (T0 + 10, newer_list["id"])
    assert s.members["lab"] == {MEMBER2.pubkey}
    assert s.belongs_to[MEMBER.pubkey] == set()
    assert s.belongs_to[MEMBER2.pubkey] == {"lab"}


def test_an_older_list_is_accepted_but_replaces_nothing() -> None:
    s = world()
    older = members(OWNER, "lab", [MEMBER2.pubkey], created_at=T0 - 10)
    plan = accepted(s, older)
    assert plan.member_lists == {}
    assert (s.heads["lab"], s.members["lab"]) == ((T0, LISTED["id"]), {MEMBER.pubkey})
    # MEMBER2 was named only by a list that never became current: nobody.
    words = f"pubkey {MEMBER2.pubkey} is not approved and is not a member of any collection"
    refused(world(), [older, terms(MEMBER2)], words, position=1)
    accepted(world(), older, claim(MEMBER, "lab", "Still a member."))


def tied_lists() -> tuple[EventDict, EventDict]:
    """Two of OWNER's lists for lab signed at the same second: (lower id, higher id)."""
    one = members(OWNER, "lab", [MEMBER.pubkey], created_at=T0 + 10)
    two = members(OWNER, "lab", [MEMBER2.pubkey], created_at=T0 + 10)
    low, high = sorted([one, two], key=lambda e: e["id"])
    return low, high


def stored_head(event: EventDict) -> Snapshot:
    """The world, with `event` (a list of lab's) stored as lab's current list."""
    s = world()
    listed = set(content_of(event)["members"])
    s.stored_ids.add(event["id"])
    s.refs[event["id"]] = ref(event)
    s.heads["lab"] = (event["created_at"], event["id"])
    s.members["lab"] = listed
    s.belongs_to = {OWNER.pubkey: {"lab"}, OWNER2.pubkey: {"other"}}
    for pubkey in listed:
        s.belongs_to.setdefault(pubkey, set()).add("lab")
    return s


def current(s: Snapshot) -> set[str]:
    return s.members["lab"]


def test_tied_lists_go_to_the_lowest_id_against_the_stored_one() -> None:
    low, high = tied_lists()
    s = stored_head(low)
    assert accepted(s, high).member_lists == {}
    assert current(s) == set(content_of(low)["members"])
    s = stored_head(high)
    assert accepted(s, low).member_lists == {
        "lab": (T0 + 10, low["id"], content_of(low)["members"])
    }
    assert current(s) == set(content_of(low)["members"])


@pytest.mark.parametrize("order", ["low-first", "high-first"])
def test_tied_lists_go_to_the_lowest_id_in_one_batch(order: str) -> None:
    low, high = tied_lists()
    s = world()
    plan = accepted(s, *((low, high) if order == "low-first" else (high, low)))
    assert plan.member_lists["lab"][1] == low["id"]
    assert current(s) == set(content_of(low)["members"])


def test_newer_breaks_ties_on_the_lowest_id() -> None:
    assert newer((2, "b"), (1, "a")) and not newer((1, "a"), (2, "b"))
    assert newer((1, "a"), (1, "b")) and not newer((1, "b"), (1, "a"))
    assert not newer((1, "a"), (1, "a"))  # the same list again changes nothing


def test_a_removal_applies_to_the_rest_of_the_batch() -> None:
    removal = members(OWNER, "lab", [], created_at=T0 + 10)
    for late in (claim(MEMBER, "lab", "Too late."), profile(MEMBER, "still here?")):
        refused(
            world(),
            [removal, late],
            f"pubkey {MEMBER.pubkey} is not approved and is not a member of any collection",
            position=1,
        )
    # A removed key that still belongs elsewhere is a stranger to this collection only.
    late = claim(MEMBER, "lab", "x")
    refused(in_both(), [removal, late], "is not a member of collection 'lab'", position=1)
    accepted(in_both(), removal, claim(MEMBER, "other", "Still in other."))


def in_both() -> Snapshot:
    """The world, where OWNER2's list for "other" names MEMBER too."""
    s = world()
    s.belongs_to[MEMBER.pubkey].add("other")
    s.members["other"] = {MEMBER.pubkey}
    return s


def test_the_owner_always_belongs() -> None:
    """Even revoked and left off its own lists, the owner still writes in its collection."""
    s = world()
    s.approved.discard(OWNER.pubkey)
    s.members["lab"] = {OWNER.pubkey, MEMBER.pubkey}  # the current list names the owner
    accepted(
        s,
        members(OWNER, "lab", [MEMBER.pubkey], created_at=T0 + 10),
        claim(OWNER, "lab", "The owner, left off the list, still writes."),
        members(OWNER, "lab", [], created_at=T0 + 20),
        profile(OWNER, "owner, renamed"),
        claim(OWNER, "lab", "And still."),
    )
    assert s.belongs_to[OWNER.pubkey] == {"lab"}


# --- references ----------------------------------------------------------------------------------


def test_references_to_every_allowed_target() -> None:
    c3 = claim(OWNER, "lab", "A claim earlier in this batch.")
    q = "correlate poorly with symptoms"
    supports = link(OWNER, "lab", DOC["id"], c3["id"], q)
    both = contradiction(OWNER, "lab", [C1["id"], c3["id"]])  # one stored, one in the batch
    accepted(
        world(),
        c3,
        supports,
        both,
        link(OWNER, "lab", DOC["id"], L1["id"], q, relation="REBUTS"),  # onto a stored link
        link(OWNER, "lab", DOC["id"], supports["id"], q, relation="REBUTS"),  # a batch link
        link(OWNER, "lab", DOC["id"], X1["id"], q),  # onto a stored contradiction
        link(OWNER, "lab", DOC["id"], both["id"], q),  # onto one in the batch
        link(OWNER, "lab", DOC["id"], DOC["id"], q, relation="REBUTS"),  # onto evidence
        link(OWNER, "lab", DOC["id"], C2["id"], q, relation="QUALIFIES"),  # QUALIFIES a claim
        link(OWNER, "lab", DOC["id"], c3["id"], q, relation="QUALIFIES"),
    )


def ln(source: str, target: str, relation: str = "SUPPORTS") -> EventDict:
    return link(OWNER, "lab", source, target, "reduced diamine oxidase", relation=relation)


REFERENCE_ERRORS: Final[list[Any]] = [
    pytest.param(
        ln(C1["id"], C2["id"]),
        [f"from must be an evidence event; {C1['id']} is a claim"],
        id="from-claim",
    ),
    pytest.param(
        ln(L1["id"], C2["id"]), ["from must be an evidence event", "is a link"], id="from-link"
    ),
    pytest.param(
        ln(MISSING, C1["id"]),
        [f"from {MISSING} does not exist in collection 'lab'"],
        id="from-missing",
    ),
    pytest.param(
        ln(DOC["id"], MISSING),
        [f"to {MISSING} does not exist in collection 'lab'"],
        id="to-missing",
    ),
    pytest.param(
        ln(DOC["id"], OWNER_PROFILE["id"]),
        [f"to {OWNER_PROFILE['id']} does not exist in collection 'lab'"],
        id="to-profile",
    ),
    pytest.param(
        ln(DOC["id"], LISTED["id"]),
        [f"to must be a claim, link, contradiction or evidence; {LISTED['id']} is a members event"],
        id="to-members",
    ),
    pytest.param(
        ln(DOC["id"], L1["id"], "QUALIFIES"),
        [f"QUALIFIES may only target a claim; {L1['id']} is a link"],
        id="qualifies-link",
    ),
    pytest.param(
        ln(DOC["id"], X1["id"], "QUALIFIES"),
        ["QUALIFIES may only target a claim", "is a contradiction"],
        id="qualifies-contradiction",
    ),
    pytest.param(
        ln(DOC["id"], DOC["id"], "QUALIFIES"),
        ["QUALIFIES may only target a claim", "is an evidence"],
        id="qualifies-evidence",
    ),
    pytest.param(
        contradiction(OWNER, "lab", [C1["id"], DOC["id"]]),
        [f"{DOC['id']} is not a claim in collection 'lab'"],
        id="contradiction-evidence",
    ),
    pytest.param(
        contradiction(OWNER, "lab", [L1["id"], C1["id"]]),
        [f"{L1['id']} is not a claim in collection 'lab'"],
        id="contradiction-link",
    ),
    pytest.param(
        contradiction(OWNER, "lab", [C1["id"], MISSING]),
        [f"claim {MISSING} does not exist in collection 'lab'"],
        id="contradiction-missing",
    ),
    pytest.param(
        contradiction(OWNER, "lab", [C1["id"], OTHER_CLAIM["id"]]),
        [f"claim {OTHER_CLAIM['id']} does not exist in collection 'lab'"],
        id="contradiction-elsewhere",
    ),
]


@pytest.mark.parametrize(("event", "words"), REFERENCE_ERRORS)
def test_reference_errors(event: EventDict, words: list[str]) -> None:
    refused(world(), [claim(OWNER, "lab", "A good claim first."), event], *words, position=1)


def test_only_earlier_events_of_the_batch_can_be_cited() -> None:
    c3 = claim(OWNER, "lab", "Claimed after its link.")
    refused(
        world(), [ln(DOC["id"], c3["id"]), c3], "does not exist in collection 'lab'", position=0
    )
    c4 = claim(OWNER, "lab", "Claimed after the contradiction.")
    later = contradiction(OWNER, "lab", [C1["id"], c4["id"]])
    refused(world(), [C2, later, c4], "does not exist in collection 'lab'", position=1)


def test_events_of_another_collection_read_exactly_like_missing_ones() -> None:
    """A member of "lab" learns nothing about "other" by citing its events."""
    mine = claim(MEMBER, "lab", "My claim.")

    def message(make: Callable[[str], EventDict], cited: str) -> str:
        bad = make(cited)
        text = refused(world(), [mine, bad], position=1)
        return text.replace(bad["id"][:12], "<event>").replace(cited, "<cited>")

    def as_target(cited: str) -> EventDict:
        return link(MEMBER, "lab", DOC["id"], cited, "DAO")

    def as_source(cited: str) -> EventDict:
        return link(MEMBER, "lab", cited, mine["id"], "DAO")

    def as_claim(cited: str) -> EventDict:
        return contradiction(MEMBER, "lab", [mine["id"], cited])

    for make, cited in [
        (as_target, OTHER_CLAIM["id"]),
        (as_source, OTHER_DOC["id"]),
        (as_claim, OTHER_CLAIM["id"]),
    ]:
        assert message(make, cited) == message(make, MISSING)


# --- quotes --------------------------------------------------------------------------------------

QUOTED: Final = (
    "The \u201cDAO\u201d enzyme \u2014 as Smith\u2019s\u00a0review notes \u2014 is\n\n"
    "\ufb01ne-tuned by diet, hista\u00admine and the  ATP\u2011ase."
)
FORGIVEN: Final = [
    "The \u201cDAO\u201d enzyme",  # exactly
    'the "dao" ENZYME',  # straight quotes, case
    "as smith's review notes",  # apostrophe, no-break space
    "enzyme - as Smith",  # em dash to hyphen
    "is fine-tuned by diet",  # line breaks and the fi ligature
    "histamine and the ATP-ase",  # soft hyphen gone, two spaces, non-breaking hyphen
    "  \tThe \u201cDAO\u201d  ",  # surrounding whitespace
]
NOT_FORGIVEN: Final = [
    "is fine-tuned by food",  # a changed word
    "fine-tuned by diet.",  # punctuation the text does not have there ...
    "The DAO enzyme",  # dropped quotation marks are not forgiven
    "finetuned by diet",  # nor a dropped hyphen
    "\u2014 \u2014",  # two dashes that never stand side by side
]


def test_quotes_are_found_after_normalization() -> None:
    doc = evidence(OWNER, "lab", QUOTED)
    c = claim(OWNER, "lab", "Diet tunes DAO.")
    links = [link(OWNER, "lab", doc["id"], c["id"], q) for q in FORGIVEN]
    plan = accepted(world(), doc, c, *links)
    # Each is anchored where it sits in the text as signed.
    assert set(plan.anchors) == set(ids(links))
    for quoted in links:
        found = plan.anchors[quoted["id"]]
        assert QUOTED[found.start : found.end] == found.exact
        assert normalize(found.exact) == normalize(content_of(quoted)["quote"])
    assert plan.anchors[links[4]["id"]].exact == "is\n\n\ufb01ne-tuned by diet"
    # ... in stored evidence too.
    s = world()
    s.evidence_texts[DOC["id"]] = QUOTED
    accepted(s, *(link(OWNER, "lab", DOC["id"], C1["id"], q) for q in FORGIVEN))


@pytest.mark.parametrize("quote", NOT_FORGIVEN)
def test_a_quote_not_found_refuses_the_batch(quote: str) -> None:
    doc = evidence(OWNER, "lab", QUOTED)
    c = claim(OWNER, "lab", "Diet tunes DAO.")
    good = link(OWNER, "lab", doc["id"], c["id"], "fine-tuned by diet")
    bad = link(OWNER, "lab", doc["id"], c["id"], quote)
    refused(
        world(),
        [doc, c, good, bad],
        f"quote not found verbatim in evidence {doc['id']}; copy it exactly",
        position=3,
    )


def test_a_refused_quote_names_the_nearest_passage() -> None:
    """A quote with one changed word is refused in SPEC's words, and the refusal points at the
    passage it was meant to copy, as the evidence has it, with a similarity."""
    doc = evidence(OWNER, "lab", QUOTED)
    c = claim(OWNER, "lab", "Diet tunes DAO.")
    bad = link(OWNER, "lab", doc["id"], c["id"], "is fine-tuned by food")
    start = QUOTED.index("is\n\n")
    message = refused(
        world(),
        [doc, c, bad],
        f"quote not found verbatim in evidence {doc['id']}; copy it exactly from the evidence "
        "text (case, whitespace, quote and dash styles may differ; nothing else); the nearest "
        f"passage is characters {start}-{start + 16} of its text (similarity 0.86",
        # the best-scoring span on word boundaries: with "food" for "diet", the passage
        # without that word reads more like the quote (0.86) than the one with it (0.81)
        '): "is\\n\\n\ufb01ne-tuned by"',
        position=2,
    )
    assert "\n" not in message
    # The same from stored evidence.
    stored = link(OWNER, "lab", DOC["id"], C1["id"], "is fine-tuned by food")
    s = world()
    s.evidence_texts[DOC["id"]] = QUOTED
    refused(s, [stored], '): "is\\n\\n\ufb01ne-tuned by"', position=0)


def test_a_quote_is_checked_against_its_own_evidence_only() -> None:
    doc = evidence(OWNER, "lab", QUOTED)
    bad = link(OWNER, "lab", doc["id"], C1["id"], "correlate poorly with symptoms")  # in DOC
    refused(world(), [doc, bad], "quote not found verbatim in evidence", position=1)
    accepted(
        world(), doc, link(OWNER, "lab", DOC["id"], C1["id"], "correlate poorly with symptoms")
    )


# --- skipping ------------------------------------------------------------------------------------


def test_stored_events_are_skipped_not_judged_again() -> None:
    s = world()
    fresh = claim(OWNER, "lab", "New.")
    plan = judge(parsed([DOC, fresh, C1]), s)
    assert [p.event.id for p in plan.accepted] == [fresh["id"]]
    assert plan.skipped == ids([DOC, C1])  # in batch order
    assert plan.collections == ["lab"]


def test_a_stored_event_resent_by_a_key_that_may_no_longer_write_is_refused() -> None:
    """Who may write is checked before an event is skipped: a removed member re-sending its
    stored claim gets the refusal a new claim would, so `skipped` never tells a key that may not
    write here that an event exists."""
    s = world()
    s.belongs_to[MEMBER.pubkey] = set()  # MEMBER has been removed since it wrote this
    s.members["lab"] = set()
    resent = claim(MEMBER, "lab", "Stored while MEMBER was a member.")
    s.stored_ids.add(resent["id"])
    stored = refused(s, [resent], "is not approved and is not a member", position=0)
    new = refused(
        s, [claim(MEMBER, "lab", "New.")], "is not approved and is not a member", position=0
    )
    assert stored.split(": ", 1)[1] == new.split(": ", 1)[1]


def test_everything_stored_writes_nothing() -> None:
    plan = judge(parsed(STORED), world())
    assert (plan.accepted, plan.skipped, plan.collections) == ([], ids(STORED), [])


def test_an_event_repeated_in_a_batch_is_skipped_the_second_time() -> None:
    s = unsigned()
    t, c = terms(OWNER), claim(OWNER, "lab", "Said twice.")
    plan = judge(parsed([t, c, dict(c), t]), s)
    assert [p.event.id for p in plan.accepted] == [t["id"], c["id"]]
    assert plan.skipped == [c["id"], t["id"]]


def test_a_resent_stored_event_can_be_cited_and_quoted() -> None:
    """A client retrying a larger batch re-sends events it already stored."""
    c3 = claim(OWNER, "lab", "DAO activity is all there is.")
    supports = link(OWNER, "lab", DOC["id"], c3["id"], "reduced diamine oxidase")
    plan = judge(
        parsed([DOC, C1, c3, supports, contradiction(OWNER, "lab", [C1["id"], c3["id"]])]), world()
    )
    assert plan.skipped == ids([DOC, C1])
    assert len(plan.accepted) == 3
    bad = link(OWNER, "lab", DOC["id"], C1["id"], "increased diamine oxidase")
    refused(world(), [DOC, bad], f"quote not found verbatim in evidence {DOC['id']}", position=1)


def test_positions_count_skipped_events() -> None:
    bad = claim(STRANGER, "lab", "x")
    message = refused(world(), [DOC, DOC, C1, bad], position=3)
    assert message == (
        f"events[3] ({bad['id'][:12]}…): pubkey {STRANGER.pubkey} is not approved and is not a "
        "member of any collection"
    )


# --- parsing a batch -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "words"),
    [
        (None, "events must be a list of signed events"),
        ({"events": []}, "must be a list"),
        ("[]", "must be a list"),
        (7, "must be a list"),
        ([], "events is empty: send at least one signed event"),
        ([{}] * (MAX_BATCH + 1), "at most 1000 events per batch; this one has 1001"),
    ],
)
def test_a_batch_is_a_list_of_1_to_1000_events(raw: object, words: str) -> None:
    with pytest.raises(PublishError, match=re.escape(words)):
        check_batch_shape(raw)
    assert check_batch_shape([{}] * MAX_BATCH) == [{}] * MAX_BATCH


def _tampered_content(e: EventDict) -> EventDict:
    return {**e, "content": e["content"].replace("claim", "clam")}


def _foreign_sig(e: EventDict) -> EventDict:
    return {**e, "sig": claim(OWNER, "lab", "another")["sig"]}


def _uppercase_id(e: EventDict) -> EventDict:
    return {**e, "id": e["id"].upper()}


def _extra_field(e: EventDict) -> EventDict:
    return {**e, "relay": "wss://x"}


def _no_sig(e: EventDict) -> EventDict:
    return {k: v for k, v in e.items() if k != "sig"}


def _float_time(e: EventDict) -> EventDict:
    return {**e, "created_at": float(e["created_at"])}


def _as_is(e: EventDict) -> EventDict:
    return e


A_CLAIM: Final = {"collection": "lab", "text": "A claim."}
LONG: Final = "x" * 2_000_001

ENVELOPE_CASES: Final[list[Any]] = [
    pytest.param(4702, A_CLAIM, (), _tampered_content, ["id does not match"], id="id"),
    pytest.param(4702, A_CLAIM, (), _foreign_sig, ["signature does not verify"], id="sig"),
    pytest.param(4702, A_CLAIM, (), _uppercase_id, ["field 'id' is invalid"], id="hex"),
    pytest.param(4702, A_CLAIM, (), _extra_field, ["unknown fields", "'relay'"], id="extra"),
    pytest.param(4702, A_CLAIM, (), _no_sig, ["field 'sig' is missing"], id="missing"),
    pytest.param(4702, A_CLAIM, (), _float_time, ["field 'created_at' is invalid"], id="t"),
    pytest.param(4702, A_CLAIM, [["t", "x"]], _as_is, ["tags must be []"], id="tags"),
    pytest.param(1, {"name": "x"}, (), _as_is, ["field 'kind' is invalid"], id="kind"),
    pytest.param(
        4707,
        {"tool": "list_collections", "args": {}},
        (),
        _as_is,
        ["kind 4707 requests are never stored"],
        id="request",
    ),
    pytest.param(
        4702, {**A_CLAIM, "score": 1}, (), _as_is, ["unknown fields", "'score'"], id="unknown"
    ),
    pytest.param(4702, {"collection": "lab"}, (), _as_is, ["'text' is missing"], id="no-text"),
    pytest.param(
        4702, {"collection": "Lab", "text": "x"}, (), _as_is, ["'collection' is invalid"], id="slug"
    ),
    pytest.param(
        4702, {"collection": "lab", "text": " \n"}, (), _as_is, ["'text' is invalid"], id="blank"
    ),
    pytest.param(4702, "not json", (), _as_is, ["field 'content' is invalid"], id="not-json"),
    pytest.param(4702, "[1, 2]", (), _as_is, ["field 'content' is invalid"], id="not-object"),
    pytest.param(
        4701,
        json.dumps({"collection": "lab", "text": LONG}),
        (),
        _as_is,
        ["field 'content' is invalid", "split longer documents"],
        id="too-long",
    ),
    pytest.param(
        4703,
        {"collection": "lab", "from": "a" * 64, "to": "b" * 64, "relation": "SUPPORTS"},
        (),
        _as_is,
        ["field 'quote' is missing"],
        id="link-missing",
    ),
    pytest.param(
        4703,
        {
            "collection": "lab",
            "from": "a" * 64,
            "to": "b" * 64,
            "relation": "REFUTES",
            "quote": "q",
            "reason": "r",
        },
        (),
        _as_is,
        ["field 'relation' is invalid"],
        id="relation",
    ),
    pytest.param(
        4704,
        {"collection": "lab", "claims": ["a" * 64], "reason": "r"},
        (),
        _as_is,
        ["field 'claims' is invalid", "at least two"],
        id="one-claim",
    ),
    pytest.param(
        4704,
        {"collection": "lab", "claims": ["a" * 64, "a" * 64], "reason": "r"},
        (),
        _as_is,
        ["field 'claims' is invalid", "same id twice"],
        id="same-claim",
    ),
    pytest.param(
        4705,
        {"collection": "lab", "members": ["npub1xyz"]},
        (),
        _as_is,
        ["field 'members' is invalid"],
        id="members",
    ),
    pytest.param(
        4706, {"version": "1"}, (), _as_is, ["field 'sha256' is missing"], id="terms-missing"
    ),
    # JSON escapes that decode to NUL or half a surrogate pair: refused naming the field, before
    # any database sees them.
    pytest.param(
        4702,
        '{"collection":"lab","text":"a\\u0000b"}',
        (),
        _as_is,
        ["field 'text' is invalid", "U+0000"],
        id="nul-claim-text",
    ),
    pytest.param(
        0, '{"name":"bot\\u0000"}', (), _as_is, ["field 'name' is invalid", "U+0000"], id="nul-name"
    ),
    pytest.param(
        0,
        '{"name":"bot","x":{"y":["\\u0000"]}}',
        (),
        _as_is,
        ["field 'x' is invalid", "U+0000"],
        id="nul-nested-extra",
    ),
    pytest.param(
        4702,
        '{"collection":"lab","text":"a\\ud800b"}',
        (),
        _as_is,
        ["field 'text' is invalid", "lone UTF-16 surrogate"],
        id="lone-surrogate",
    ),
    pytest.param(
        4701,
        '{"collection":"lab","text":"t","title":"\\udc00"}',
        (),
        _as_is,
        ["field 'title' is invalid", "lone UTF-16 surrogate"],
        id="lone-low-surrogate",
    ),
]


@pytest.mark.parametrize(("kind", "content", "tags", "spoil", "words"), ENVELOPE_CASES)
def test_a_malformed_event_is_refused_by_position(
    kind: int,
    content: Any,
    tags: Sequence[Sequence[str]],
    spoil: Callable[[EventDict], EventDict],
    words: list[str],
) -> None:
    """The bad event comes third, after two good ones."""
    bad = spoil(signed(OWNER, kind, content, tags=tags))
    batch = [terms(OWNER), claim(OWNER, "lab", "A good claim.", created_at=T0 + 1), bad]
    with pytest.raises(PublishError) as caught:
        parse_events(batch, NOW)
    message = str(caught.value)
    assert message.startswith(where(2, bad) + ": "), message
    for fragment in words:
        assert fragment in message, (fragment, message)


def test_positions_count_from_the_offset_of_a_chunk() -> None:
    """A big batch is parsed in chunks; each names its events by their place in the whole."""
    bad = {**C1, "sig": C2["sig"]}
    with pytest.raises(PublishError, match=r"^events\[101\] "):
        parse_events([C2, bad], NOW, offset=100)


def test_created_at_at_most_fifteen_minutes_ahead() -> None:
    too_far = claim(OWNER, "lab", "From the future.", created_at=NOW + 901)
    with pytest.raises(PublishError) as caught:
        parse_events([too_far], NOW)
    assert str(caught.value) == (
        f"{where(0, too_far)}: field 'created_at' is invalid: 901 s ahead of server time "
        "(at most 900 s allowed); check the signer's clock"
    )
    for fine in (
        claim(OWNER, "lab", "Just in time.", created_at=NOW + 900),
        claim(OWNER, "lab", "Long ago.", created_at=0),
    ):
        assert [p.event.id for p in parse_events([fine], NOW)] == [fine["id"]]


def test_content_of_two_million_characters_is_fine() -> None:
    shell = compact({"collection": "lab", "text": ""})
    doc = evidence(OWNER, "lab", "y" * (2_000_000 - len(shell)))
    assert len(doc["content"]) == 2_000_000
    assert [p.event.id for p in parse_events([doc], NOW)] == [doc["id"]]


def test_a_surrogate_pair_escape_is_fine() -> None:
    c = signed(OWNER, 4702, '{"collection":"lab","text":"\\ud83e\\uddea test tube"}')
    [item] = parse_events([c], NOW)
    assert item.content == Claim(collection="lab", text="\U0001f9ea test tube")


# --- junk never raises anything but PublishError -------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(junk_strategies(ids(STORED)))
def test_junk_raises_only_publish_error(raw: object) -> None:
    """Parsed and judged as `Ledger.submit` does: a PublishError naming the batch or one of its
    events, or a plan that accounts for every event."""
    try:
        plan = judge(parse_events(check_batch_shape(raw), NOW), world())
    except PublishError as exc:
        message = str(exc)
        if message.startswith("events["):
            assert isinstance(raw, list)
            position = int(message[len("events[") : message.index("]")])
            assert 0 <= position < len(raw)
        else:
            assert message.startswith("events "), message
    else:
        assert isinstance(raw, list)
        assert len(plan.accepted) + len(plan.skipped) == len(raw)


# --- random batches ------------------------------------------------------------------------------
#
# Batches drawn from a small pool: a few keys in each role, the world's collections and a new one,
# every kind, references to stored events, to earlier events of the batch (of any collection) and
# to nothing, quotes in and out of the evidence texts, member lists at created_at around the
# stored one's, stored events re-sent, events repeated. Mostly plausible, so that many batches
# get far; the properties hold of the refused and the accepted alike.

KEYS: Final = [OWNER, OWNER2, APPROVED, MEMBER, MEMBER2, STRANGER]
SLUGS: Final = ["lab", "lab", "other", "fresh"]  # lab, with the most in it, twice as often
# Who usually writes where (and whoever a list of the batch names): the owners, the listed
# member, and in "fresh" mostly APPROVED, who may create it, sometimes MEMBER, who may not.
WRITERS: Final = {
    "lab": [OWNER, MEMBER],
    "other": [OWNER2],
    "fresh": [APPROVED, APPROVED, APPROVED, APPROVED, MEMBER],
}
TEXTS: Final = [TEXT, "Serum DAO is not the whole story.", QUOTED]
QUOTES: Final = {  # text: quotes found in it (after normalization), and one that is not
    TEXT: ["reduced diamine oxidase", "SERUM DAO LEVELS,  however", "DAO", "increased DAO"],
    TEXTS[1]: ["not the whole story", "Serum DAO is", "DAO", "the whole story!"],
    QUOTED: ["is fine-tuned by diet", 'the "dao" enzyme', "DAO", "fine-tuned by food"],
}
# What each next event is; "again" re-sends an event stored or earlier in the batch.
CHOICES: Final = [
    *("terms", "profile", "evidence", "claim", "link", "contradiction", "members", "again"),
    *("claim", "link", "link", "contradiction", "members"),
]


def mostly(usual: st.SearchStrategy[Any], other: st.SearchStrategy[Any], times: int = 7) -> Any:
    """`usual`, `times` times as often as `other`."""
    return st.one_of([usual] * times + [other])


@st.composite
def random_batches(draw: st.DrawFn) -> list[EventDict]:
    """Mostly plausible batches: most events are signed by a writer of their collection and
    cite events of it, with quotes from the cited text; the rest by anyone, citing anything."""
    signers = st.sampled_from([OWNER, OWNER2, APPROVED, MEMBER])
    events = [terms(signer) for signer in draw(st.lists(signers, unique=True, max_size=3))]
    texts = {e["id"]: content_of(e)["text"] for e in STORED if e["kind"] == KIND_EVIDENCE}
    for _ in range(draw(st.integers(1, 10))):
        known = [*STORED, *events]
        choice = draw(st.sampled_from(CHOICES))
        slug = draw(st.sampled_from(SLUGS))
        named = {
            k
            for e in events
            if e["kind"] == KIND_MEMBERS and collection_of(e) == slug
            for k in KEYS
            if k.pubkey in content_of(e)["members"]
        }
        writers = WRITERS[slug] + sorted(named - set(WRITERS[slug]), key=KEYS.index)
        signer: SecretKey = draw(mostly(st.sampled_from(writers), st.sampled_from(KEYS), 11))
        at = T0 + draw(st.integers(-1, 2))

        def cite(kinds: set[int], known: list[EventDict] = known, slug: str = slug) -> str:
            """An event of this collection of one of `kinds`, mostly, and one of the batch when
            there is one; else any id, or none."""
            fitting = [e["id"] for e in known if e["kind"] in kinds and collection_of(e) == slug]
            anything = st.sampled_from([*ids(known), MISSING])
            if not fitting:
                return draw(anything)
            stored = sum(1 for e in STORED if e["id"] in fitting)
            usual = st.sampled_from(fitting)
            if fitting[stored:]:  # prefer the batch's own
                usual = mostly(st.sampled_from(fitting[stored:]), usual, 2)
            return draw(mostly(usual, anything))

        if choice == "again":
            events.append(draw(st.sampled_from(known)))
        elif choice == "terms":
            version = draw(mostly(st.none(), st.just("2")))
            events.append(terms(signer, version=version, created_at=at))
        elif choice == "profile":
            events.append(profile(signer, draw(st.sampled_from(["a", "b"])), created_at=at))
        elif choice == "evidence":
            text = draw(st.sampled_from(TEXTS))
            events.append(evidence(signer, slug, text, created_at=at))
            texts[events[-1]["id"]] = text
        elif choice == "claim":
            text = draw(st.sampled_from(["c1", "c2", "c3"]))
            events.append(claim(signer, slug, text, created_at=at))
        elif choice == "link":
            source = cite({KIND_EVIDENCE})
            target = cite({KIND_CLAIM, KIND_LINK, KIND_CONTRADICTION, KIND_EVIDENCE})
            quotes = QUOTES.get(texts.get(source, ""), ["DAO"])
            quote = draw(mostly(st.sampled_from(quotes), st.just("not in any text"), 3))
            relation = draw(st.sampled_from(["SUPPORTS", "REBUTS", "QUALIFIES"]))
            events.append(
                link(signer, slug, source, target, quote, relation=relation, created_at=at)
            )
        elif choice == "contradiction":
            pair = [cite({KIND_CLAIM}), cite({KIND_CLAIM})]
            assume(pair[0] != pair[1])
            events.append(contradiction(signer, slug, pair, created_at=at))
        else:
            keep = draw(mostly(st.just([MEMBER]), st.just([]), 3))  # lab's member, mostly kept
            listed = {*keep, *draw(st.lists(st.sampled_from(KEYS), max_size=2))}
            pubkeys = [k.pubkey for k in sorted(listed, key=KEYS.index)]
            events.append(members(signer, slug, pubkeys, created_at=at))
            if draw(st.booleans()):  # the newly listed sign the terms at once
                events += [terms(k) for k in listed if k in (MEMBER2, STRANGER)]
    return events


# --- a naive reading of the rules, to judge the judge ---------------------------------------------
#
# SPEC's rules read as plainly as possible: each event of a batch against the whole history of
# events stored and accepted before it, every fact recomputed from the events themselves (who
# owns a collection, its current list, who signed the terms), in the order the rules are listed.
# Slow and obviously right, where the judge works incrementally from a snapshot.

STORED_TERMS: Final = {
    k.pubkey: terms(k, created_at=T0 - 100) for k in (OWNER, OWNER2, APPROVED, MEMBER)
}
LINK_TARGETS: Final = {KIND_CLAIM, KIND_LINK, KIND_CONTRADICTION, KIND_EVIDENCE}


def owner_in(history: list[EventDict], slug: str) -> str | None:
    """The signer of the first event naming the collection."""
    return next((e["pubkey"] for e in history if collection_of(e) == slug), None)


def listed_in(history: list[EventDict], slug: str) -> set[str]:
    """The members of the newest list (the latest created_at, then the lowest id)."""
    lists = [e for e in history if e["kind"] == KIND_MEMBERS and collection_of(e) == slug]
    if not lists:
        return set()
    return set(content_of(min(lists, key=lambda e: (-e["created_at"], e["id"])))["members"])


def belongs(history: list[EventDict], pubkey: str) -> bool:
    slugs = {collection_of(e) for e in history} - {None}
    return any(owner_in(history, s) == pubkey or pubkey in listed_in(history, s) for s in slugs)


def may_not_write(approved: set[str], history: list[EventDict], event: EventDict) -> str | None:
    """Why the signer may not write in the collection `event` names, or None. A key that is not
    approved hears the same for a missing collection as for one it is not in."""
    signer, kind, slug = event["pubkey"], event["kind"], content_of(event).get("collection")
    if slug is None:
        return None
    owner = owner_in(history, slug)
    if owner is None:
        return None if signer in approved else "not a member"
    if signer == owner:
        return None
    member = signer in listed_in(history, slug)
    if signer not in approved and not member:
        return "not a member"  # even for a member list: only members and approved keys learn
    if kind == KIND_MEMBERS:
        return "not the owner"
    return None if member else "not a member"


def broken_rule(approved: set[str], history: list[EventDict], event: EventDict) -> str | None:
    """The first rule `event` breaks after `history`, or None."""
    signer, kind, content = event["pubkey"], event["kind"], content_of(event)
    if signer not in approved and not belongs(history, signer):
        return "unknown key"
    if kind == KIND_TERMS:
        if (content["version"], content["sha256"]) != (TERMS["version"], TERMS["sha256"]):
            return "not the current terms"
    elif not any(e["kind"] == KIND_TERMS and e["pubkey"] == signer for e in history):
        return "terms first"
    slug = content.get("collection")
    if slug is None:
        return None
    refusal = may_not_write(approved, history, event)
    if refusal is not None:
        return refusal

    def cited(event_id: str) -> EventDict | None:
        found = next((e for e in history if e["id"] == event_id), None)
        return found if found is not None and collection_of(found) == slug else None

    if kind == KIND_LINK:
        source, target = cited(content["from"]), cited(content["to"])
        if source is None:
            return "from missing"
        if source["kind"] != KIND_EVIDENCE:
            return "from not evidence"
        if target is None:
            return "to missing"
        if target["kind"] not in LINK_TARGETS:
            return "to of the wrong kind"
        if content["relation"] == "QUALIFIES" and target["kind"] != KIND_CLAIM:
            return "QUALIFIES not a claim"
        quote = normalize(content["quote"])
        if not quote or quote not in normalize(content_of(source)["text"]):
            return "quote not found"
    if kind == KIND_CONTRADICTION:
        for claim_id in content["claims"]:
            found = cited(claim_id)
            if found is None:
                return "claim missing"
            if found["kind"] != KIND_CLAIM:
                return "claim not a claim"
    return None


@dataclass
class Verdict:
    accepted: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    refused: tuple[int, str] | None = None  # position, rule


def naive_judge(approved: set[str], history: list[EventDict], batch: list[EventDict]) -> Verdict:
    history, verdict = list(history), Verdict()
    for position, event in enumerate(batch):
        if event["id"] in ids(history):
            # who may write is asked of stored events too, before they are skipped
            signer = event["pubkey"]
            unknown = signer not in approved and not belongs(history, signer)
            rule = "unknown key" if unknown else may_not_write(approved, history, event)
            if rule is not None:
                verdict.refused = (position, rule)
                return verdict
            verdict.skipped.append(event["id"])
            continue
        rule = broken_rule(approved, history, event)
        if rule is not None:
            verdict.refused = (position, rule)
            return verdict
        history.append(event)
        verdict.accepted.append(event["id"])
    return verdict


# What the judge's messages say, by rule.
RULES: Final = [
    (r"is not approved and is not a member of any collection", "unknown key"),
    (r"these are not the current terms", "not the current terms"),
    (r"must sign the current terms first", "terms first"),
    (r"only the owner of collection", "not the owner"),
    (r"is not a member of collection", "not a member"),
    (r": from [0-9a-f]{64} does not exist in collection", "from missing"),
    (r"from must be an evidence event", "from not evidence"),
    (r": to [0-9a-f]{64} does not exist in collection", "to missing"),
    (r"to must be a claim, link, contradiction or evidence", "to of the wrong kind"),
    (r"QUALIFIES may only target a claim", "QUALIFIES not a claim"),
    (r"quote not found verbatim", "quote not found"),
    (r": claim [0-9a-f]{64} does not exist in collection", "claim missing"),
    (r"is not a claim in collection", "claim not a claim"),
]


def rule_of(message: str) -> str:
    [rule] = [rule for pattern, rule in RULES if re.search(pattern, message)]
    return rule


# --- the judge against the naive reading, and a stored prefix ------------------------------------


@dataclass
class World:
    snapshot: Snapshot
    history: list[EventDict]  # the stored events the snapshot sums up, oldest first


def world_with_history(unsigned: Sequence[SecretKey] = (), *, revoked: bool = False) -> World:
    """The world, where the `unsigned` keys have not signed the terms yet, and OWNER's approval
    may have been revoked (it still owns "lab")."""
    s = world()
    if revoked:
        s.approved.discard(OWNER.pubkey)
    s.terms_signed -= {k.pubkey for k in unsigned}
    signed_terms = [e for pubkey, e in STORED_TERMS.items() if pubkey in s.terms_signed]
    s.stored_ids |= set(ids(signed_terms))
    return World(s, [*signed_terms, *STORED])


def random_world(draw: st.DrawFn) -> World:
    unsigned = draw(st.sets(st.sampled_from([OWNER, OWNER2, APPROVED, MEMBER]), max_size=2))
    return world_with_history(sorted(unsigned, key=KEYS.index), revoked=draw(st.booleans()))


def test_the_world_sums_up_its_history() -> None:
    """The hand-made snapshot says what the naive reading finds in its history."""
    for w in (world_with_history(), world_with_history([OWNER], revoked=True)):
        s, history = w.snapshot, w.history
        slugs = ("lab", "other")
        assert s.owners == {slug: owner_in(history, slug) for slug in slugs}
        assert s.members == {slug: listed_in(history, slug) for slug in slugs}
        for k in KEYS:
            assert bool(s.belongs_to.get(k.pubkey)) is belongs(history, k.pubkey), k
            signed_terms = any(e["kind"] == KIND_TERMS and e["pubkey"] == k.pubkey for e in history)
            assert (k.pubkey in s.terms_signed) is signed_terms, k
        assert s.stored_ids == set(ids(history))
        assert s.refs == {e["id"]: ref(e) for e in history if e["kind"] != KIND_TERMS}


@dataclass
class Outcome:
    plan: Plan | None
    error: str | None
    after: Snapshot  # the snapshot as the judge left it


def run(batch: Sequence[Parsed], snapshot: Snapshot) -> Outcome:
    """Judge an already parsed batch against a copy of `snapshot`."""
    s = copy.deepcopy(snapshot)
    try:
        return Outcome(judge(batch, s), None, s)
    except PublishError as exc:
        return Outcome(None, str(exc), s)


def check_plan(snapshot: Snapshot, batch: list[EventDict], plan: Plan) -> None:
    """What the plan says beyond accepted and skipped: the collections the batch creates (by
    their first event) and the member lists it makes current (the newest, stored one included)."""
    accepted = [p.event.to_dict() for p in plan.accepted]
    firsts: dict[str, EventDict] = {}
    for event in accepted:
        slug = collection_of(event)
        if slug is not None and slug not in snapshot.owners:
            firsts.setdefault(slug, event)
    assert plan.new_collections == [(s, e["pubkey"], e["id"]) for s, e in firsts.items()]
    assert plan.collections == sorted({collection_of(e) for e in accepted} - {None})
    for slug in {collection_of(e) for e in accepted if e["kind"] == KIND_MEMBERS}:
        lists = [
            (e["created_at"], e["id"])
            for e in accepted
            if e["kind"] == KIND_MEMBERS and collection_of(e) == slug
        ]
        head = snapshot.heads.get(slug)
        best = min([*lists, *([head] if head else [])], key=lambda key: (-key[0], key[1]))
        if best == head:
            assert slug not in plan.member_lists
        else:
            created_at, list_id, listed = plan.member_lists[slug]
            assert (created_at, list_id) == best
            assert listed == content_of(next(e for e in accepted if e["id"] == list_id))["members"]
    assert set(plan.member_lists) <= set(plan.collections)


SETTINGS: Final = settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


@SETTINGS
@given(batch=random_batches(), data=st.data())
def test_the_judge_agrees_with_a_naive_reading_of_the_rules(
    batch: list[EventDict], data: st.DataObject
) -> None:
    """Accepted and skipped alike, or refused at the same event for the same rule, named by
    its position and id prefix; and the plan's details right."""
    w = random_world(data.draw)
    outcome = run(parsed(batch), w.snapshot)
    expected = naive_judge(w.snapshot.approved, w.history, batch)
    if expected.refused is not None:
        assert outcome.error is not None, expected.refused
        position, rule = expected.refused
        assert outcome.error.startswith(where(position, batch[position]) + ": "), outcome.error
        assert rule_of(outcome.error) == rule, outcome.error
    else:
        assert outcome.plan is not None, outcome.error
        assert [p.event.id for p in outcome.plan.accepted] == expected.accepted
        assert outcome.plan.skipped == expected.skipped
        check_plan(w.snapshot, batch, outcome.plan)


@SETTINGS
@given(batch=random_batches(), data=st.data())
def test_a_refused_batch_leaves_the_snapshot_as_it_found_it(
    batch: list[EventDict], data: st.DataObject
) -> None:
    """The group commit judges its batches one after another on one snapshot: a batch refused
    after it created a collection, signed terms or replaced a member list must take all of it
    back, or the batches after it would be judged against what was never stored."""
    snapshot = random_world(data.draw).snapshot
    before = copy.deepcopy(snapshot)
    outcome = run(parsed(batch), snapshot)
    if outcome.plan is None:
        assert outcome.after == before, outcome.error


def stored_after(snapshot: Snapshot, plan: Plan) -> Snapshot:
    """The snapshot a later batch would find once `plan` is written: the judge's own updates
    (terms, owners, members, heads) plus the accepted events, now stored and citable."""
    s = copy.deepcopy(snapshot)
    for item in plan.accepted:
        s.stored_ids.add(item.event.id)
        if item.collection is not None:
            s.refs[item.event.id] = Ref(item.event.kind, item.collection)
        if isinstance(item.content, Evidence):
            s.evidence_texts[item.event.id] = item.content.text
    return s


def assert_removed_by_its_own_list(sent: Sequence[Parsed], first: Outcome, error: str) -> None:
    """The one retry refused by design (docs/architecture.md, "Publishing"): the part stored
    first holds a member list that removed one of its own signers; sent again, that signer's
    stored event is refused, as any event of a key that may no longer write."""
    found = re.match(r"events\[(\d+)\]", error)
    assert found, error
    item = sent[int(found.group(1))]
    assert first.plan is not None and first.plan.member_lists, error
    assert item.event.id in {p.event.id for p in first.plan.accepted}, error
    signer = item.event.pubkey
    assert signer not in first.after.approved, error
    if item.collection is None:
        assert not first.after.belongs_to.get(signer), error
    else:
        assert item.collection in first.plan.member_lists, error
        assert signer not in first.after.members[item.collection], error


@SETTINGS
@given(batch=random_batches(), data=st.data())
def test_a_stored_prefix_changes_nothing_but_what_is_skipped(
    batch: list[EventDict], data: st.DataObject
) -> None:
    """Publishing a batch whole, or its first part and then all of it again (as a client that
    retries does), ends in the same state with the same events stored, or fails on the same
    event in the same words."""
    snapshot = random_world(data.draw).snapshot
    split = data.draw(st.integers(0, len(batch)), label="split")
    items = parsed(batch)
    whole = run(items, snapshot)
    first = run(items[:split], snapshot)
    if first.plan is None:  # the first part alone is refused: so is the whole, in its words
        assert whole.error == first.error
        return
    again = run(items, stored_after(first.after, first.plan))
    if again.error != whole.error:  # the retry is refused at an event the first part stored
        assert again.error is not None, whole.error
        assert_removed_by_its_own_list(items[:split], first, again.error)
        return
    if whole.plan is None or again.plan is None:
        return
    stored_first = [p.event.id for p in first.plan.accepted]
    assert stored_first + [p.event.id for p in again.plan.accepted] == [
        p.event.id for p in whole.plan.accepted
    ]
    assert sorted(again.plan.skipped) == sorted(whole.plan.skipped + stored_first)
    for name in ("terms_signed", "belongs_to", "owners", "members", "heads"):
        assert getattr(again.after, name) == getattr(whole.after, name), name
