// nostr-tools' own Relay against a live TMS with plugins enabled: a member authenticates on
// /c/lab and publishes the events it is given, one EVENT each, noting each OK (its reason, or the
// error nostr-tools raises for OK false); then asks /c/sealed for its claims, a read the read
// filter refuses, and notes the CLOSED reason. Prints one JSON line. The key, the events and the
// base URL come from the environment.
import { Relay } from 'nostr-tools/relay'
import { finalizeEvent } from 'nostr-tools/pure'
import { hexToBytes } from 'nostr-tools/utils'

const WS = process.env.RELAY_BASE.replace(/^http/, 'ws')
const sk = hexToBytes(process.env.MEMBER_HEX)
const events = JSON.parse(process.env.EVENTS_JSON)
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))

async function connected (path) {
  const relay = await Relay.connect(WS + path)
  for (let i = 0; i < 200 && !relay.challenge; i++) await sleep(10)
  await relay.auth(async (template) => finalizeEvent(template, sk))
  return relay
}

const lab = await connected('/c/lab')
const published = []
for (const event of events) {
  try {
    published.push({ ok: true, reason: await lab.publish(event) })
  } catch (err) {
    published.push({ ok: false, reason: String(err.message ?? err) })
  }
}
lab.close()

const sealed = await connected('/c/sealed')
const closed = await new Promise((resolve) => {
  sealed.subscribe([{ kinds: [4702] }], {
    onevent: () => resolve('got an event'),
    onclose: resolve
  })
})
sealed.close()
console.log(JSON.stringify({ published, closed }))
