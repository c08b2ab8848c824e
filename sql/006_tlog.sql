-- The transparency log: one RFC 6962 Merkle tree per collection, over its events in `seq` order
-- (profiles and terms belong to no collection and are not entries), and the checkpoints the
-- server signed over it. Written in the publish transaction, under the collection's lock, by
-- tms/ledger/tlog.py; read by tms/ledger/tlog_reads.py. Ledger, so append-only like sql/001's
-- tables: a tree that could be rewritten would prove nothing.
--
-- An entry is the 32 raw bytes of an event id (leaf hash = SHA-256(0x00 || id)), so the full
-- text stays out of the tree. The leaf hash is never stored: it is one SHA-256 away from the id.

-- The leaf index of each event: where it sits in its collection's tree. The entry is kept as
-- the 32 bytes it is (half the index a hex id would make: this index is the log's dearest row).
CREATE TABLE tlog_leaves (
    collection  slug NOT NULL,
    idx         bigint NOT NULL CHECK (idx >= 0),
    event_id    bytea NOT NULL UNIQUE CHECK (length(event_id) = 32),  -- an entry of one log, once
    PRIMARY KEY (collection, idx)
);

-- Perfect subtrees above the leaves, written once when their last leaf arrives: the node
-- (level, idx) is the Merkle Tree Hash of leaves [idx * 2^level, (idx + 1) * 2^level). Only
-- the levels divisible by 4 are kept (a fifteenth of the rows of every level; any other
-- subtree is at most 8 stored ones away), which tlog-tiles' levels 8, 16, ... are among.
-- Proofs and the frontier a publish extends are folded from them (tms/ledger/tlog.py STRIDE).
CREATE TABLE tlog_nodes (
    collection  slug NOT NULL,
    level       smallint NOT NULL CHECK (level BETWEEN 4 AND 60 AND level % 4 = 0),
    idx         bigint NOT NULL CHECK (idx >= 0),
    hash        bytea NOT NULL CHECK (length(hash) = 32),
    PRIMARY KEY (collection, level, idx)
);

-- Every checkpoint signed (C2SP signed note, tlog-checkpoint text), one per publish that added
-- entries. The latest is the highest size; each was checked consistent with the one before it.
CREATE TABLE tlog_checkpoints (
    collection  slug NOT NULL,
    size        bigint NOT NULL CHECK (size > 0),
    root        bytea NOT NULL CHECK (length(root) = 32),
    note        text NOT NULL,
    signed_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (collection, size)
);

DO $$
DECLARE
    log_table text;
BEGIN
    FOREACH log_table IN ARRAY ARRAY['tlog_leaves', 'tlog_nodes', 'tlog_checkpoints'] LOOP
        EXECUTE format('CREATE TRIGGER %I BEFORE UPDATE OR DELETE ON %I '
                       'FOR EACH ROW EXECUTE FUNCTION tms_refuse_change()',
                       log_table || '_append_only', log_table);
        EXECUTE format('CREATE TRIGGER %I BEFORE TRUNCATE ON %I '
                       'FOR EACH STATEMENT EXECUTE FUNCTION tms_refuse_change()',
                       log_table || '_no_truncate', log_table);
    END LOOP;
END
$$;
