"""Fixtures of the docs tests: the npm packages that SPEC's and /docs' JavaScript import."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import pytest

JS_PACKAGE: Final = Path(__file__).parent / "js"
NPM_SECONDS: Final = 300


# --- Node.js and the packages SPEC's JavaScript imports --------------------------------------


@pytest.fixture(scope="session")
def js_packages() -> Iterator[Path]:
    """A temporary directory with tests/docs/js's lockfile installed by `npm ci`: scripts placed
    in it import nostr-tools and @noble/hashes as SPEC's snippet does."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.fail(
            "SPEC's JavaScript snippet needs Node.js 18 or later and npm on PATH "
            "(Debian: apt-get install nodejs npm; .ci/run installs them)",
            pytrace=False,
        )
    version = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=30)
    major = int(version.stdout.strip().lstrip("v").split(".")[0])
    if major < 18:
        pytest.fail(f"SPEC's JavaScript needs Node.js 18 or later, found {version.stdout}")
    root = Path(tempfile.mkdtemp(prefix="tms-spec-js-"))
    try:
        for name in ("package.json", "package-lock.json"):
            shutil.copyfile(JS_PACKAGE / name, root / name)
        result = subprocess.run(
            [npm, "ci", "--no-audit", "--no-fund", "--prefer-offline", "--loglevel=error"],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=NPM_SECONDS,
        )
        if result.returncode != 0:
            pytest.fail(
                f"npm ci of tests/docs/js failed:\n{result.stdout}{result.stderr}", pytrace=False
            )
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)
