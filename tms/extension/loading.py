"""Finding, loading and checking the plugins `TMS_PLUGINS` names, and the one object the core
wires in: `Extensions`.

How plugins are found is pytest's and Datasette's way: an installed package declares each of
its plugins as an entry point in the group `tms.plugins` (the entry point's name is the
plugin's), naming a `Plugin` or a `PluginFactory`. Unlike them, nothing is loaded for being
installed: only the names in `TMS_PLUGINS` are looked up and imported, in that order, so that
installing a package changes nothing until the operator says so. `strfry` is built in (it runs
`TMS_STRFRY_COMMAND`); a package may not take that name.

Every problem stops start-up with one line naming the plugin (`ExtensionError`): a name no
installed package declares, two packages declaring one name, an import or a factory that fails,
a registration that does not hold up (`tms.extension.registry`), and each collision: two plugins'
tools, prompts or routes with one name or path, two plugins filling a single-slot seam, and
(`Extensions.check_collisions`, given the core's names) a plugin's tool, prompt or route that is
the core's.

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
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from typing import Final

from tms.config import STRFRY, Settings
from tms.errors import one_line
from tms.extension.api import Plugin, PluginError
from tms.extension.hooks import AfterCommitHooks
from tms.extension.policies import EventPolicy, Judge, ReadFilters, WritePolicies
from tms.extension.registry import (
    NAME,
    PREFIX,
    ExtensionError,
    PluginPrompt,
    PluginRoute,
    PluginTool,
    check_prompt,
    check_route,
    check_tool,
    same_path,
)
from tms.extension.strfry import StrfryPolicy
from tms.metrics import PLUGIN_FAILURES, PLUGIN_READS_REFUSED

log = logging.getLogger("tms.extension")

GROUP: Final = "tms.plugins"
BUILT_IN: Final = "built-in"
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
    - `tools`, `routes`, `prompts`: their registrations, for the core's registries;
    - `start`/`stop` (or `running()`) in the server's lifespan: the hooks' workers and the
      strfry command.

    With no plugin enabled every part is empty and costs nothing: `admission.admit` returns
    ACCEPTED at once."""

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
        _check_each_other(self.loaded, self.tools, self.routes, self.prompts)
        judges: list[Judge] = []
        self._commands: list[StrfryPolicy] = []
        for item in self.loaded:
            plugin = item.plugin
            _check_seams(plugin)
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

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(item.name for item in self.loaded)

    def describe(self) -> str:
        """The start-up log's line: which plugins, from where."""
        if not self.loaded:
            return "plugins: none"
        return "plugins: " + ", ".join(f"{item.name} ({item.source})" for item in self.loaded)

    def check_collisions(
        self, core_tools: Iterable[str], core_routes: Iterable[str], core_prompts: Iterable[str]
    ) -> None:
        """`ExtensionError` for the first plugin tool, route or prompt that is the core's: a
        tool or prompt of the same name, a route at the same path (parameters compared by place,
        not name; `tms.extension.registry.same_path`), or a core route inside `/plugins/`,
        which is the plugins' own."""
        tools, prompts = set(core_tools), set(core_prompts)
        for tool in self.tools:
            if tool.name in tools:
                raise ExtensionError(
                    f"plugin '{tool.plugin}': tool '{tool.name}' collides with the core's tool "
                    f"'{tool.name}'"
                )
        for prompt in self.prompts:
            if prompt.name in prompts:
                raise ExtensionError(
                    f"plugin '{prompt.plugin}': prompt '{prompt.name}' collides with the core's "
                    f"prompt '{prompt.name}'"
                )
        paths = {same_path(path): path for path in core_routes}
        for shape, path in paths.items():
            if (shape == PREFIX or shape.startswith(PREFIX + "/")) and self.routes:
                raise ExtensionError(
                    f"plugin '{self.routes[0].plugin}': the core's route {path} is inside "
                    f"{PREFIX}/, where plugins' routes are served"
                )
        for route in self.routes:
            core = paths.get(same_path(route.path))
            if core is not None:
                raise ExtensionError(
                    f"plugin '{route.plugin}': route {route.path} collides with the core's "
                    f"route {core}"
                )

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
    """The plugins `settings.plugins` names (`TMS_PLUGINS`), loaded, checked against each other
    and assembled; `ExtensionError` (one line) for the first that cannot be. `environ` is what
    plugin factories read their settings from (the process's environment unless given). The
    core's own names are checked afterwards, by `Extensions.check_collisions`."""
    environ = os.environ if environ is None else environ
    declared = _declared(settings.plugins)
    loaded = [_load(name, declared.get(name, []), settings, environ) for name in settings.plugins]
    extensions = Extensions(loaded, settings, environ=environ)
    if loaded:
        log.info("%s", extensions.describe())
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
    if name == STRFRY:
        if entries:
            raise ExtensionError(
                f"plugin '{name}': the package {_source(entries[0])} declares a plugin of the "
                "built-in plugin's name"
            )
        return Loaded(_strfry(settings), BUILT_IN)
    if not entries:
        raise ExtensionError(
            f"plugin '{name}': TMS_PLUGINS names it but no installed package declares it (entry "
            f"point group '{GROUP}')"
        )
    if len(entries) > 1:
        sources = " and ".join(sorted(_source(entry) for entry in entries))
        raise ExtensionError(f"plugin '{name}': declared twice, by {sources}")
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


