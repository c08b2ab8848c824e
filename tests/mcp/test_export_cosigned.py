"""An export that ends with the newest checkpoint the witnesses cosigned (issue 33, item 4): with
the one witness down, `?checkpoint=1` ends with the latest signed checkpoint, which
`tms verify-export --policy` refuses, advising what helps; `?checkpoint=cosigned` ends at the
one the quorum cosigned before the witness went down, and passes. Real servers: witness W and
server A, whose policy names W."""

from __future__ import annotations

import io
import json
import time
from pathlib import Path

import httpx
from factories import (
    LOG_SIGNER,
    claim,
    free_port,
    fresh_database,
    live_server,
    nip98_auth,
    settings,
    terms,
)
from mcp_helpers import Caller, approve

from tms.cli.verify_export import run as verify_export
from tms.nostr.events import SecretKey
from tms.tlog.cosignature import CosignerKey


def _export(url: str, owner: SecretKey) -> str:
    response = httpx.get(url, headers=nip98_auth(owner, url), timeout=60)
    assert response.status_code == 200, response.text
    return response.text


def _verify(path: Path, policy: Path) -> tuple[int, str]:
    out = io.StringIO()
    code = verify_export(
        str(path), None, LOG_SIGNER.verifier().encode(), out, policy_path=str(policy)
    )
    return code, out.getvalue()


def test_an_export_ends_with_the_cosigned_checkpoint_while_the_witness_is_down(
    pg_server_url: str, template_url: str, tmp_path: Path
) -> None:
    witness = CosignerKey.generate("w.example/witness")
    (tmp_path / "logs").write_text(f"log 127.0.0.1/c/ {LOG_SIGNER.verifier().encode()}\n")
    port_w = free_port()
    policy = tmp_path / "policy"
    policy.write_text(
        f"log {LOG_SIGNER.verifier().encode()}\n"
        f"witness W {witness.verifier().encode()} http://127.0.0.1:{port_w}/witness\nquorum W\n"
    )
    config_w = settings(
        TMS_EMBED="off", TMS_WITNESS_LOGS=str(tmp_path / "logs"), TMS_WITNESS_KEY=witness.encode()
    )
    config_a = settings(TMS_EMBED="off", TMS_WITNESS_POLICY=str(policy))
    owner = SecretKey.generate()
    with (
        fresh_database(pg_server_url, template_url) as db_w,
        fresh_database(pg_server_url, template_url) as db_a,
    ):
        w = live_server(db_w, config_w, port=port_w)
        w.__enter__()
        try:
            with live_server(db_a, config_a) as a:
                approve(db_a, owner)
                caller = Caller(a)
                try:
                    caller.publish(terms(owner), *[claim(owner, "lab", f"c {i}") for i in range(3)])
                    url = f"{a.url}/c/lab/checkpoint"
                    deadline = time.monotonic() + 30
                    while True:
                        shown = httpx.get(url, headers=nip98_auth(owner, url), timeout=10)
                        if shown.headers["tms-quorum"] == "met" and "\n3\n" in shown.text:
                            break
                        assert time.monotonic() < deadline, shown.headers
                        time.sleep(0.1)
                    w.__exit__(None, None, None)  # the witness goes down
                    caller.publish(*[claim(owner, "lab", f"later {i}") for i in range(2)])
                finally:
                    caller.close()
                latest = _export(f"{a.url}/c/lab/export.jsonl?checkpoint=1", owner)
                (tmp_path / "latest.jsonl").write_text(latest)
                code, said = _verify(tmp_path / "latest.jsonl", policy)
                assert code == 1, said
                assert "the checkpoint at size 5 is cosigned by no witness" in said
                assert "export with ?checkpoint=cosigned" in said
                cosigned = _export(f"{a.url}/c/lab/export.jsonl?checkpoint=cosigned", owner)
        finally:
            w.__exit__(None, None, None)
    (tmp_path / "cosigned.jsonl").write_text(cosigned)
    code, said = _verify(tmp_path / "cosigned.jsonl", policy)
    assert code == 0, said
    assert "the checkpoint at size 3 is cosigned by W: the policy's quorum (witness W) holds" in (
        said
    )
    lines = cosigned.splitlines()
    assert len(lines) == 5  # the owner's terms, its first three claims, the checkpoint line
    assert json.loads(lines[-1])["entries"] == [json.loads(line)["id"] for line in lines[1:4]]
    assert lines[:4] == latest.splitlines()[:4]
