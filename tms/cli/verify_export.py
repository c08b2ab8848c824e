"""`tms verify-export FILE.jsonl [--checkpoint FILE] --key VERIFIER_KEY [--policy FILE]`: prove,
offline, that an export holds every event of its collection's log, unaltered and in order
(`tms.tlog.audit`); with a witness policy, that the checkpoint proving it was cosigned by the
policy's quorum.

The file is read as bytes and split on `\\n` only (content may hold U+2028 raw). Checking ids
and BIP-340 signatures is nearly all the work, so big files are checked in worker processes, one
per CPU, in blocks of lines; the audit itself then runs over the results in file order.
Exit 0: every check holds; 1: something is missing, extra, out of order or changed, or no
checkpoint proves the file whole (its lines and the file against itself are checked all the
same); 2: the command could not run (a file that cannot be read, a key that is not one).
"""

from __future__ import annotations

import itertools
import os
import sys
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from multiprocessing import get_context
from typing import BinaryIO, Final, TextIO

from tms.cli.small_files import log_verifier, read_small
from tms.errors import LogError
from tms.orphans import exit_with_parent
from tms.tlog.audit import audit
from tms.tlog.export_lines import CheckpointLine, Line, read_kept, read_lines
from tms.tlog.policy import Policy

BLOCK_LINES: Final = 4000  # lines a worker checks at once
PARALLEL_FROM: Final = 2 * BLOCK_LINES  # smaller files are checked in this process
READ_BYTES: Final = 1 << 20


def run(
    path: str, kept_path: str | None, key: str, out: TextIO, *, policy_path: str | None = None
) -> int:
    try:
        verifier = log_verifier(key)
        kept = [] if kept_path is None else read_kept(read_small(kept_path))
        policy = None if policy_path is None else Policy.parse(read_small(policy_path))
        with open(path, "rb") as stream:
            report = audit(_checked(stream), verifier, kept, policy)
    except LogError as exc:
        print(f"tms: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"tms: cannot read {exc.filename}: {exc.strerror}", file=sys.stderr)
        return 2
    for line in report.lines():
        print(line, file=out)
    print(report.summary(), file=out)
    return 0 if report.ok else 1


def _raw_lines(stream: BinaryIO) -> Iterator[tuple[int, bytes]]:
    """(line number, bytes) for every non-blank line, split on b"\\n" only."""
    number, rest = 0, b""
    while chunk := stream.read(READ_BYTES):
        parts = (rest + chunk).split(b"\n")
        rest = parts.pop()
        for part in parts:
            number += 1
            if part.strip():
                yield number, part
    if rest.strip():
        yield number + 1, rest


def _blocks(stream: BinaryIO) -> Iterator[tuple[list[int], list[bytes]]]:
    numbers: list[int] = []
    block: list[bytes] = []
    for number, raw in _raw_lines(stream):
        numbers.append(number)
        block.append(raw)
        if len(block) == BLOCK_LINES:
            yield numbers, block
            numbers, block = [], []
    if block:
        yield numbers, block


def _checked(stream: BinaryIO) -> Iterator[Line | CheckpointLine]:
    """Every line checked, in file order: in this process for a small file, else by worker
    processes (spawned: nothing of this process's state is copied), a few blocks ahead."""
    blocks = _blocks(stream)
    head = list(itertools.islice(blocks, PARALLEL_FROM // BLOCK_LINES))
    if len(head) < PARALLEL_FROM // BLOCK_LINES:
        for numbers, raws in head:
            yield from read_lines(numbers, raws)
        return
    workers = os.cpu_count() or 1
    with ProcessPoolExecutor(
        workers, mp_context=get_context("spawn"), initializer=exit_with_parent
    ) as pool:
        pending: deque[Future[list[Line | CheckpointLine]]] = deque()
        for numbers, raws in itertools.chain(head, blocks):
            pending.append(pool.submit(read_lines, numbers, raws))
            while len(pending) > 2 * workers:  # bounded read-ahead: memory stays flat
                yield from pending.popleft().result()
        while pending:
            yield from pending.popleft().result()
