"""A tool's declared `reads` and its handler's parameter are checked together by mypy
(`tms.mcp.tools.Tool` is generic over what it reads): a handler that reads a collection its tool
did not declare is a type error, found before anything runs. mypy is run, as CI runs it, on a
snippet holding one right tool and two wrong ones, and must name exactly the wrong lines."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SNIPPET = """
from tms.ledger.access import ReadableCollection, Reader
from tms.mcp import schemas as s
from tms.mcp.tools import EVERY_COLLECTION, ONE_COLLECTION, THE_KEY, Tool
from tms.results import ClaimSummary
from tms.services import Services


async def list_claims(
    services: Services, readable: ReadableCollection, args: s.ListClaimsArgs
) -> list[ClaimSummary]:
    return await services.reads.list_claims(readable, args.sort, args.limit)


async def every_claim(
    services: Services, reader: Reader, args: s.ListClaimsArgs
) -> list[ClaimSummary]:
    return [
        claim
        for slug in reader.slugs
        for claim in await services.reads.list_claims(reader.collection(slug), "recent", 50)
    ]


A, R = s.ListClaimsArgs, list[ClaimSummary]
RIGHT = Tool("a", "reads the collection it names", A, R, list_claims, ONE_COLLECTION)
NOTHING = Tool("b", "declares no read", A, R, list_claims, THE_KEY)  # wrong
ONE = Tool("c", "declares one collection", A, R, every_claim, ONE_COLLECTION)  # wrong
ALL = Tool("d", "reads every collection", A, R, every_claim, EVERY_COLLECTION)
"""


def test_mypy_refuses_a_handler_reading_what_its_tool_did_not_declare(tmp_path: Path) -> None:
    snippet = tmp_path / "wrong_tool.py"
    snippet.write_text(SNIPPET)
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--config-file",
            str(ROOT / "pyproject.toml"),
            "--no-error-summary",
            "--hide-error-context",
            str(snippet),
        ],
        cwd=ROOT,  # the project's mypy cache: the tms modules are read once
        capture_output=True,
        text=True,
        timeout=600,
    )
    errors = [line for line in run.stdout.splitlines() if ": error:" in line]
    lines = {int(line.split(":")[1]) for line in errors}
    assert run.returncode == 1, run.stdout + run.stderr
    wrong = {n for n, line in enumerate(SNIPPET.splitlines(), 1) if line.endswith("# wrong")}
    assert len(wrong) == 2 and lines == wrong, run.stdout
