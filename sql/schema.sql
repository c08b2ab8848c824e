-- The schema the migrations in this folder build, as pg_dump --schema-only prints
-- it (PostgreSQL 18). Generated, never applied: read it, do not edit it.
-- TMS_WRITE_SCHEMA=1 uv run pytest tests/store/test_schema.py writes it again.

CREATE EXTENSION IF NOT EXISTS vector WITH SCHEMA public;

COMMENT ON EXTENSION vector IS 'vector data type and ivfflat and hnsw access methods';

CREATE DOMAIN public.hex64 AS text COLLATE pg_catalog."C"
	CONSTRAINT hex64_check CHECK ((length(VALUE) = 64));

CREATE DOMAIN public.slug AS text COLLATE pg_catalog."C"
	CONSTRAINT slug_check CHECK (((length(VALUE) >= 1) AND (length(VALUE) <= 64)));

CREATE FUNCTION public.tms_refuse_change() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    RAISE EXCEPTION 'the TMS ledger is append-only: % on % is refused', TG_OP, TG_TABLE_NAME
        USING ERRCODE = 'insufficient_privilege',
              HINT = 'corrections are new events (a link that disputes), never edits';
END
$$;

CREATE FUNCTION public.tms_text_sha256(value text) RETURNS bytea
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    RETURN sha256(convert_to(value, 'UTF8'::name));

CREATE TABLE public.approvals (
    pubkey public.hex64 NOT NULL,
    approved_at timestamp with time zone DEFAULT now() NOT NULL
);

CREATE TABLE public.blocked_addresses (
    address text NOT NULL COLLATE pg_catalog."C",
    reason text DEFAULT ''::text NOT NULL,
    blocked_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT blocked_addresses_address_check CHECK (((length(address) >= 1) AND (length(address) <= 64))),
    CONSTRAINT blocked_addresses_reason_check CHECK ((length(reason) <= 1000))
);

CREATE TABLE public.claim_counts (
    claim_id public.hex64 NOT NULL,
    collection text NOT NULL COLLATE pg_catalog."C",
    seq bigint NOT NULL,
    supports integer DEFAULT 0 NOT NULL,
    qualifies integer DEFAULT 0 NOT NULL,
    rebuts integer DEFAULT 0 NOT NULL,
    findings integer DEFAULT 0 NOT NULL,
    CONSTRAINT claim_counts_collection_check CHECK (((length(collection) >= 1) AND (length(collection) <= 64)))
);

CREATE TABLE public.claim_keys (
    claim_id public.hex64 NOT NULL,
    collection text NOT NULL COLLATE pg_catalog."C",
    key bytea NOT NULL,
    CONSTRAINT claim_keys_collection_check CHECK (((length(collection) >= 1) AND (length(collection) <= 64))),
    CONSTRAINT claim_keys_key_check CHECK ((length(key) = 32))
);

CREATE TABLE public.claims (
    id public.hex64 NOT NULL,
    seq bigint NOT NULL,
    collection text NOT NULL COLLATE pg_catalog."C",
    pubkey public.hex64 NOT NULL,
    text text NOT NULL,
    search tsvector GENERATED ALWAYS AS (to_tsvector('english'::regconfig, "left"(text, 100000))) STORED,
    CONSTRAINT claims_collection_check CHECK (((length(collection) >= 1) AND (length(collection) <= 64)))
);

CREATE TABLE public.collection_counts (
    collection text NOT NULL COLLATE pg_catalog."C",
    evidence bigint DEFAULT 0 NOT NULL,
    claims bigint DEFAULT 0 NOT NULL,
    links bigint DEFAULT 0 NOT NULL,
    contradictions bigint DEFAULT 0 NOT NULL,
    CONSTRAINT collection_counts_collection_check CHECK (((length(collection) >= 1) AND (length(collection) <= 64)))
);

CREATE TABLE public.collections (
    slug public.slug NOT NULL,
    owner public.hex64 NOT NULL,
    created_by public.hex64 NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL
);

