// nostr-tools' Negentropy (its nip77, as its index exports it: the package has no ./nip77
// export) as the other side of tms.nostr.negentropy, for
// tests/nostr/test_negentropy_nostr_tools.py. One JSON request a line on stdin, one JSON answer
// a line on stdout:
//   {"items": [[timestamp, "hex id"], ...], "frame": n}  -> {"ok": true}   (a new initiator)
//   {"op": "initiate"}                                   -> {"msg": "hex"}
//   {"op": "reconcile", "msg": "hex"}                    -> {"msg": "hex" | null, "have": [...], "need": [...]}
// nostr-tools implements the initiator only; an error is answered as {"error": "..."}.
import { createInterface } from 'node:readline'
import { nip77 } from 'nostr-tools'

const { Negentropy, NegentropyStorageVector } = nip77

let neg = null
const lines = createInterface({ input: process.stdin })
for await (const line of lines) {
  const request = JSON.parse(line)
  let answer
  try {
    if (request.items !== undefined) {
      const storage = new NegentropyStorageVector()
      for (const [timestamp, id] of request.items) storage.insert(timestamp, id)
      storage.seal()
      neg = new Negentropy(storage, request.frame)
      answer = { ok: true }
    } else if (request.op === 'initiate') {
      answer = { msg: neg.initiate() }
    } else {
      const have = []
      const need = []
      const msg = neg.reconcile(request.msg, (id) => have.push(id), (id) => need.push(id))
      answer = { msg, have, need }
    }
  } catch (error) {
    answer = { error: String(error) }
  }
  process.stdout.write(JSON.stringify(answer) + '\n')
}
