"""The core vocabulary of TMS, named once.

Plain aliases rather than NewTypes: values arrive from JSON and flow straight through, and the
names exist so signatures say what a string means.
"""

from typing import Final

EventId = str  # 64 lowercase hex characters: sha256 of the NIP-01 serialization
PubKey = str  # 64 lowercase hex characters: BIP-340 x-only public key
Sig = str  # 128 lowercase hex characters: BIP-340 Schnorr signature
Kind = int
Slug = str  # a collection's name: 1-64 of [a-z0-9_-]

# The `collection` the ledger files profiles and terms under (they belong to none): a value no
# slug can take, so that the column is never NULL and Citus can place them (sql/015).
UNSCOPED: Final = "~unscoped"

KIND_PROFILE: Final = 0
KIND_EVIDENCE: Final = 4701
KIND_CLAIM: Final = 4702
KIND_LINK: Final = 4703
KIND_CONTRADICTION: Final = 4704
KIND_MEMBERS: Final = 4705
KIND_TERMS: Final = 4706
KIND_REQUEST: Final = 4707
# NIP-98 HTTP auth: kept in a collection's log as a membership change (NIP-86), with its body.
KIND_MEMBER_CHANGE: Final = 27235
# NIP-43's join (with an invite code) and leave requests, signed by the joining or leaving key:
# kept in a collection's log with the NIP-42 AUTH event that ties them to its relay.
KIND_JOIN: Final = 28934
KIND_LEAVE: Final = 28936

MAX_CONTENT_CHARS: Final = 2_000_000
# SPEC's `limit` arguments (at least 1) and search texts of the tools and the pages. The relay
# speaks NIP-01, whose filters carry limits of their own (`tms.relay.limits`: a filter's `limit`
# up to 1,000, the relay's answers bounded there).
MAX_LIMIT: Final = 200
MAX_EVIDENCE_LIMIT: Final = 500
MAX_LINKS_LIMIT: Final = 1000
MAX_QUERY_CHARS: Final = 10_000
MAX_FUTURE_SECONDS: Final = 15 * 60  # a stored event may be this far ahead of server time
