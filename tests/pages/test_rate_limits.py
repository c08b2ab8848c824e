"""Rate limits and the refusal log through a real server: 429 with Retry-After on HTTP, SPEC's
failed call on MCP, budgets per address (X-Forwarded-For only from a trusted proxy), per key
once verified (a forged event spends nobody's), per key on fetches and logins; and every
refusal recorded with who, where and what kind, never what was sent, without changing an answer.

The server trusts 127.0.0.1 as a proxy, so each test speaks from an address of its own (its
X-Forwarded-For) and spends only its own budget."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import asyncpg
import httpx
import pytest
from factories import (
    Live,
    claim,
    fresh_database,
    key,
    live_server,
    nip98_header,
    request,
    settings,
    signed,
    terms,
)

from tms.nostr.events import SecretKey

LIMITED = settings(
    TMS_EMBED="off",
    TMS_TRUSTED_PROXIES="127.0.0.1",
    TMS_RATE_ADDRESS="20/minute",
    TMS_RATE_KEY="3/minute",
    TMS_RATE_FETCH="1/minute",
    TMS_RATE_LOGIN="1/minute",
)
SECRET_WORDS = "SECRET-CONTENT-7f3a"
HEADERS = {"Accept": "application/json, text/event-stream"}


@pytest.fixture(scope="module")
def live(pg_server_url: str, template_url: str) -> Iterator[Live]:
    with fresh_database(pg_server_url, template_url) as url, live_server(url, LIMITED) as server:
        yield server


class Client:
    """One client, at an address of its own behind the trusted proxy."""

    def __init__(self, live: Live, address: str) -> None:
        self.live = live
        self.address = address
        self.http = httpx.Client(base_url=live.url, headers={"X-Forwarded-For": address})

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.http.close()

    def rpc(self, method: str, params: dict[str, Any] | None = None) -> httpx.Response:
        body: dict[str, Any] = {"jsonrpc": "2.0", "id": 7, "method": method}
        if params is not None:
            body["params"] = params
        return self.http.post("/mcp", json=body, headers=HEADERS)

    def call(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        response = self.rpc("tools/call", {"name": tool, "arguments": arguments})
        assert response.status_code == 200, response.text
        result: dict[str, Any] = response.json()["result"]
        return result

    def tool(self, signer: SecretKey, name: str, **args: Any) -> dict[str, Any]:
        return self.call(name, {"request": request(signer, name, **args)})


def error_text(result: dict[str, Any]) -> str:
    assert result.get("isError") is True, result
    text: str = result["content"][0]["text"]
    return text


def refusals(database_url: str, address: str, count: int) -> list[dict[str, Any]]:
    """The refusal log's rows for `address`, once there are `count` (the writer runs every
    second, off the request path)."""

    async def read() -> list[dict[str, Any]]:
        conn = await asyncpg.connect(database_url)
        try:
            rows = await conn.fetch(
                "SELECT * FROM refusals WHERE address = $1 ORDER BY seq", address
            )
        finally:
            await conn.close()
        return [dict(row) for row in rows]

    deadline = time.monotonic() + 15
    while len(rows := asyncio.run(read())) < count and time.monotonic() < deadline:
        time.sleep(0.2)
    return rows


def test_an_address_over_its_budget_gets_a_429_with_retry_after(live: Live) -> None:
    with Client(live, "198.51.100.1") as client:
        for _ in range(20):
            assert client.http.get("/terms").status_code == 200
        refused = client.http.get("/terms")
        assert refused.status_code == 429
        retry = int(refused.headers["Retry-After"])
        assert 1 <= retry <= 60
        assert refused.json() == {
            "error": "rate limited: too many requests from this address (at most 20 per minute); "
            f"try again in {retry} s"
        }
        # /mcp answers with a JSON-RPC error, before reading the body (so without its id).
        mcp = client.rpc("tools/list")
        assert mcp.status_code == 429 and "Retry-After" in mcp.headers
        reply = mcp.json()
        assert reply["id"] is None and reply["error"]["code"] == -32000
        assert reply["error"]["message"].startswith(
            "rate limited: too many requests from this address"
        )
        # Health checks and the pages' files are never limited; other addresses have their own.
        assert client.http.get("/healthz").status_code == 200
        assert client.http.get("/static/tms.css").status_code == 200
        with Client(live, "198.51.100.2") as elsewhere:
            assert elsewhere.http.get("/terms").status_code == 200
        rows = refusals(live.database_url, "198.51.100.1", 2)
        assert [(r["kind"], r["tool"], r["pubkey"]) for r in rows] == [
            ("rate_limited", "terms", None),  # the route's name in the table, as after routing
            ("rate_limited", "mcp", None),
        ]


def test_x_forwarded_for_counts_only_from_a_trusted_proxy(
    pg_server_url: str, template_url: str
) -> None:
    config = settings(TMS_EMBED="off", TMS_RATE_ADDRESS="3/minute")
    with fresh_database(pg_server_url, template_url) as url, live_server(url, config) as live:
        answers = [
            httpx.get(f"{live.url}/terms", headers={"X-Forwarded-For": f"192.0.2.{n}"})
            for n in range(4)
        ]
        assert [a.status_code for a in answers] == [200, 200, 200, 429]
        assert refusals(url, "127.0.0.1", 1)[0]["kind"] == "rate_limited"


def test_a_key_over_its_budget_is_refused_as_a_failed_call(live: Live) -> None:
    with Client(live, "198.51.100.3") as client:
        busy, other = key(0xA1), key(0xA2)
        for _ in range(3):
            assert client.tool(busy, "list_collections")["structuredContent"] == {"result": []}
        text = error_text(client.tool(busy, "list_collections"))
        assert text.startswith(
            "rate limited: too many requests from this key (at most 3 per minute)"
        )
        assert text.endswith(" s") and "try again in " in text
        assert not client.tool(other, "list_collections").get("isError")
        [row] = refusals(live.database_url, "198.51.100.3", 1)
        assert (row["kind"], row["tool"], row["pubkey"]) == (
            "rate_limited",
            "list_collections",
            busy.pubkey,
        )


def test_forged_events_never_spend_another_keys_budget(live: Live) -> None:
    with Client(live, "198.51.100.4") as client:
        victim, forger = key(0xA3), key(0xA4)
        genuine = terms(victim)
        for n in range(5):
            forged = {**claim(forger, "lab", f"Forged {n}."), "pubkey": victim.pubkey}
            result = client.call("publish", {"events": [genuine, forged]})
            assert "events[1]" in error_text(result) and "does not" in error_text(result)
            stolen = {**request(victim, "list_collections"), "sig": "0" * 128}
            assert "signature does not verify" in error_text(
                client.call("list_collections", {"request": stolen})
            )
        for _ in range(3):  # the victim's whole budget is still there
            assert not client.tool(victim, "list_collections").get("isError")
        rows = refusals(live.database_url, "198.51.100.4", 10)
        assert {r["kind"] for r in rows} == {"bad_signature"}
        assert {r["pubkey"] for r in rows} == {None}  # never a key whose signature did not verify


def test_fetches_have_a_budget_per_key(live: Live) -> None:
    with Client(live, "198.51.100.5") as client:
        fetcher = key(0xA5)
        approve(live.database_url, fetcher)
        first = error_text(client.tool(fetcher, "fetch_url", url="http://169.254.169.254/latest"))
        assert first.startswith("refused:")
        second = error_text(client.tool(fetcher, "fetch_url", url="https://example.org/"))
        assert second.startswith("rate limited: too many requests from this key's fetches")
        rows = refusals(live.database_url, "198.51.100.5", 2)
        assert [(r["kind"], r["tool"], r["pubkey"]) for r in rows] == [
            ("ssrf", "fetch_url", fetcher.pubkey),
            ("rate_limited", "fetch_url", fetcher.pubkey),
        ]


def test_logins_have_a_budget_per_key(live: Live) -> None:
    with Client(live, "198.51.100.6") as client:
        person = key(0xA6)
        approve(live.database_url, person)

        def log_in() -> httpx.Response:
            challenge = client.http.get("/login/challenge").json()
            event = person.sign(
                27235, "", int(time.time()), [["u", challenge["url"]], ["method", "POST"]]
            )
            return client.http.post(
                challenge["url"], headers={"Authorization": nip98_header(event), "Origin": live.url}
            )

        assert log_in().status_code == 200
        again = log_in()
        assert again.status_code == 429 and int(again.headers["Retry-After"]) >= 1
        assert again.json()["error"].startswith(
            "rate limited: too many requests from this key's logins"
        )
        [row] = refusals(live.database_url, "198.51.100.6", 1)
        assert (row["kind"], row["tool"], row["pubkey"]) == ("rate_limited", "login", person.pubkey)


def test_every_refusal_is_recorded_with_who_where_and_what_kind_never_content(live: Live) -> None:
    with Client(live, "198.51.100.7") as client:
        stranger, owner = key(0xA7), key(0xA8)
        approve(live.database_url, owner)
        assert not client.call("publish", {"events": [terms(owner)]}).get("isError")
        secret = claim(stranger, "lab", f"{SECRET_WORDS} in a claim")
        error_text(client.call("publish", {"events": [terms(stranger), secret]}))  # not a member
        error_text(client.call("publish", {"events": [{**secret, "sig": "1" * 128}]}))  # forged
        used = request(owner, "list_collections")
        client.call("list_collections", {"request": used})
        error_text(client.call("list_collections", {"request": used}))  # replay
        stale = request(owner, "list_collections", created_at=int(time.time()) - 3600)
        error_text(client.call("list_collections", {"request": stale}))
        reader = key(0xAB)  # the owner's budget of 3 calls a minute is spent above
        error_text(client.tool(reader, "list_claims", collection="nowhere"))  # not a reader
        export = f"{live.url}/c/lab/export.jsonl"
        assert client.http.get(export).status_code == 401  # no credentials
        event = reader.sign(27235, "", int(time.time()), [["u", export], ["method", "GET"]])
        assert (
            client.http.get(export, headers={"Authorization": nip98_header(event)}).status_code
            == 404
        )
        rows = refusals(live.database_url, "198.51.100.7", 7)
        assert [(r["kind"], r["tool"], r["pubkey"]) for r in rows] == [
            ("not_member", "publish", stranger.pubkey),
            ("bad_signature", "publish", None),
            ("replay", "list_collections", owner.pubkey),
            ("stale", "list_collections", owner.pubkey),
            ("not_member", "list_claims", reader.pubkey),
            ("unauthenticated", "export", None),
            ("not_member", "export", reader.pubkey),
        ]
        for row in rows:
            assert set(row) == {"seq", "at", "kind", "tool", "pubkey", "address", "count"}
            assert row["count"] == 1
            assert SECRET_WORDS not in repr(row) and "lab" not in repr(row)
            assert abs(row["at"].timestamp() - time.time()) < 120


def test_the_logs_routes_note_their_refusals_and_spend_the_key_budget(live: Live) -> None:
    """The transparency log's member-only routes refuse as export does: a 401 without
    credentials, the same 404 for a non-member (noted under the route's name, never the slug),
    and the caller's key budget spent before membership is looked up."""
    with Client(live, "198.51.100.9") as client:
        stranger = key(0xAC)
        paths = ["/c/lab/checkpoint", "/c/lab/consistency?old=1", "/c/lab/tile/0/000"]
        assert client.http.get(paths[0]).status_code == 401
        for path in paths:  # three: the key's budget of 3 a minute
            url = f"{live.url}{path}"
            event = stranger.sign(27235, "", int(time.time()), [["u", url], ["method", "GET"]])
            answer = client.http.get(url, headers={"Authorization": nip98_header(event)})
            assert answer.status_code == 404 and answer.json() == {"error": "no such collection"}
        url = f"{live.url}/c/lab/checkpoint"
        event = stranger.sign(27235, "", int(time.time()), [["u", url], ["method", "GET"]])
        over = client.http.get(url, headers={"Authorization": nip98_header(event)})
        assert over.status_code == 429 and int(over.headers["Retry-After"]) >= 1
        rows = refusals(live.database_url, "198.51.100.9", 5)
        assert [(r["kind"], r["tool"], r["pubkey"]) for r in rows] == [
            ("unauthenticated", "log checkpoint", None),
            ("not_member", "log checkpoint", stranger.pubkey),
            ("not_member", "log consistency", stranger.pubkey),
            ("not_member", "log tile", stranger.pubkey),
            ("rate_limited", "log checkpoint", stranger.pubkey),
        ]


def test_recording_never_changes_an_answer(live: Live) -> None:
    """With the log's table gone, refusals are answered exactly as before; the records wait in
    memory and are written once the table is back."""
    with Client(live, "198.51.100.8") as client:
        stranger = key(0xA9)
        batch = [terms(stranger), claim(stranger, "lab", "Let me in.")]
        before = client.call("publish", {"events": batch})
        _sql(live.database_url, "ALTER TABLE refusals RENAME TO refusals_away")
        try:
            time.sleep(1.5)  # the writer has failed at least once
            assert client.call("publish", {"events": batch}) == before
            assert client.http.get("/c/lab/export.jsonl").status_code == 401
        finally:
            _sql(live.database_url, "ALTER TABLE refusals_away RENAME TO refusals")
        rows = refusals(live.database_url, "198.51.100.8", 3)
        assert [r["kind"] for r in rows] == ["not_member", "not_member", "unauthenticated"]


def _sql(database_url: str, statement: str, *args: object) -> None:
    async def run() -> None:
        conn = await asyncpg.connect(database_url)
        try:
            await conn.execute(statement, *args)
        finally:
            await conn.close()

    asyncio.run(run())


def approve(database_url: str, signer: SecretKey) -> None:
    """The operator approves the key (as `tms approve` does)."""
    _sql(database_url, "INSERT INTO approvals (pubkey) VALUES ($1)", signer.pubkey)


def test_a_signed_event_is_recorded_under_its_key_only_once_verified() -> None:
    """The one rule the log's `pubkey` column keeps (pure: the error says whose it is)."""
    from tms.errors import PublishError
    from tms.rules.publish import parse_events

    forged = {**signed(key(0xAA), 4702, {"collection": "lab", "text": "x"}), "sig": "2" * 128}
    with pytest.raises(PublishError) as refused:
        parse_events([forged], int(time.time()))
    assert refused.value.refusal == "bad_signature" and refused.value.pubkey is None


def test_a_witness_flood_from_one_address_gets_a_429(live: Live) -> None:
    """Issue 33.6: anyone may post add-checkpoint, and each costs a signature verification and
    a database read; it spends ADD_CHECKPOINT_UNITS (5) of the address's budget (20 a minute
    here), so the fifth is a 429 with Retry-After. The refusals (this server witnesses no log:
    404) are in the refusal log with the rate limit's."""
    with Client(live, "198.51.100.19") as client:
        body = b"old 0\n\nnobody.example/log\n1\n" + b"A" * 43 + b"=\n\n"
        answers = [client.http.post("/witness/add-checkpoint", content=body) for _ in range(5)]
        assert [a.status_code for a in answers] == [404, 404, 404, 404, 429]
        assert 1 <= int(answers[-1].headers["Retry-After"]) <= 60
        rows = refusals(live.database_url, "198.51.100.19", 5)
        assert [(r["kind"], r["tool"]) for r in rows] == [
            ("invalid", "witness add-checkpoint")
        ] * 4 + [("rate_limited", "witness add-checkpoint")]
