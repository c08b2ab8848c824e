-- Membership changes (NIP-86 `allowpubkey` / `unallowpubkey` on a collection's relay URL): each
-- is the NIP-98 event (kind 27235) the owner signed for the call, stored in `events` like every
-- entry of the collection's log, and here with the JSON-RPC body its `payload` tag hashes and
-- the change it makes. Folded with the member lists (kind 4705) in log order into `memberships`
-- and `current_member_lists` (whose `list_id` is then the last record that applied, list or
-- change): tms/rules/membership.py, docs/architecture.md "Membership records".
-- (`collection` is plain text, as sql/015 made it for every table Citus co-locates with events.)
CREATE TABLE member_changes (
    id          hex64 NOT NULL,
    seq         bigint NOT NULL,
    collection  text COLLATE "C" NOT NULL CHECK (length(collection) BETWEEN 1 AND 64),
    pubkey      hex64 NOT NULL,   -- the signer: the collection's owner
    created_at  bigint NOT NULL,
    method      text NOT NULL CHECK (method IN ('allowpubkey', 'unallowpubkey')),
    target      hex64 NOT NULL,   -- the key allowed or unallowed
    body        text NOT NULL,    -- the request body exactly as signed (by its SHA-256)
    PRIMARY KEY (id, collection)
);
CREATE INDEX member_changes_collection ON member_changes (collection, seq);

DO $$
BEGIN
    CREATE TRIGGER member_changes_append_only BEFORE UPDATE OR DELETE ON member_changes
        FOR EACH ROW EXECUTE FUNCTION tms_refuse_change();
    CREATE TRIGGER member_changes_no_truncate BEFORE TRUNCATE ON member_changes
        FOR EACH STATEMENT EXECUTE FUNCTION tms_refuse_change();
END
$$;

-- Not ledger: what the operator sets over NIP-86 on the root relay URL (TMS_OPERATOR_KEYS,
-- tms/relay/operator.py), which may change. The client addresses refused at the gate
-- (`blockip`): an address or a network in CIDR notation, as `TMS_TRUSTED_PROXIES` writes one.
CREATE TABLE blocked_addresses (
    address     text COLLATE "C" PRIMARY KEY CHECK (length(address) BETWEEN 1 AND 64),
    reason      text NOT NULL DEFAULT '' CHECK (length(reason) <= 1000),
    blocked_at  timestamptz NOT NULL DEFAULT now()
);
-- The root relay's NIP-11 name and description (`changerelayname`, `changerelaydescription`).
CREATE TABLE relay_details (
    field       text PRIMARY KEY CHECK (field IN ('name', 'description')),
    value       text NOT NULL CHECK (length(value) BETWEEN 1 AND 1000)
);