CREATE TABLE public.contradiction_claims (
    contradiction_id public.hex64 NOT NULL,
    claim_id public.hex64 NOT NULL,
    collection text NOT NULL COLLATE pg_catalog."C",
    CONSTRAINT contradiction_claims_collection_check CHECK (((length(collection) >= 1) AND (length(collection) <= 64)))
);

CREATE TABLE public.contradiction_search (
    contradiction_id public.hex64 NOT NULL,
    collection text NOT NULL COLLATE pg_catalog."C",
    seq bigint NOT NULL,
    search tsvector NOT NULL,
    CONSTRAINT contradiction_search_collection_check CHECK (((length(collection) >= 1) AND (length(collection) <= 64)))
);

CREATE TABLE public.contradictions (
    id public.hex64 NOT NULL,
    seq bigint NOT NULL,
    collection text NOT NULL COLLATE pg_catalog."C",
    pubkey public.hex64 NOT NULL,
    reason text NOT NULL,
    CONSTRAINT contradictions_collection_check CHECK (((length(collection) >= 1) AND (length(collection) <= 64)))
);

CREATE TABLE public.current_member_lists (
    collection public.slug NOT NULL,
    list_id public.hex64 NOT NULL,
    created_at bigint NOT NULL
);

CREATE TABLE public.embedding_queue (
    event_id public.hex64 NOT NULL,
    seq bigint NOT NULL,
    collection text NOT NULL COLLATE pg_catalog."C",
    CONSTRAINT embedding_queue_collection_check CHECK (((length(collection) >= 1) AND (length(collection) <= 64)))
);

CREATE TABLE public.embeddings (
    event_id public.hex64 NOT NULL,
    model text NOT NULL,
    collection text NOT NULL COLLATE pg_catalog."C",
    kind integer NOT NULL,
    embedding public.vector NOT NULL,
    embedded_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT embeddings_collection_check CHECK (((length(collection) >= 1) AND (length(collection) <= 64)))
);

CREATE TABLE public.events (
    seq bigint NOT NULL,
    id public.hex64 NOT NULL,
    pubkey public.hex64 NOT NULL,
    created_at bigint NOT NULL,
    kind integer NOT NULL,
    tags text NOT NULL,
    content text NOT NULL,
    sig text NOT NULL COLLATE pg_catalog."C",
    collection text NOT NULL COLLATE pg_catalog."C",
    received_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT events_collection_check CHECK (((length(collection) >= 1) AND (length(collection) <= 64))),
    CONSTRAINT events_sig_check CHECK ((length(sig) = 128))
);

ALTER TABLE public.events ALTER COLUMN seq ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.events_seq_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

CREATE TABLE public.evidence (
    id public.hex64 NOT NULL,
    seq bigint NOT NULL,
    collection text NOT NULL COLLATE pg_catalog."C",
    pubkey public.hex64 NOT NULL,
    title text,
    url text,
    source text,
    text text NOT NULL,
    chars integer GENERATED ALWAYS AS (char_length(text)) STORED,
    CONSTRAINT evidence_collection_check CHECK (((length(collection) >= 1) AND (length(collection) <= 64)))
);

CREATE TABLE public.link_anchors (
    link_id public.hex64 NOT NULL,
    collection text NOT NULL COLLATE pg_catalog."C",
    start_offset integer NOT NULL,
    end_offset integer NOT NULL,
    exact text NOT NULL,
    prefix text NOT NULL,
    suffix text NOT NULL,
    occurrences integer NOT NULL,
    context_before text,
    context_after text,
    CONSTRAINT link_anchors_check CHECK ((end_offset >= start_offset)),
    CONSTRAINT link_anchors_collection_check CHECK (((length(collection) >= 1) AND (length(collection) <= 64))),
    CONSTRAINT link_anchors_context_whole CHECK (((context_before IS NULL) = (context_after IS NULL))),
    CONSTRAINT link_anchors_occurrences_check CHECK ((occurrences >= 1)),
    CONSTRAINT link_anchors_start_offset_check CHECK ((start_offset >= 0))
);

