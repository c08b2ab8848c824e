"""Each kind of collision stops the real `tms serve` (and `tms stdio`) at start-up with its one
line, `tms: ` and the core registries' `Collision` naming both sides, exit 1, before any database
is touched: a plugin name two packages declare, a tool or prompt that is the core's or another
plugin's, a route a plugin declares twice, and two plugins filling the single-slot seam. The
plugins come from a package installed for the command alone (a distribution on its
PYTHONPATH)."""

from __future__ import annotations

import subprocess
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import pytest
from factories import LOG_SIGNER, TMS, environment, free_port

PLUGINS: Final = """
from tms.extension import Plugin, Prompt, Route, Tool


async def handler(*args):
    raise AssertionError("never called: start-up stops first")


def tool(name):
    return Tool(name, "a tool", {"type": "object"}, handler, reads=None)


core_tool = Plugin("core_tool", tools=[tool("publish")])
tool_a = Plugin("tool_a", tools=[tool("stats")])
tool_b = Plugin("tool_b", tools=[tool("stats")])
routes = Plugin("routes", routes=[Route("/x/{id}", handler), Route("/x/{other}", handler)])
prompt = Plugin("prompt", prompts=[Prompt("briefing", "a prompt", lambda arguments: "text")])
seam_a = Plugin("seam_a", strfry_command="cat")
seam_b = Plugin("seam_b", strfry_command="cat")
allowlist = Plugin("allowlist")
"""
NAMES: Final = ("core_tool", "tool_a", "tool_b", "routes", "prompt", "seam_a", "seam_b")
RUN_SECONDS: Final = 120


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    folder = tmp_path_factory.mktemp("clashes")
    info = folder / "tms_test_clashes-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: tms-test-clashes\nVersion: 1.0\n")
    entries = "".join(f"{name} = clashing:{name}\n" for name in (*NAMES, "allowlist"))
    (info / "entry_points.txt").write_text("[tms.plugins]\n" + entries)
    (folder / "clashing.py").write_text(textwrap.dedent(PLUGINS))
    yield folder


def start(site: Path, command: str, plugins: str, **env: str) -> subprocess.CompletedProcess[str]:
    args = [TMS, command] + (["--port", str(free_port())] if command == "serve" else [])
    return subprocess.run(
        args,
        env=environment(
            PYTHONPATH=str(site),
            TMS_PLUGINS=plugins,
            TMS_DATA_DIR=str(site / "never-made"),  # start-up stops before any database
            TMS_LOG_KEY=LOG_SIGNER.encode(),
            TMS_SECRET="clashes-" * 5,
            TMS_EVIDENCE_HOSTS="example.org",
            **env,
        ),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=RUN_SECONDS,
    )


@pytest.mark.parametrize(
    ("plugins", "line"),
    [
        (
            "allowlist",
            "plugin 'allowlist' of the package tms-test-clashes 1.0 collides with plugin "
            "'allowlist' of the package tms-example-plugins 1.0.0",
        ),
        (
            "core_tool",
            "MCP tool 'publish' of plugin 'core_tool' collides with MCP tool 'publish' of the core",
        ),
        (
            "tool_a,tool_b",
            "MCP tool 'stats' of plugin 'tool_b' collides with MCP tool 'stats' of plugin 'tool_a'",
        ),
        (
            "prompt",
            "MCP prompt 'briefing' of plugin 'prompt' collides with MCP prompt 'briefing' of the "
            "core",
        ),
        (
            "routes",
            "route 'GET /plugins/routes/x/{other}' of plugin 'routes' collides with route "
            "'GET /plugins/routes/x/{id}' of plugin 'routes'",
        ),
        (
            "seam_a,seam_b",
            "single-slot seam 'strfry_command' of plugin 'seam_b' collides with single-slot seam "
            "'strfry_command' of plugin 'seam_a'",
        ),
        (
            "strfry,seam_a",
            "single-slot seam 'strfry_command' of plugin 'seam_a' collides with single-slot seam "
            "'strfry_command' of plugin 'strfry'",
        ),
    ],
)
def test_each_collision_stops_tms_serve_with_its_one_line(
    site: Path, plugins: str, line: str
) -> None:
    result = start(site, "serve", plugins, TMS_STRFRY_COMMAND="cat" if "strfry" in plugins else "")
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stderr.splitlines() == [f"tms: {line}"]
    assert "serving on" not in result.stdout
    assert not (site / "never-made").exists()


def test_tms_stdio_stops_alike_and_a_plugin_not_installed_is_one_line(site: Path) -> None:
    result = start(site, "stdio", "tool_a,tool_b")
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.splitlines()[-1] == (
        "tms: MCP tool 'stats' of plugin 'tool_b' collides with MCP tool 'stats' of plugin 'tool_a'"
    )
    missing = start(site, "serve", "nowhere")
    assert missing.returncode == 1
    assert missing.stderr.splitlines() == [
        "tms: plugin 'nowhere': TMS_PLUGINS names it but no installed package declares it (entry "
        "point group 'tms.plugins')"
    ]
