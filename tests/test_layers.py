"""The ledger's front door (issue 35.1): a door (the relay, the pages, the HTTP API, MCP, the
CLI, the witness) and the member's client (the mirror) use what `tms.ledger` and `tms.services`
export, and never reach below them: not into the ledger's modules (`tms.ledger.read`, `.write`,
`.log`, ...) nor into the store. Read from each file's syntax tree, so an import inside a
function or under `TYPE_CHECKING` counts as much as one at the top."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import pytest

ROOT: Final = Path(__file__).resolve().parents[1]
TMS: Final = ROOT / "tms"

# The doors, and the member's client: the mirror speaks to servers over HTTP and the relay
# protocol, so it has even less business with the ledger's insides than a door.
DOORS: Final = ("relay", "pages", "api", "mcp", "cli", "witness", "mirror")


def below(name: str) -> bool:
    """A module under the ledger's front door, or the store."""
    return name.startswith("tms.ledger.") or name == "tms.store" or name.startswith("tms.store.")


def is_module(name: str) -> bool:
    """A module or package of this tree (`from tms.ledger import read` imports one; `from
    tms.ledger import Ledger`, a name the package hands on, does not)."""
    path = ROOT.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or path.is_dir()


def imported(tree: ast.Module, module: str) -> Iterator[tuple[int, str]]:
    """Every module a file's code names in an import, with its line: `import a.b` names a.b;
    `from a.b import c` names a.b, and a.b.c where c is a module; a relative import is read
    from `module`, the file's own dotted name."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = module.split(".")[: -node.level]
                base = ".".join([*package, base] if base else package)
            yield node.lineno, base
            for alias in node.names:
                if is_module(f"{base}.{alias.name}"):
                    yield node.lineno, f"{base}.{alias.name}"


def reaching_below(package: Path) -> list[str]:
    """Each import under `package` that reaches below the front door, as `path:line module`."""
    found = []
    for path in sorted(package.rglob("*.py")):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        for line, name in imported(ast.parse(path.read_text("utf-8")), module):
            if below(name):
                found.append(f"{path.relative_to(ROOT)}:{line} {name}")
    return sorted(set(found))


@pytest.mark.parametrize("door", DOORS)
def test_a_door_uses_only_the_ledgers_front_door(door: str) -> None:
    assert reaching_below(TMS / door) == []


def test_the_doors_are_there() -> None:
    """A door renamed away would pass the rule by being looked for nowhere."""
    assert set(DOORS) <= {path.name for path in TMS.iterdir() if path.is_dir()}


def test_the_rule_sees_every_way_of_reaching_below(tmp_path: Path) -> None:
    door = tmp_path / "door"
    door.mkdir()
    (door / "fine.py").write_text(
        "from tms.ledger import Ledger\nfrom tms.services import Services\nimport tms.ledger\n"
    )
    (door / "below.py").write_text(
        "from tms.ledger.read import x\n"
        "import tms.store.pool\n"
        "from tms import store\n"
        "from tms.ledger import read\n"
        "def later() -> None:\n"
        "    from tms.ledger.write.commits import Turn\n"
        "    import tms.ledger.log.reads as reads\n"
    )
    module = "tms.relay.below"
    names = {name for _, name in imported(ast.parse((door / "below.py").read_text()), module)}
    assert {name for name in names if below(name)} == {
        "tms.ledger.read",
        "tms.store.pool",
        "tms.store",
        "tms.ledger.write.commits",
        "tms.ledger.log.reads",
    }
    fine = ast.parse((door / "fine.py").read_text())
    assert not [name for _, name in imported(fine, "tms.relay.fine") if below(name)]
    relative = ast.parse("from ..ledger.read import feed\nfrom .. import store\n")
    assert {name for _, name in imported(relative, "tms.relay.shared")} >= {
        "tms.ledger.read.feed",
        "tms.store",
    }
