"""A page's expectations (`Ledger.submit(..., expected=...)`) against the real PostgreSQL: a
batch made against a state that is gone stores nothing and leaves the member list standing,
also when the change lands in the same group commit just before it.

The rule alone is tested in tests/rules/test_expected.py.
"""

from __future__ import annotations

import asyncio

import pytest
from factories import APPROVED, MEMBER, MEMBER2, NOW, OWNER, T0, members, terms
from publishing import counts, join, open_collection

from tms.errors import PublishError
from tms.ledger.service import Ledger
from tms.rules.admission import OPERATOR

pytestmark = pytest.mark.anyio


async def current_list(ledger: Ledger, slug: str) -> list[str]:
    info = await ledger.pool.fetchval(
        """SELECT l.members FROM current_member_lists h JOIN member_lists l ON l.id = h.list_id
           WHERE h.collection = $1""",
        slug,
    )
    return list(info or [])


async def head(ledger: Ledger, slug: str) -> str:
    found = await ledger.pool.fetchval(
        "SELECT list_id FROM current_member_lists WHERE collection = $1", slug
    )
    return str(found or "")


async def test_a_stale_create_form_never_empties_an_existing_list(ledger: Ledger) -> None:
    await open_collection(ledger, OWNER, "lab", [MEMBER])
    before = await counts(ledger)
    stale = members(OWNER, "lab", [], created_at=T0 + 60)
    with pytest.raises(PublishError, match="you already own collection 'lab'"):
        await ledger.submit([stale], now=NOW, expected={"lab": None}, origin=OPERATOR)
    assert await counts(ledger) == before
    assert await current_list(ledger, "lab") == [MEMBER.pubkey]
    # Without the expectation the same event replaces the list: what a bot may still do.
    await ledger.submit([stale], now=NOW, origin=OPERATOR)
    assert await current_list(ledger, "lab") == []


async def test_another_approved_key_hears_the_name_is_taken(ledger: Ledger) -> None:
    await open_collection(ledger, OWNER, "lab")
    await ledger.approve([APPROVED.pubkey])
    await join(ledger, APPROVED)
    with pytest.raises(PublishError, match="the name 'lab' is taken"):
        await ledger.submit(
            [members(APPROVED, "lab", [])], now=NOW, expected={"lab": None}, origin=OPERATOR
        )
    created = await ledger.submit(
        [members(APPROVED, "lab2", [])], now=NOW, expected={"lab2": None}, origin=OPERATOR
    )
    assert created["collections"] == ["lab2"]


async def test_a_member_learns_nothing_from_an_expectation(ledger: Ledger) -> None:
    """A key that may not create collections gets the publish rules' own refusal, the same
    one it gets without `expected`."""
    await open_collection(ledger, OWNER, "lab", [MEMBER])
    await join(ledger, MEMBER)
    batch = [members(MEMBER, "lab", [])]
    with pytest.raises(PublishError) as plain:
        await ledger.submit(batch, now=NOW, origin=OPERATOR)
    with pytest.raises(PublishError) as expecting:
        await ledger.submit(batch, now=NOW, expected={"lab": None}, origin=OPERATOR)
    assert str(expecting.value) == str(plain.value)
    assert "taken" not in str(expecting.value) and "already own" not in str(expecting.value)


async def test_a_members_page_saves_only_over_the_list_it_showed(ledger: Ledger) -> None:
    await open_collection(ledger, OWNER, "lab", [MEMBER])
    shown = await head(ledger, "lab")
    elsewhere = members(OWNER, "lab", [MEMBER.pubkey, MEMBER2.pubkey], created_at=T0 + 10)
    await ledger.submit([elsewhere], now=NOW, origin=OPERATOR)
    stale = members(OWNER, "lab", [], created_at=T0 + 20)
    with pytest.raises(PublishError, match="changed since this page was loaded"):
        await ledger.submit([stale], now=NOW, expected={"lab": shown}, origin=OPERATOR)
    assert await current_list(ledger, "lab") == [MEMBER.pubkey, MEMBER2.pubkey]
    fresh = members(OWNER, "lab", [MEMBER2.pubkey], created_at=T0 + 30)
    await ledger.submit([fresh], now=NOW, expected={"lab": elsewhere["id"]}, origin=OPERATOR)
    assert await current_list(ledger, "lab") == [MEMBER2.pubkey]


async def test_two_saves_from_one_view_in_one_group_commit_store_one(ledger: Ledger) -> None:
    """Both batches wait for the same lock and are judged in one transaction: the second sees
    the list the first just made current, so it is refused, not silently applied over it."""
    await open_collection(ledger, OWNER, "lab", [MEMBER])
    shown = await head(ledger, "lab")
    first = members(OWNER, "lab", [MEMBER2.pubkey], created_at=T0 + 10)
    second = members(OWNER, "lab", [], created_at=T0 + 20)
    results = await asyncio.gather(
        ledger.submit([first], now=NOW, expected={"lab": shown}, origin=OPERATOR),
        ledger.submit([second], now=NOW, expected={"lab": shown}, origin=OPERATOR),
        return_exceptions=True,
    )
    assert isinstance(results[0], dict)
    assert isinstance(results[1], PublishError)
    assert "changed since this page was loaded" in str(results[1])
    assert await current_list(ledger, "lab") == [MEMBER2.pubkey]


async def test_the_page_that_creates_a_collection_may_send_its_batch_again(
    ledger: Ledger,
) -> None:
    await ledger.approve([OWNER.pubkey])
    await ledger.submit([terms(OWNER)], now=NOW, origin=OPERATOR)
    created = members(OWNER, "lab", [])
    await ledger.submit([created], now=NOW, expected={"lab": None}, origin=OPERATOR)
    again = await ledger.submit([created], now=NOW, expected={"lab": None}, origin=OPERATOR)
    assert again["skipped"] == [created["id"]]
