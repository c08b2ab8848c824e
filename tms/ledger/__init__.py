"""The ledger's front door: what the doors may use of it (the pages' and the HTTP API's reads
and names below); the modules under `read`, `write` and `log` are its insides."""

from tms.ledger.log.reads import LogReads
from tms.ledger.read import watermark
from tms.ledger.read.excerpts import ShownLink
from tms.ledger.read.export import Exporter
from tms.ledger.read.lookups import Found, Lookups
from tms.ledger.read.reads import CLAIM_SORTS, DEFAULT_WINDOW, Reads

__all__ = [
    "CLAIM_SORTS",
    "DEFAULT_WINDOW",
    "Exporter",
    "Found",
    "LogReads",
    "Lookups",
    "Reads",
    "ShownLink",
    "watermark",
]
