"""Fuzzing every door a stranger can knock on, over real HTTP: mutated valid events and huge or
deeply nested values through `/mcp`, NIP-98 headers on the export and the login, and the pages'
forms. Whatever comes: never a 500, never a traceback or an internal name in the answer, and
never a partial write (the ledger's row counts move by a whole batch or not at all).

`TMS_FUZZ_EXAMPLES` (tests only) sets the examples per property: 100 unless set (CI), more for
a long run (`TMS_FUZZ_EXAMPLES=2000 uv run pytest tests/pages/test_fuzz.py
--hypothesis-show-statistics`)."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import time
from collections.abc import Iterator
from typing import Any, Final

import asyncpg
import httpx
import pytest
from factories import (
    Live,
    claim,
    evidence,
    fresh_database,
    key,
    link,
    live_server,
    nip98_header,
    settings,
    terms,
)
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from tms.nostr.events import FIELDS

# A failing example's huge values make hypothesis warn that their repr is large: with warnings as
# errors, that warning would stand in the report where the failure should.
pytestmark = pytest.mark.filterwarnings(
    "ignore:Generating overly large repr:hypothesis.errors.HypothesisWarning"
)

EXAMPLES: Final = int(os.environ.get("TMS_FUZZ_EXAMPLES", "100"))
FUZZ = hypothesis_settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
HEADERS: Final = {
    "Accept": "application/json, text/event-stream",
    "Content-Type": "application/json",
}
OWNER = key(0xC1)
DOC = "Histamine intolerance is thought to result from reduced diamine oxidase activity."
LEAKS: Final = ("Traceback", 'File "', "pydantic", "asyncpg", "starlette", "internal error")
TABLES: Final = ("events", "evidence", "claims", "links", "contradictions", "profiles")


@pytest.fixture(scope="module")
def live(pg_server_url: str, template_url: str) -> Iterator[Live]:
    with fresh_database(pg_server_url, template_url, "tms_fuzz") as url:
        asyncio.run(_sql(url, "INSERT INTO approvals (pubkey) VALUES ($1)", OWNER.pubkey))
        with live_server(url, settings(TMS_EMBED="off")) as server:
            seed = [terms(OWNER), evidence(OWNER, "lab", DOC), claim(OWNER, "lab", "DAO.")]
            _rpc(server, "tools/call", {"name": "publish", "arguments": {"events": seed}})
            yield server


@pytest.fixture(scope="module")
def http(live: Live) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=live.url, timeout=60) as client:
        yield client


@pytest.fixture(scope="module")
def session(live: Live) -> Iterator[httpx.Client]:
    """A logged-in browser: cookie, Origin and CSRF token, as the pages send them."""
    with httpx.Client(base_url=live.url, timeout=60) as client:
        challenge = client.get("/login/challenge").json()
        signed = OWNER.sign(
            27235, "", int(time.time()), [["u", challenge["url"]], ["method", "POST"]]
        )
        answer = client.post(
            challenge["url"], headers={"Authorization": nip98_header(signed), "Origin": live.url}
        )
        assert answer.status_code == 200, answer.text
        home = client.get("/").text
        csrf = home.split('name="tms-csrf" content="')[1].split('"')[0]
        client.headers.update({"Origin": live.url, "X-CSRF-Token": csrf})
        yield client


async def _sql(url: str, statement: str, *args: object) -> Any:
    conn = await asyncpg.connect(url)
    try:
        return await conn.fetch(statement, *args)
    finally:
        await conn.close()


def _rpc(live: Live, method: str, params: dict[str, Any]) -> dict[str, Any]:
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    reply: dict[str, Any] = httpx.post(live.mcp, json=body, headers=HEADERS, timeout=60).json()
    return reply


def counts(live: Live) -> dict[str, int]:
    query = " UNION ALL ".join(f"SELECT '{t}', count(*) FROM {t}" for t in TABLES)
    return {row[0]: row[1] for row in asyncio.run(_sql(live.database_url, query))}


def clean(response: httpx.Response) -> None:
    """An answer a client can read: not a 500, nothing of the server's insides."""
    assert response.status_code < 500 or response.status_code == 503, response.text[:500]
    for leak in LEAKS:
        assert leak not in response.text, response.text[:500]


