-- The refusal log (not ledger: bounded, pruned, and never shown to a client).
--
-- Every refused publish, tool call, login, fetch and request over a rate limit is one row,
-- written in batches off the request path (tms/guard/refusals.py): when, what kind of refusal,
-- which tool or route, the key when its signature verified, and the client's address. Never
-- the content sent, a message or a secret. `tms refusals` reads it for the operator.
--
-- Bounded: after each write the oldest rows beyond TMS_REFUSALS_KEEP are deleted, and how many
-- were (with those a server could not write at all) is added to refusals_dropped.
CREATE TABLE refusals (
    seq      bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at       timestamptz NOT NULL,
    kind     text NOT NULL,
    tool     text NOT NULL,
    pubkey   hex64,  -- null unless the key's signature verified
    address  text
);
CREATE INDEX refusals_at ON refusals (at);
CREATE INDEX refusals_pubkey ON refusals (pubkey, at) WHERE pubkey IS NOT NULL;

CREATE TABLE refusals_dropped (
    only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    dropped  bigint NOT NULL DEFAULT 0
);
INSERT INTO refusals_dropped DEFAULT VALUES;
