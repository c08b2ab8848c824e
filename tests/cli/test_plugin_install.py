"""docs/operating.md's "Plugins in the environment", run as printed (issue 34 item 6): a plugin
installed with `uv pip install` survives the upgrade's `uv sync --locked --no-dev --inexact` and
`uv run`, where a plain `uv sync` removes it (which is why the section says so).

The environment is one of the test's own, with the installed uv: a project that depends on
nothing (syncing TMS' whole environment again would take minutes and touch the checkout's),
and `./my-plugins` a small package declaring a `tms.plugins` entry point, which is what TMS'
loader looks up (`tms.plugins.loading`)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Final

import pytest
from factories import environment

ROOT: Final = Path(__file__).resolve().parents[2]
OPERATING: Final = ROOT / "docs" / "operating.md"
FENCE: Final = re.compile(r"^```(\w+)\n(.*?)^```$", re.MULTILINE | re.DOTALL)
ENTRY_POINTS: Final = (
    "import json; from importlib.metadata import entry_points; "
    "print(json.dumps(sorted(e.name for e in entry_points(group='tms.plugins'))))"
)

PLUGIN_PROJECT: Final = """[project]
name = "tms-tiny-plugin"
version = "1.0.0"
requires-python = ">=3.11"
dependencies = []

[project.entry-points."tms.plugins"]
tiny = "tms_tiny:plugin"

[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[tool.hatch.build.targets.wheel]
packages = ["tms_tiny"]
"""

HOST_PROJECT: Final = """[project]
name = "host"
version = "0.1.0"
requires-python = ">=3.11"
dependencies = []
"""


def isolated() -> dict[str, str]:
    """This environment without the test run's own virtual environment (`uv run pytest` sets
    VIRTUAL_ENV, and `uv pip install` installs into an active one) or uv's project settings."""
    env = environment(UV_NO_PROGRESS="1")
    for name in ("VIRTUAL_ENV", "UV_PROJECT_ENVIRONMENT", "UV_PYTHON", "CONDA_PREFIX"):
        env.pop(name, None)
    return env


def section(heading: str) -> list[tuple[str, str]]:
    text = OPERATING.read_text("utf-8")
    body = text.split(f"\n### {heading}\n", 1)[1].split("\n### ", 1)[0]
    return FENCE.findall(body)