# --- values ---------------------------------------------------------------------------------------

SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=False)
    | st.text(max_size=20)
)
JSON = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


@st.composite
def huge_or_deep(draw: st.DrawFn) -> Any:
    """Values built to cost: deep nesting around the cap, long strings, wide lists."""
    choice = draw(st.sampled_from(["deep", "long", "wide", "deep-objects"]))
    if choice == "deep":
        value: Any = draw(SCALARS)
        for _ in range(draw(st.integers(1, 200))):
            value = [value]
        return value
    if choice == "deep-objects":
        value = draw(SCALARS)
        for _ in range(draw(st.integers(1, 200))):
            value = {"k": value}
        return value
    if choice == "long":
        return draw(st.sampled_from(["a", "é", "\u2028", '"', "\\", "\x00", "💥"])) * draw(
            st.integers(1, 300_000)
        )
    return [draw(SCALARS)] * draw(st.integers(1, 20_000))


VALUES = JSON | huge_or_deep()


# --- mutated valid events through /mcp -----------------------------------------------------------


@st.composite
def mutated_batches(draw: st.DrawFn) -> list[Any]:
    """A valid batch (evidence, a claim, a link quoting the evidence), one part of it spoiled:
    an envelope field replaced or dropped, an extra field, content replaced (re-signed or not),
    a huge or deep value anywhere."""
    n = draw(st.integers(0, 10**9))
    doc = evidence(OWNER, "lab", f"{DOC} ({n})")
    said = claim(OWNER, "lab", f"A claim {n}.")
    quoted = link(OWNER, "lab", doc["id"], said["id"], "reduced diamine oxidase")
    batch: list[Any] = [doc, said, quoted]
    target = draw(st.integers(0, len(batch) - 1))
    event = dict(batch[target])
    how = draw(st.sampled_from(["replace", "drop", "extra", "content", "resign", "tags"]))
    if how == "replace":
        event[draw(st.sampled_from(FIELDS))] = draw(VALUES)
    elif how == "drop":
        del event[draw(st.sampled_from(FIELDS))]
    elif how == "extra":
        event[draw(st.text(max_size=10).filter(lambda k: k not in FIELDS))] = draw(VALUES)
    elif how == "content":
        event["content"] = json.dumps(draw(VALUES))
    elif how == "tags":
        event["tags"] = draw(VALUES)
    else:  # a correctly signed event whose content is junk: the schemas must refuse it
        content = draw(st.dictionaries(st.sampled_from(["collection", "text", "x"]), VALUES))
        content.setdefault("collection", "lab")
        event = OWNER.sign(event["kind"], json.dumps(content), event["created_at"]).to_dict()
    batch[target] = event
    return batch


@FUZZ
@given(batch=mutated_batches())
def test_mutated_events_are_refused_whole_with_a_clean_error(live: Live, batch: list[Any]) -> None:
    before = counts(live)
    body = {"jsonrpc": "2.0", "id": 9, "method": "tools/call"}
    body["params"] = {"name": "publish", "arguments": {"events": batch}}
    try:
        payload = json.dumps(body).encode()
    except ValueError:
        return
    response = httpx.post(live.mcp, content=payload, headers=HEADERS, timeout=60)
    clean(response)
    reply = response.json()
    after = counts(live)
    if "error" in reply:  # refused at the door: a JSON-RPC error in plain words
        assert response.status_code in (400, 413), reply
        assert after == before
        return
    result = reply["result"]
    if result.get("isError"):
        assert result["content"][0]["text"], result
        assert after == before
    else:  # the spoiled part happened to be harmless: then all of it is stored (or was already:
        # an example hypothesis draws again, the same events signed again, is skipped whole)
        published = result["structuredContent"]
        stored, skipped = len(published["accepted"]), len(published["skipped"])
        assert stored + skipped == len(batch), published
        assert after["events"] - before["events"] == stored


