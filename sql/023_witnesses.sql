-- Witnesses (C2SP tlog-witness, tlog-cosignature): the server as a log that submits its
-- (`collection` is plain text, as sql/015 made it for every table Citus co-locates with events)
-- checkpoints to witnesses, and as a witness of other logs (tms/witness/).

-- As the log: every cosignature a witness returned for one of a collection's checkpoints, as
-- the note signature line it sent. What a member is shown with the checkpoint (C2SP signed
-- note with several signatures). Append-only like the log it vouches for: a cosignature is a
-- witness's signed statement, and dropping one would hide what it said.
CREATE TABLE tlog_cosignatures (
    collection  text COLLATE "C" NOT NULL CHECK (length(collection) BETWEEN 1 AND 64),
    size        bigint NOT NULL CHECK (size > 0),
    witness     text NOT NULL,  -- the witness's verifier key, <name>+<key ID>+<key>
    signed_time bigint NOT NULL CHECK (signed_time >= 0),  -- the cosignature's own timestamp
    line        text NOT NULL,  -- '— <name> <base64>', without the newline
    received_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (collection, size, witness)
);

DO $$
BEGIN
    CREATE TRIGGER tlog_cosignatures_append_only BEFORE UPDATE OR DELETE ON tlog_cosignatures
        FOR EACH ROW EXECUTE FUNCTION tms_refuse_change();
    CREATE TRIGGER tlog_cosignatures_no_truncate BEFORE TRUNCATE ON tlog_cosignatures
        FOR EACH STATEMENT EXECUTE FUNCTION tms_refuse_change();
END
$$;

-- As the log: where each witness stands on each collection's log (the size it last cosigned,
-- sent as `old` next time), and how submitting to it goes (failures in a row back it off).
-- State, not ledger: it changes with every submission.
CREATE TABLE tlog_witness_state (
    collection  text COLLATE "C" NOT NULL CHECK (length(collection) BETWEEN 1 AND 64),
    witness     text NOT NULL,  -- the witness's verifier key
    size        bigint NOT NULL DEFAULT 0 CHECK (size >= 0),
    failures    integer NOT NULL DEFAULT 0,
    retry_at    timestamptz NOT NULL DEFAULT now(),
    last_error  text,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (collection, witness)
);

-- As a witness: the latest checkpoint this server cosigned of each log it witnesses (another
-- TMS's collections, or any C2SP log), with its own cosignature line: what the monitoring view
-- serves, and what the next submission must extend. Updated only by a compare-and-set on the
-- size (tms/witness/state.py), so two submissions racing advance it at most once.
CREATE TABLE witnessed_logs (
    origin      text PRIMARY KEY,
    origin_sha256 text NOT NULL UNIQUE,  -- hex SHA-256 of the origin: the monitoring view's name
    size        bigint NOT NULL CHECK (size >= 0),
    root        bytea NOT NULL CHECK (length(root) = 32),
    note        text NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now()
);
