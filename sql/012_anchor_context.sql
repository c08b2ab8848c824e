-- Each anchor's context: up to a few hundred characters of the evidence before and after the
-- quoted passage (tms.rules.anchors.CONTEXT_WINDOW_CHARS), stored with the anchor so that a page
-- showing quotes in context reads a bounded row per link and never an evidence text.
--
-- Why stored, and not read with substr() around the anchor at each view: PostgreSQL cannot
-- start a substring of a UTF-8 text at a character offset without decompressing (or fetching
-- every TOAST chunk of) the text up to that offset, so a window near the end of a 2,000,000
-- character document cost 8 ms (prose) to 28 ms (text of multi-byte characters) per link, and a
-- claim page quoting 200 such documents 1.6 to 5.7 s, whatever its memory. Stored, a window
-- costs what the few hundred characters cost.
--
-- Computed where the anchor is (the publish that stores the link has the text in hand). Rows
-- anchored before this migration have NULL here until the start-up back-fill
-- (tms.ledger.anchors) reads their evidence once and fills them in; pages meanwhile show those
-- quotes without context. Not ledger: derived from the signed text, recomputable.
ALTER TABLE link_anchors
    ADD COLUMN context_before text,
    ADD COLUMN context_after text,
    ADD CONSTRAINT link_anchors_context_whole
        CHECK ((context_before IS NULL) = (context_after IS NULL));

-- The back-fill's look-up: anchors still waiting for their context (few, then none).
CREATE INDEX link_anchors_without_context ON link_anchors (collection, link_id)
    WHERE context_before IS NULL;
