-- Each collection's record counts (evidence, claims, links, contradictions), kept as records are
-- stored, so that `list_collections` and the home page read one row per collection instead of
-- counting four tables at every call (10 ms a call at 50,000 claims, growing with the ledger).
--
-- Not ledger: derived, written by the publish's one statement (tms.ledger.writes) in the
-- transaction that stores what it counts, under the collection's lock. Counts only grow. Should
-- they ever be doubted, the rows may be deleted and this file's INSERT run again.
CREATE TABLE collection_counts (
    collection     slug PRIMARY KEY,
    evidence       bigint NOT NULL DEFAULT 0,
    claims         bigint NOT NULL DEFAULT 0,
    links          bigint NOT NULL DEFAULT 0,
    contradictions bigint NOT NULL DEFAULT 0
);

INSERT INTO collection_counts (collection, evidence, claims, links, contradictions)
SELECT c.slug,
       (SELECT count(*) FROM evidence x WHERE x.collection = c.slug),
       (SELECT count(*) FROM claims x WHERE x.collection = c.slug),
       (SELECT count(*) FROM links x WHERE x.collection = c.slug),
       (SELECT count(*) FROM contradictions x WHERE x.collection = c.slug)
FROM collections c;
