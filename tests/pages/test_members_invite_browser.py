"""The members page's invite (NIP-43, docs "Joining with an invite"), in headless Chromium with
the test NIP-07 provider: the owner signs an invite, the page shows its code and the server
keeps only its SHA-256; a key that joins with the code is then on the page's members."""

from __future__ import annotations

import hashlib
import json
from typing import Any, Final

import pytest
from browser import Person, connect, on_ledger, visit
from factories import Live, members, signed, terms
from playwright.sync_api import Browser, expect

from tms.ledger.service import Ledger
from tms.nostr.events import SecretKey
from tms.nostr.nip19 import npub_encode
from tms.rules.admission import OPERATOR

OWNER: Final = SecretKey(bytes([0x81]) * 32)  # approved; owns the collection
JOINER: Final = SecretKey(bytes([0x82]) * 32)  # neither approved nor a member
SLUG: Final = "invited"


@pytest.fixture(scope="module", autouse=True)
def collection(site: Live) -> None:
    async def seed(ledger: Ledger) -> None:
        await ledger.approve([OWNER.pubkey])
        await ledger.submit([terms(OWNER), members(OWNER, SLUG, [])], origin=OPERATOR)

    on_ledger(site.database_url, seed)


def test_the_owner_signs_an_invite_and_the_joiner_appears(
    browser: Browser, site: Live, people: list[Person]
) -> None:
    owner = connect(browser, site, OWNER, people)
    page = owner.page
    visit(page, f"{site.url}/c/{SLUG}/members")
    page.click("#make-invite")
    expect(page.locator("#invite-code")).to_be_visible()
    expect(page.locator("#invite-status")).to_contain_text("works once")
    code = page.locator("#invite-code code").inner_text()
    assert len(code) == 32
    signed_invite = owner.signed[-1]
    assert signed_invite["kind"] == 27235 and code not in json.dumps(signed_invite)

    async def invites(ledger: Ledger) -> list[Any]:
        rows = await ledger.pool.fetch(
            "SELECT target, body FROM member_changes WHERE method = 'createinvite'"
        )
        return [(row["target"], row["body"]) for row in rows]

    [(target, body)] = on_ledger(site.database_url, invites)
    assert target == hashlib.sha256(code.encode()).hexdigest() and code not in body

    now = int(signed_invite["created_at"]) + 1
    auth = signed(
        JOINER,
        22242,
        "",
        created_at=now,
        tags=[["relay", f"{site.url}/c/{SLUG}"], ["challenge", "c"]],
    )
    join = signed(JOINER, 28934, "", created_at=now, tags=[["-"], ["claim", code]])

    async def joined(ledger: Ledger) -> None:
        await ledger.submit([{**join, "body": json.dumps(auth)}], origin=OPERATOR)

    on_ledger(site.database_url, joined)
    visit(page, f"{site.url}/c/{SLUG}/members")
    expect(page.locator("#current-members")).to_contain_text(npub_encode(JOINER.pubkey))
