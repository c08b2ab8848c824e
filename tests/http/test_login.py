"""The login's pure parts: nonces, session cookies and CSRF tokens signed with the secret."""

from __future__ import annotations

import pytest

from tms.errors import AuthError
from tms.http.login import NONCE_SECONDS, Keyring

RING = Keyring(b"k" * 32)
NOW = 1_800_000_000


def test_a_nonce_is_ours_for_a_minute() -> None:
    nonce = RING.mint_nonce(NOW)
    assert RING.check_nonce(nonce, NOW + NONCE_SECONDS) == nonce
    with pytest.raises(AuthError, match="more than 60s old"):
        RING.check_nonce(nonce, NOW + NONCE_SECONDS + 1)
    with pytest.raises(AuthError, match="not issued by this server"):
        Keyring(b"x" * 32).check_nonce(nonce, NOW)
    for junk in (None, "", "1.2", "a.b.c", "é" * 10, "x" * 500):
        with pytest.raises(AuthError):
            RING.check_nonce(junk, NOW)


def test_a_cookie_names_its_session_only_when_we_signed_it() -> None:
    cookie, recorded = RING.new_session()
    assert RING.session_hash(cookie) == recorded
    session_id = cookie.split(".")[0]
    for forged in (session_id, f"{session_id}.00", cookie + "0", "ü.ü", "", None, "a" * 300):
        assert RING.session_hash(forged) is None
    assert Keyring(b"x" * 32).session_hash(cookie) is None


def test_csrf_tokens_differ_per_session_and_per_secret() -> None:
    one, two = RING.new_session()[1], RING.new_session()[1]
    assert RING.csrf(one) != RING.csrf(two)
    assert Keyring(b"x" * 32).csrf(one) != RING.csrf(one)
