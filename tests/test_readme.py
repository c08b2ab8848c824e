"""The README stays true to the code: every `TMS_*` setting the code reads is in its settings
table, and every `tms` command is shown there."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

from tms.cli.main import main

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text("utf-8")


def test_every_setting_the_code_reads_is_in_the_settings_table() -> None:
    code = "\n".join(path.read_text("utf-8") for path in (ROOT / "tms").rglob("*.py"))
    read = set(re.findall(r'"(TMS_[A-Z_]+)"', code))
    first_cells = re.findall(r"^\| ([^|]*`TMS_[^|]*)\|", README, re.MULTILINE)
    table = {name for cell in first_cells for name in re.findall(r"`(TMS_[A-Z_]+)`", cell)}
    assert read, "no settings found: the pattern is stale"
    assert read <= table, sorted(read - table)


def test_every_command_is_shown() -> None:
    commands = re.findall(r"^    (\w[\w-]*)\s", _help(), re.MULTILINE)
    assert "refusals" in commands and "serve" in commands
    for command in commands:
        assert f"tms {command}" in README, command


def _help() -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
        main(["--help"])
    return out.getvalue()
