"""The extension surface stays what docs/extending.md promises: its public names are exactly
`tms.extension.__all__`, each documented; its version is semver; and the example plugins
import nothing from TMS but `tms.extension`, and only its public names (read from their source,
so that a plugin cannot lean on the core's internals without this failing)."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path
from typing import Final

import tms_example_plugins

import tms.extension

ROOT: Final = Path(__file__).resolve().parents[2]
EXTENDING: Final = ROOT / "docs" / "extending.md"
EXAMPLES: Final = sorted(Path(tms_example_plugins.__file__).parent.glob("*.py"))

# The promise of API 1.0.0: removing or renaming one of these is a major version.
PUBLIC: Final = {
    "ACCEPT",
    "API_VERSION",
    "SHADOW_REJECT",
    "Action",
    "AfterCommit",
    "Auth",
    "Caller",
    "Committed",
    "Door",
    "Event",
    "Origin",
    "Plugin",
    "PluginError",
    "PluginFactory",
    "Prompt",
    "PromptArgument",
    "Read",
    "ReadFilter",
    "Refused",
    "Route",
    "RouteHandler",
    "Tool",
    "ToolHandler",
    "Verdict",
    "WritePolicy",
    "reject",
}


def test_the_public_names_are_the_promised_ones_each_documented() -> None:
    assert set(tms.extension.__all__) == PUBLIC
    assert all(hasattr(tms.extension, name) for name in PUBLIC)
    documented = EXTENDING.read_text("utf-8").split("## Every public name", 1)[1]
    for name in PUBLIC:
        assert f"`{name}`" in documented, name


def test_the_version_is_semver_and_the_one_documented() -> None:
    version = tms.extension.API_VERSION
    assert re.fullmatch(r"(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)", version)
    assert f"now **{version}**" in EXTENDING.read_text("utf-8")


def tms_imports(path: Path) -> list[tuple[str, list[str]]]:
    """Every import of a `tms` module in a source file: the module and the names taken."""
    found = []
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "tms":
                    found.append((alias.name, []))
        elif (
            isinstance(node, ast.ImportFrom)
            and node.level == 0
            and (node.module or "").split(".")[0] == "tms"
        ):
            found.append((str(node.module), [alias.name for alias in node.names]))
    return found


def test_the_example_plugins_import_only_the_public_surface() -> None:
    assert {path.name for path in EXAMPLES} >= {"allowlist.py", "notify.py"}
    for path in EXAMPLES:
        source = path.read_text("utf-8")
        assert "importlib" not in source and "__import__" not in source, path.name
        for module, names in tms_imports(path):
            assert module == "tms.extension", (path.name, module)
            assert set(names) <= PUBLIC, (path.name, set(names) - PUBLIC)
        assert path.name == "__init__.py" or tms_imports(path), path.name


def test_the_checker_sees_a_forbidden_import(tmp_path: Path) -> None:
    sneaky = tmp_path / "sneaky.py"
    sneaky.write_text("import tms.ledger.service\nfrom tms.extension.loading import x\n")
    assert tms_imports(sneaky) == [
        ("tms.ledger.service", []),
        ("tms.extension.loading", ["x"]),
    ]


def test_importing_the_surface_loads_no_door_database_or_ledger() -> None:
    """A plugin module costs its server no more than the surface: `tms.extension` is its own
    vocabulary and pulls in nothing else of TMS, never the ledger, the store, the doors, the
    core's classes or the plugins' machinery (`tms.plugins`)."""
    code = (
        "import sys, tms.extension, tms_example_plugins.allowlist, tms_example_plugins.notify\n"
        "print('\\n'.join(sorted(m for m in sys.modules if m.startswith('tms'))))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split()
    assert [module for module in loaded if module.startswith("tms.")] == [
        "tms.extension",
        "tms.extension.api",
    ]
