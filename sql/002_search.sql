-- Search and signed requests: keyword search over claims, vectors for claims, evidence and
-- contradictions, the queue of events still waiting for a vector, and used request ids.

CREATE EXTENSION IF NOT EXISTS vector;

-- Keyword search (PostgreSQL full text, English stemming). A stored column, so ranking reads it
-- instead of re-parsing every match; adding it rewrites the table but fires no row trigger, so
-- the append-only guard is untouched. Only the first 100,000 characters are indexed: a tsvector
-- holds at most 1 MB, and a longer claim must still be storable.
ALTER TABLE claims
    ADD COLUMN search tsvector GENERATED ALWAYS AS (to_tsvector('english', left(text, 100000))) STORED;
CREATE INDEX claims_search ON claims USING gin (search);

-- Not ledger: vectors are derived from events and recomputed when the model changes. One row per
-- event and model; the column has no fixed dimension because models differ, so the server
-- creates, at start-up, an HNSW index for its own model over `embedding::vector(<dims>)` limited
-- to that model's rows (see tms/search_store.py).
CREATE TABLE embeddings (
    event_id    hex64 NOT NULL,
    model       text NOT NULL,
    collection  slug NOT NULL,
    kind        integer NOT NULL,
    embedding   vector NOT NULL,
    embedded_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (event_id, model)
);
CREATE INDEX embeddings_collection ON embeddings (collection, kind, model);

-- Events still waiting for a vector: filled in the publish transaction, emptied as vectors are
-- stored, so catching up never scans the ledger for what is missing.
CREATE TABLE embedding_queue (
    event_id    hex64 PRIMARY KEY,
    seq         bigint NOT NULL
);
CREATE INDEX embedding_queue_seq ON embedding_queue (seq);

-- Ids of signed requests already used (each works once). A request is only accepted within 60 s
-- of its `created_at`, so rows older than that window are pruned without reopening replay.
CREATE TABLE used_requests (
    id          hex64 PRIMARY KEY,
    created_at  bigint NOT NULL,
    used_at     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX used_requests_created_at ON used_requests (created_at);
