// nostr-tools' own Relay against a live TMS relay: a member subscribes, another member
// publishes evidence, a claim and a link, a stranger and a missing collection are refused.
// Prints one JSON line of what each side saw. Keys and the base URL come from the environment.
import { Relay } from 'nostr-tools/relay'
import { finalizeEvent } from 'nostr-tools/pure'
import { hexToBytes } from 'nostr-tools/utils'

const WS = process.env.RELAY_BASE.replace(/^http/, 'ws')
const key = (name) => hexToBytes(process.env[name])
const signer = (sk) => async (template) => finalizeEvent(template, sk)
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))
const now = () => Math.floor(Date.now() / 1000)
const sign = (sk, kind, content) =>
  finalizeEvent({ kind, created_at: now(), tags: [], content: JSON.stringify(content) }, sk)

async function connected(path, sk) {
  const relay = await Relay.connect(WS + path)
  if (sk) {
    for (let i = 0; i < 200 && !relay.challenge; i++) await sleep(10)
    await relay.auth(signer(sk))
  }
  return relay
}

async function refusal(path, sk) {
  const relay = await connected(path, sk)
  const reason = await new Promise((resolve) => {
    relay.subscribe([{ kinds: [4702] }], {
      onevent: () => resolve('got an event'),
      onclose: resolve,
    })
  })
  relay.close()
  return reason
}

const reader = await connected('/c/rel', key('READER_HEX'))
const received = []
await new Promise((resolve) => {
  reader.subscribe([{ kinds: [4701, 4702, 4703], limit: 0 }], {
    onevent: (event) => received.push(event.id),
    oneose: resolve,
  })
})

const writer = await connected('/c/rel')
const sk = key('WRITER_HEX')
const text = 'Honey never spoils when it is sealed.'
const evidence = sign(sk, 4701, { collection: 'rel', text, title: 'On honey' })
const claim = sign(sk, 4702, { collection: 'rel', text: `Sealed honey keeps ${Date.now()}` })
const link = sign(sk, 4703, {
  collection: 'rel', from: evidence.id, to: claim.id, relation: 'SUPPORTS',
  quote: 'never spoils', reason: 'The text says so.',
})
const published = []
for (const event of [evidence, claim, link]) published.push(await writer.publish(event))
let refused = ''
try {
  await writer.publish(sign(sk, 4702, { collection: 'other', text: 'not mine' }))
} catch (err) {
  refused = err.message
}

for (let i = 0; i < 300 && received.length < 3; i++) await sleep(10)
const stranger = await refusal('/c/rel', key('STRANGER_HEX'))
const missing = await refusal('/c/no-such', key('STRANGER_HEX'))
const anonymous = await refusal('/c/rel', null)
console.log(JSON.stringify({
  published, refused, received, sent: [evidence.id, claim.id, link.id], stranger, missing, anonymous,
}))
reader.close()
writer.close()
process.exit(0)
