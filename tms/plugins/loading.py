"""Finding, loading and checking the plugins `TMS_PLUGINS` names, and the one object the core
wires in: `Extensions`.

How plugins are found is pytest's and Datasette's way: an installed package declares each of
its plugins as an entry point in the group `tms.plugins` (the entry point's name is the
plugin's), naming a `Plugin` or a `PluginFactory`. Unlike them, nothing is loaded for being
installed: only the names in `TMS_PLUGINS` are looked up and imported, in that order, so that
installing a package changes nothing until the operator says so. `strfry` is built in (it runs
`TMS_STRFRY_COMMAND`); a package may not take that name.

Every problem stops start-up with one line naming the plugin: `ExtensionError` for a name no
installed package declares, an import or a factory that fails, a registration that does not hold
up (`tms.plugins.registry`); and `tms.registry.Collision`, the core's one way of saying a name is
taken, for every collision: two packages declaring one plugin name (or a package taking the
built-in `strfry`'s), two plugins filling a single-slot seam, and a tool, prompt or route that is
the core's or another plugin's. The plugins' tools and prompts join copies of the core's
registries here (`Extensions.tools_served`, `prompts_served`), their routes a copy of the app's
route table (`Extensions.route_table`, called by `tms.app`).

Single-slot seams: only `strfry_command`. A strfry plugin is written for a relay that runs one
(strfry's `writePolicy.plugin`), and it is one child process kept alive in every server process;
strfry's policies compose inside the one script (strfry-policies' pipeline). Write policies, read
filters and after-commit hooks are slices, as khatru's hooks are: each enabled plugin's is asked,
in `TMS_PLUGINS` order.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from typing import Any, Final

from tms.config import STRFRY, Settings
from tms.errors import one_line
from tms.extension import Plugin, PluginError
from tms.http.routes import RouteTable
from tms.mcp.prompts import PROMPTS, Prompt
from tms.mcp.tools import TOOLS, Tool
from tms.metrics import PLUGIN_FAILURES, PLUGIN_READS_REFUSED
from tms.plugins.hooks import AfterCommitHooks
from tms.plugins.policies import EventPolicy, Judge, ReadFilters, WritePolicies
from tms.plugins.registry import (
    NAME,
    ExtensionError,
    PluginPrompt,
    PluginRoute,
    PluginTool,
    check_prompt,
    check_route,
    check_tool,
)
from tms.plugins.routes import starlette_route
from tms.plugins.served import as_prompt, as_tool
from tms.plugins.strfry import StrfryPolicy
from tms.registry import CORE, Registry, by_plugin
from tms.rules.admission import Admission, CommitHook, ReadCheck

log = logging.getLogger("tms.extension")  # the name operators filter on, kept from before the move

GROUP: Final = "tms.plugins"
BUILT_IN: Final = "built-in"
STRFRY_SEAM: Final = "strfry_command"  # the one single-slot seam
SEAMS: Final = ("write_policy", "read_filter", "after_commit")
CAUSES: Final = ("raised", "timeout")


@dataclass(frozen=True, slots=True)
class Loaded:
    """An enabled plugin and where it came from: `built-in`, or the package and its version."""

    plugin: Plugin
    source: str

    @property
    def name(self) -> str:
        return self.plugin.name


class Extensions:
    """What the enabled plugins add, for the core to wire in:

    - `admission`: their write policies as the ledger's `Admission` (asked once per batch);
    - `read_filter`: their read filters, `await read_filter.check(Read(...))` per read;
    - `after_commit`: their hooks, `after_commit.submit(Committed(...))` per committed batch;
    - `tools_served`, `prompts_served`: the core's tool and prompt registries with theirs
      added; `route_table(core)`: the app's route table with their routes added;
    - `start`/`stop` (or `running()`) in the server's lifespan: the hooks' workers and the
      strfry command.

    With no plugin enabled every part is empty and costs nothing (`write_policy`,
    `reads_check` and `commit_hook` are then None: the core asks nobody)."""

    def __init__(
        self, loaded: Sequence[Loaded], settings: Settings, *, environ: Mapping[str, str]
    ) -> None:
        self.loaded = tuple(loaded)
        _check_names(self.loaded)
        self.tools: tuple[PluginTool, ...] = tuple(
            check_tool(item.name, tool) for item in self.loaded for tool in item.plugin.tools
        )
        self.routes: tuple[PluginRoute, ...] = tuple(
            check_route(item.name, route) for item in self.loaded for route in item.plugin.routes
        )
        self.prompts: tuple[PluginPrompt, ...] = tuple(
            check_prompt(item.name, prompt)
            for item in self.loaded
            for prompt in item.plugin.prompts
        )
        for item in self.loaded:
            _check_seams(item.plugin)
        seams: Registry[str] = Registry("single-slot seam")
        for item in self.loaded:
            if item.plugin.strfry_command is not None:
                seams.register(STRFRY_SEAM, item.name, by=by_plugin(item.name))
        self.tools_served: Registry[Tool[Any, Any]] = TOOLS.copy()
        for tool in self.tools:
            self.tools_served.register(tool.name, as_tool(tool), by=by_plugin(tool.plugin))
        self.prompts_served: Registry[Prompt] = PROMPTS.copy()
        for prompt in self.prompts:
            by = by_plugin(prompt.plugin)
            self.prompts_served.register(prompt.name, as_prompt(prompt), by=by)
        judges: list[Judge] = []
        self._commands: list[StrfryPolicy] = []
        for item in self.loaded:
            plugin = item.plugin
            if plugin.write_policy is not None:
                seconds = settings.plugin_seconds
                judges.append(EventPolicy(plugin.name, plugin.write_policy, seconds))
            if plugin.strfry_command is not None:
                command = StrfryPolicy(
                    plugin.name,
                    plugin.strfry_command,
                    settings.strfry_seconds,
                    environ=environ,
                )
                judges.append(command)
                self._commands.append(command)
        self.admission = WritePolicies(judges)
        self.read_filter = ReadFilters(
            [
                (item.name, item.plugin.read_filter)
                for item in self.loaded
                if item.plugin.read_filter is not None
            ],
            settings.plugin_seconds,
        )
        self.after_commit = AfterCommitHooks(
            [
                (item.name, item.plugin.after_commit)
                for item in self.loaded
                if item.plugin.after_commit is not None
            ],
            queue=settings.hook_queue,
            seconds=settings.hook_seconds,
        )
        for item in self.loaded:  # every series from zero
            PLUGIN_READS_REFUSED.labels(item.name)
            for seam in SEAMS:
                for cause in CAUSES:
                    PLUGIN_FAILURES.labels(item.name, seam, cause)

    @classmethod
    def none(cls, settings: Settings) -> Extensions:
        """No plugin: the core's registries as they are, and nobody asked."""
        return cls((), settings, environ={})

    @property
    def write_policy(self) -> Admission | None:
        """The ledger's `Admission`, or None when no plugin has a write policy."""
        return self.admission if self.admission.names else None

    @property
    def reads_check(self) -> ReadCheck | None:
        return self.read_filter if self.read_filter.names else None

    @property
    def commit_hook(self) -> CommitHook | None:
        return self.after_commit if self.after_commit.names else None

    def route_table(self, core: RouteTable) -> RouteTable:
        """`core` (the app's route table) with the plugins' routes added, each served under
        `/plugins/<name>` behind the auth it declared (`tms.plugins.routes`): a route that
        answers what another answers is a `Collision`."""
        table = core.copy()
        for route in self.routes:
            table.add(starlette_route(route), by=by_plugin(route.plugin))
        return table

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(item.name for item in self.loaded)

    def describe(self) -> str:
        """The start-up log's line: which plugins, from where."""
        if not self.loaded:
            return "plugins: none"
        return "plugins: " + ", ".join(f"{item.name} ({item.source})" for item in self.loaded)

    async def start(self) -> None:
        await self.after_commit.start()
        for command in self._commands:
            await command.start()

    async def stop(self) -> None:
        try:
            await self.after_commit.stop()
        finally:
            for command in self._commands:
                await command.close()

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[Extensions]:
        await self.start()
        try:
            yield self
        finally:
            await self.stop()