# --- collisions between plugins ------------------------------------------------------------------


def _check_names(loaded: Sequence[Loaded]) -> None:
    seen: dict[str, str] = {}
    for item in loaded:
        name = item.name
        if not isinstance(name, str) or not NAME.fullmatch(name):
            raise ExtensionError(
                f"plugin {str(name)!r:.50} ({item.source}): a plugin's name is a lowercase "
                "letter, then up to 39 lowercase letters, digits, '-' or '_'"
            )
        if name in seen:
            raise ExtensionError(
                f"plugin '{name}': two plugins have this name ({seen[name]} and {item.source})"
            )
        seen[name] = item.source


def _check_each_other(
    loaded: Sequence[Loaded],
    tools: Sequence[PluginTool],
    routes: Sequence[PluginRoute],
    prompts: Sequence[PluginPrompt],
) -> None:
    """Two plugins (or one, twice) with one tool name, prompt name or route, or both filling
    a single-slot seam."""
    for what, registered in (("tool", tools), ("prompt", prompts)):
        owners: dict[str, str] = {}
        for entry in registered:
            other = owners.get(entry.name)
            if other == entry.plugin:
                raise ExtensionError(f"plugin '{other}': {what} '{entry.name}' is declared twice")
            if other is not None:
                raise ExtensionError(
                    f"plugin '{entry.plugin}': {what} '{entry.name}' collides with the {what} "
                    f"'{entry.name}' of plugin '{other}'"
                )
            owners[entry.name] = entry.plugin
    served: dict[tuple[str, str], PluginRoute] = {}
    for route in routes:
        for method in route.methods:
            key = (same_path(route.path), method)
            before = served.setdefault(key, route)
            if before is not route:
                raise ExtensionError(
                    f"plugin '{route.plugin}': route {method} {route.path} is declared twice"
                )
    filled: str | None = None
    for item in loaded:
        if item.plugin.strfry_command is not None:
            if filled is not None:
                raise ExtensionError(
                    f"plugin '{item.name}': the strfry command is a single-slot seam and plugin "
                    f"'{filled}' fills it already"
                )
            filled = item.name


def _check_seams(plugin: Plugin) -> None:
    for seam in ("write_policy", "read_filter", "after_commit"):
        value = getattr(plugin, seam)
        if value is not None and not callable(value):
            raise ExtensionError(f"plugin '{plugin.name}': its {seam} is not callable")
    command = plugin.strfry_command
    if command is not None and (not isinstance(command, str) or not command.strip()):
        raise ExtensionError(f"plugin '{plugin.name}': its strfry_command is empty")
