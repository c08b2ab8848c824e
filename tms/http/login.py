"""Browser login: a signed challenge, then a session cookie.

1. `GET /login/challenge` hands out a nonce and the URL to sign. The nonce is stateless (its
   date and an HMAC with the server's secret), so asking for one costs the database nothing.
2. The browser signs, with NIP-07, a NIP-98 event (kind 27235) whose `u` tag is that URL (the
   nonce is in its query) and whose `method` tag is POST, and sends it in `Authorization` to
   `POST /login?nonce=...`. It is checked as NIP-98 says (signature, 60 s, exact URL, method;
   `tms.nostr.nip98`), the nonce's HMAC and age (at most `NONCE_SECONDS`), then the nonce is
   recorded as used (`tms.ledger.sessions`): one login per nonce, across server processes.
3. A key that may use the service (approved, or a member: `tms.ledger.access`) gets a session:
   a random id whose sha256 is recorded, and a cookie holding the id and its HMAC, for
   `SESSION_SECONDS`, HttpOnly, SameSite=Lax, and Secure when the site is served over https.

Each request then finds its session by the cookie; a session whose key may no longer use the
service (revoked and in no collection) is ended there and then. Logout deletes the session row.
The CSRF token of a session is an HMAC of its id: forms and the pages' fetches send it back.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from typing import Final

from starlette.requests import Request

from tms.errors import AuthError, Refusal
from tms.http.origin import signed_origin

NONCE_SECONDS: Final = 60
SESSION_SECONDS: Final = 12 * 3600
COOKIE: Final = "tms_session"
CSRF_HEADER: Final = "x-csrf-token"
CSRF_FIELD: Final = "csrf"
MAX_COOKIE_CHARS: Final = 200
_NONCE_FUTURE_SECONDS: Final = 5  # a nonce dated later than this is not ours


@dataclass(frozen=True, slots=True)
class Session:
    pubkey: str
    id_sha256: str
    csrf: str


class Keyring:
    """What the server's secret signs: nonces, session cookies and CSRF tokens, each under a
    label of its own so that one can never stand for another."""

    def __init__(self, secret: bytes) -> None:
        self._secret = secret

    def _mac(self, label: str, value: str) -> str:
        return hmac.new(self._secret, f"{label}\n{value}".encode(), hashlib.sha256).hexdigest()

    # --- nonces ----------------------------------------------------------------------------

    def mint_nonce(self, now: int) -> str:
        body = f"{now}.{secrets.token_hex(16)}"
        return f"{body}.{self._mac('nonce', body)}"

    def check_nonce(self, nonce: str | None, now: int) -> str:
        """The nonce if it is ours and fresh, else `AuthError` saying to start again."""
        if not nonce or len(nonce) > 200:
            raise AuthError("login needs the nonce from GET /login/challenge; start again")
        body, _, mac = nonce.rpartition(".")
        issued, _, _ = body.partition(".")
        if not _same(mac, self._mac("nonce", body)) or not issued.isdigit():
            raise AuthError("this login nonce was not issued by this server; start again")
        age = now - int(issued)
        if age > NONCE_SECONDS or age < -_NONCE_FUTURE_SECONDS:
            raise AuthError(
                f"this login challenge is more than {NONCE_SECONDS}s old; connect again"
            ).refused_as(Refusal.STALE)
        return nonce

    # --- sessions --------------------------------------------------------------------------

    def new_session(self) -> tuple[str, str]:
        """A new session's (cookie value, id sha256 to record)."""
        session_id = secrets.token_hex(32)
        return f"{session_id}.{self._mac('session', session_id)}", _sha256(session_id)

    def session_hash(self, cookie: str | None) -> str | None:
        """The recorded hash of a cookie's session id, if the cookie is one we signed."""
        if not cookie or len(cookie) > MAX_COOKIE_CHARS:
            return None
        session_id, _, mac = cookie.partition(".")
        if not session_id or not _same(mac, self._mac("session", session_id)):
            return None
        return _sha256(session_id)

    def csrf(self, id_sha256: str) -> str:
        return self._mac("csrf", id_sha256)

    def csrf_ok(self, session: Session, token: str | None) -> bool:
        return token is not None and _same(token, session.csrf)


def request_url(request: Request, base_url: str | None) -> str:
    """The absolute URL a client signs in NIP-98's `u` tag: this server's origin as NIP-42's
    relay tag names it too (`tms.http.origin`: `TMS_BASE_URL`, else the address the server
    listens on, never the client's `Host`), then the path and query exactly as the client sent
    them (still percent-encoded), so that a client signing the URL it requests always matches."""
    origin = signed_origin(request, base_url)
    raw_path = request.scope.get("raw_path")
    path = raw_path.decode("latin-1") if raw_path else request.url.path
    query = request.scope.get("query_string", b"").decode("latin-1")
    return f"{origin}{path}" + (f"?{query}" if query else "")


def _same(given: str, expected: str) -> bool:
    """Constant-time comparison of a client's token, which may hold any characters."""
    return hmac.compare_digest(given.encode("utf-8", "replace"), expected.encode())


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()
