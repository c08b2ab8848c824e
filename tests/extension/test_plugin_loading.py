"""Loading plugins: only the names TMS_PLUGINS gives, from installed packages' `tms.plugins`
entry points (the example plugins are installed in the dev environment; others are installed
here as a distribution on `sys.path`, which is what an installed package is to
`importlib.metadata`), and every problem a start-up error of one line naming the plugin: a
collision is the core registries' own `Collision`, naming both sides."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
from factories import settings
from starlette.routing import Route as StarletteRoute

from tms.config import Settings
from tms.errors import ConfigError, ToolError
from tms.extension import Auth, Caller, Plugin, Prompt, Refused, Route, Tool
from tms.http.routes import RouteTable
from tms.plugins.loading import BUILT_IN, Extensions, Loaded, load_extensions
from tms.plugins.registry import ExtensionError
from tms.registry import Collision

pytestmark = pytest.mark.anyio

HOSTS = {"TMS_EVIDENCE_HOSTS": "example.org", "TMS_NOTIFY_URL": "http://127.0.0.1:9/hook"}
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"collection": {"type": "string"}, "limit": {"type": "integer", "minimum": 1}},
    "required": ["collection"],
    "additionalProperties": False,
}


async def echo(caller: Caller, args: dict[str, Any]) -> Any:
    if args.get("limit") == 13:
        raise Refused("unlucky\nnumber")
    return {"caller": caller.pubkey, "args": args}


def tool(name: str = "stats", **changes: Any) -> Tool:
    return Tool(
        **{"name": name, "description": "d", "input_schema": SCHEMA, "handler": echo, **changes}
    )


async def handler(request: Any, pubkey: str | None) -> Any:
    raise AssertionError("not called")


def prompt(name: str = "review") -> Prompt:
    return Prompt(name, "d", lambda arguments: "text")


def assemble(*plugins: Plugin, config: Settings | None = None) -> Extensions:
    loaded = [Loaded(plugin, BUILT_IN) for plugin in plugins]
    return Extensions(loaded, config or settings(), environ={})


def refused(make: Callable[[], object]) -> str:
    """The one line start-up stops with, for a plugin that cannot be enabled."""
    with pytest.raises(ExtensionError) as caught:
        make()
    message = str(caught.value)
    assert "\n" not in message and message.startswith("plugin ")
    assert isinstance(caught.value, ConfigError)  # `tms serve` says it after `tms: ` and exits
    return message


def collides(make: Callable[[], object]) -> str:
    """The one line start-up stops with for a collision: the registries' own."""
    with pytest.raises(Collision) as caught:
        make()
    message = str(caught.value)
    assert "\n" not in message and " collides with " in message
    assert isinstance(caught.value, ConfigError)
    return message


def install(
    root: Path,
    monkeypatch: pytest.MonkeyPatch,
    dist: str,
    entries: Mapping[str, str],
    modules: Mapping[str, str],
) -> None:
    """A distribution `dist` 1.0 declaring `entries` in `tms.plugins`, with `modules`' sources."""
    folder = root / dist
    info = folder / f"{dist}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
    lines = "".join(f"{name} = {value}\n" for name, value in entries.items())
    (info / "entry_points.txt").write_text("[tms.plugins]\n" + lines)
    for module, source in modules.items():
        (folder / f"{module}.py").write_text(textwrap.dedent(source))
    monkeypatch.syspath_prepend(str(folder))


# --- finding and loading -------------------------------------------------------------------------


def test_the_named_installed_plugins_are_loaded_in_order() -> None:
    extensions = load_extensions(settings(TMS_PLUGINS="notify, allowlist"), HOSTS)
    assert extensions.names == ("notify", "allowlist")
    assert extensions.describe() == (
        "plugins: notify (tms-example-plugins 1.0.0), allowlist (tms-example-plugins 1.0.0)"
    )
    assert extensions.admission.names == ("allowlist",)
    assert extensions.after_commit.names == ("notify",)
    assert extensions.read_filter.names == ()


