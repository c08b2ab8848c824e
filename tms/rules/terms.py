"""The terms every key signs (kind 4706) before its first write.

The text ships with the package; its sha256 is computed from the exact bytes, so the hash a
signer commits to is the hash of the text they were shown.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import cache
from importlib.resources import files
from typing import Final

TERMS_VERSION: Final = "1"


@dataclass(frozen=True, slots=True)
class Terms:
    version: str
    sha256: str
    text: str

    def to_dict(self) -> dict[str, str]:
        return {"version": self.version, "sha256": self.sha256, "text": self.text}


@cache
def current_terms() -> Terms:
    data = files("tms.rules").joinpath("terms.txt").read_bytes()
    return Terms(TERMS_VERSION, hashlib.sha256(data).hexdigest(), data.decode("utf-8"))