def load_extensions(settings: Settings, environ: Mapping[str, str] | None = None) -> Extensions:
    """The plugins `settings.plugins` names (`TMS_PLUGINS`), loaded, checked, and their tools
    and prompts registered beside the core's; `ExtensionError` or `Collision` (one line) for the
    first that cannot be. `environ` is what plugin factories read their settings from (the
    process's environment unless given). Their routes join the app's table in `tms.app`."""
    environ = os.environ if environ is None else environ
    declared = _declared(settings.plugins)
    loaded = [_load(name, declared.get(name, []), settings, environ) for name in settings.plugins]
    extensions = Extensions(loaded, settings, environ=environ)
    if loaded:
        log.debug("%s", extensions.describe())  # `tms serve` names them in its summary
    return extensions


def _declared(names: Sequence[str]) -> dict[str, list[EntryPoint]]:
    """The `tms.plugins` entry points of the names wanted, none of them loaded yet (reading
    the installed packages' metadata imports nothing)."""
    if not names:
        return {}
    wanted = set(names)
    found: dict[str, list[EntryPoint]] = {}
    for entry in entry_points(group=GROUP):
        if entry.name in wanted:
            found.setdefault(entry.name, []).append(entry)
    return found


def _source(entry: EntryPoint) -> str:
    dist = entry.dist
    return f"{dist.name} {dist.version}" if dist is not None else entry.value


