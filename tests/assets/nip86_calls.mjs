// NIP-86 relay management through nostr-tools' NIP-98 (`nip98.getToken` with the call as its
// payload, as a relay-management client signs it) and a plain JSON-RPC POST, against a live
// TMS. The calls to make come as JSON in CALLS: [{name, path, key, method, params,
// forge?, badSig?, replay?, forwarded?}]; prints one JSON line: each call's HTTP status and
// answer. `forge`: the token sent with another body; `badSig`: with its signature altered.
import { getToken } from 'nostr-tools/nip98'
import { finalizeEvent } from 'nostr-tools/pure'
import { hexToBytes } from 'nostr-tools/utils'

const BASE = process.env.RELAY_BASE
const calls = JSON.parse(process.env.CALLS)
const seen = {}

async function send(url, token, body, forwarded) {
  const headers = { 'Content-Type': 'application/nostr+json+rpc', Authorization: token }
  if (forwarded) headers['X-Forwarded-For'] = forwarded
  const response = await fetch(url, { method: 'POST', headers, body })
  return { status: response.status, answer: await response.json() }
}

for (const call of calls) {
  const url = BASE + call.path
  const sk = hexToBytes(call.key)
  const payload = { method: call.method, params: call.params }
  let token = await getToken(url, 'POST', async (e) => finalizeEvent(e, sk), true, payload)
  if (call.badSig) {
    const event = JSON.parse(Buffer.from(token.slice('Nostr '.length), 'base64').toString())
    event.sig = (event.sig[0] === '0' ? '1' : '0') + event.sig.slice(1)
    token = 'Nostr ' + Buffer.from(JSON.stringify(event)).toString('base64')
  }
  // What a forger sends: the owner's token for one call, with another body.
  const body = call.forge
    ? JSON.stringify({ method: call.method, params: call.forge })
    : JSON.stringify(payload)
  seen[call.name] = await send(url, token, body, call.forwarded)
  if (call.replay) seen[call.name + ' again'] = await send(url, token, body, call.forwarded)
}
console.log(JSON.stringify(seen))