def test_an_installed_plugin_not_named_is_never_imported() -> None:
    for module in ("tms_example_plugins.notify", "tms_example_plugins.allowlist"):
        sys.modules.pop(module, None)
    extensions = load_extensions(settings(TMS_PLUGINS="allowlist"), HOSTS)
    assert extensions.names == ("allowlist",)
    assert "tms_example_plugins.allowlist" in sys.modules
    assert "tms_example_plugins.notify" not in sys.modules
    assert load_extensions(settings(), HOSTS).describe() == "plugins: none"


def test_a_named_plugin_not_installed_stops_start_up() -> None:
    message = refused(lambda: load_extensions(settings(TMS_PLUGINS="allowlist,nope"), HOSTS))
    assert message == (
        "plugin 'nope': TMS_PLUGINS names it but no installed package declares it (entry point "
        "group 'tms.plugins')"
    )


def test_a_factory_refusing_its_settings_stops_start_up() -> None:
    message = refused(lambda: load_extensions(settings(TMS_PLUGINS="allowlist"), {}))
    assert message == (
        "plugin 'allowlist': TMS_EVIDENCE_HOSTS is not set: list the hosts evidence may come from"
    )


def test_two_packages_declaring_one_name_stop_start_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    install(
        tmp_path,
        monkeypatch,
        "rival",
        {"allowlist": "rival_plugin:plugin"},
        {"rival_plugin": "from tms.extension import Plugin\nplugin = Plugin('allowlist')\n"},
    )
    message = collides(lambda: load_extensions(settings(TMS_PLUGINS="allowlist"), HOSTS))
    assert message == (
        "plugin 'allowlist' of the package tms-example-plugins 1.0.0 collides with plugin "
        "'allowlist' of the package rival 1.0"
    )


def test_a_package_may_not_take_the_built_in_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    install(tmp_path, monkeypatch, "impostor", {"strfry": "impostor:plugin"}, {"impostor": ""})
    config = settings(TMS_PLUGINS="strfry", TMS_STRFRY_COMMAND="cat")
    message = collides(lambda: load_extensions(config, {}))
    assert message == (
        "plugin 'strfry' of the package impostor 1.0 collides with plugin 'strfry' of the core"
    )


def test_the_built_in_strfry_plugin_needs_its_command() -> None:
    message = refused(lambda: load_extensions(settings(TMS_PLUGINS="strfry"), {}))
    assert message.startswith("plugin 'strfry': TMS_STRFRY_COMMAND is not set")
    config = settings(TMS_PLUGINS="strfry", TMS_STRFRY_COMMAND="cat")
    extensions = load_extensions(config, {})
    assert extensions.describe() == "plugins: strfry (built-in)"
    assert extensions.admission.names == ("strfry",)


def test_entry_points_that_do_not_hold_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    install(
        tmp_path,
        monkeypatch,
        "broken",
        {
            "unimportable": "broken_plugins:missing",
            "misnamed": "broken_plugins:misnamed",
            "nothing": "broken_plugins:nothing",
            "crashing": "broken_plugins:crashing",
            "made": "broken_plugins:made",
        },
        {
            "broken_plugins": """
                from tms.extension import Plugin
                misnamed = Plugin("other")
                nothing = 42
                def crashing(environ):
                    raise KeyError("HOME")
                def made(environ):
                    return Plugin("made", tools=[], write_policy=None)
            """
        },
    )

    def load(name: str) -> Extensions:
        return load_extensions(settings(TMS_PLUGINS=name), {})

    assert refused(lambda: load("unimportable")).startswith(
        "plugin 'unimportable': cannot import broken_plugins:missing: AttributeError: "
    )
    assert refused(lambda: load("misnamed")) == (
        "plugin 'misnamed': its entry point gives a plugin named 'other'"
    )
    assert refused(lambda: load("nothing")) == (
        "plugin 'nothing': its entry point names a int, not a Plugin or a factory of one"
    )
    assert refused(lambda: load("crashing")) == (
        "plugin 'crashing': its factory failed: KeyError: 'HOME'"
    )
    assert load("made").describe() == "plugins: made (broken 1.0)"


