-- NIP-43's invites, joins and leaves, kept as membership records beside the NIP-86 changes
-- (sql/025; tms/rules/membership.py, docs/architecture.md "Membership records"):
-- - an invite is a NIP-86 call the owner signed, method `createinvite`, `target` the SHA-256 of
--   its single-use code (never the code);
-- - a join (kind 28934) is signed by the joining key (`pubkey`, and `target`), `claim` the
--   SHA-256 of its code: the invite it used up; `body` the joiner's NIP-42 AUTH event naming
--   the collection's relay;
-- - a leave (kind 28936) is signed by the leaving key (`pubkey`, and `target`), `body` its AUTH
--   event.
ALTER TABLE member_changes DROP CONSTRAINT member_changes_method_check;
ALTER TABLE member_changes ADD CONSTRAINT member_changes_method_check
    CHECK (method IN ('allowpubkey', 'unallowpubkey', 'createinvite', 'join', 'leave'));
ALTER TABLE member_changes ADD COLUMN claim hex64;
ALTER TABLE member_changes ADD CONSTRAINT member_changes_claim_check
    CHECK ((method = 'join') = (claim IS NOT NULL));
