-- The refusal log, flood-proof (issue 19): rate-limit refusals are counted, not listed, and each
-- kind of refusal keeps its own budget of rows.
--
-- One address over its rate limit for 25 s (4,000-5,500 requests a second, 99 % answered 429)
-- filled the 100,000-row log and pruned every other address's records with it, bad signatures
-- included. Now:
--
-- * a rate-limit refusal is one row per minute, route (tool), address and key, with a count:
--   `at` is that minute's start, and every refusal of the minute adds to `count` (an upsert on
--   refusals_rate_limited, from every server process alike). Other kinds stay one row each, at
--   their exact time, with a count of 1;
-- * TMS_REFUSALS_KEEP applies to each kind on its own: after each write, a kind over its budget
--   loses its oldest rows and no other kind's. refusals_kept holds each kind's row count, so that
--   pruning costs what it deletes, never a count of the table. refusals_dropped still counts
--   the refusals deleted (the sum of their counts) and those no server could write;
-- * `tms refusals` reads by time with indexes that end its scans at its limit.

ALTER TABLE refusals ADD COLUMN count bigint NOT NULL DEFAULT 1 CHECK (count > 0);

-- The rate-limit refusals recorded one by one so far become a minute's count each.
WITH one_by_one AS (
    DELETE FROM refusals WHERE kind = 'rate_limited' RETURNING seq, at, tool, pubkey, address
)
INSERT INTO refusals (at, kind, tool, pubkey, address, count)
SELECT date_trunc('minute', at), 'rate_limited', tool, pubkey, address, count(*)
FROM one_by_one
GROUP BY date_trunc('minute', at), tool, pubkey, address
ORDER BY min(seq);

CREATE UNIQUE INDEX refusals_rate_limited ON refusals (at, tool, address, pubkey)
    NULLS NOT DISTINCT WHERE kind = 'rate_limited';
CREATE INDEX refusals_kind ON refusals (kind, seq);  -- a kind's oldest rows, for pruning

-- Newest first by time, stopping at the limit: (at, seq) rather than (at) alone.
DROP INDEX refusals_at;
CREATE INDEX refusals_at ON refusals (at, seq);
DROP INDEX refusals_pubkey;
CREATE INDEX refusals_pubkey ON refusals (pubkey, at, seq) WHERE pubkey IS NOT NULL;

CREATE TABLE refusals_kept (
    kind text PRIMARY KEY,
    rows bigint NOT NULL CHECK (rows >= 0)
);
INSERT INTO refusals_kept (kind, rows) SELECT kind, count(*) FROM refusals GROUP BY kind;
