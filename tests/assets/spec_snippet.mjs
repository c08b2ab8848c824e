// SPEC's JavaScript, run unchanged against a live server by tests/docs/test_spec_snippets.py, from a
// directory where tests/docs/js/package-lock.json is installed (imports resolve from this file's
// directory, so the test copies it there).
//
// Between the "// >>> SPEC" and "// <<< SPEC" lines is the "#### JavaScript" block of SPEC.md
// ("For bots and agents" > "Signed requests"), byte for byte. Edit SPEC and this file together.
// The test replaces only BASE's URL. Everything after "// <<< SPEC" is not SPEC's: it publishes
// (terms, profile, a claim in `mcas`, of which the test's owner made this key a member) and reads
// back with SPEC's helpers, printing one JSON line {"step", "result"} per call.

// >>> SPEC: "For bots and agents" > "Signed requests" > "#### JavaScript"
import { finalizeEvent } from 'nostr-tools/pure'
import { hexToBytes } from '@noble/hashes/utils'

const BASE = 'https://tms.delegance.ai'
const sk = hexToBytes(process.env.BOT_SECRET_HEX)
const sign = (kind, content) =>
  finalizeEvent({ kind, created_at: Math.floor(Date.now() / 1000), tags: [], content: JSON.stringify(content) }, sk)

async function call(tool, args) {
  const r = await fetch(`${BASE}/mcp`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream' },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: tool, arguments: args } }),
  })
  const { result } = await r.json()
  if (result.isError) throw new Error(result.content[0].text)
  return result.structuredContent
}
const tool = (name, args = {}) => call(name, { request: sign(4707, { tool: name, args }) })

console.log(await tool('list_collections'))
// <<< SPEC

// --- not SPEC's -----------------------------------------------------------------------------
const show = (step, result) => console.log(JSON.stringify({ step, result }))

const terms = await (await fetch(`${BASE}/terms`)).json()
const claim = sign(4702, { collection: 'mcas', text: 'DAO activity is lower in people who react to histamine-rich food.' })
show('ids', { pubkey: claim.pubkey, claim: claim.id })
show('publish', await call('publish', {
  events: [
    sign(4706, { version: terms.version, sha256: terms.sha256 }),
    sign(0, { name: 'js-bot', about: 'agent: runs the JavaScript snippet' }),
    claim,
  ],
}))
show('list_collections', await tool('list_collections'))
show('search_claims_keyword', await tool('search_claims', { collection: 'mcas', text: 'DAO activity', method: 'keyword' }))
