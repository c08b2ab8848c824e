"""A batch with one bad event anywhere stores nothing: a property over real PostgreSQL.

A valid batch of every kind (terms, a profile, evidence, claims, links quoting the evidence, a
contradiction, a member list) is built; one event at a random position is spoiled in one of
many ways, from a flipped signature to a quote that is not in its evidence; the ledger must
refuse the whole batch, name that event, and leave every table as it was. The same batch
unspoiled is then accepted whole, so the refusal was the spoiled event's doing.

`TMS_FUZZ_EXAMPLES` (tests only) sets the examples: 100 unless set."""

from __future__ import annotations

import json
import os
from typing import Any, Final

import pytest
from factories import (
    NOW,
    EventDict,
    claim,
    contradiction,
    evidence,
    key,
    link,
    members,
    profile,
    sign,
    terms,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from publishing import counts

from tms.errors import PublishError
from tms.ledger.service import Ledger
from tms.rules.admission import OPERATOR

pytestmark = pytest.mark.anyio

EXAMPLES: Final = int(os.environ.get("TMS_FUZZ_EXAMPLES", "100"))
AUTHOR = key(0xD1)
FRIEND = key(0xD2)
TEXT = (
    "Histamine intolerance is thought to result from reduced diamine oxidase activity in the gut."
)
SPOILS: Final = [
    "signature",
    "id",
    "content after signing",
    "future",
    "unknown field",
    "blank text",
    "tags",
    "request kind",
    "quote",
    "reference",
    "foreign collection",
    "not the owner",
]


def valid_batch(slug: str, claims: int) -> list[EventDict]:
    doc = evidence(AUTHOR, slug, TEXT, title="HIT")
    said = [claim(AUTHOR, slug, f"Claim {n} about DAO.") for n in range(claims)]
    links = [link(AUTHOR, slug, doc["id"], c["id"], "reduced diamine oxidase") for c in said]
    tail = [contradiction(AUTHOR, slug, [said[0]["id"], said[1]["id"]])] if claims > 1 else []
    return [
        terms(AUTHOR),
        profile(AUTHOR, "author"),
        members(AUTHOR, slug, [FRIEND.pubkey]),
        doc,
        *said,
        *links,
        *tail,
    ]


def spoil(event: EventDict, how: str, slug: str) -> EventDict | None:
    """`event` spoiled `how`, or None when that spoiling does not apply to its kind."""
    content: dict[str, Any] = json.loads(event["content"])
    kind = event["kind"]

    def resigned(new: dict[str, Any], as_kind: int | None = None, **when: Any) -> EventDict:
        return sign(AUTHOR, kind if as_kind is None else as_kind, new, **when).to_dict()

    if how == "signature":
        return {**event, "sig": event["sig"][:-1] + ("0" if event["sig"][-1] != "0" else "1")}
    if how == "id":
        return {**event, "id": "0" * 64}
    if how == "content after signing":
        return {**event, "content": event["content"].replace('"', ' "', 1)}
    if how == "future":
        return resigned(content, created_at=NOW + 3600)
    if how == "unknown field":
        return None if kind == 0 else resigned({**content, "confidence": 0.9})
    if how == "blank text":
        return resigned({**content, "text": "  "}) if "text" in content else None
    if how == "tags":
        return None if kind == 0 else resigned(content, tags=[["t", "x"]])
    if how == "request kind":
        return resigned({"tool": "list_collections", "args": {}}, 4707)
    if how == "quote":
        return resigned({**content, "quote": "serum levels in children"}) if kind == 4703 else None
    if how == "reference":
        return resigned({**content, "to": "e" * 64}) if kind == 4703 else None
    if how == "foreign collection":
        return resigned({**content, "collection": f"{slug}x"}) if kind == 4703 else None
    if how == "not the owner":
        if kind != 4705:
            return None
        return sign(FRIEND, kind, content).to_dict()
    raise AssertionError(how)


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    claims=st.integers(1, 6),
    position=st.integers(0, 30),
    how=st.sampled_from(SPOILS),
    n=st.integers(0, 10**6),
)
async def test_one_bad_event_anywhere_stores_nothing(
    ledger: Ledger, claims: int, position: int, how: str, n: int
) -> None:
    await ledger.approve([AUTHOR.pubkey])
    slug = f"c{n}"
    batch = valid_batch(slug, claims)
    position %= len(batch)
    bad = spoil(batch[position], how, slug)
    if bad is None:
        return
    spoiled = [*batch[:position], bad, *batch[position + 1 :]]
    before = await counts(ledger)
    with pytest.raises(PublishError) as refused:
        await ledger.submit(spoiled, now=NOW, origin=OPERATOR)
    assert str(refused.value).startswith(f"events[{position}] ("), (how, str(refused.value))
    assert await counts(ledger) == before, how
    result = await ledger.submit(
        batch, now=NOW, origin=OPERATOR
    )  # the same batch, unspoiled, goes in whole
    assert len(result["accepted"]) + len(result["skipped"]) == len(batch)
