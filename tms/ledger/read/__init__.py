"""The read path: every read the doors make, each with a capability (`tms.ledger.access`), and the
commit feed that hands the relay what committed."""
