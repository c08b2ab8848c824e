-- Browser logins (not ledger: rows here change and expire).
--
-- A login signs a server nonce. The nonce itself is stateless (HMAC-signed with TMS_SECRET and
-- dated, tms.web.login), so asking for one costs the database nothing; a nonce is recorded here
-- only when a login uses it, and the primary key lets exactly one use through. Rows older than
-- the nonce's lifetime are purged by later logins.
CREATE TABLE login_nonces (
    nonce       text COLLATE "C" PRIMARY KEY,
    used_at     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX login_nonces_used_at ON login_nonces (used_at);

-- One row per live browser session. The cookie holds the session id (and an HMAC of it); only
-- its sha256 is stored, so reading this table gives nobody a cookie. Logout deletes the row;
-- a session whose key may no longer use the service is deleted when it is next presented.
CREATE TABLE web_sessions (
    id_sha256   hex64 PRIMARY KEY,
    pubkey      hex64 NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL
);
CREATE INDEX web_sessions_pubkey ON web_sessions (pubkey);
CREATE INDEX web_sessions_expires_at ON web_sessions (expires_at);
