"""The extension surface's signatures, held against `surface.snapshot` beside this file, so that
a change to what plugins are promised fails CI until it is made on purpose.

Every public name of `tms.extension` is described in a line or a few: a dataclass by its
constructor, an enum by its members, a class by its public methods and properties, a callable
type by what it takes and returns, a value by its repr. A pull request that changes the surface
fails here and says what kind of change it is: a name or a line only added is a minor version
(`API_VERSION`), one removed or changed a major one. Once the version says so, the snapshot is
written again, `uv run python tests/extension/test_surface_snapshot.py`, and the diff of the
snapshot is what review reads.
"""

from __future__ import annotations

import dataclasses
import enum
import inspect
import re
import sys
from pathlib import Path
from typing import Any, Final

import tms.extension

SNAPSHOT: Final = Path(__file__).with_name("surface.snapshot")
MODULE_PREFIX: Final = re.compile(r"\b(?:tms\.extension\.api|collections\.abc|typing)\.")


def _plain(text: str) -> str:
    """A type as the surface spells it, without the modules it happens to live in."""
    return MODULE_PREFIX.sub("", text)


def _members(cls: type) -> list[str]:
    lines = []
    for name, member in sorted(vars(cls).items()):
        if name.startswith("_") and name != "__init__":
            continue
        if isinstance(member, property) and member.fget is not None:
            returns = inspect.signature(member.fget).return_annotation
            lines.append(f"  .{name}: {_plain(str(returns))}")
        elif inspect.isfunction(member):
            lines.append(f"  .{name}{_plain(str(inspect.signature(member)))}")
    return lines


def describe(name: str, value: Any) -> list[str]:
    """What `tms.extension.<name>` promises, as lines of text."""
    if isinstance(value, type) and issubclass(value, enum.Enum):
        members = ", ".join(f"{member.name}={member.value!r}" for member in value)
        return [f"enum {name}({value.__bases__[0].__name__}): {members}"]
    if isinstance(value, type) and dataclasses.is_dataclass(value):
        frozen = value.__dataclass_params__.frozen  # type: ignore[attr-defined]
        kind = "frozen dataclass" if frozen else "dataclass"
        return [f"{kind} {name}{_plain(str(inspect.signature(value)))}"]
    if isinstance(value, type):
        bases = ", ".join(base.__name__ for base in value.__bases__)
        return [f"class {name}({bases})", *_members(value)]
    if inspect.isfunction(value):
        return [f"def {name}{_plain(str(inspect.signature(value)))}"]
    if hasattr(value, "__origin__"):  # a type alias: Callable[[...], ...]
        return [f"type {name} = {_plain(repr(value))}"]
    return [f"value {name} = {_plain(repr(value))}"]


def surface() -> list[str]:
    """The whole surface, name by name in alphabetical order, its version first."""
    lines = [f"API_VERSION {tms.extension.API_VERSION}"]
    for name in sorted(tms.extension.__all__):
        if name != "API_VERSION":
            lines.extend(describe(name, getattr(tms.extension, name)))
    return lines


def change(promised: list[str], now: list[str]) -> tuple[str, list[str], list[str]]:
    """The version a change from `promised` to `now` needs, and its lines removed and added."""
    removed = [line for line in promised[1:] if line not in now]
    added = [line for line in now[1:] if line not in promised]
    return ("a major version" if removed else "a minor version"), removed, added


def test_the_surface_is_the_snapshot() -> None:
    promised = SNAPSHOT.read_text("utf-8").splitlines()
    now = surface()
    if now == promised:
        return
    bump, removed, added = change(promised, now)
    raise AssertionError(
        f"tms.extension changed: {bump} (API_VERSION, docs/extending.md), then the snapshot "
        "written again (uv run python tests/extension/test_surface_snapshot.py)\n"
        + "".join(f"- {line}\n" for line in removed)
        + "".join(f"+ {line}\n" for line in added)
        + (f"version: {promised[0]} -> {now[0]}\n" if promised[:1] != now[:1] else "")
    )


def test_a_removed_or_changed_line_is_a_major_version_an_added_one_minor() -> None:
    """The checker reads a change the way semver does (a check of the test itself)."""
    before = ["API_VERSION 1.0.0", "frozen dataclass Origin(door: 'Door')", "def reject() -> None"]
    renamed = [before[0], "frozen dataclass Origin(gate: 'Door')", before[2]]
    assert change(before, renamed) == ("a major version", [before[1]], [renamed[1]])
    assert change(before, [*before, "def accept() -> None"]) == (
        "a minor version",
        [],
        ["def accept() -> None"],
    )
    assert change(before, before[:2]) == ("a major version", [before[2]], [])


if __name__ == "__main__":
    SNAPSHOT.write_text("\n".join(surface()) + "\n", "utf-8")
    sys.stdout.write(f"wrote {SNAPSHOT}\n")
