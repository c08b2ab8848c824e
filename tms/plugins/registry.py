"""A plugin's tools, routes and prompts checked once at start-up (a name the registry can hold,
a schema that is one, a path under the plugin's prefix), carrying what the core calls at run
time. They join the core's registries (`tms.plugins.served`, `tms.registry`), where a name or a
route taken twice is a `Collision`.

The checks raise `ExtensionError`, one line naming the plugin and what is wrong: start-up stops
there (`tms serve` says it after `tms: `), as for any setting it cannot use.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError, best_match

from tms.errors import ConfigError, ToolError
from tms.extension import Auth, Caller, Prompt, Refused, Route, Tool

PREFIX: Final = "/plugins"  # every plugin's routes are under /plugins/<name>
NAME: Final = re.compile(r"[a-z][a-z0-9_-]{0,39}")  # a plugin's (TMS_PLUGINS checks it too)
TOOL_NAME: Final = re.compile(r"[a-z][a-z0-9_]{0,63}")  # a tool's or a prompt's
ROUTE_PATH: Final = re.compile(r"/(?:[A-Za-z0-9_.~\-]+|\{[a-z_][a-z0-9_]*(?::[a-z]+)?\}|/)*")
METHODS: Final = frozenset({"GET", "POST", "PUT", "PATCH", "DELETE"})
MAX_ERROR_CHARS: Final = 300  # of an argument's refusal, which may quote what was sent


class ExtensionError(ConfigError):
    """A plugin that cannot be enabled as configured, or that collides with another or with the
    core: one line naming the plugin and the problem. Start-up stops with it."""


def plugin_path(plugin: str, path: str) -> str:
    """Where a plugin's route is served."""
    return f"{PREFIX}/{plugin}{path}"


