"""docs/operating.md's nginx blocks, run as printed (issue 34 item 1): Debian's nginx, started
unprivileged with the reverse proxy's block as its whole site, in front of live servers on one
database; through it, nostr-tools' `Relay` authenticates, publishes and subscribes live (the
WebSocket upgrades the documented blocks once answered `200`), the MCP SDK client lists the
tools and makes a signed call, and a page loads. Then the same with the "Several servers"
`upstream` in place of the block's own, in front of two servers.

The only changes to the printed text: the listen port (a free one on 127.0.0.1), the
certificate (trustme's, for 127.0.0.1) and the servers' ports (the live servers'). The servers
get the settings the sections give: `TMS_BASE_URL` the public origin, `TMS_TRUSTED_PROXIES`
the proxy on the same machine."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import shutil
import ssl
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import httpx
import pytest
import trustme
from factories import (
    ASSETS,
    MEMBER,
    MEMBER2,
    OWNER,
    STRANGER,
    Live,
    environment,
    free_port,
    fresh_database,
    live_server,
    members,
    request,
    settings,
    terms,
)

from tms.ledger.service import Ledger
from tms.rules.admission import OPERATOR
from tms.store.database import open_pool

OPERATING: Final = Path(__file__).resolve().parents[2] / "docs" / "operating.md"
NGINX_FENCE: Final = re.compile(r"^```nginx\n(.*?)^```$", re.MULTILINE | re.DOTALL)
NGINX: Final = shutil.which("nginx") or "/usr/sbin/nginx"
UPSTREAM: Final = re.compile(r"^upstream tms \{\n.*?^\}\n", re.MULTILINE | re.DOTALL)
RUN_SECONDS: Final = 120

pytestmark = pytest.mark.skipif(
    not Path(NGINX).is_file(), reason="needs nginx (Debian: apt-get install nginx)"
)


def blocks() -> tuple[str, str]:
    """The reverse proxy's block and the "Several servers" upstream, as printed."""
    text = OPERATING.read_text("utf-8")
    [proxy] = [b for b in NGINX_FENCE.findall(text) if "server {" in b]
    [several] = NGINX_FENCE.findall(text.split("\n## Several servers\n", 1)[1].split("\n## ")[0])
    return proxy, several


def site(proxy: str, upstream: str, ports: list[int], listen: int, cert: Path, key: Path) -> str:
    """The printed block with its upstream replaced by `upstream` (itself, or the "Several
    servers" one), aimed at this test's servers, certificate and port."""
    assert len(UPSTREAM.findall(proxy)) == 1 and UPSTREAM.fullmatch(upstream)
    printed = re.findall(r"server 127\.0\.0\.1:(\d+);", upstream)
    assert len(printed) == len(ports), (printed, ports)
    for old, new in zip(printed, ports, strict=True):
        upstream = upstream.replace(f"127.0.0.1:{old};", f"127.0.0.1:{new};")
    out = UPSTREAM.sub(lambda _: upstream, proxy)
    for printed_line, ours in (
        ("listen 443 ssl;", f"listen 127.0.0.1:{listen} ssl;"),
        ("/etc/letsencrypt/live/tms.example.org/fullchain.pem", str(cert)),
        ("/etc/letsencrypt/live/tms.example.org/privkey.pem", str(key)),
    ):
        assert out.count(printed_line) == 1, printed_line
        out = out.replace(printed_line, ours)
    return out


