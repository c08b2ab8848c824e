"""NIP-43 on a collection's relay: the relay's own key in its NIP-11 document (`self`, and
`pubkey`, where nostr-tools looks), and what that key signs of the collection's members."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import httpx
import pytest
from factories import ASSETS, MEMBER, MEMBER2, OWNER, RELAY_KEY, STRANGER, Live, environment
from relay_client import Client, ws_url

NIP11 = {"Accept": "application/nostr+json"}
RUN_SECONDS = 120


def test_a_collections_relay_names_the_relay_key_as_self_and_pubkey(live: Live) -> None:
    for path in ("/c/rel", "/c/no-such"):  # the same for every slug: no existence oracle
        document = httpx.get(live.url + path, headers=NIP11).json()
        assert document["self"] == RELAY_KEY.pubkey
        assert document["pubkey"] == RELAY_KEY.pubkey
    root = httpx.get(live.url + "/", headers=NIP11).json()
    assert "self" not in root and 43 not in root["supported_nips"]  # no members at the root


def test_nostr_tools_reads_the_member_list_and_its_changes_live(
    live: Live, js_current_packages: Path
) -> None:
    shutil.copyfile(ASSETS / "relay_nip43.mjs", js_current_packages / "relay_nip43.mjs")
    result = subprocess.run(
        ["node", "--experimental-websocket", "relay_nip43.mjs"],
        cwd=js_current_packages,
        env=environment(
            RELAY_BASE=live.url,
            READER_HEX=MEMBER.secret.hex(),
            READER=MEMBER.pubkey,
            OWNER_HEX=OWNER.secret.hex(),
            JOINER=MEMBER2.pubkey,
        ),
        capture_output=True,
        text=True,
        timeout=RUN_SECONDS,
    )
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen["self"] == seen["pubkey"] == RELAY_KEY.pubkey
    # stored: the member added by the seeded list, and the list now (the owner first)
    assert [(e["kind"], e["pubkey"], e["verified"]) for e in seen["stored"]] == [
        (13534, RELAY_KEY.pubkey, True),
        (8000, RELAY_KEY.pubkey, True),
    ]
    member_list, added = seen["stored"]
    assert member_list["tags"][:3] == [["-"], ["member", OWNER.pubkey], ["member", MEMBER.pubkey]]
    assert added["tags"][:2] == [["-"], ["p", MEMBER.pubkey]]
    # live, in log order: each list's change, then the list it leaves; each names its record
    first, second = seen["lists"]
    assert [(e["kind"], e["tags"][1], e["tags"][-1]) for e in seen["live"]] == [
        (8000, ["p", MEMBER2.pubkey], ["e", first]),
        (13534, ["member", OWNER.pubkey], ["e", first]),
        (8001, ["p", MEMBER2.pubkey], ["e", second]),
        (13534, ["member", OWNER.pubkey], ["e", second]),
    ]
    assert all(e["verified"] and e["pubkey"] == RELAY_KEY.pubkey for e in seen["live"])
    assert ["member", MEMBER2.pubkey] in seen["live"][1]["tags"]
    assert ["member", MEMBER2.pubkey] not in seen["live"][3]["tags"]


@pytest.mark.anyio
async def test_views_are_read_by_members_only_within_limits_and_never_published(live: Live) -> None:
    url = ws_url(live.url, "/c/rel")
    views = {"kinds": [13534, 8000, 8001]}
    async with await Client.open(url) as member:
        await member.auth(MEMBER)
        every, end = await member.req("all", views)
        assert end[0] == "EOSE" and every
        assert {event["kind"] for event in every} <= {13534, 8000, 8001}
        newest, _ = await member.req("one", {**views, "kinds": [8000, 8001], "limit": 1})
        assert len(newest) == 1 and newest[0] in every
        assert await member.req("none", {**views, "limit": 0}) == ([], ["EOSE", "none"])
        plain, _ = await member.req("records", {"kinds": [4705]})  # no view unless asked
        assert {event["kind"] for event in plain} == {4705}
        ok = await member.publish(every[0])
        assert ok[2] is False and ok[3].startswith("invalid: ")  # the relay's, not a record
    async with await Client.open(url) as stranger:
        await stranger.auth(STRANGER)
        events, end = await stranger.req("all", views)
        assert events == [] and end[0] == "CLOSED" and end[2].startswith("restricted: ")
