-- NIP-77 (negentropy) reconciles a set of (created_at, id) items: the relay builds the list of
-- the events a filter matches, once per NEG-OPEN (tms.ledger.negentropy_items). This index
-- holds exactly those columns, in the protocol's order, per collection, with the kind a filter
-- usually names: the list is read from it alone (an index-only scan once the table is
-- vacuumed), never from the rows and their contents, and arrives sorted.
CREATE INDEX events_negentropy ON events (collection, created_at, id) INCLUDE (kind);