def _load(
    name: str, entries: Sequence[EntryPoint], settings: Settings, environ: Mapping[str, str]
) -> Loaded:
    declaring: Registry[str] = Registry("plugin")  # a name declared twice is a collision
    if name == STRFRY:
        declaring.register(name, BUILT_IN, by=_who(BUILT_IN))
    for entry in sorted(entries, key=_source):
        declaring.register(name, _source(entry), by=_who(_source(entry)))
    if name == STRFRY:
        return Loaded(_strfry(settings), BUILT_IN)
    if not entries:
        raise ExtensionError(
            f"plugin '{name}': TMS_PLUGINS names it but no installed package declares it (entry "
            f"point group '{GROUP}')"
        )
    entry = entries[0]
    try:
        declared = entry.load()
    except Exception as exc:
        log.debug("plugin %s: import failed", name, exc_info=True)
        raise ExtensionError(
            f"plugin '{name}': cannot import {entry.value}: {type(exc).__name__}: {one_line(exc)}"
        ) from None
    plugin = _made(name, declared, environ)
    if plugin.name != name:
        raise ExtensionError(
            f"plugin '{name}': its entry point gives a plugin named {str(plugin.name)!r:.50}"
        )
    return Loaded(plugin, _source(entry))


def _made(name: str, declared: object, environ: Mapping[str, str]) -> Plugin:
    """The `Plugin` an entry point names, or the one its factory makes from the environment."""
    if isinstance(declared, Plugin):
        return declared
    if not callable(declared):
        raise ExtensionError(
            f"plugin '{name}': its entry point names a {type(declared).__name__}, not a Plugin "
            "or a factory of one"
        )
    try:
        made = declared(environ)
    except PluginError as exc:
        raise ExtensionError(f"plugin '{name}': {one_line(exc)}") from None
    except Exception as exc:
        log.debug("plugin %s: its factory failed", name, exc_info=True)
        raise ExtensionError(
            f"plugin '{name}': its factory failed: {type(exc).__name__}: {one_line(exc)}"
        ) from None
    if not isinstance(made, Plugin):
        raise ExtensionError(
            f"plugin '{name}': its factory returned a {type(made).__name__}, not a Plugin"
        )
    return made


def _strfry(settings: Settings) -> Plugin:
    """The built-in plugin: `TMS_STRFRY_COMMAND` as a write policy."""
    if settings.strfry_command is None:
        raise ExtensionError(
            f"plugin '{STRFRY}': TMS_STRFRY_COMMAND is not set; it is the command to run, a "
            "strfry write-policy plugin"
        )
    return Plugin(STRFRY, strfry_command=settings.strfry_command)


# --- what is checked of every plugin -------------------------------------------------------------


def _who(source: str) -> str:
    """Who declares a plugin, as a collision of two plugin names says it."""
    return CORE if source == BUILT_IN else f"the package {source}"


def _check_names(loaded: Sequence[Loaded]) -> None:
    names: Registry[Loaded] = Registry("plugin")
    for item in loaded:
        name = item.name
        if not isinstance(name, str) or not NAME.fullmatch(name):
            raise ExtensionError(
                f"plugin {str(name)!r:.50} ({item.source}): a plugin's name is a lowercase "
                "letter, then up to 39 lowercase letters, digits, '-' or '_'"
            )
        names.register(name, item, by=_who(item.source))


def _check_seams(plugin: Plugin) -> None:
    for seam in ("write_policy", "read_filter", "after_commit"):
        value = getattr(plugin, seam)
        if value is not None and not callable(value):
            raise ExtensionError(f"plugin '{plugin.name}': its {seam} is not callable")
    command = plugin.strfry_command
    if command is not None and (not isinstance(command, str) or not command.strip()):
        raise ExtensionError(f"plugin '{plugin.name}': its strfry_command is empty")
