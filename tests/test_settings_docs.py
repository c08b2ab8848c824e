"""Each setting is declared once, on its settings field (`tms.envvars.setting`), and
docs/operating.md's settings tables say what the declarations say: every declared variable has a
row, whose default is the declared one; and tms/config.py reads no variable it does not declare."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Final

import pytest

from tms.config import RATES, EmbeddingConfig, Settings
from tms.envvars import declared

ROOT: Final = Path(__file__).resolve().parents[1]
OPERATING: Final = ROOT / "docs" / "operating.md"
CONFIG: Final = ROOT / "tms" / "config.py"


def _shown(default: Any) -> str:
    """A default as the settings tables write it."""
    if default is None:
        return "unset"
    if default == ():
        return "empty"
    if isinstance(default, tuple):
        return f"`{','.join(default)}`"
    if isinstance(default, float):
        return f"`{default:g}`"
    return f"`{default}`"


def _documented() -> dict[str, str]:
    """Each variable in the settings tables, with the default its row gives it."""
    rows: dict[str, str] = {}
    for line in OPERATING.read_text("utf-8").splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) < 3 or not cells[0].startswith("`TMS_"):
            continue
        names = re.findall(r"`(TMS_[A-Z_]+)`", cells[0])
        defaults = cells[1].split(", ") if len(names) > 1 else [cells[1]]
        rows.update(zip(names, defaults, strict=True))
    return rows


def _declared() -> dict[str, str]:
    """Each declared variable, with the default the tables must show."""
    settings = [*declared(Settings), *declared(EmbeddingConfig)]
    shown = {d.variable: d.shown or _shown(d.default) for d in settings}
    shown.update({variable: _shown(default) for variable, default in RATES.values()})
    return shown


@pytest.mark.parametrize("variable", sorted(_declared()))
def test_every_declared_setting_has_its_row_and_its_default(variable: str) -> None:
    documented = _documented()
    assert variable in documented, f"{variable} is not in docs/operating.md's settings tables"
    assert documented[variable] == _declared()[variable]


def test_the_settings_read_only_what_they_declare() -> None:
    read = set(re.findall(r'"(TMS_[A-Z_]+)"', CONFIG.read_text("utf-8")))
    assert len(_declared()) > 40, "the declarations are not found"
    assert read <= set(_declared()), sorted(read - set(_declared()))
