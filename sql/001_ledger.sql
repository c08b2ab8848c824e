-- The ledger: every event exactly as signed, plus typed tables filled in the same transaction
-- for querying. Every ledger table is append-only, enforced here by triggers, not only in Python.
--
-- Ids, keys and slugs are ASCII compared byte for byte: the domains use the "C" collation (a
-- locale-aware B-tree on random hex is several times slower to fill) and check only lengths,
-- because a regular expression per column per row cost more than the rest of an insert; the
-- hex alphabet is checked in Python before anything reaches the database.
-- The typed tables are projections written by one function in the same transaction as their
-- events; they carry no foreign keys (a per-row check that doubled the cost of a batch), and a
-- test asserts that every typed row has its event.

CREATE DOMAIN hex64 AS text COLLATE "C" CHECK (length(VALUE) = 64);
CREATE DOMAIN slug AS text COLLATE "C" CHECK (length(VALUE) BETWEEN 1 AND 64);

CREATE TABLE events (
    seq         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,  -- "oldest first" and export order
    id          hex64 NOT NULL UNIQUE,
    pubkey      hex64 NOT NULL,
    created_at  bigint NOT NULL,
    kind        integer NOT NULL,
    tags        text NOT NULL,      -- the tags array as compact JSON (jsonb would refuse \u0000)
    content     text NOT NULL,      -- exactly the signed string, never re-serialized
    sig         text COLLATE "C" NOT NULL CHECK (length(sig) = 128),
    collection  slug,               -- null for profiles and terms only
    received_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX events_collection_seq ON events (collection, seq);
CREATE INDEX events_unscoped_pubkey ON events (pubkey, seq) WHERE collection IS NULL;

-- A collection is created by the first event naming it; its signer owns it forever.
CREATE TABLE collections (
    slug        slug PRIMARY KEY,
    owner       hex64 NOT NULL,
    created_by  hex64 NOT NULL REFERENCES events (id),
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX collections_owner ON collections (owner);

CREATE TABLE evidence (
    id          hex64 PRIMARY KEY,
    seq         bigint NOT NULL,
    collection  slug NOT NULL,
    pubkey      hex64 NOT NULL,
    title       text,
    url         text,
    source      text,
    text        text NOT NULL
);
CREATE INDEX evidence_collection_seq ON evidence (collection, seq);

CREATE TABLE claims (
    id          hex64 PRIMARY KEY,
    seq         bigint NOT NULL,
    collection  slug NOT NULL,
    pubkey      hex64 NOT NULL,
    text        text NOT NULL
);
CREATE INDEX claims_collection_seq ON claims (collection, seq);

CREATE TABLE links (
    id          hex64 PRIMARY KEY,
    seq         bigint NOT NULL,
    collection  slug NOT NULL,
    pubkey      hex64 NOT NULL,
    from_id     hex64 NOT NULL,
    to_id       hex64 NOT NULL,
    relation    text NOT NULL CHECK (relation IN ('SUPPORTS', 'REBUTS', 'QUALIFIES')),
    quote       text NOT NULL,
    reason      text NOT NULL
);
CREATE INDEX links_collection_to ON links (collection, to_id);
CREATE INDEX links_collection_from ON links (collection, from_id);
CREATE INDEX links_collection_seq ON links (collection, seq);

CREATE TABLE contradictions (
    id          hex64 PRIMARY KEY,
    seq         bigint NOT NULL,
    collection  slug NOT NULL,
    pubkey      hex64 NOT NULL,
    reason      text NOT NULL
);
CREATE INDEX contradictions_collection_seq ON contradictions (collection, seq);

CREATE TABLE contradiction_claims (
    contradiction_id hex64 NOT NULL,
    claim_id         hex64 NOT NULL,
    collection       slug NOT NULL,
    PRIMARY KEY (contradiction_id, claim_id)
);
CREATE INDEX contradiction_claims_claim ON contradiction_claims (collection, claim_id);

CREATE TABLE member_lists (
    id          hex64 PRIMARY KEY,
    seq         bigint NOT NULL,
    collection  slug NOT NULL,
    pubkey      hex64 NOT NULL,
    created_at  bigint NOT NULL,
    members     text[] COLLATE "C" NOT NULL
);
CREATE INDEX member_lists_current ON member_lists (collection, created_at DESC, id);

CREATE TABLE profiles (
    id          hex64 PRIMARY KEY,
    seq         bigint NOT NULL,
    pubkey      hex64 NOT NULL,
    created_at  bigint NOT NULL,
    name        text NOT NULL,
    about       text,
    picture     text
);
CREATE INDEX profiles_current ON profiles (pubkey, created_at DESC, id);

CREATE TABLE terms_signatures (
    id          hex64 PRIMARY KEY,
    seq         bigint NOT NULL,
    pubkey      hex64 NOT NULL,
    version     text NOT NULL,
    sha256      hex64 NOT NULL
);
CREATE INDEX terms_signatures_pubkey ON terms_signatures (pubkey, version, sha256);

CREATE FUNCTION tms_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'the TMS ledger is append-only: % on % is refused', TG_OP, TG_TABLE_NAME
        USING ERRCODE = 'insufficient_privilege',
              HINT = 'corrections are new events (a link that disputes), never edits';
END
$$;

DO $$
DECLARE
    ledger_table text;
BEGIN
    FOREACH ledger_table IN ARRAY ARRAY['events', 'collections', 'evidence', 'claims', 'links',
            'contradictions', 'contradiction_claims', 'member_lists', 'profiles',
            'terms_signatures'] LOOP
        EXECUTE format('CREATE TRIGGER %I BEFORE UPDATE OR DELETE ON %I '
                       'FOR EACH ROW EXECUTE FUNCTION tms_refuse_change()',
                       ledger_table || '_append_only', ledger_table);
        EXECUTE format('CREATE TRIGGER %I BEFORE TRUNCATE ON %I '
                       'FOR EACH STATEMENT EXECUTE FUNCTION tms_refuse_change()',
                       ledger_table || '_no_truncate', ledger_table);
    END LOOP;
END
$$;

-- Not ledger: state that may change, derived from the ledger or set by the operator.

-- The current member list of each collection (the replaceable rule: newest created_at, ties to
-- the lowest id), kept as rows so that "is this key a member?" is one index look-up.
CREATE TABLE current_member_lists (
    collection  slug PRIMARY KEY REFERENCES collections (slug),
    list_id     hex64 NOT NULL,
    created_at  bigint NOT NULL
);
CREATE TABLE memberships (
    collection  slug NOT NULL,
    pubkey      hex64 NOT NULL,
    PRIMARY KEY (collection, pubkey)
);
CREATE INDEX memberships_pubkey ON memberships (pubkey);

CREATE TABLE approvals (
    pubkey      hex64 PRIMARY KEY,
    approved_at timestamptz NOT NULL DEFAULT now()
);