CREATE TABLE public.links (
    id public.hex64 NOT NULL,
    seq bigint NOT NULL,
    collection text NOT NULL COLLATE pg_catalog."C",
    pubkey public.hex64 NOT NULL,
    from_id public.hex64 NOT NULL,
    to_id public.hex64 NOT NULL,
    relation text NOT NULL,
    quote text NOT NULL,
    reason text NOT NULL,
    CONSTRAINT links_collection_check CHECK (((length(collection) >= 1) AND (length(collection) <= 64))),
    CONSTRAINT links_relation_check CHECK ((relation = ANY (ARRAY['SUPPORTS'::text, 'REBUTS'::text, 'QUALIFIES'::text])))
);

CREATE TABLE public.login_nonces (
    nonce text NOT NULL COLLATE pg_catalog."C",
    used_at timestamp with time zone DEFAULT now() NOT NULL
);

CREATE TABLE public.member_changes (
    id public.hex64 NOT NULL,
    seq bigint NOT NULL,
    collection text NOT NULL COLLATE pg_catalog."C",
    pubkey public.hex64 NOT NULL,
    created_at bigint NOT NULL,
    method text NOT NULL,
    target public.hex64 NOT NULL,
    body text NOT NULL,
    claim public.hex64,
    CONSTRAINT member_changes_claim_check CHECK (((method = 'join'::text) = (claim IS NOT NULL))),
    CONSTRAINT member_changes_collection_check CHECK (((length(collection) >= 1) AND (length(collection) <= 64))),
    CONSTRAINT member_changes_method_check CHECK ((method = ANY (ARRAY['allowpubkey'::text, 'unallowpubkey'::text, 'createinvite'::text, 'join'::text, 'leave'::text])))
);

CREATE TABLE public.member_lists (
    id public.hex64 NOT NULL,
    seq bigint NOT NULL,
    collection text NOT NULL COLLATE pg_catalog."C",
    pubkey public.hex64 NOT NULL,
    created_at bigint NOT NULL,
    members text[] NOT NULL COLLATE pg_catalog."C",
    CONSTRAINT member_lists_collection_check CHECK (((length(collection) >= 1) AND (length(collection) <= 64)))
);

CREATE TABLE public.memberships (
    collection public.slug NOT NULL,
    pubkey public.hex64 NOT NULL
);

CREATE TABLE public.profiles (
    id public.hex64 NOT NULL,
    seq bigint NOT NULL,
    pubkey public.hex64 NOT NULL,
    created_at bigint NOT NULL,
    name text NOT NULL,
    about text,
    picture text
);

CREATE VIEW public.readers AS
 SELECT collections.slug AS collection,
    collections.owner AS pubkey
   FROM public.collections
UNION
 SELECT memberships.collection,
    memberships.pubkey
   FROM public.memberships;

CREATE TABLE public.refusals (
    seq bigint NOT NULL,
    at timestamp with time zone NOT NULL,
    kind text NOT NULL,
    tool text NOT NULL,
    pubkey public.hex64,
    address text,
    count bigint DEFAULT 1 NOT NULL,
    CONSTRAINT refusals_count_check CHECK ((count > 0))
);

CREATE TABLE public.refusals_dropped (
    only_row boolean DEFAULT true NOT NULL,
    dropped bigint DEFAULT 0 NOT NULL,
    CONSTRAINT refusals_dropped_only_row_check CHECK (only_row)
);

CREATE TABLE public.refusals_kept (
    kind text NOT NULL,
    rows bigint NOT NULL,
    CONSTRAINT refusals_kept_rows_check CHECK ((rows >= 0))
);

ALTER TABLE public.refusals ALTER COLUMN seq ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.refusals_seq_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

CREATE TABLE public.relay_details (
    field text NOT NULL,
    value text NOT NULL,
    CONSTRAINT relay_details_field_check CHECK ((field = ANY (ARRAY['name'::text, 'description'::text]))),
    CONSTRAINT relay_details_value_check CHECK (((length(value) >= 1) AND (length(value) <= 1000)))
);

CREATE TABLE public.schema_migrations (
    version integer NOT NULL,
    name text NOT NULL,
    sha256 text NOT NULL,
    applied_at timestamp with time zone DEFAULT now() NOT NULL
);

