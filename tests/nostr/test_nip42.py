"""NIP-42 AUTH events: the challenge, this relay's URL as clients normalise it, the kind and the
clock, each refusal saying what to fix."""

from __future__ import annotations

import pytest
from factories import MEMBER

from tms.errors import AuthError, Refusal
from tms.nostr.nip42 import check_auth, normalize_relay_url

URL = "wss://tms.example.org/c/mcas"
NOW = 1_800_000_000


def auth(**change: object) -> dict[str, object]:
    tags = change.pop("tags", [["relay", URL], ["challenge", "abc"]])
    event = MEMBER.sign(
        int(change.pop("kind", 22242)), "", int(change.pop("created_at", NOW)), tags
    )  # type: ignore[arg-type]
    return event.to_dict()


def test_the_signer_of_a_good_answer() -> None:
    assert check_auth(auth(), challenge="abc", relay_url=URL, now=NOW + 30) == MEMBER.pubkey


@pytest.mark.parametrize(
    ("event", "words", "kind"),
    [
        (auth(kind=27235), "must be kind 22242", Refusal.UNAUTHENTICATED),
        (auth(created_at=NOW - 700), "more than 600 s from server time", Refusal.STALE),
        (auth(tags=[["relay", URL], ["challenge", "xyz"]]), "not the challenge", Refusal.REPLAY),
        (
            auth(tags=[["relay", "wss://evil.example/c/mcas"], ["challenge", "abc"]]),
            "relay tag",
            Refusal.UNAUTHENTICATED,
        ),
        (auth(tags=[["relay", URL]]), "exactly one 'challenge' tag", Refusal.UNAUTHENTICATED),
        ({"kind": 22242}, "invalid: field 'id' is missing", Refusal.BAD_SIGNATURE),
    ],
)
def test_refusals_say_what_to_fix(event: object, words: str, kind: Refusal) -> None:
    with pytest.raises(AuthError) as caught:
        check_auth(event, challenge="abc", relay_url=URL, now=NOW)
    assert str(caught.value).startswith("invalid: ") and words in str(caught.value)
    assert caught.value.refusal is kind


def test_a_tampered_event_is_a_bad_signature() -> None:
    event = auth()
    event["content"] = "changed"
    with pytest.raises(AuthError) as caught:
        check_auth(event, challenge="abc", relay_url=URL, now=NOW)
    assert caught.value.refusal is Refusal.BAD_SIGNATURE


def test_urls_compare_as_clients_normalise_them() -> None:
    same = ["wss://TMS.example.org:443/c/mcas/", "https://tms.example.org/c//mcas", URL]
    assert {normalize_relay_url(url) for url in same} == {URL}
    assert normalize_relay_url("ws://127.0.0.1:8000") == "ws://127.0.0.1:8000"
    assert normalize_relay_url("ws://[::1]:80/") == "ws://[::1]"
    assert normalize_relay_url("ftp://x") is None and normalize_relay_url("not a url") is None
