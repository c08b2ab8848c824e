"""The extraction worker: `python -m tms.fetch.worker FD MEMORY_BYTES`, started by
`tms.fetch.process` on behalf of `tms.fetch.pool`.

A worker is a fresh interpreter, not a fork of the server: it inherits no memory, threads,
event loop or database connection, no file descriptor but its end of a socket pair (FD), and an
environment stripped to locale, paths and Python's own variables (no `TMS_*` secret reaches the
process that parses hostile documents). It imports only `tms.fetch.extract` and its libraries,
lowers its CPU priority (`NICE`) so the server always comes first, disables core dumps, warms
trafilatura up, says it is ready, then serves one job at a time until its socket closes:

    job    header {"content_type", "url", "max_chars"}, payload: the body
    reply  header {"title", "error", "why", "retire"}, payload: the text, UTF-8

Each message is a frame: 12 bytes (the header's length, u32, and the payload's, u64, both
big-endian), the header as JSON, then the payload. JSON, never pickle: the server must not run
whatever a worker that a hostile document took over might send it.

Memory: the pool kills a worker whose resident memory passes MEMORY_BYTES (it watches from the
outside, so a parser stuck in C code cannot hide). Inside, the address space is capped at twice
that (RLIMIT_AS) for what grows faster than the pool looks. Where that cap bites, libxml2 and
PDFium may not say so (a parse just stops early), so a job whose peak address space came within
a quarter of MEMORY_BYTES of the cap is reported as out of memory whatever it returned
(`why: "memory"`), as is a MemoryError. A `FetchRefused` comes back as `why: "refused"` with
its message, another `FetchError` as `why: "unreadable"`, anything else as `why: "failed"`.
`retire` asks the pool for a fresh worker instead of this one: after running out of memory or
an unexpected error, or when the job left this process
bigger than `RETIRE_RSS` resident or MEMORY_BYTES of address space.
"""

from __future__ import annotations

import json
import os
import resource
import socket
import struct
import sys
import traceback
from typing import Any, Final

FRAME: Final = struct.Struct(">IQ")  # header length, payload length
MAX_HEADER: Final = 1 << 20
NICE: Final = 10
RETIRE_RSS: Final = 256 * 1024 * 1024
READY: Final = {"ready": True}
_WARM_UP: Final = b"<html><head><title>t</title></head><body><p>Warming up.</p></body></html>"


def encode(header: dict[str, Any], payload: bytes = b"") -> tuple[bytes, bytes]:
    """A frame's first part (lengths and header) and its payload, to send one after the other."""
    head = json.dumps(header, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    return FRAME.pack(len(head), len(payload)) + head, payload


def _recv_exactly(sock: socket.socket, size: int) -> bytearray | None:
    """`size` bytes, or None when the other side closed first."""
    buffer = bytearray(size)
    view = memoryview(buffer)
    got = 0
    while got < size:
        n = sock.recv_into(view[got:])
        if n == 0:
            return None
        got += n
    return buffer


def _receive(sock: socket.socket) -> tuple[dict[str, Any], bytes] | None:
    lengths = _recv_exactly(sock, FRAME.size)
    if lengths is None:
        return None
    head_size, payload_size = FRAME.unpack(lengths)
    if head_size > MAX_HEADER:
        raise ValueError(f"job header of {head_size} bytes")
    head = _recv_exactly(sock, head_size)
    payload = _recv_exactly(sock, payload_size)
    if head is None or payload is None:
        return None
    header = json.loads(head.decode("utf-8"))
    if not isinstance(header, dict):
        raise ValueError("job header is not a JSON object")
    return header, bytes(payload)


def _send(sock: socket.socket, header: dict[str, Any], payload: bytes = b"") -> None:
    head, body = encode(header, payload)
    sock.sendall(head)
    sock.sendall(body)


def _status(field: str) -> int:
    """A size from /proc/self/status in bytes (VmPeak, VmRSS), or 0 where there is none."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _job(header: dict[str, Any], body: bytes, memory_bytes: int) -> tuple[dict[str, Any], bytes]:
    from tms.errors import FetchError, FetchRefused, one_line
    from tms.fetch.extract import extract

    reply: dict[str, Any] = {"title": None, "error": None, "why": None, "retire": False}
    text = b""
    try:
        result = extract(
            body, str(header["content_type"]), str(header["url"]), max_chars=header["max_chars"]
        )
        text = result.text.encode("utf-8")
        reply["title"] = result.title
    except FetchError as exc:  # its class crosses back as `why`
        reply.update(
            error=str(exc), why="refused" if isinstance(exc, FetchRefused) else "unreadable"
        )
    except MemoryError:
        reply.update(why="memory", retire=True)
    except Exception as exc:  # a bug or a library's surprise: report it, then start afresh
        traceback.print_exc(file=sys.stderr)
        reply.update(error=f"{type(exc).__name__}: {one_line(exc, 300)}", why="failed")
        reply["retire"] = True
    peak = _status("VmPeak")
    if peak >= 2 * memory_bytes - memory_bytes // 4:
        reply.update(title=None, error=None, why="memory", retire=True)  # it may have been cut
        text = b""
    if peak > memory_bytes or _status("VmRSS") > RETIRE_RSS:
        reply["retire"] = True  # give the memory back to the system rather than keep it idle
    return reply, text


def main(argv: list[str]) -> int:
    sock = socket.socket(fileno=int(argv[1]))
    sock.setblocking(True)
    memory_bytes = int(argv[2])
    os.nice(NICE)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    import logging

    logging.disable(logging.WARNING)  # trafilatura's warnings about odd pages are no one's news

    from tms.fetch.extract import extract

    # Load the libraries, and let trafilatura set itself up (a quarter of a second, once),
    # before saying "ready": the first caller should not pay for it.
    extract(_WARM_UP, "text/html", "http://localhost/", max_chars=1000)
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = 2 * memory_bytes if hard == resource.RLIM_INFINITY else min(2 * memory_bytes, hard)
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    _send(sock, READY)
    while True:
        job = _receive(sock)
        if job is None:
            return 0  # the pool closed our socket, or the server is gone
        reply, text = _job(*job, memory_bytes)
        del job
        _send(sock, reply, text)
        if reply["retire"]:
            return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv))
    except (BrokenPipeError, ConnectionResetError):
        sys.exit(0)  # the pool hung up on us (a timeout, a cancelled fetch): nothing to say