CREATE TABLE public.terms_signatures (
    id public.hex64 NOT NULL,
    seq bigint NOT NULL,
    pubkey public.hex64 NOT NULL,
    version text NOT NULL,
    sha256 public.hex64 NOT NULL
);

CREATE TABLE public.tlog_checkpoints (
    collection text NOT NULL COLLATE pg_catalog."C",
    size bigint NOT NULL,
    root bytea NOT NULL,
    note text NOT NULL,
    signed_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT tlog_checkpoints_collection_check CHECK (((length(collection) >= 1) AND (length(collection) <= 64))),
    CONSTRAINT tlog_checkpoints_root_check CHECK ((length(root) = 32)),
    CONSTRAINT tlog_checkpoints_size_check CHECK ((size > 0))
);

CREATE TABLE public.tlog_cosignatures (
    collection text NOT NULL COLLATE pg_catalog."C",
    size bigint NOT NULL,
    witness text NOT NULL,
    signed_time bigint NOT NULL,
    line text NOT NULL,
    received_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT tlog_cosignatures_collection_check CHECK (((length(collection) >= 1) AND (length(collection) <= 64))),
    CONSTRAINT tlog_cosignatures_signed_time_check CHECK ((signed_time >= 0)),
    CONSTRAINT tlog_cosignatures_size_check CHECK ((size > 0))
);

CREATE TABLE public.tlog_leaves (
    collection text NOT NULL COLLATE pg_catalog."C",
    idx bigint NOT NULL,
    event_id bytea NOT NULL,
    CONSTRAINT tlog_leaves_collection_check CHECK (((length(collection) >= 1) AND (length(collection) <= 64))),
    CONSTRAINT tlog_leaves_event_id_check CHECK ((length(event_id) = 32)),
    CONSTRAINT tlog_leaves_idx_check CHECK ((idx >= 0))
);

CREATE TABLE public.tlog_nodes (
    collection text NOT NULL COLLATE pg_catalog."C",
    level smallint NOT NULL,
    idx bigint NOT NULL,
    hash bytea NOT NULL,
    CONSTRAINT tlog_nodes_collection_check CHECK (((length(collection) >= 1) AND (length(collection) <= 64))),
    CONSTRAINT tlog_nodes_hash_check CHECK ((length(hash) = 32)),
    CONSTRAINT tlog_nodes_idx_check CHECK ((idx >= 0)),
    CONSTRAINT tlog_nodes_level_check CHECK ((((level >= 4) AND (level <= 60)) AND (((level)::integer % 4) = 0)))
);

CREATE TABLE public.tlog_origin (
    one boolean DEFAULT true NOT NULL,
    host text NOT NULL,
    recorded_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT tlog_origin_host_check CHECK (((host <> ''::text) AND (host !~ '[[:space:]]'::text))),
    CONSTRAINT tlog_origin_one_check CHECK (one)
);

CREATE TABLE public.tlog_witness_state (
    collection text NOT NULL COLLATE pg_catalog."C",
    witness text NOT NULL,
    size bigint DEFAULT 0 NOT NULL,
    failures integer DEFAULT 0 NOT NULL,
    retry_at timestamp with time zone DEFAULT now() NOT NULL,
    last_error text,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT tlog_witness_state_collection_check CHECK (((length(collection) >= 1) AND (length(collection) <= 64))),
    CONSTRAINT tlog_witness_state_size_check CHECK ((size >= 0))
);

CREATE TABLE public.used_requests (
    id public.hex64 NOT NULL,
    created_at bigint NOT NULL,
    used_at timestamp with time zone DEFAULT now() NOT NULL
);

CREATE TABLE public.web_sessions (
    id_sha256 public.hex64 NOT NULL,
    pubkey public.hex64 NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    expires_at timestamp with time zone NOT NULL
);

CREATE TABLE public.witnessed_logs (
    origin text NOT NULL,
    origin_sha256 text NOT NULL,
    size bigint NOT NULL,
    root bytea NOT NULL,
    note text NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT witnessed_logs_root_check CHECK ((length(root) = 32)),
    CONSTRAINT witnessed_logs_size_check CHECK ((size >= 0))
);

