// NIP-86 relay management through welshman, unchanged: `makeHttpAuth` builds the NIP-98 event
// for the call (its `payload` tag hashing the body), nostr-tools signs it, and
// `sendManagementRequest` POSTs the call with it, as Flotilla does. The calls come as JSON in
// CALLS: [{name, path, key, method, params}]; prints one JSON line: each call's answer.
import { makeHttpAuth, sendManagementRequest } from '@welshman/util'
import { finalizeEvent } from 'nostr-tools/pure'
import { hexToBytes } from 'nostr-tools/utils'

const BASE = process.env.RELAY_BASE
const seen = {}
for (const call of JSON.parse(process.env.CALLS)) {
  const url = BASE + call.path
  const request = { method: call.method, params: call.params }
  const template = await makeHttpAuth(url, 'POST', JSON.stringify(request))
  const auth = finalizeEvent(template, hexToBytes(call.key))
  seen[call.name] = await sendManagementRequest(url, request, auth)
}
console.log(JSON.stringify(seen))
