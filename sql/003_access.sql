-- Who may read a collection: its owner (for good) and the keys on its current member list.
-- This view is the one place the rule is written in SQL; tms/ledger/access.py is the one place
-- in Python that asks it, and every door (MCP tools, the HTTP export, the pages) goes through
-- that module. A filter on either column is pushed into both branches, so a look-up is two
-- index probes (collections_owner or the primary key, memberships' primary key or its pubkey
-- index).
CREATE VIEW readers AS
    SELECT slug AS collection, owner AS pubkey FROM collections
    UNION
    SELECT collection, pubkey FROM memberships;