@FUZZ
@given(value=VALUES, where=st.sampled_from(["arguments", "request", "params", "id"]))
def test_huge_and_deep_values_anywhere_in_a_call_get_plain_answers(
    http: httpx.Client, value: Any, where: str
) -> None:
    params: dict[str, Any] = {"name": "list_collections", "arguments": {"request": value}}
    body: dict[str, Any] = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}
    if where == "arguments":
        params["arguments"] = {"x": value}
    elif where == "params":
        body["params"] = value
    elif where == "id":
        body["id"] = value
    try:
        payload = json.dumps(body).encode()
    except ValueError:
        return
    response = http.post("/mcp", content=payload, headers=HEADERS)
    clean(response)
    assert response.status_code in (200, 202, 400, 413), response.text[:300]


# --- NIP-98 headers ------------------------------------------------------------------------------


@st.composite
def authorizations(draw: st.DrawFn) -> str:
    """Junk headers, base64 of junk, and NIP-98 events with one part spoiled."""
    choice = draw(st.sampled_from(["text", "base64", "event"]))
    if choice == "text":
        return draw(st.text(max_size=300))
    if choice == "base64":
        raw = draw(st.binary(max_size=300) | JSON.map(lambda v: json.dumps(v).encode()))
        return "Nostr " + base64.b64encode(raw).decode()
    tags = draw(
        st.just([["u", "x"], ["method", "GET"]])
        | st.lists(st.lists(st.text(max_size=30), max_size=3), max_size=4)
    )
    event = OWNER.sign(27235, "", int(time.time()) + draw(st.integers(-200, 200)), tags).to_dict()
    if draw(st.booleans()):
        event[draw(st.sampled_from(FIELDS))] = draw(JSON)
    return "Nostr " + base64.b64encode(json.dumps(event).encode()).decode()


@FUZZ
@given(header=authorizations(), route=st.sampled_from(["export", "login"]))
def test_any_nip98_header_is_a_401_in_plain_words(
    http: httpx.Client, live: Live, header: str, route: str
) -> None:
    header = "".join(c for c in header if " " <= c <= "~").strip()  # what HTTP can carry
    if route == "export":
        response = http.get("/c/lab/export.jsonl", headers={"Authorization": header})
    else:
        response = http.post(
            "/login?nonce=1.2.3", headers={"Authorization": header, "Origin": live.url}
        )
    clean(response)
    assert response.status_code == 401, response.text[:300]
    assert set(response.json()) == {"error"}


# --- the pages' forms ----------------------------------------------------------------------------


@FUZZ
@given(
    route=st.sampled_from(["/publish", "/fetch", "/logout", "/login"]),
    body=st.binary(max_size=2000)
    | JSON.map(lambda v: json.dumps(v).encode())
    | st.dictionaries(st.sampled_from(["events", "url", "csrf"]), VALUES).map(
        lambda v: json.dumps(v).encode()
    ),
    query=st.text(max_size=50),
    content_type=st.sampled_from(["application/json", "application/x-www-form-urlencoded", ""]),
)
def test_the_pages_forms_answer_anything_cleanly(
    session: httpx.Client, route: str, body: bytes, query: str, content_type: str
) -> None:
    before = None
    if route == "/publish":
        before = counts_of(session)
    headers = {"Content-Type": content_type} if content_type else {}
    response = session.post(route, content=body, params={"q": query}, headers=headers)
    clean(response)
    if route == "/publish" and response.status_code != 200:
        assert counts_of(session) == before
    if route == "/logout":  # logging out ends the session: log in again for the next example
        session.cookies.clear()
        _relogin(session)


def counts_of(session: httpx.Client) -> int:
    """How many events the logged-in key's collection exports (the pages' own view)."""
    return session.get("/c/lab/export.jsonl").text.count("\n")


def _relogin(client: httpx.Client) -> None:
    challenge = client.get("/login/challenge").json()
    signed = OWNER.sign(27235, "", int(time.time()), [["u", challenge["url"]], ["method", "POST"]])
    answer = client.post(challenge["url"], headers={"Authorization": nip98_header(signed)})
    assert answer.status_code == 200, answer.text
    home = client.get("/").text
    client.headers["X-CSRF-Token"] = home.split('name="tms-csrf" content="')[1].split('"')[0]
