"""Shared helpers for the test suite: real keys, real signatures, no fakes."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tms.events import Event, SecretKey


def sign(
    key: SecretKey,
    kind: int,
    content: dict[str, Any] | str,
    created_at: int = 1_790_000_000,
    tags: list[list[str]] | None = None,
) -> Event:
    text = content if isinstance(content, str) else json.dumps(content, separators=(",", ":"))
    return key.sign(kind, text, created_at, tags or [])


@pytest.fixture(scope="session")
def key() -> SecretKey:
    return SecretKey.generate()