def plugins(where: Path, *run: str) -> list[str]:
    """The `tms.plugins` entry points the environment's Python sees: `run` runs it (`uv run
    --no-dev python`, or an interpreter's path), else the project's `.venv`."""
    command = [*run, "-c"] if run and run[-1].endswith("python") else [*run, "python", "-c"]
    done = subprocess.run(
        [*command, ENTRY_POINTS] if run else [".venv/bin/python", "-c", ENTRY_POINTS],
        cwd=where,
        env=isolated(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    names: list[str] = json.loads(done.stdout)
    return names


def test_an_installed_plugin_survives_the_upgrades_sync(tmp_path: Path) -> None:
    uv = shutil.which("uv")
    if uv is None:
        pytest.skip("needs uv on PATH")
    [block] = [code for lang, code in section("Plugins in the environment") if lang == "bash"]
    assert "uv pip install ./my-plugins" in block and "--inexact" in block
    host = tmp_path / "host"
    (host / "my-plugins" / "tms_tiny").mkdir(parents=True)
    (host / "my-plugins" / "pyproject.toml").write_text(PLUGIN_PROJECT, encoding="utf-8")
    (host / "my-plugins" / "tms_tiny" / "__init__.py").write_text("plugin = None\n")
    (host / "pyproject.toml").write_text(HOST_PROJECT, encoding="utf-8")

    def bash(script: str) -> None:
        done = subprocess.run(
            ["bash", "-c", "set -euo pipefail\n" + script],
            cwd=host,
            env=isolated(),
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert done.returncode == 0, done.stderr

    bash("uv lock\nuv sync --locked --no-dev")  # the installation, before any plugin
    assert plugins(host) == []
    bash(block)  # as printed
    assert plugins(host) == ["tiny"]
    assert plugins(host, uv, "run", "--no-dev") == ["tiny"]  # `uv run` keeps it too
    bash("uv sync --locked --no-dev")  # what the section warns of
    assert plugins(host) == []


# --- the Docker image --------------------------------------------------------------------------

DOCKERFILE: Final = ROOT / "Dockerfile"


def dockerfile_instruction(keyword: str, after: str) -> str:
    """The first `keyword` instruction after the line `after`, its continuation lines joined."""
    text = DOCKERFILE.read_text("utf-8").split(f"\n{after}\n", 1)[1]
    start = text.index(f"\n{keyword} ") + 1
    lines = []
    for line in text[start:].splitlines():
        lines.append(line.removesuffix("\\"))
        if not line.endswith("\\"):
            break
    return " ".join(lines).removeprefix(f"{keyword} ")  # as Docker joins them


def env_value(name: str) -> str:
    found = re.search(rf"\b{name}=(\S+)", DOCKERFILE.read_text("utf-8"))
    assert found is not None, name
    return found.group(1)


def test_the_images_plugins_build_argument_installs_them(tmp_path: Path) -> None:
    """The Dockerfile's plugin step, run by sh as Docker would (the build context and the
    image's environment moved to this test's directories): the packages the build argument names
    land in that environment; with none, nothing happens. Docker itself is not run."""
    uv = shutil.which("uv")
    if uv is None:
        pytest.skip("needs uv on PATH")
    venv = env_value("UV_PROJECT_ENVIRONMENT")
    step = dockerfile_instruction("RUN", 'ARG TMS_PLUGINS_PIP=""')
    assert f"--python {venv}/bin/python" in step and "/tmp/context" in step
    ours = tmp_path / "venv"
    made = subprocess.run(
        [uv, "venv", str(ours)], env=isolated(), capture_output=True, text=True, check=False
    )
    assert made.returncode == 0, made.stderr
    for argument, expected in (("", []), ("./plugins/tiny", ["tiny"])):
        context = tmp_path / "context"
        (context / "plugins" / "tiny" / "tms_tiny").mkdir(parents=True)
        (context / "plugins" / "tiny" / "pyproject.toml").write_text(PLUGIN_PROJECT, "utf-8")
        (context / "plugins" / "tiny" / "tms_tiny" / "__init__.py").write_text("plugin = None\n")
        script = step.replace("/tmp/context", str(context)).replace(venv, str(ours))
        done = subprocess.run(
            ["sh", "-c", script],
            env={**isolated(), "TMS_PLUGINS_PIP": argument},
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        assert not context.exists()  # the context's copy is not left in the image
        assert plugins(tmp_path, str(ours / "bin" / "python")) == expected


def test_the_documented_derived_image_matches_the_dockerfile() -> None:
    """The derived image in "Plugins in the environment" installs into the image's environment
    and gives the image back to its user; the build argument it names is the Dockerfile's."""
    [derived] = [
        code for lang, code in section("Plugins in the environment") if lang == "dockerfile"
    ]
    venv = env_value("UV_PROJECT_ENVIRONMENT")
    users = re.findall(r"^USER (\S+)$", DOCKERFILE.read_text("utf-8"), re.MULTILINE)
    assert f"--python {venv}/bin/python" in derived
    assert derived.strip().splitlines()[-1] == f"USER {users[-1]}"
    docs = " ".join(OPERATING.read_text("utf-8").split())
    for argument in re.findall(r"--build-arg (\w+)=", docs):
        assert f"\nARG {argument}=" in DOCKERFILE.read_text("utf-8"), argument
    assert 'ENTRYPOINT ["/usr/bin/tini", "--"]' in DOCKERFILE.read_text("utf-8")
    assert "install -y --no-install-recommends tini" in DOCKERFILE.read_text("utf-8")
    assert env_value("TMS_METRICS_HOST") == "0.0.0.0"
