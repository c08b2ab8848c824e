"""Agreement with an independent NIP-01/NIP-19 implementation: nostr-tools under Node.

The vectors in `assets/nostr_tools_vectors.json` were produced by
`assets/make_nostr_vectors.mjs` (see its header for how to regenerate them).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from factories import ASSETS

from tms.nostr import keys, nip19
from tms.nostr.events import Event, SecretKey, compute_id

VECTORS_PATH = ASSETS / "nostr_tools_vectors.json"
VECTORS: dict[str, Any] = json.loads(VECTORS_PATH.read_text(encoding="utf-8"))
KEYS: list[dict[str, str]] = VECTORS["keys"]
CASES: list[tuple[dict[str, Any], dict[str, str]]] = [
    (event, KEYS[case["key"]])
    for event, case in zip(VECTORS["events"], VECTORS["cases"], strict=True)
]
CASE_IDS = [
    f"{case['label']}-kind{event['kind']}"
    for event, case in zip(VECTORS["events"], VECTORS["cases"], strict=True)
]
KEY_IDS = [f"key{i}-{key['pubkey'][:8]}" for i, key in enumerate(KEYS)]


def test_vectors_file_is_complete() -> None:
    assert VECTORS["generator"].startswith("nostr-tools ")
    assert len(VECTORS["events"]) >= 40
    assert len(KEYS) >= 3


@pytest.mark.parametrize(("event", "key"), CASES, ids=CASE_IDS)
def test_event_parses_and_verifies(event: dict[str, Any], key: dict[str, str]) -> None:
    parsed = Event.from_dict(event)
    parsed.verify()
    assert parsed.pubkey == key["pubkey"]


@pytest.mark.parametrize(("event", "key"), CASES, ids=CASE_IDS)
def test_compute_id_matches(event: dict[str, Any], key: dict[str, str]) -> None:
    assert (
        compute_id(
            event["pubkey"], event["created_at"], event["kind"], event["tags"], event["content"]
        )
        == event["id"]
    )


@pytest.mark.parametrize(("event", "key"), CASES, ids=CASE_IDS)
def test_to_json_round_trips(event: dict[str, Any], key: dict[str, str]) -> None:
    text = Event.from_dict(event).to_json()
    assert json.loads(text) == event
    Event.from_json(text).verify()


@pytest.mark.parametrize(("event", "key"), CASES, ids=CASE_IDS)
def test_resigning_gives_same_id(event: dict[str, Any], key: dict[str, str]) -> None:
    secret = SecretKey(bytes.fromhex(key["secret_hex"]))
    ours = secret.sign(event["kind"], event["content"], event["created_at"], event["tags"])
    assert ours.pubkey == event["pubkey"]
    assert ours.id == event["id"]
    ours.verify()
    Event.from_dict(event).verify()
    # Same id, same key: each signature verifies in the other's envelope.
    Event.from_dict({**event, "sig": ours.sig}).verify()


@pytest.mark.parametrize("key", KEYS, ids=KEY_IDS)
def test_nip19_keys_match(key: dict[str, str]) -> None:
    assert nip19.npub_encode(key["pubkey"]) == key["npub"]
    assert nip19.nsec_encode(bytes.fromhex(key["secret_hex"])) == key["nsec"]
    assert nip19.npub_decode(key["npub"]) == key["pubkey"]
    assert nip19.nsec_decode(key["nsec"]) == bytes.fromhex(key["secret_hex"])
    assert keys.parse_secret(key["nsec"]).pubkey == key["pubkey"]
    assert keys.parse_secret(key["secret_hex"]).pubkey == key["pubkey"]
    assert SecretKey(bytes.fromhex(key["secret_hex"])).pubkey == key["pubkey"]
