-- Anchors: where each link's quote sits in its evidence, as the W3C Web Annotation selectors say
-- it (TextPositionSelector `start`/`end`, TextQuoteSelector `exact`/`prefix`/`suffix`), plus how
-- many times the normalized quote occurs. Offsets count code points of the evidence text as
-- signed, never of its normalized form. Computed by the server (tms.rules.anchors) from the
-- link's quote and its evidence's text; the signed events never change.
--
-- Not ledger, although a new link's anchor is written in the transaction that stores the link.
-- Why a table of its own, and not a column added to `links`:
-- * `links` refuses UPDATE (sql/001), so the links stored before this migration could never get
--   theirs in such a column: their anchors would live in a second table, and every read would
--   look in two places. One table holds them all, the way `embeddings` holds vectors.
-- * An anchor is derived, not signed: should the way offsets are counted ever change, its rows
--   may be deleted and are computed again (at start-up, tms.ledger.anchors fills in every link
--   that has none: the one-off back-fill of the links stored before this migration).
CREATE TABLE link_anchors (
    link_id      hex64 PRIMARY KEY,
    collection   slug NOT NULL,
    start_offset integer NOT NULL CHECK (start_offset >= 0),
    end_offset   integer NOT NULL CHECK (end_offset >= start_offset),
    exact        text NOT NULL,
    prefix       text NOT NULL,
    suffix       text NOT NULL,
    occurrences  integer NOT NULL CHECK (occurrences >= 1)
);
