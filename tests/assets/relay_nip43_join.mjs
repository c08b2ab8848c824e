// NIP-43 join and leave through nostr-tools' own Relay against a live TMS collection relay. The
// owner makes an invite with a NIP-86 call signed by nostr-tools' NIP-98 (`createinvite`, whose
// param is the SHA-256 of a random code: the code never leaves this script but in the join);
// the joiner authenticates (NIP-42), sends a wrong code, then the code (kind 28934), reads the
// member list (13534), while a member watches the views live; is told `duplicate:` when it joins again, and leaves (kind 28936). Another key
// claims the used code; the joiner's leave is replayed on another collection's relay. Prints
// one JSON line of every answer. Keys, slugs and the base URL come from the environment.
import { createHash, randomBytes } from 'node:crypto'
import { getToken } from 'nostr-tools/nip98'
import { Relay } from 'nostr-tools/relay'
import { finalizeEvent } from 'nostr-tools/pure'
import { hexToBytes } from 'nostr-tools/utils'

const BASE = process.env.RELAY_BASE
const WS = BASE.replace(/^http/, 'ws')
const CLUB = process.env.CLUB
const OTHER = process.env.OTHER
const key = (name) => hexToBytes(process.env[name])
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))
const now = () => Math.floor(Date.now() / 1000)
const said = async (promise) => {
  try {
    return { ok: true, reason: await promise }
  } catch (error) {
    return { ok: false, reason: String(error.message ?? error) }
  }
}

async function signedIn(slug, name) {
  const relay = await Relay.connect(`${WS}/c/${slug}`)
  for (let i = 0; i < 200 && !relay.challenge; i++) await sleep(10)
  let auth = null
  await relay.auth(async (template) => (auth = finalizeEvent(template, key(name))))
  return { relay, auth }
}

const seen = {}
seen.nips = (await (await fetch(`${BASE}/c/${CLUB}`, { headers: { Accept: 'application/nostr+json' } })).json()).supported_nips
const code = randomBytes(16).toString('hex')
const digest = createHash('sha256').update(code).digest('hex')

// The owner's invite: a NIP-86 call on the collection's relay URL.
const url = `${BASE}/c/${CLUB}`
const payload = { method: 'createinvite', params: [digest] }
const token = await getToken(url, 'POST', async (e) => finalizeEvent(e, key('OWNER_HEX')), true, payload)
const response = await fetch(url, {
  method: 'POST',
  headers: { 'Content-Type': 'application/nostr+json+rpc', Authorization: token },
  body: JSON.stringify(payload),
})
seen.invite = { status: response.status, answer: await response.json() }

const request = (kind, tags, name, created_at = now()) =>
  finalizeEvent({ kind, created_at, tags: [['-'], ...tags], content: '' }, key(name))

// A member watches the views live; the joiner reads them once it belongs.
const watcher = await signedIn(CLUB, 'WATCHER_HEX')
const views = []
let watching = false
watcher.relay.subscribe([{ kinds: [13534, 8000, 8001] }], {
  onevent: (event) => watching && views.push({ kind: event.kind, tags: event.tags }),
  oneose: () => { watching = true },
})
for (let i = 0; i < 300 && !watching; i++) await sleep(10)

const joiner = await signedIn(CLUB, 'JOINER_HEX')
seen.wrong = await said(joiner.relay.publish(request(28934, [['claim', 'not-a-code']], 'JOINER_HEX')))
const join = request(28934, [['claim', code]], 'JOINER_HEX')
seen.join = await said(joiner.relay.publish(join))

const stored = []
let eose = false
joiner.relay.subscribe([{ kinds: [13534] }], {
  onevent: (event) => stored.push({ kind: event.kind, tags: event.tags }),
  oneose: () => { eose = true },
})
for (let i = 0; i < 300 && !eose; i++) await sleep(10)
seen.stored = stored

seen.again = await said(joiner.relay.publish(request(28934, [['claim', code]], 'JOINER_HEX', now() + 1)))
const second = await signedIn(CLUB, 'SECOND_HEX')
seen.used = await said(second.relay.publish(request(28934, [['claim', code]], 'SECOND_HEX')))

// The joiner's leave, replayed on another collection's relay: by a connection that signed in
// as another key, and as a line carrying the joiner's own AUTH event (which names CLUB).
const leave = request(28936, [], 'JOINER_HEX')
const elsewhere = await signedIn(OTHER, 'SECOND_HEX')
seen.replayed = await said(elsewhere.relay.publish(leave))
seen.replayedWithAuth = await said(elsewhere.relay.publish({ ...leave, body: JSON.stringify(joiner.auth) }))

// Invite codes asked of the relay (NIP-43's 28935): it holds none.
const codes = []
seen.asked = await new Promise((resolve) => {
  watcher.relay.subscribe([{ kinds: [28935] }], {
    onevent: (event) => codes.push(event),
    oneose: () => resolve({ eose: true, codes: codes.length }),
    onclose: (reason) => resolve({ closed: reason }),
  })
})

seen.leave = await said(joiner.relay.publish(leave))
for (let i = 0; i < 500 && !views.some((v) => v.kind === 8001); i++) await sleep(10)
seen.views = views
seen.code = code
seen.ids = { join: join.id, leave: leave.id }

console.log(JSON.stringify(seen))
for (const one of [watcher, joiner, second, elsewhere]) one.relay.close()
process.exit(0)