ALTER TABLE ONLY public.approvals
    ADD CONSTRAINT approvals_pkey PRIMARY KEY (pubkey);

ALTER TABLE ONLY public.blocked_addresses
    ADD CONSTRAINT blocked_addresses_pkey PRIMARY KEY (address);

ALTER TABLE ONLY public.claim_counts
    ADD CONSTRAINT claim_counts_pkey PRIMARY KEY (claim_id, collection);

ALTER TABLE ONLY public.claim_keys
    ADD CONSTRAINT claim_keys_pkey PRIMARY KEY (claim_id, collection);

ALTER TABLE ONLY public.claims
    ADD CONSTRAINT claims_pkey PRIMARY KEY (id, collection);

ALTER TABLE ONLY public.collection_counts
    ADD CONSTRAINT collection_counts_pkey PRIMARY KEY (collection);

ALTER TABLE ONLY public.collections
    ADD CONSTRAINT collections_pkey PRIMARY KEY (slug);

ALTER TABLE ONLY public.contradiction_claims
    ADD CONSTRAINT contradiction_claims_pkey PRIMARY KEY (contradiction_id, claim_id, collection);

ALTER TABLE ONLY public.contradiction_search
    ADD CONSTRAINT contradiction_search_pkey PRIMARY KEY (contradiction_id, collection);

ALTER TABLE ONLY public.contradictions
    ADD CONSTRAINT contradictions_pkey PRIMARY KEY (id, collection);

ALTER TABLE ONLY public.current_member_lists
    ADD CONSTRAINT current_member_lists_pkey PRIMARY KEY (collection);

ALTER TABLE ONLY public.embedding_queue
    ADD CONSTRAINT embedding_queue_pkey PRIMARY KEY (event_id, collection);

ALTER TABLE ONLY public.embeddings
    ADD CONSTRAINT embeddings_pkey PRIMARY KEY (event_id, model, collection);

ALTER TABLE ONLY public.events
    ADD CONSTRAINT events_id_key UNIQUE (id, collection);

ALTER TABLE ONLY public.events
    ADD CONSTRAINT events_pkey PRIMARY KEY (collection, seq);

ALTER TABLE ONLY public.evidence
    ADD CONSTRAINT evidence_pkey PRIMARY KEY (id, collection);

ALTER TABLE ONLY public.link_anchors
    ADD CONSTRAINT link_anchors_pkey PRIMARY KEY (link_id, collection);

ALTER TABLE ONLY public.links
    ADD CONSTRAINT links_pkey PRIMARY KEY (id, collection);

ALTER TABLE ONLY public.login_nonces
    ADD CONSTRAINT login_nonces_pkey PRIMARY KEY (nonce);

ALTER TABLE ONLY public.member_changes
    ADD CONSTRAINT member_changes_pkey PRIMARY KEY (id, collection);

ALTER TABLE ONLY public.member_lists
    ADD CONSTRAINT member_lists_pkey PRIMARY KEY (id, collection);

ALTER TABLE ONLY public.memberships
    ADD CONSTRAINT memberships_pkey PRIMARY KEY (collection, pubkey);

ALTER TABLE ONLY public.profiles
    ADD CONSTRAINT profiles_pkey PRIMARY KEY (id);

ALTER TABLE ONLY public.refusals_dropped
    ADD CONSTRAINT refusals_dropped_pkey PRIMARY KEY (only_row);

ALTER TABLE ONLY public.refusals_kept
    ADD CONSTRAINT refusals_kept_pkey PRIMARY KEY (kind);

ALTER TABLE ONLY public.refusals
    ADD CONSTRAINT refusals_pkey PRIMARY KEY (seq);

ALTER TABLE ONLY public.relay_details
    ADD CONSTRAINT relay_details_pkey PRIMARY KEY (field);

ALTER TABLE ONLY public.schema_migrations
    ADD CONSTRAINT schema_migrations_pkey PRIMARY KEY (version);

ALTER TABLE ONLY public.terms_signatures
    ADD CONSTRAINT terms_signatures_pkey PRIMARY KEY (id);

