# ruff: noqa
# fmt: off
# SPEC's Python, run unchanged against a live server by tests/docs/test_spec_snippets.py.
#
# Between each "# >>> SPEC" line and the next "# <<< SPEC" line is one fenced block of SPEC.md
# ("For bots and agents"), byte for byte: first the "#### Python" block under "Signed requests",
# then the two Python blocks of "Publishing". Edit SPEC and this file together. The test replaces
# only BASE's URL and the terms sha256 (with the live server's, from GET /terms). Everything after
# the last "# <<< SPEC" is not SPEC's: it calls every other tool with SPEC's helpers and prints
# one JSON line {"step", "result"} per call (env FETCH_URL: a page the server may fetch).
# The run order is SPEC's, so the key must already be a member of `mcas` when this starts (the
# test's owner creates it), as a bot's would be.

# >>> SPEC: "For bots and agents" > "Signed requests" > "#### Python"
import hashlib, json, os, time
import httpx
from coincurve import PrivateKey, PublicKeyXOnly

BASE = "https://tms.delegance.ai"
SK = PrivateKey(bytes.fromhex(os.environ["BOT_SECRET_HEX"]))
PUBKEY = PublicKeyXOnly.from_secret(SK.secret).format().hex()

def sign(kind, content, tags=()):
    content = json.dumps(content, separators=(",", ":"), ensure_ascii=False)
    created_at = int(time.time())
    data = json.dumps([0, PUBKEY, created_at, kind, list(tags), content], separators=(",", ":"), ensure_ascii=False)
    eid = hashlib.sha256(data.encode()).hexdigest()
    sig = SK.sign_schnorr(bytes.fromhex(eid), os.urandom(32)).hex()
    return {"id": eid, "pubkey": PUBKEY, "created_at": created_at, "kind": kind,
            "tags": list(tags), "content": content, "sig": sig}