# --- collisions ----------------------------------------------------------------------------------


def test_two_plugins_of_one_name() -> None:
    message = collides(lambda: assemble(Plugin("twin"), Plugin("twin")))
    assert message == "plugin 'twin' of the core collides with plugin 'twin' of the core"


def test_tools_and_prompts_colliding_with_another_plugins() -> None:
    message = collides(lambda: assemble(Plugin("a", tools=[tool()]), Plugin("b", tools=[tool()])))
    assert message == "MCP tool 'stats' of plugin 'b' collides with MCP tool 'stats' of plugin 'a'"
    message = collides(lambda: assemble(Plugin("a", tools=[tool(), tool()])))
    assert message == "MCP tool 'stats' of plugin 'a' collides with MCP tool 'stats' of plugin 'a'"
    message = collides(
        lambda: assemble(Plugin("a", prompts=[prompt()]), Plugin("b", prompts=[prompt()]))
    )
    assert message == (
        "MCP prompt 'review' of plugin 'b' collides with MCP prompt 'review' of plugin 'a'"
    )


def test_a_route_declared_twice() -> None:
    routes = [Route("/x/{id}", handler, ("GET", "POST")), Route("/x/{other}", handler, ("POST",))]
    extensions = assemble(Plugin("a", routes=routes))
    message = collides(lambda: extensions.route_table(RouteTable()))
    assert message == (
        "route 'POST /plugins/a/x/{other}' of plugin 'a' collides with route "
        "'GET,POST /plugins/a/x/{id}' of plugin 'a'"
    )
    # the same path in two plugins is two paths: each plugin has its prefix
    one = [Route("/x", handler)]
    table = assemble(Plugin("a", routes=one), Plugin("b", routes=one)).route_table(RouteTable())
    assert len(table) == 2


def test_two_plugins_filling_the_single_slot_seam() -> None:
    message = collides(
        lambda: assemble(Plugin("a", strfry_command="cat"), Plugin("b", strfry_command="cat"))
    )
    assert message == (
        "single-slot seam 'strfry_command' of plugin 'b' collides with single-slot seam "
        "'strfry_command' of plugin 'a'"
    )


def test_collisions_with_the_core() -> None:
    message = collides(lambda: assemble(Plugin("a", tools=[tool("publish")])))
    assert message == (
        "MCP tool 'publish' of plugin 'a' collides with MCP tool 'publish' of the core"
    )
    message = collides(lambda: assemble(Plugin("a", prompts=[prompt("briefing")])))
    assert message == (
        "MCP prompt 'briefing' of plugin 'a' collides with MCP prompt 'briefing' of the core"
    )
    extensions = assemble(Plugin("b", routes=[Route("/x/{id}", handler)]))
    core = RouteTable()
    core.add(StarletteRoute("/plugins/b/x/{thing}", handler))  # a core route where it may not be
    message = collides(lambda: extensions.route_table(core))
    assert message == (
        "route 'GET /plugins/b/x/{id}' of plugin 'b' collides with route "
        "'GET /plugins/b/x/{thing}' of the core"
    )
    served = assemble(Plugin("a", tools=[tool()], prompts=[prompt()]))
    assert served.tools_served.registered_by("stats") == "plugin 'a'"
    assert served.tools_served.registered_by("publish") == "the core"
    assert served.prompts_served.registered_by("review") == "plugin 'a'"
    assert "stats" not in assemble().tools_served  # the core's own registry is untouched


# --- registrations that do not hold up -----------------------------------------------------------


