-- Each evidence text's length in characters, stored beside it when it is inserted, so that
-- listing evidence (`list_evidence`, the collection page) never reads the texts themselves: a
-- page of 50 two-million-character documents took 200 ms, decompressing 100 MB to count them.
--
-- A generated column: PostgreSQL computes it from `text` on insert, so the signed content
-- and the publish path are unchanged; adding it rewrites the table once (no row triggers fire,
-- so the append-only guard of sql/001 is not involved).
ALTER TABLE evidence ADD COLUMN chars integer GENERATED ALWAYS AS (char_length(text)) STORED;
