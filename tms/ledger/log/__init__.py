"""Each collection's transparency log as the ledger keeps it: extended at publish, read as
checkpoints, proofs and tiles, and cosigned by witnesses."""
