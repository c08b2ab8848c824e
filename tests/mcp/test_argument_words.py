"""A tool's arguments over their limits are refused in SPEC's words for limits, not pydantic's."""

from __future__ import annotations

import pytest

from tms.mcp.tools import TOOLS, ToolError, parse_args
from tms.types import MAX_QUERY_CHARS


def test_a_search_text_over_its_limit_says_how_long_it_may_be() -> None:
    with pytest.raises(ToolError) as caught:
        parse_args(
            TOOLS["search_claims"], {"collection": "lab", "text": "x" * (MAX_QUERY_CHARS + 1)}
        )
    assert str(caught.value) == (
        "field 'text' is invalid in search_claims args: longer than 10,000 characters"
    )
    assert "items after validation" not in str(caught.value)
    parse_args(TOOLS["search_claims"], {"collection": "lab", "text": "x" * MAX_QUERY_CHARS})
