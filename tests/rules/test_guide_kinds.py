"""The guide's table of kinds (`/docs`, "Events") against the registry, `tms.rules.kinds.KINDS`:
every kind there is, under its number and name, with exactly its content fields, those marked
`?` optional and the others required. A kind added, renamed or given a field shows here."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Final

from tms.rules.kinds import KINDS

GUIDE: Final = Path(__file__).resolve().parents[2] / "tms" / "pages" / "templates" / "docs.md"


def guide_kinds() -> dict[int, tuple[str, dict[str, bool]]]:
    """Each row of the table: number -> (name, {field: required})."""
    text = GUIDE.read_text("utf-8")
    section = text.split("\n### Events\n", 1)[1].split("\n### ", 1)[0]
    rows: dict[int, tuple[str, dict[str, bool]]] = {}
    for number, name, fields in re.findall(
        r"^\| (\d+) \| (\w+) \| (.*) \|$", section, re.MULTILINE
    ):
        named = re.sub(r"\([^()]*\)", "", fields)  # what a field's parenthesis says of it
        named = re.sub(r' = `"[^`]*"`', "", named)  # the value a field must hold
        found = {field: not optional for field, optional in re.findall(r"`(\w+)`(\??)", named)}
        rows[int(number)] = (name, found)
    return rows


def registry_kinds() -> dict[int, tuple[str, dict[str, bool]]]:
    return {
        kind.number: (
            kind.name,
            {
                (field.alias or field_name): field.is_required()
                for field_name, field in kind.model.model_fields.items()
            },
        )
        for kind in KINDS.values()
    }


def test_the_guides_kinds_table_is_the_registry() -> None:
    table = guide_kinds()
    assert len(table) >= 8, "the table was not found where the guide keeps it"
    assert table == registry_kinds()