ALTER TABLE ONLY public.tlog_checkpoints
    ADD CONSTRAINT tlog_checkpoints_pkey PRIMARY KEY (collection, size);

ALTER TABLE ONLY public.tlog_cosignatures
    ADD CONSTRAINT tlog_cosignatures_pkey PRIMARY KEY (collection, size, witness);

ALTER TABLE ONLY public.tlog_leaves
    ADD CONSTRAINT tlog_leaves_event_id_key UNIQUE (event_id, collection);

ALTER TABLE ONLY public.tlog_leaves
    ADD CONSTRAINT tlog_leaves_pkey PRIMARY KEY (collection, idx);

ALTER TABLE ONLY public.tlog_nodes
    ADD CONSTRAINT tlog_nodes_pkey PRIMARY KEY (collection, level, idx);

ALTER TABLE ONLY public.tlog_origin
    ADD CONSTRAINT tlog_origin_pkey PRIMARY KEY (one);

ALTER TABLE ONLY public.tlog_witness_state
    ADD CONSTRAINT tlog_witness_state_pkey PRIMARY KEY (collection, witness);

ALTER TABLE ONLY public.used_requests
    ADD CONSTRAINT used_requests_pkey PRIMARY KEY (id);

ALTER TABLE ONLY public.web_sessions
    ADD CONSTRAINT web_sessions_pkey PRIMARY KEY (id_sha256);

ALTER TABLE ONLY public.witnessed_logs
    ADD CONSTRAINT witnessed_logs_origin_sha256_key UNIQUE (origin_sha256);

ALTER TABLE ONLY public.witnessed_logs
    ADD CONSTRAINT witnessed_logs_pkey PRIMARY KEY (origin);

CREATE INDEX claim_counts_contested ON public.claim_counts USING btree (collection, ((rebuts + findings)) DESC, seq DESC, claim_id);

CREATE INDEX claim_counts_links ON public.claim_counts USING btree (collection, (((supports + qualifies) + rebuts)) DESC, seq DESC, claim_id);

CREATE INDEX claim_counts_unchallenged ON public.claim_counts USING btree (collection, ((rebuts + findings)), supports DESC, seq DESC, claim_id);

CREATE INDEX claim_counts_unsupported ON public.claim_counts USING btree (collection, supports, seq DESC, claim_id);

CREATE INDEX claim_keys_lookup ON public.claim_keys USING btree (collection, key);

CREATE INDEX claims_collection_seq ON public.claims USING btree (collection, seq);

CREATE INDEX claims_search ON public.claims USING gin (search);

CREATE INDEX collections_owner ON public.collections USING btree (owner);

CREATE INDEX contradiction_claims_claim ON public.contradiction_claims USING btree (collection, claim_id);

CREATE INDEX contradiction_search_collection_seq ON public.contradiction_search USING btree (collection, seq);

CREATE INDEX contradiction_search_search ON public.contradiction_search USING gin (search);

CREATE INDEX contradictions_collection_seq ON public.contradictions USING btree (collection, seq);

CREATE INDEX embedding_queue_collection_seq ON public.embedding_queue USING btree (collection, seq);

CREATE INDEX embedding_queue_seq ON public.embedding_queue USING btree (seq);

CREATE INDEX embeddings_collection ON public.embeddings USING btree (collection, kind, model);

CREATE INDEX events_collection_created_at ON public.events USING btree (collection, created_at, seq);

CREATE INDEX events_collection_kind ON public.events USING btree (collection, kind, seq) INCLUDE (created_at);

CREATE INDEX events_collection_pubkey ON public.events USING btree (collection, pubkey, seq) INCLUDE (kind, created_at);

CREATE INDEX events_negentropy ON public.events USING btree (collection, created_at, id) INCLUDE (kind);

CREATE INDEX events_seq ON public.events USING btree (seq) INCLUDE (collection, kind, created_at);

CREATE INDEX events_unscoped_pubkey ON public.events USING btree (pubkey, seq) WHERE (collection = '~unscoped'::text);

CREATE INDEX evidence_collection_seq ON public.evidence USING btree (collection, seq);

