"""The relay door: every collection is a Nostr relay (NIP-01, 11, 42, 45, 50) at `/c/<slug>`, and
the root `/` is one relay over every collection the authenticated key reads."""
