"""A setting declared once: its `TMS_*` variable, its default and how its text is read, on the
settings object's field itself (`setting`), so that `Settings.from_env`, the settings objects
built by hand and the documentation's settings table (held equal by tests/test_settings_docs.py)
all take them from one line.

Pure: reads only the mapping it is given.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from tms.errors import ConfigError

V = TypeVar("V")

# How one variable's text becomes its value: (variable, its text or None when unset, the
# declared default, the values read before it, by field), raising `ConfigError` in its words.
Reader = Callable[[str, str | None, Any, Mapping[str, Any]], Any]

_KEY: Final = "tms.setting"


@dataclass(frozen=True, slots=True)
class Declared:
    """One setting: its field, its variable, its default and how it is read; `shown` is what
    the documentation's table says the default is, when that is not the default itself
    ("generated", "a tenth of `TMS_MAX_CONNECTIONS`")."""

    field: str
    variable: str
    default: Any
    read: Reader
    shown: str | None


def setting(
    variable: str,
    default: V,
    read: Reader,
    *,
    shown: str | None = None,
    factory: Callable[[], V] | None = None,
) -> V:
    """A settings field read from `variable` by `read`, `default` when built by hand (or
    `factory()`, for a default made per object)."""
    spec = {_KEY: (variable, default, read, shown, factory)}
    if factory is not None:
        made: V = dataclasses.field(default_factory=factory, metadata=spec)
        return made
    declared: V = dataclasses.field(default=default, metadata=spec)
    return declared


def declared(cls: type) -> Iterator[Declared]:
    """The settings a settings class declares, in its fields' order."""
    for f in dataclasses.fields(cls):
        if _KEY in f.metadata:
            variable, default, read, shown, factory = f.metadata[_KEY]
            value = factory() if factory is not None else default
            yield Declared(f.name, variable, value, read, shown)


def read_all(cls: type, env: Mapping[str, str]) -> dict[str, Any]:
    """Every declared setting of `cls` read from `env`, by field, in declaration order (a
    reader may use the values read before it)."""
    got: dict[str, Any] = {}
    for d in declared(cls):
        got[d.field] = d.read(d.variable, env.get(d.variable), d.default, got)
    return got


def text(variable: str, value: str | None, default: Any, got: Mapping[str, Any]) -> Any:
    """The text as given, stripped; unset or blank, the default."""
    return (value or "").strip() or default


def number(low: float, high: float, unit: str = "") -> Reader:
    """A number from `low` to `high`; a whole one unless `unit` names what it counts
    ("seconds"). Unset or blank, the default."""

    def read(variable: str, value: str | None, default: Any, got: Mapping[str, Any]) -> Any:
        return parse_number(variable, value or "", default, low, high, unit)

    return read


def parse_number(
    variable: str, value: str, default: float, low: float, high: float, unit: str
) -> Any:
    """`number`'s reading, for a reader whose bounds are known only as it reads."""
    text = value.strip()
    if not text:
        return default
    try:
        got = float(text)
    except ValueError:
        got = float("nan")
    if not low <= got <= high or (not unit and got != int(got)):
        what = unit or "a whole number"
        raise ConfigError(f"{variable} must be {what} from {low:g} to {high:g}, got {text!r}")
    return got if unit else int(got)


def choice(*choices: str) -> Reader:
    """One of `choices` (the first when unset), as text."""

    def read(variable: str, value: str | None, default: Any, got: Mapping[str, Any]) -> Any:
        given = value or ""
        picked = given.strip().lower() or choices[0]
        if picked not in choices:
            raise ConfigError(f"{variable} must be {' or '.join(choices)}, got {given!r:.40}")
        return picked

    return read


def switch(variable: str, value: str | None, default: Any, got: Mapping[str, Any]) -> Any:
    """`on` or `off` (`off` when unset), as a bool."""
    return choice("off", "on")(variable, value, default, got) == "on"
