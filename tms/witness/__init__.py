"""Witnesses (C2SP tlog-witness): this server submits its collections' checkpoints to the
witnesses its policy names (`submit`), keeps their cosignatures (`cosigned`), and witnesses
other logs itself (`state`, `routes`), as `settings` configures."""
