// nostr-tools' own Relay against a live TMS collection relay, NIP-43: the NIP-11 document names
// the relay's key (`self`, `pubkey`); a member reads the member list (13534) and the changes
// (8000/8001) signed by it, then receives live the changes the owner's member lists make.
// Prints one JSON line of what it saw. Keys and the base URL come from the environment.
import { Relay } from 'nostr-tools/relay'
import { finalizeEvent, verifyEvent } from 'nostr-tools/pure'
import { hexToBytes } from 'nostr-tools/utils'

const BASE = process.env.RELAY_BASE
const WS = BASE.replace(/^http/, 'ws')
const key = (name) => hexToBytes(process.env[name])
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))
const now = () => Math.floor(Date.now() / 1000)
const shown = (event) => ({
  kind: event.kind,
  pubkey: event.pubkey,
  tags: event.tags,
  verified: verifyEvent(event),
})

const info = await (await fetch(BASE + '/c/rel', { headers: { Accept: 'application/nostr+json' } })).json()

const reader = await Relay.connect(WS + '/c/rel')
for (let i = 0; i < 200 && !reader.challenge; i++) await sleep(10)
await reader.auth(async (template) => finalizeEvent(template, key('READER_HEX')))
const stored = []
const live = []
let eose = false
reader.subscribe([{ kinds: [13534, 8000, 8001] }], {
  onevent: (event) => (eose ? live : stored).push(shown(event)),
  oneose: () => { eose = true },
})
for (let i = 0; i < 300 && !eose; i++) await sleep(10)

// The owner adds a key, then removes it: two member lists (kind 4705), signed by the owner.
const owner = await Relay.connect(WS + '/c/rel')
const list = (members, created_at) => finalizeEvent({
  kind: 4705, created_at, tags: [],
  content: JSON.stringify({ collection: 'rel', members }),
}, key('OWNER_HEX'))
const t = now()
const lists = [
  list([process.env.READER, process.env.JOINER], t),
  list([process.env.READER], t + 1),
]
for (const event of lists) await owner.publish(event)
for (let i = 0; i < 500 && live.length < 4; i++) await sleep(10)

console.log(JSON.stringify({
  self: info.self, pubkey: info.pubkey, nips: info.supported_nips,
  stored, live, lists: lists.map((event) => event.id),
}))
reader.close()
owner.close()
process.exit(0)
