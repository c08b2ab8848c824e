-- Each claim's link counts, kept as links and contradictions are stored, so that the
-- `list_claims` count sorts (links, unsupported, unchallenged, contested) read the top of an
-- index instead of counting every link and contradiction of the collection at every call (42 to
-- 52 ms a call at 50,000 claims and 25,000 links; the cost grew with the collection).
--
-- Not ledger: derived from `links` and `contradiction_claims`, written by the publish's one
-- statement (tms.ledger.writes), in the transaction that stores what it counts, under the
-- collection's lock. The ledger is append-only, so a count only ever grows. Should the counts
-- ever be doubted, the rows may be deleted and this file's INSERT run again.
CREATE TABLE claim_counts (
    claim_id   hex64 PRIMARY KEY,
    collection slug NOT NULL,
    seq        bigint NOT NULL,  -- the claim's, for the sorts' ties (newest first)
    supports   integer NOT NULL DEFAULT 0,
    qualifies  integer NOT NULL DEFAULT 0,
    rebuts     integer NOT NULL DEFAULT 0,
    findings   integer NOT NULL DEFAULT 0  -- contradictions naming the claim
);

-- One index per sort, in the sort's own order (tms.ledger.reads._SORT_KEYS).
CREATE INDEX claim_counts_links
    ON claim_counts (collection, (supports + qualifies + rebuts) DESC, seq DESC, claim_id);
CREATE INDEX claim_counts_unsupported
    ON claim_counts (collection, supports, seq DESC, claim_id);
CREATE INDEX claim_counts_unchallenged
    ON claim_counts (collection, (rebuts + findings), supports DESC, seq DESC, claim_id);
CREATE INDEX claim_counts_contested
    ON claim_counts (collection, (rebuts + findings) DESC, seq DESC, claim_id);

INSERT INTO claim_counts (claim_id, collection, seq, supports, qualifies, rebuts, findings)
SELECT c.id, c.collection, c.seq,
       coalesce(l.supports, 0), coalesce(l.qualifies, 0), coalesce(l.rebuts, 0),
       coalesce(f.findings, 0)
FROM claims c
LEFT JOIN (
    SELECT collection, to_id,
           count(*) FILTER (WHERE relation = 'SUPPORTS') AS supports,
           count(*) FILTER (WHERE relation = 'QUALIFIES') AS qualifies,
           count(*) FILTER (WHERE relation = 'REBUTS') AS rebuts
    FROM links GROUP BY collection, to_id) AS l
    ON l.to_id = c.id AND l.collection = c.collection
LEFT JOIN (
    SELECT collection, claim_id, count(*) AS findings
    FROM contradiction_claims GROUP BY collection, claim_id) AS f
    ON f.claim_id = c.id AND f.collection = c.collection;
