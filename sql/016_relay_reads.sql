-- Relay reads answered from indexes, and contradictions searched through an index of their own
-- (tms/ledger/filters.py, tms/search/search.py).
--
-- A REQ's page is its filter's newest events below a `seq`, per collection. Each index below
-- leads with the collection (so that on Citus every shard holds its own collections' entries)
-- and then orders by `seq`, so that a page for one author, or one kind, is a backward walk of
-- its entries that stops after the page: a filter naming 1,000 authors is 1,000 short walks of
-- index entries, never a scan of the collection. The other fields a filter may name ride along
-- (INCLUDE), so a walk tests them without reading the table; only the page's own rows are read.
-- `created_at` ranges (since/until) get an index for the planner to choose when the range is
-- narrow.
CREATE INDEX events_collection_pubkey ON events (collection, pubkey, seq) INCLUDE (kind, created_at);
CREATE INDEX events_collection_kind ON events (collection, kind, seq) INCLUDE (created_at);
CREATE INDEX events_collection_created_at ON events (collection, created_at, seq);

-- Not ledger: each contradiction's keyword document (its reason, then its claims' `search`
-- vectors, as tms.search.search folds them), built once, the first time a search of its
-- collection meets it. A contradiction and its claims never change, so neither does its
-- document; searching reads these through the GIN index, as claim search reads `claims.search`,
-- instead of folding every document of the collection at each query. Distributed with
-- `events` on Citus (tms.store.citus).
CREATE TABLE contradiction_search (
    contradiction_id hex64 NOT NULL,
    collection       text COLLATE "C" NOT NULL CHECK (length(collection) BETWEEN 1 AND 64),
    seq              bigint NOT NULL,
    search           tsvector NOT NULL,
    PRIMARY KEY (contradiction_id, collection)
);
CREATE INDEX contradiction_search_search ON contradiction_search USING gin (search);
CREATE INDEX contradiction_search_collection_seq ON contradiction_search (collection, seq);
