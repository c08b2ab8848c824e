-- The host the transparency logs are named after (each collection's checkpoint origin is
-- `<host>/c/<slug>`, C2SP tlog-checkpoint), recorded once per database: by the first publish
-- that signs a checkpoint (tms/ledger/tlog.py), and kept from then on, whatever TMS_BASE_URL
-- or TMS_HOST later say. Every checkpoint a member kept names it; one signed under another
-- origin would disown them all (tms verify-export needs one origin per log). A server whose
-- configured origin differs says so at start and keeps this one (docs/transparency-log.md).
-- Server bookkeeping, not the ledger; never changed, so guarded like the log's tables. On
-- Citus a reference table: the publish that records it runs on the collection's worker.
CREATE TABLE tlog_origin (
    one          boolean PRIMARY KEY DEFAULT true CHECK (one),  -- a single row
    host         text NOT NULL CHECK (host <> '' AND host !~ '[[:space:]]'),
    recorded_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TRIGGER tlog_origin_append_only BEFORE UPDATE OR DELETE ON tlog_origin
    FOR EACH ROW EXECUTE FUNCTION tms_refuse_change();
CREATE TRIGGER tlog_origin_no_truncate BEFORE TRUNCATE ON tlog_origin
    FOR EACH STATEMENT EXECUTE FUNCTION tms_refuse_change();

-- A database that signed checkpoints before this table existed adopts the origin they carry
-- (the newest's, should an operator have changed it already), so that the checkpoints members
-- kept go on verifying against every later one.
INSERT INTO tlog_origin (host, recorded_at)
SELECT regexp_replace(split_part(note, E'\n', 1), '/c/[^/]*$', ''), signed_at
FROM tlog_checkpoints
ORDER BY signed_at DESC, size DESC
LIMIT 1;
