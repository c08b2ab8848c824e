-- The ledger: every event exactly as signed, plus typed tables filled in the same transaction
-- for querying. Every ledger table is append-only, enforced here by triggers, not only in Python.

CREATE TABLE events (
    seq         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,  -- "oldest first" and export order
    id          text NOT NULL UNIQUE CHECK (id ~ '^[0-9a-f]{64}$'),
    pubkey      text NOT NULL CHECK (pubkey ~ '^[0-9a-f]{64}$'),
    created_at  bigint NOT NULL,
    kind        integer NOT NULL,
    tags        text NOT NULL,      -- the tags array as compact JSON (jsonb would refuse \u0000)
    content     text NOT NULL,      -- exactly the signed string, never re-serialized
    sig         text NOT NULL CHECK (sig ~ '^[0-9a-f]{128}$'),
    collection  text,               -- null for profiles and terms only
    received_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX events_collection_seq ON events (collection, seq);
CREATE INDEX events_unscoped_pubkey ON events (pubkey, seq) WHERE collection IS NULL;

-- A collection is created by the first event naming it; its signer owns it forever.
CREATE TABLE collections (
    slug        text PRIMARY KEY CHECK (slug ~ '^[a-z0-9_-]{1,64}$'),
    owner       text NOT NULL,
    created_by  text NOT NULL REFERENCES events (id),
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX collections_owner ON collections (owner);

CREATE TABLE evidence (
    id          text PRIMARY KEY REFERENCES events (id),
    seq         bigint NOT NULL,
    collection  text NOT NULL REFERENCES collections (slug),
    pubkey      text NOT NULL,
    title       text,
    url         text,
    source      text,
    text        text NOT NULL
);
CREATE INDEX evidence_collection_seq ON evidence (collection, seq);

CREATE TABLE claims (
    id          text PRIMARY KEY REFERENCES events (id),
    seq         bigint NOT NULL,
    collection  text NOT NULL REFERENCES collections (slug),
    pubkey      text NOT NULL,
    text        text NOT NULL
);
CREATE INDEX claims_collection_seq ON claims (collection, seq);

CREATE TABLE links (
    id          text PRIMARY KEY REFERENCES events (id),
    seq         bigint NOT NULL,
    collection  text NOT NULL REFERENCES collections (slug),
    pubkey      text NOT NULL,
    from_id     text NOT NULL,
    to_id       text NOT NULL,
    relation    text NOT NULL CHECK (relation IN ('SUPPORTS', 'REBUTS', 'QUALIFIES')),
    quote       text NOT NULL,
    reason      text NOT NULL
);
CREATE INDEX links_collection_to ON links (collection, to_id);
CREATE INDEX links_collection_from ON links (collection, from_id);
CREATE INDEX links_collection_seq ON links (collection, seq);

CREATE TABLE contradictions (
    id          text PRIMARY KEY REFERENCES events (id),
    seq         bigint NOT NULL,
    collection  text NOT NULL REFERENCES collections (slug),
    pubkey      text NOT NULL,
    reason      text NOT NULL
);
CREATE INDEX contradictions_collection_seq ON contradictions (collection, seq);

CREATE TABLE contradiction_claims (
    contradiction_id text NOT NULL REFERENCES contradictions (id),
    claim_id         text NOT NULL REFERENCES claims (id),
    collection       text NOT NULL REFERENCES collections (slug),
    PRIMARY KEY (contradiction_id, claim_id)
);
CREATE INDEX contradiction_claims_claim ON contradiction_claims (collection, claim_id);

CREATE TABLE member_lists (
    id          text PRIMARY KEY REFERENCES events (id),
    seq         bigint NOT NULL,
    collection  text NOT NULL REFERENCES collections (slug),
    pubkey      text NOT NULL,
    created_at  bigint NOT NULL,
    members     text[] NOT NULL
);
CREATE INDEX member_lists_current ON member_lists (collection, created_at DESC, id);

CREATE TABLE profiles (
    id          text PRIMARY KEY REFERENCES events (id),
    seq         bigint NOT NULL,
    pubkey      text NOT NULL,
    created_at  bigint NOT NULL,
    name        text NOT NULL,
    about       text,
    picture     text
);
CREATE INDEX profiles_current ON profiles (pubkey, created_at DESC, id);

CREATE TABLE terms_signatures (
    id          text PRIMARY KEY REFERENCES events (id),
    seq         bigint NOT NULL,
    pubkey      text NOT NULL,
    version     text NOT NULL,
    sha256      text NOT NULL
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
    collection  text PRIMARY KEY REFERENCES collections (slug),
    list_id     text NOT NULL REFERENCES member_lists (id),
    created_at  bigint NOT NULL
);
CREATE TABLE memberships (
    collection  text NOT NULL REFERENCES collections (slug),
    pubkey      text NOT NULL,
    PRIMARY KEY (collection, pubkey)
);
CREATE INDEX memberships_pubkey ON memberships (pubkey);

CREATE TABLE approvals (
    pubkey      text PRIMARY KEY CHECK (pubkey ~ '^[0-9a-f]{64}$'),
    approved_at timestamptz NOT NULL DEFAULT now()
);