@pytest.mark.parametrize(
    ("plugin", "expected"),
    [
        (Plugin("Bad"), "plugin 'Bad' (built-in): a plugin's name is a lowercase letter, then"),
        (Plugin("a", tools=[tool("Stats")]), "plugin 'a': tool name 'Stats' must be a lowercase"),
        (
            Plugin("a", tools=[tool(input_schema={"type": "object", "required": []})]),
            "plugin 'a': tool 'stats' reads a collection, so its input_schema must require a "
            "string 'collection'",
        ),
        (
            Plugin("a", tools=[tool(input_schema={"type": "object", "minProperties": -1})]),
            "plugin 'a': tool 'stats': input_schema is not a JSON Schema: -1 is less than",
        ),
        (
            Plugin("a", tools=[tool(input_schema={"type": "array"})]),
            "plugin 'a': tool 'stats': its input_schema must be a JSON Schema of type 'object'",
        ),
        (Plugin("a", tools=["stats"]), "plugin 'a': its tools must be Tool values, got str"),
        (Plugin("a", routes=[Route("x", handler)]), "plugin 'a': route path 'x' must start with"),
        (Plugin("a", routes=[Route("/../etc", handler)]), "plugin 'a': route path '/../etc' holds"),
        (
            Plugin("a", routes=[Route("/x", handler, ("GET", "TRACE"))]),
            "plugin 'a': route /x: its methods must be among",
        ),
        (
            Plugin("a", routes=[Route("/x", handler, auth="cookie")]),  # type: ignore[arg-type]
            "plugin 'a': route /x: its auth must be Auth.NONE, Auth.LOGIN or Auth.NIP98",
        ),
        (Plugin("a", prompts=[prompt("")]), "plugin 'a': prompt name '' must be a lowercase"),
        (Plugin("a", write_policy="no"), "plugin 'a': its write_policy is not callable"),  # type: ignore[arg-type]
        (Plugin("a", strfry_command=" "), "plugin 'a': its strfry_command is empty"),
    ],
)
def test_registrations_are_checked_at_start_up(plugin: Plugin, expected: str) -> None:
    assert refused(lambda: assemble(plugin)).startswith(expected)


# --- what the core calls -------------------------------------------------------------------------


async def test_a_plugin_tool_checks_its_arguments_and_refuses_in_words() -> None:
    [stats] = assemble(Plugin("a", tools=[tool()])).tools
    caller = Caller("ab" * 32, ("mcas",))
    assert await stats.call(caller, {"collection": "mcas"}) == {
        "caller": "ab" * 32,
        "args": {"collection": "mcas"},
    }
    with pytest.raises(ToolError, match=r"^stats args: limit: 0 is less than the minimum of 1$"):
        await stats.call(caller, {"collection": "mcas", "limit": 0})
    with pytest.raises(ToolError, match=r"^stats args: 'collection' is a required property$"):
        await stats.call(caller, {})
    with pytest.raises(ToolError, match=r"^unlucky number$"):
        await stats.call(caller, {"collection": "mcas", "limit": 13})
    with pytest.raises(ToolError) as caught:
        await stats.call(caller, {"collection": "x" * 5000, "extra": 1})
    assert len(str(caught.value)) < 320


def test_a_plugin_prompt_needs_its_required_arguments() -> None:
    from tms.extension import PromptArgument

    topic = Prompt(
        "topic",
        "d",
        lambda arguments: f"About {arguments['topic']}",
        (PromptArgument("topic", "what about"),),
    )
    [entry] = assemble(Plugin("a", prompts=[topic])).prompts
    assert entry.render({"topic": "DAO"}) == "About DAO"
    with pytest.raises(ValueError, match=r"^prompt 'topic' needs `topic`$"):
        entry.render({})


def test_routes_are_served_under_the_plugins_prefix() -> None:
    [route] = assemble(Plugin("a", routes=[Route("/x/{id}", handler, auth=Auth.NIP98)])).routes
    assert (route.path, route.methods, route.auth) == ("/plugins/a/x/{id}", ("GET",), Auth.NIP98)