CREATE INDEX evidence_text_sha256 ON public.evidence USING btree (collection, public.tms_text_sha256(text));

CREATE INDEX evidence_url_md5 ON public.evidence USING btree (collection, md5(url)) WHERE (url IS NOT NULL);

CREATE INDEX link_anchors_without_context ON public.link_anchors USING btree (collection, link_id) WHERE (context_before IS NULL);

CREATE INDEX links_collection_from ON public.links USING btree (collection, from_id);

CREATE INDEX links_collection_seq ON public.links USING btree (collection, seq);

CREATE INDEX links_collection_to ON public.links USING btree (collection, to_id);

CREATE INDEX login_nonces_used_at ON public.login_nonces USING btree (used_at);

CREATE INDEX member_changes_collection ON public.member_changes USING btree (collection, seq);

CREATE INDEX member_lists_current ON public.member_lists USING btree (collection, created_at DESC, id);

CREATE INDEX memberships_pubkey ON public.memberships USING btree (pubkey);

CREATE INDEX profiles_current ON public.profiles USING btree (pubkey, created_at DESC, id);

CREATE INDEX refusals_at ON public.refusals USING btree (at, seq);

CREATE INDEX refusals_kind ON public.refusals USING btree (kind, seq);

CREATE INDEX refusals_pubkey ON public.refusals USING btree (pubkey, at, seq) WHERE (pubkey IS NOT NULL);

CREATE UNIQUE INDEX refusals_rate_limited ON public.refusals USING btree (at, tool, address, pubkey) NULLS NOT DISTINCT WHERE (kind = 'rate_limited'::text);

CREATE INDEX terms_signatures_pubkey ON public.terms_signatures USING btree (pubkey, version, sha256);

CREATE INDEX used_requests_created_at ON public.used_requests USING btree (created_at);

CREATE INDEX web_sessions_expires_at ON public.web_sessions USING btree (expires_at);

CREATE INDEX web_sessions_pubkey ON public.web_sessions USING btree (pubkey);

CREATE TRIGGER claims_append_only BEFORE DELETE OR UPDATE ON public.claims FOR EACH ROW EXECUTE FUNCTION public.tms_refuse_change();

CREATE TRIGGER claims_no_truncate BEFORE TRUNCATE ON public.claims FOR EACH STATEMENT EXECUTE FUNCTION public.tms_refuse_change();

CREATE TRIGGER collections_append_only BEFORE DELETE OR UPDATE ON public.collections FOR EACH ROW EXECUTE FUNCTION public.tms_refuse_change();

CREATE TRIGGER collections_no_truncate BEFORE TRUNCATE ON public.collections FOR EACH STATEMENT EXECUTE FUNCTION public.tms_refuse_change();

CREATE TRIGGER contradiction_claims_append_only BEFORE DELETE OR UPDATE ON public.contradiction_claims FOR EACH ROW EXECUTE FUNCTION public.tms_refuse_change();

CREATE TRIGGER contradiction_claims_no_truncate BEFORE TRUNCATE ON public.contradiction_claims FOR EACH STATEMENT EXECUTE FUNCTION public.tms_refuse_change();

CREATE TRIGGER contradictions_append_only BEFORE DELETE OR UPDATE ON public.contradictions FOR EACH ROW EXECUTE FUNCTION public.tms_refuse_change();

CREATE TRIGGER contradictions_no_truncate BEFORE TRUNCATE ON public.contradictions FOR EACH STATEMENT EXECUTE FUNCTION public.tms_refuse_change();

CREATE TRIGGER events_append_only BEFORE DELETE OR UPDATE ON public.events FOR EACH ROW EXECUTE FUNCTION public.tms_refuse_change();

CREATE TRIGGER events_no_truncate BEFORE TRUNCATE ON public.events FOR EACH STATEMENT EXECUTE FUNCTION public.tms_refuse_change();

CREATE TRIGGER evidence_append_only BEFORE DELETE OR UPDATE ON public.evidence FOR EACH ROW EXECUTE FUNCTION public.tms_refuse_change();