# --- tools ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PluginTool:
    """A plugin's tool, its schema checked and compiled. In the core's tool registry
    (`tms.plugins.served`), the arguments are checked first (`check`), then come the core's
    own checks (the signed request, its single use, the key's rate limit, what the tool
    `reads`), then `run` with the `Caller` those made."""

    plugin: str
    tool: Tool
    validator: Draft202012Validator

    @property
    def name(self) -> str:
        return self.tool.name

    @property
    def schema(self) -> Mapping[str, Any]:
        return self.tool.input_schema

    def check(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """The arguments if the tool's schema holds them, else a `ToolError` saying where not."""
        args = dict(arguments)
        error = best_match(self.validator.iter_errors(args))
        if error is not None:
            where = ".".join(str(part) for part in error.absolute_path)
            text = " ".join(f"{where + ': ' if where else ''}{error.message}".split())
            if len(text) > MAX_ERROR_CHARS:
                text = text[: MAX_ERROR_CHARS - 1] + "…"
            raise ToolError(f"{self.name} args: {text}")
        return args

    async def run(self, caller: Caller, args: dict[str, Any]) -> Any:
        """The handler, on arguments `check` passed; a `Refused` becomes the `ToolError` the
        caller is told. Anything else it raises is a failure of the plugin, for the core to
        answer as an internal error."""
        try:
            return await self.tool.handler(caller, args)
        except Refused as exc:
            raise ToolError(" ".join(str(exc).split()) or f"{self.name} refused the call") from None

    async def call(self, caller: Caller, arguments: Mapping[str, Any]) -> Any:
        """`check`, then `run`."""
        return await self.run(caller, self.check(arguments))


def check_tool(plugin: str, tool: object) -> PluginTool:
    if not isinstance(tool, Tool):
        raise ExtensionError(f"plugin '{plugin}': its tools must be Tool values, got {_kind(tool)}")
    if not isinstance(tool.name, str) or not TOOL_NAME.fullmatch(tool.name):
        raise ExtensionError(
            f"plugin '{plugin}': tool name {str(tool.name)!r:.70} must be a lowercase letter, "
            "then up to 63 lowercase letters, digits or '_'"
        )
    where = f"plugin '{plugin}': tool '{tool.name}'"
    if not isinstance(tool.description, str) or not tool.description.strip():
        raise ExtensionError(f"{where} needs a description")
    if not callable(tool.handler):
        raise ExtensionError(f"{where}: its handler is not callable")
    if tool.reads not in ("collection", "all", None):
        raise ExtensionError(f"{where}: reads must be 'collection', 'all' or None")
    schema = tool.input_schema
    if not isinstance(schema, Mapping) or schema.get("type") != "object":
        raise ExtensionError(f"{where}: its input_schema must be a JSON Schema of type 'object'")
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        raise ExtensionError(f"{where}: input_schema is not a JSON Schema: {exc.message}") from None
    if tool.reads == "collection":
        collection = (schema.get("properties") or {}).get("collection")
        if (
            not isinstance(collection, Mapping)
            or collection.get("type") != "string"
            or "collection" not in (schema.get("required") or ())
        ):
            raise ExtensionError(
                f"{where} reads a collection, so its input_schema must require a string "
                "'collection'"
            )
    return PluginTool(plugin, tool, Draft202012Validator(schema))


# --- routes --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PluginRoute:
    """A plugin's route, at its full path (`/plugins/<name><path>`)."""

    plugin: str
    route: Route
    path: str

    @property
    def methods(self) -> tuple[str, ...]:
        return self.route.methods

    @property
    def auth(self) -> Auth:
        return self.route.auth


def check_route(plugin: str, route: object) -> PluginRoute:
    if not isinstance(route, Route):
        raise ExtensionError(
            f"plugin '{plugin}': its routes must be Route values, got {_kind(route)}"
        )
    path = route.path
    if not isinstance(path, str) or not ROUTE_PATH.fullmatch(path) or "//" in path:
        raise ExtensionError(
            f"plugin '{plugin}': route path {str(path)!r:.70} must start with '/' and hold only "
            "letters, digits, '-._~', '/' and {parameters}"
        )
    if any(part in (".", "..") for part in path.split("/")):
        raise ExtensionError(f"plugin '{plugin}': route path {path!r:.70} holds '.' or '..'")
    where = f"plugin '{plugin}': route {path}"
    if not route.methods or any(method not in METHODS for method in route.methods):
        raise ExtensionError(f"{where}: its methods must be among {', '.join(sorted(METHODS))}")
    if len(set(route.methods)) != len(route.methods):
        raise ExtensionError(f"{where} names a method twice")
    if not isinstance(route.auth, Auth):
        raise ExtensionError(f"{where}: its auth must be Auth.NONE, Auth.LOGIN or Auth.NIP98")
    if not callable(route.handler):
        raise ExtensionError(f"{where}: its handler is not callable")
    return PluginRoute(plugin, route, plugin_path(plugin, path))


# --- prompts -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PluginPrompt:
    plugin: str
    prompt: Prompt

    @property
    def name(self) -> str:
        return self.prompt.name

    def render(self, arguments: Mapping[str, str]) -> str:
        """The prompt's text, or a `ValueError` whose message the client is told (a required
        argument missing, or the prompt's own refusal)."""
        for argument in self.prompt.arguments:
            if argument.required and not str(arguments.get(argument.name, "")).strip():
                raise ValueError(f"prompt '{self.name}' needs `{argument.name}`")
        text = self.prompt.render(dict(arguments))
        if not isinstance(text, str):
            raise TypeError(f"plugin {self.plugin}: prompt {self.name} rendered {_kind(text)}")
        return text


def check_prompt(plugin: str, prompt: object) -> PluginPrompt:
    if not isinstance(prompt, Prompt):
        raise ExtensionError(
            f"plugin '{plugin}': its prompts must be Prompt values, got {_kind(prompt)}"
        )
    if not isinstance(prompt.name, str) or not TOOL_NAME.fullmatch(prompt.name):
        raise ExtensionError(
            f"plugin '{plugin}': prompt name {str(prompt.name)!r:.70} must be a lowercase "
            "letter, then up to 63 lowercase letters, digits or '_'"
        )
    where = f"plugin '{plugin}': prompt '{prompt.name}'"
    if not isinstance(prompt.description, str) or not prompt.description.strip():
        raise ExtensionError(f"{where} needs a description")
    if not callable(prompt.render):
        raise ExtensionError(f"{where}: its render is not callable")
    names = [argument.name for argument in prompt.arguments]
    if len(set(names)) != len(names):
        raise ExtensionError(f"{where} names an argument twice")
    return PluginPrompt(plugin, prompt)


def _kind(value: object) -> str:
    return type(value).__name__
