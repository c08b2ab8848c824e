-- What the submit page looks up before anything is signed (tms.ledger.lookups): whether the
-- evidence text or URL it is about to sign is already evidence in the collection, and whether
-- a claim it is about to sign already exists there. In an append-only ledger a duplicate is
-- forever, so the page warns first and offers the stored record instead.
--
-- Evidence texts hold up to 2,000,000 characters: the page sends the sha256 of the exact text
-- (UTF-8), and an index over the stored texts' sha256 answers without reading any text.
-- convert_to is only STABLE (in general it depends on the database's encoding, which never
-- changes for a database), so the hash is wrapped in a function declared IMMUTABLE, as an
-- index expression must be; queries name the same function, so the index serves them.

CREATE FUNCTION tms_text_sha256(value text) RETURNS bytea
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    RETURN sha256(convert_to(value, 'UTF8'));

-- Building these reads every stored text once; later, each insert hashes its own text.
CREATE INDEX evidence_text_sha256 ON evidence (collection, tms_text_sha256(text));
-- A URL may be longer than a B-tree entry may be: its md5 is indexed, the URL compared after.
CREATE INDEX evidence_url_md5 ON evidence (collection, md5(url)) WHERE url IS NOT NULL;

-- Not ledger: each claim's text as quote matching normalizes it (case, whitespace, quotation
-- marks, dashes, soft hyphens, ligatures: tms.rules.quotes), hashed. Python computes it, in the
-- publish that stores the claim; claims stored before this table existed get theirs from a
-- back-fill at start-up (tms.ledger.lookups.backfill). Derived, so it may be rebuilt.
CREATE TABLE claim_keys (
    claim_id    hex64 PRIMARY KEY,
    collection  slug NOT NULL,
    key         bytea NOT NULL CHECK (length(key) = 32)
);
CREATE INDEX claim_keys_lookup ON claim_keys (collection, key);
