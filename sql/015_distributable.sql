-- A schema that Citus can distribute by collection, and that a single PostgreSQL runs as before
-- (what each table becomes on Citus, and why each change is safe: tms/store/citus.py and
-- docs/operating.md's "Scale-out: Citus"). Nothing here needs Citus: `tms migrate --distribute`
-- distributes the tables afterwards, on a database that has the extension.
--
-- Citus needs, of a table distributed by `collection`: every primary key and unique constraint
-- to include `collection`; no NULL in it; and no foreign key to it from a table that is not
-- distributed with it. An event's id is the hash of its signed content, and the content names
-- the collection (profiles and terms name none), so an id can only ever be stored under one
-- collection: a key of (id, collection) is unique exactly when the id is, and no constraint
-- below admits a row the old one refused.

-- Profiles and terms belong to no collection: their rows in `events` get a collection value no
-- collection can have (slugs are lowercase letters, digits, `-` and `_`; tms.types
-- UNSCOPED), so that `collection` is never NULL. The value is the server's bookkeeping, not
-- part of any signed event; export and every read treat it as "no collection", as they treated
-- NULL. The ledger's guard is lifted for this one statement and restored in the same
-- transaction.
ALTER TABLE events DISABLE TRIGGER events_append_only;
UPDATE events SET collection = '~unscoped' WHERE collection IS NULL;
ALTER TABLE events ENABLE TRIGGER events_append_only;
ALTER TABLE events ALTER COLUMN collection SET NOT NULL;
DROP INDEX events_unscoped_pubkey;
CREATE INDEX events_unscoped_pubkey ON events (pubkey, seq) WHERE collection = '~unscoped';

-- The directory of collections is read by every access check and written once per collection:
-- on Citus a reference table (a copy on every node). A reference table may not point at a
-- distributed one, so `created_by` loses its foreign key; it is written by the statement that
-- stores the event it names (tms.ledger.writes), and tests/ledger hold every row to its event.
ALTER TABLE collections DROP CONSTRAINT collections_created_by_fkey;
-- Likewise the current member lists' key into the directory (both reference tables): Citus
-- runs every statement of a transaction that wrote to a table with a foreign key over one
-- connection per node, and refuses the write outright after a statement that used several; a
-- publish to two collections is such a transaction. The row is written by the statement that
-- creates the collection or stores the list, under the collection's lock.
ALTER TABLE current_member_lists DROP CONSTRAINT current_member_lists_collection_fkey;

-- The tables Citus distributes by `collection` hold it as plain text (the `slug` domain's
-- collation and check, spelled out): Citus 13.2 cannot route by a column of a domain type (an
-- UPDATE filtered on one crashed its coordinator). Same values, same comparisons, same check.
DO $$
DECLARE
    scoped text;
BEGIN
    FOREACH scoped IN ARRAY ARRAY['events', 'evidence', 'claims', 'links', 'contradictions',
            'contradiction_claims', 'member_lists', 'link_anchors', 'claim_counts',
            'collection_counts', 'embeddings', 'tlog_leaves', 'tlog_nodes',
            'tlog_checkpoints', 'claim_keys'] LOOP
        EXECUTE format('ALTER TABLE %I ALTER COLUMN collection TYPE text COLLATE "C"', scoped);
        EXECUTE format('ALTER TABLE %I ADD CONSTRAINT %I CHECK (length(collection) BETWEEN 1 AND 64)',
                       scoped, scoped || '_collection_check');
    END LOOP;
END
$$;

-- Keys with the collection in them (the old ones' columns first, so that a look-up by id alone
-- still walks the same index on a single PostgreSQL).
ALTER TABLE events DROP CONSTRAINT events_pkey;
ALTER TABLE events ADD PRIMARY KEY (collection, seq);
DROP INDEX events_collection_seq;  -- the primary key now
ALTER TABLE events DROP CONSTRAINT events_id_key;
ALTER TABLE events ADD CONSTRAINT events_id_key UNIQUE (id, collection);

ALTER TABLE evidence DROP CONSTRAINT evidence_pkey;
ALTER TABLE evidence ADD PRIMARY KEY (id, collection);
ALTER TABLE claims DROP CONSTRAINT claims_pkey;
ALTER TABLE claims ADD PRIMARY KEY (id, collection);
ALTER TABLE links DROP CONSTRAINT links_pkey;
ALTER TABLE links ADD PRIMARY KEY (id, collection);
ALTER TABLE contradictions DROP CONSTRAINT contradictions_pkey;
ALTER TABLE contradictions ADD PRIMARY KEY (id, collection);
ALTER TABLE contradiction_claims DROP CONSTRAINT contradiction_claims_pkey;
ALTER TABLE contradiction_claims ADD PRIMARY KEY (contradiction_id, claim_id, collection);
ALTER TABLE member_lists DROP CONSTRAINT member_lists_pkey;
ALTER TABLE member_lists ADD PRIMARY KEY (id, collection);
ALTER TABLE link_anchors DROP CONSTRAINT link_anchors_pkey;
ALTER TABLE link_anchors ADD PRIMARY KEY (link_id, collection);
ALTER TABLE claim_counts DROP CONSTRAINT claim_counts_pkey;
ALTER TABLE claim_counts ADD PRIMARY KEY (claim_id, collection);
ALTER TABLE embeddings DROP CONSTRAINT embeddings_pkey;
ALTER TABLE embeddings ADD PRIMARY KEY (event_id, model, collection);
-- A claim's key (sql/013) is its claim's, which is in one collection only.
ALTER TABLE claim_keys DROP CONSTRAINT claim_keys_pkey;
ALTER TABLE claim_keys ADD PRIMARY KEY (claim_id, collection);
-- A log's entry is an event id, so it too belongs to one collection only.
ALTER TABLE tlog_leaves DROP CONSTRAINT tlog_leaves_event_id_key;
ALTER TABLE tlog_leaves ADD CONSTRAINT tlog_leaves_event_id_key UNIQUE (event_id, collection);

-- The embedding queue learns each event's collection, so that it lives beside the events it
-- lists and is taken one collection at a time (tms.search.vectors).
ALTER TABLE embedding_queue
    ADD COLUMN collection text COLLATE "C" CHECK (length(collection) BETWEEN 1 AND 64);
UPDATE embedding_queue q SET collection = e.collection FROM events e WHERE e.id = q.event_id;
DELETE FROM embedding_queue WHERE collection IS NULL;  -- none: every queued id is an event
ALTER TABLE embedding_queue ALTER COLUMN collection SET NOT NULL;
ALTER TABLE embedding_queue DROP CONSTRAINT embedding_queue_pkey;
ALTER TABLE embedding_queue ADD PRIMARY KEY (event_id, collection);
CREATE INDEX embedding_queue_collection_seq ON embedding_queue (collection, seq);