CREATE TRIGGER evidence_no_truncate BEFORE TRUNCATE ON public.evidence FOR EACH STATEMENT EXECUTE FUNCTION public.tms_refuse_change();

CREATE TRIGGER links_append_only BEFORE DELETE OR UPDATE ON public.links FOR EACH ROW EXECUTE FUNCTION public.tms_refuse_change();

CREATE TRIGGER links_no_truncate BEFORE TRUNCATE ON public.links FOR EACH STATEMENT EXECUTE FUNCTION public.tms_refuse_change();

CREATE TRIGGER member_changes_append_only BEFORE DELETE OR UPDATE ON public.member_changes FOR EACH ROW EXECUTE FUNCTION public.tms_refuse_change();

CREATE TRIGGER member_changes_no_truncate BEFORE TRUNCATE ON public.member_changes FOR EACH STATEMENT EXECUTE FUNCTION public.tms_refuse_change();

CREATE TRIGGER member_lists_append_only BEFORE DELETE OR UPDATE ON public.member_lists FOR EACH ROW EXECUTE FUNCTION public.tms_refuse_change();

CREATE TRIGGER member_lists_no_truncate BEFORE TRUNCATE ON public.member_lists FOR EACH STATEMENT EXECUTE FUNCTION public.tms_refuse_change();

CREATE TRIGGER profiles_append_only BEFORE DELETE OR UPDATE ON public.profiles FOR EACH ROW EXECUTE FUNCTION public.tms_refuse_change();

CREATE TRIGGER profiles_no_truncate BEFORE TRUNCATE ON public.profiles FOR EACH STATEMENT EXECUTE FUNCTION public.tms_refuse_change();

CREATE TRIGGER terms_signatures_append_only BEFORE DELETE OR UPDATE ON public.terms_signatures FOR EACH ROW EXECUTE FUNCTION public.tms_refuse_change();

CREATE TRIGGER terms_signatures_no_truncate BEFORE TRUNCATE ON public.terms_signatures FOR EACH STATEMENT EXECUTE FUNCTION public.tms_refuse_change();

CREATE TRIGGER tlog_checkpoints_append_only BEFORE DELETE OR UPDATE ON public.tlog_checkpoints FOR EACH ROW EXECUTE FUNCTION public.tms_refuse_change();

CREATE TRIGGER tlog_checkpoints_no_truncate BEFORE TRUNCATE ON public.tlog_checkpoints FOR EACH STATEMENT EXECUTE FUNCTION public.tms_refuse_change();

CREATE TRIGGER tlog_cosignatures_append_only BEFORE DELETE OR UPDATE ON public.tlog_cosignatures FOR EACH ROW EXECUTE FUNCTION public.tms_refuse_change();

CREATE TRIGGER tlog_cosignatures_no_truncate BEFORE TRUNCATE ON public.tlog_cosignatures FOR EACH STATEMENT EXECUTE FUNCTION public.tms_refuse_change();

CREATE TRIGGER tlog_leaves_append_only BEFORE DELETE OR UPDATE ON public.tlog_leaves FOR EACH ROW EXECUTE FUNCTION public.tms_refuse_change();

CREATE TRIGGER tlog_leaves_no_truncate BEFORE TRUNCATE ON public.tlog_leaves FOR EACH STATEMENT EXECUTE FUNCTION public.tms_refuse_change();

CREATE TRIGGER tlog_nodes_append_only BEFORE DELETE OR UPDATE ON public.tlog_nodes FOR EACH ROW EXECUTE FUNCTION public.tms_refuse_change();

CREATE TRIGGER tlog_nodes_no_truncate BEFORE TRUNCATE ON public.tlog_nodes FOR EACH STATEMENT EXECUTE FUNCTION public.tms_refuse_change();

CREATE TRIGGER tlog_origin_append_only BEFORE DELETE OR UPDATE ON public.tlog_origin FOR EACH ROW EXECUTE FUNCTION public.tms_refuse_change();

CREATE TRIGGER tlog_origin_no_truncate BEFORE TRUNCATE ON public.tlog_origin FOR EACH STATEMENT EXECUTE FUNCTION public.tms_refuse_change();
