"""`GET /c/<slug>/annotations.jsonld` over real HTTP (uvicorn, the real app) and `tms export
--format annotations` (the console script): a member reads the collection's links as W3C Web
Annotations, with NIP-98 or the login cookie; the document expands offline with the shipped
context; anyone else gets what a missing collection gets; the command writes the same bytes."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from factories import (
    MEMBER,
    OWNER,
    STRANGER,
    TMS,
    claim,
    environment,
    evidence,
    link,
    live_server,
    nip98_auth,
    nip98_header,
    settings,
)
from offline_jsonld import AS, expand
from publishing import join, open_collection, publish

from tms.ledger.service import Ledger
from tms.nostr import nip19
from tms.nostr.events import Event, SecretKey
from tms.rules.annotations import MEDIA_TYPE

pytestmark = pytest.mark.anyio

SETTINGS = settings(TMS_EMBED="off")
TEXT = "Na\u0308ive \U0001f9ea DAO activity fell (n\u0303=12) in patients; symptoms eased."
QUOTE = "DAO activity fell (n\u0303=12)"
LINKS = 700  # more than one chunk of the stream


@pytest.fixture
async def collection(ledger: Ledger) -> dict[str, Any]:
    """`lab`: one evidence with a URL, a claim, `LINKS` links to it and one REBUTS link to the
    first link; `empty`, a collection without links."""
    await open_collection(ledger, OWNER, "lab", [MEMBER])
    await open_collection(ledger, OWNER, "empty", [MEMBER])
    await join(ledger, MEMBER)
    doc = evidence(MEMBER, "lab", TEXT, url="https://example.org/dao", title="DAO")
    said = claim(MEMBER, "lab", "Low DAO activity goes with histamine intolerance.")
    links = [
        link(MEMBER, "lab", doc["id"], said["id"], QUOTE, reason=f"reason {i}")
        for i in range(LINKS)
    ]
    disputed = link(OWNER, "lab", doc["id"], links[0]["id"], "symptoms eased", relation="REBUTS")
    await publish(ledger, doc, said, *links[:500])
    await publish(ledger, *links[500:], disputed)
    return {"evidence": doc, "claim": said, "links": [*links, disputed]}


@pytest.fixture
def url(db_url: str) -> Iterator[str]:
    with live_server(db_url, SETTINGS) as live:
        yield live.url


def get(url: str, key: SecretKey | None) -> httpx.Response:
    headers = {} if key is None else nip98_auth(key, url)
    return httpx.get(url, headers=headers, timeout=60)


async def test_a_member_reads_the_links_as_web_annotations(
    url: str, collection: dict[str, Any]
) -> None:
    where = f"{url}/c/lab/annotations.jsonld"
    answer = get(where, MEMBER)
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"] == MEDIA_TYPE
    assert answer.headers["cache-control"] == "no-store"
    assert 'filename="lab.annotations.jsonld"' in answer.headers["content-disposition"]
    document = answer.json()
    assert (document["id"], document["type"]) == (where, "AnnotationCollection")
    assert document["total"] == LINKS + 1
    items = document["first"]["items"]
    assert [item["nostrEvent"] for item in items] == collection["links"]  # ledger order
    for item in items:  # each traced to its signed event, which verifies
        Event.from_dict(item["nostrEvent"]).verify()
        assert nip19.event_id_decode(item["id"]) == item["nostrEvent"]["id"]
    first, disputed = items[0], items[-1]
    assert first["motivation"] == "assessing"
    assert first["creator"] == f"nostr:{nip19.npub_encode(MEMBER.pubkey)}"
    assert first["body"][0] == {
        "id": f"nostr:{nip19.note_encode(collection['claim']['id'])}",
        "type": "TextualBody",
        "value": "Low DAO activity goes with histamine intolerance.",
        "format": "text/plain",
    }
    assert first["target"]["source"] == "https://example.org/dao"
    quote, place = first["target"]["selector"]
    assert (quote["exact"], quote["prefix"], quote["suffix"]) == (
        QUOTE,
        "Na\u0308ive \U0001f9ea ",
        " in patients; symptoms eased.",
    )
    assert (place["start"], place["end"]) == (9, 9 + len(QUOTE))  # code points
    assert TEXT[place["start"] : place["end"]] == QUOTE
    assert disputed["motivation"] == "questioning"
    assert disputed["body"][0] == {"id": first["id"]}  # a link: its id alone


async def test_the_document_expands_offline_and_the_command_writes_the_same(
    url: str, collection: dict[str, Any], db_url: str
) -> None:
    body = get(f"{url}/c/lab/annotations.jsonld", MEMBER).content
    [expanded] = expand(json.loads(body))
    [page] = expanded[f"{AS}first"]
    assert len(page[f"{AS}items"][0]["@list"]) == LINKS + 1
    host, port = url.removeprefix("http://").split(":")
    env = environment(TMS_DATABASE_URL=db_url, TMS_HOST=host, TMS_PORT=port)
    command = [TMS, "export", "lab", "--format", "annotations"]
    written = subprocess.run(command, env=env, capture_output=True, timeout=180, check=False)
    assert written.returncode == 0, written.stderr
    assert written.stdout == body
    refused = subprocess.run(
        [*command, "--checkpoint"], env=env, capture_output=True, timeout=180, check=False
    )
    assert refused.returncode == 2
    assert b"--checkpoint goes with the JSON Lines export only" in refused.stderr


async def test_a_collection_without_links_is_an_empty_collection(
    url: str, collection: dict[str, Any]
) -> None:
    document = get(f"{url}/c/empty/annotations.jsonld", MEMBER).json()
    assert (document["type"], document["total"]) == ("AnnotationCollection", 0)
    assert "first" not in document


async def test_others_get_what_a_missing_collection_gets(
    url: str, collection: dict[str, Any]
) -> None:
    closed = get(f"{url}/c/lab/annotations.jsonld", STRANGER)
    missing = get(f"{url}/c/nothing-here/annotations.jsonld", STRANGER)
    odd = get(f"{url}/c/a/b/annotations.jsonld", STRANGER)
    assert closed.status_code == missing.status_code == odd.status_code == 404
    assert closed.content == missing.content == odd.content
    assert get(f"{url}/c/lab/annotations.jsonld", None).status_code == 401
    # a header signed for another URL does not hold up
    forged = httpx.get(
        f"{url}/c/lab/annotations.jsonld",
        headers=nip98_auth(MEMBER, f"{url}/c/lab/export.jsonl"),
        timeout=60,
    )
    assert forged.status_code == 401


async def test_a_browser_reads_them_with_its_login_cookie(
    url: str, collection: dict[str, Any]
) -> None:
    with httpx.Client(base_url=url, timeout=60) as client:
        challenge = client.get("/login/challenge").json()
        signed = MEMBER.sign(
            27235, "", int(time.time()), [["u", challenge["url"]], ["method", "POST"]]
        )
        logged = client.post(
            challenge["url"], headers={"Authorization": nip98_header(signed), "Origin": url}
        )
        assert logged.status_code == 200, logged.text
        answer = client.get("/c/lab/annotations.jsonld")
        assert answer.status_code == 200
        assert answer.json()["total"] == LINKS + 1