@contextlib.contextmanager
def nginx(prefix: Path, site_conf: str, port: int) -> Iterator[None]:
    """Debian's nginx with `site_conf` as its http block's only site (as conf.d/tms.conf is in
    Debian's nginx.conf), its pid, logs and temporary files under `prefix`, in the foreground."""
    for folder in ("logs", "temp", "conf.d"):
        (prefix / folder).mkdir(parents=True, exist_ok=True)
    (prefix / "conf.d" / "tms.conf").write_text(site_conf, encoding="utf-8")
    temps = "\n".join(
        f"    {kind}_temp_path {prefix}/temp/{kind};"
        for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    (prefix / "nginx.conf").write_text(
        f"""worker_processes 1;
pid {prefix}/nginx.pid;
error_log {prefix}/logs/error.log warn;
daemon off;
events {{ worker_connections 256; }}
http {{
    access_log off;
{temps}
    include {prefix}/conf.d/*.conf;
}}
""",
        encoding="utf-8",
    )
    command = [NGINX, "-p", str(prefix), "-e", f"{prefix}/logs/error.log", "-c"]
    command.append(str(prefix / "nginx.conf"))
    checked = subprocess.run([*command, "-t"], capture_output=True, text=True, check=False)
    assert checked.returncode == 0, checked.stderr
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    errors = prefix / "logs" / "error.log"
    try:
        deadline = time.monotonic() + 30
        with httpx.Client(verify=False, timeout=2) as http:
            while True:
                assert process.poll() is None, errors.read_text()
                assert time.monotonic() < deadline, "nginx did not answer within 30 s"
                with contextlib.suppress(httpx.TransportError):
                    http.get(f"https://127.0.0.1:{port}/healthz")
                    break
                time.sleep(0.05)
        yield
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture(scope="module")
def database(pg_server_url: str, template_url: str) -> Iterator[str]:
    async def seed(url: str) -> None:
        pool = await open_pool(url, min_size=1, max_size=2)
        try:
            ledger = Ledger(pool)
            await ledger.approve([OWNER.pubkey])
            await ledger.submit(
                [
                    terms(OWNER),
                    members(OWNER, "rel", [MEMBER.pubkey, MEMBER2.pubkey]),
                    terms(MEMBER),
                    terms(MEMBER2),
                ],
                origin=OPERATOR,
            )
        finally:
            await pool.close()

    with fresh_database(pg_server_url, template_url, "tms_nginx") as url:
        asyncio.run(seed(url))
        yield url


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """A certificate for 127.0.0.1, its key, and the authority the clients are told to trust."""
    where = tmp_path_factory.mktemp("tls")
    authority = trustme.CA()
    issued = authority.issue_cert("127.0.0.1")
    cert, key, ca = where / "cert.pem", where / "key.pem", where / "ca.pem"
    issued.private_key_and_cert_chain_pem.write_to_path(str(key))
    issued.cert_chain_pems[0].write_to_path(str(cert))
    for chained in issued.cert_chain_pems[1:]:
        cert.write_bytes(cert.read_bytes() + chained.bytes())
    authority.cert_pem.write_to_path(str(ca))
    return cert, key, ca


def through(base: str, ca: Path, js: Path) -> None:
    """Every door through the proxy at `base`: the relay (nostr-tools), MCP (the SDK), a page."""
    shutil.copyfile(ASSETS / "relay_roles.mjs", js / "relay_roles.mjs")
    relay = subprocess.run(
        ["node", "--experimental-websocket", "relay_roles.mjs"],
        cwd=js,
        env=environment(
            RELAY_BASE=base,
            READER_HEX=MEMBER.secret.hex(),
            WRITER_HEX=MEMBER2.secret.hex(),
            STRANGER_HEX=STRANGER.secret.hex(),
            NODE_EXTRA_CA_CERTS=str(ca),
        ),
        capture_output=True,
        text=True,
        timeout=RUN_SECONDS,
    )
    assert relay.returncode == 0, relay.stderr
    seen = json.loads(relay.stdout.strip().splitlines()[-1])
    assert seen["published"] == ["", "", ""]
    assert seen["received"] == seen["sent"]  # live, in order, over the upgraded socket
    assert seen["stranger"].startswith("restricted: ")

    asyncio.run(mcp_through(base))

    with httpx.Client(verify=ssl.create_default_context(cafile=ca), timeout=30) as http:
        page = http.get(f"{base}/")
        assert page.status_code == 200 and "<html" in page.text.lower()
        upgrade = http.get(
            f"{base}/c/rel",
            headers={
                "Connection": "Upgrade",
                "Upgrade": "websocket",
                "Sec-WebSocket-Version": "13",
                "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
            },
        )
        assert upgrade.status_code == 101, upgrade.status_code


async def mcp_through(base: str) -> None:
    from mcp import Client

    async with Client(f"{base}/mcp") as client:  # its HTTP client trusts SSL_CERT_FILE
        tools = await client.list_tools()
        assert "publish" in {tool.name for tool in tools.tools}
        listed = await client.call_tool(
            "list_collections", {"request": request(MEMBER, "list_collections")}
        )
        assert not listed.is_error, listed.content
        assert [c["slug"] for c in listed.structured_content["result"]] == ["rel"]


def served(database: str, port: int) -> contextlib.AbstractContextManager[Live]:
    return live_server(
        database,
        settings(
            TMS_EMBED="off",
            TMS_BASE_URL=f"https://127.0.0.1:{port}",
            TMS_TRUSTED_PROXIES="127.0.0.1",
        ),
    )


def test_the_reverse_proxy_block_serves_every_door(
    database: str,
    certificate: tuple[Path, Path, Path],
    js_packages: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cert, key, ca = certificate
    monkeypatch.setenv("SSL_CERT_FILE", str(ca))  # the MCP SDK's own HTTP client trusts it
    proxy, _ = blocks()
    port = free_port()
    with served(database, port) as server:
        upstream = UPSTREAM.search(proxy)
        assert upstream is not None
        conf = site(proxy, upstream.group(0), [int(server.url.rsplit(":", 1)[1])], port, cert, key)
        with nginx(tmp_path, conf, port):
            through(f"https://127.0.0.1:{port}", ca, js_packages)


def test_several_servers_behind_the_same_block(
    database: str,
    certificate: tuple[Path, Path, Path],
    js_packages: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cert, key, ca = certificate
    monkeypatch.setenv("SSL_CERT_FILE", str(ca))
    proxy, several = blocks()
    port = free_port()
    with served(database, port) as one, served(database, port) as two:
        ports = [int(live.url.rsplit(":", 1)[1]) for live in (one, two)]
        with nginx(tmp_path, site(proxy, several, ports, port, cert, key), port):
            through(f"https://127.0.0.1:{port}", ca, js_packages)