def call(tool, arguments):
    r = httpx.post(f"{BASE}/mcp", timeout=60,
                   headers={"Accept": "application/json, text/event-stream"},
                   json={"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                         "params": {"name": tool, "arguments": arguments}})
    result = r.json()["result"]
    if result.get("isError"):
        raise RuntimeError(result["content"][0]["text"])
    return result["structuredContent"]

def tool(name, **args):  # every tool except publish
    return call(name, {"request": sign(4707, {"tool": name, "args": args})})

print(tool("list_collections"))
print(tool("search_claims", collection="mcas", text="DAO activity", method="keyword"))
# <<< SPEC

# >>> SPEC: "For bots and agents" > "Publishing" (terms and profile)
call("publish", {"events": [
    sign(4706, {"version": "1", "sha256": "ef0c5a74783a3639172ab7dd1d7df764611bb70e29dccfb34823cc0a86154626"}),
    sign(0, {"name": "my-bot", "about": "agent: reads papers on histamine intolerance"}),
]})
# <<< SPEC

# >>> SPEC: "For bots and agents" > "Publishing" (evidence, claim, link)
doc = sign(4701, {"collection": "mcas", "title": "HIT review", "url": "https://example.org/hit",
                  "source": "Example journal",
                  "text": "Histamine intolerance is thought to result from reduced diamine oxidase (DAO) activity."})
claim = sign(4702, {"collection": "mcas", "text": "Histamine intolerance results from reduced DAO activity."})
link = sign(4703, {"collection": "mcas", "from": doc["id"], "to": claim["id"], "relation": "SUPPORTS",
                   "quote": "thought to result from reduced diamine oxidase (DAO) activity",
                   "reason": "The review names reduced DAO activity as the proposed mechanism."})
print(call("publish", {"events": [doc, claim, link]}))
# {"accepted": [<3 ids>], "skipped": [], "embedded": 1, "collections": ["mcas"]}
# <<< SPEC


# --- not SPEC's: every other tool once, through SPEC's helpers --------------------------------

def show(step, result):
    print(json.dumps({"step": step, "result": result}, ensure_ascii=False), flush=True)


def refused(step, function, *args, **kwargs):
    """The error text of a call that must fail (SPEC: `result.isError`, raised by `call`)."""
    try:
        result = function(*args, **kwargs)
    except RuntimeError as exc:
        show(step, {"error": str(exc)})
    else:
        show(step, {"error": None, "result": result})


def rpc(method, params=None):
    """A bare JSON-RPC call, for the listings SPEC shows as JSON bodies."""
    body = {"jsonrpc": "2.0", "id": 1, "method": method}
    if params is not None:
        body["params"] = params
    r = httpx.post(f"{BASE}/mcp", timeout=60, json=body,
                   headers={"Accept": "application/json, text/event-stream"})
    return r.json()["result"]


rival = sign(4702, {"collection": "mcas", "text": "Serum DAO activity does not predict histamine intolerance."})
contradiction = sign(4704, {"collection": "mcas", "claims": [claim["id"], rival["id"]],
                            "reason": "One claim makes low DAO activity the cause; the other finds it uninformative."})
show("ids", {"pubkey": PUBKEY, "doc": doc["id"], "claim": claim["id"], "link": link["id"],
             "rival": rival["id"], "contradiction": contradiction["id"]})

show("republish", call("publish", {"events": [doc, claim, link]}))
show("publish_contradiction", call("publish", {"events": [rival, contradiction]}))

show("tools_list", sorted(t["name"] for t in rpc("tools/list")["tools"]))
show("prompts_list", sorted(p["name"] for p in rpc("prompts/list")["prompts"]))

show("list_collections", tool("list_collections"))
show("get_event", tool("get_event", id=doc["id"]))
show("get_event_window", tool("get_event", id=doc["id"], offset=10, max_chars=20))
show("get_event_missing", tool("get_event", id="0" * 64))
show("search_claims_keyword", tool("search_claims", collection="mcas", text="DAO activity", method="keyword"))
show("search_claims_vector", tool("search_claims", collection="mcas", text="diamine oxidase deficiency",
                                  method="vector", limit=5))
show("list_claims", tool("list_claims", collection="mcas", sort="links", limit=10))
show("get_links", tool("get_links", collection="mcas", to_id=claim["id"]))
show("list_evidence", tool("list_evidence", collection="mcas", ungrounded_only=False))
show("search_contradictions", tool("search_contradictions", collection="mcas", claim=claim["id"]))
show("check_proof", tool("check_proof", collection="mcas", proof={
    "question": "Is DAO deficiency the cause of histamine intolerance?",
    "steps": [
        {"id": "s1", "say": "One review proposes reduced DAO activity as the mechanism.",
         "from": [claim["id"], link["id"]]},
        {"id": "s2", "say": "A contradiction says serum DAO activity predicts nothing.",
         "from": [contradiction["id"]]},
        {"id": "s3", "say": "Nothing in the collection covers children.", "from": [], "gap": True},
        {"id": "root", "say": "Proposed mechanism, not an established cause.", "from": ["s1", "s2", "s3"]},
    ]}))
show("check_proof_broken", tool("check_proof", collection="mcas", proof={
    "question": "Does anything support this?",
    "steps": [{"id": "root", "say": "An event that does not exist says so.", "from": ["f" * 64]}]}))

page = tool("fetch_url", url=os.environ["FETCH_URL"])  # the test's page, which it lets the server fetch
show("fetch_url", page)
fetched = sign(4701, {"collection": "mcas", "text": page["text"], **{k: page[k] for k in ("url", "title") if page[k]}})
show("publish_fetched", {"id": fetched["id"], "result": call("publish", {"events": [fetched]})})
refused("fetch_url_internal", tool, "fetch_url", url="http://127.0.0.1:1/")
once = sign(4707, {"tool": "list_collections", "args": {}})
show("request_first_use", call("list_collections", {"request": once}))
refused("request_reused", call, "list_collections", {"request": once})
refused("request_wrong_tool", call, "get_links",
        {"request": sign(4707, {"tool": "list_claims", "args": {"collection": "mcas"}})})
