"""NIP-43 on a collection's relay: the relay's own key in its NIP-11 document (`self`, and
`pubkey`, where nostr-tools looks), and what that key signs of the collection's members."""

from __future__ import annotations

import httpx
from factories import RELAY_KEY, Live

NIP11 = {"Accept": "application/nostr+json"}


def test_a_collections_relay_names_the_relay_key_as_self_and_pubkey(live: Live) -> None:
    for path in ("/c/rel", "/c/no-such"):  # the same for every slug: no existence oracle
        document = httpx.get(live.url + path, headers=NIP11).json()
        assert document["self"] == RELAY_KEY.pubkey
        assert document["pubkey"] == RELAY_KEY.pubkey
    root = httpx.get(live.url + "/", headers=NIP11).json()
    assert "self" not in root and 43 not in root["supported_nips"]  # no members at the root
