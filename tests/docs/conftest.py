"""Fixtures of the docs tests: the npm packages that SPEC's and /docs' JavaScript import."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import pytest

HERE: Final = Path(__file__).parent
NPM_SECONDS: Final = 300


def _installed(package: Path, node_major: int, whose: str) -> Iterator[Path]:
    """A temporary directory with `package`'s lockfile installed by `npm ci`: scripts placed in
    it import what the snippets import (ESM resolves bare imports from the importing file's
    directory)."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.fail(
            f"{whose} JavaScript snippet needs Node.js {node_major} or later and npm on PATH "
            "(Debian: apt-get install nodejs npm; .ci/run installs them)",
            pytrace=False,
        )
    version = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=30)
    major = int(version.stdout.strip().lstrip("v").split(".")[0])
    if major < node_major:
        pytest.fail(
            f"{whose} JavaScript needs Node.js {node_major} or later, found {version.stdout}"
        )
    root = Path(tempfile.mkdtemp(prefix="tms-docs-js-"))
    try:
        for name in ("package.json", "package-lock.json"):
            shutil.copyfile(package / name, root / name)
        result = subprocess.run(
            [npm, "ci", "--no-audit", "--no-fund", "--prefer-offline", "--loglevel=error"],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=NPM_SECONDS,
        )
        if result.returncode != 0:
            pytest.fail(
                f"npm ci of {package.relative_to(HERE.parent.parent)} failed:\n"
                f"{result.stdout}{result.stderr}",
                pytrace=False,
            )
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def js_packages() -> Iterator[Path]:
    """tests/docs/js installed: the nostr-tools and @noble/hashes SPEC's snippet imports (the
    last nostr-tools that still exports `@noble/hashes/utils` and signs on Node 18)."""
    yield from _installed(HERE / "js", 18, "SPEC's")


@pytest.fixture(scope="session")
def js_current_packages() -> Iterator[Path]:
    """tests/docs/js-current installed: nostr-tools as `npm install nostr-tools` gives it today,
    in a package.json with "type": "module", which is what /docs' snippet is written for."""
    yield from _installed(HERE / "js-current", 20, "/docs'")
