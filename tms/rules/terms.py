"""The terms every key signs (kind 4706) before its first write.

The text ships with the package; its sha256 is computed from the exact bytes, so the hash a
signer commits to is the hash of the text they were shown.
"""

from __future__ import annotations

import hashlib
from functools import cache
from importlib.resources import files
from typing import Final

from tms.results import TermsInfo

TERMS_VERSION: Final = "1"


@cache
def current_terms() -> TermsInfo:
    data = files("tms.rules").joinpath("terms.txt").read_bytes()
    return {
        "version": TERMS_VERSION,
        "sha256": hashlib.sha256(data).hexdigest(),
        "text": data.decode("utf-8"),
    }
