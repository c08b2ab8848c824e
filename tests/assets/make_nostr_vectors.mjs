// NIP-01 / NIP-19 test vectors from an independent implementation (nostr-tools), checked in as
// tests/assets/nostr_tools_vectors.json and read by tests/nostr/test_nostr_vectors.py.
//
// Generated with nostr-tools 2.25.2 (from the npm registry) under Node v20.20.2:
//
//   mkdir /tmp/vectors && cd /tmp/vectors && npm init -y && npm install nostr-tools
//   node /work/main/tests/assets/make_nostr_vectors.mjs > /work/main/tests/assets/nostr_tools_vectors.json
//
// nostr-tools is resolved from the current directory (not from this file's), so run it from the
// directory holding node_modules/nostr-tools. Ids and keys are deterministic; signatures are not
// (BIP-340 auxiliary randomness), so a rerun changes every "sig" and nothing else.
//
// Output: {"generator", "keys": [{secret_hex, nsec, npub, pubkey}], "events": [signed events
// exactly as finalizeEvent returns them], "cases": [{label, key}]} where cases[i] names events[i]
// and key is the index in "keys" of the key that signed it. No string holds a lone surrogate:
// JSON.stringify would escape it and our implementation rejects such events by design.

import { existsSync, readFileSync } from 'node:fs'
import path from 'node:path'
import { pathToFileURL } from 'node:url'

function findPackage(name) {
  for (let dir = process.cwd(); ; dir = path.dirname(dir)) {
    const root = path.join(dir, 'node_modules', name)
    if (existsSync(path.join(root, 'package.json'))) return root
    if (path.dirname(dir) === dir) throw new Error(`${name} not found: run from a directory where it is installed`)
  }
}

const root = findPackage('nostr-tools')
const pkg = JSON.parse(readFileSync(path.join(root, 'package.json'), 'utf8'))
const load = subpath => import(pathToFileURL(path.join(root, pkg.exports[subpath].import)).href)

// The same entry points as `import {...} from 'nostr-tools/pure'` and `from 'nostr-tools'`.
const { finalizeEvent, getEventHash, verifyEvent, getPublicKey } = await load('./pure')
const { nip19 } = await load('.')

const hexToBytes = hex => Uint8Array.from(hex.match(/../g), b => parseInt(b, 16))

const SECRETS = [
  // 1: the smallest secret; its public key is the x coordinate of the generator G.
  '0000000000000000000000000000000000000000000000000000000000000001',
  // n - 1: the largest secret; same x-only public key as 1 (its point is -G).
  'fffffffffffffffffffffffffffffffebaaedce6af48a03bbfd25e8cd0364140',
  // Arbitrary fixed keys.
  '5c0c523f52a5b6fad39ed2403092df8cebc36318b39383bca6c00808626fab3a',
  '7f7ff03d123792d6ac594bfa67bf6d0c0ab55b6b1fdb6249303fe861f1ccba9a',
]

const keys = SECRETS.map(secret_hex => {
  const secret = hexToBytes(secret_hex)
  const pubkey = getPublicKey(secret)
  return { secret_hex, nsec: nip19.nsecEncode(secret), npub: nip19.npubEncode(pubkey), pubkey }
})

const P = keys.map(k => k.pubkey)
const T = 1718000000

const controls = Array.from({ length: 32 }, (_, i) => String.fromCharCode(i)).join('') + '\u007f'

function longContent() {
  const unit = 'The quick brown fox jumps over the lazy dog. "quoted" \\back\\slash\\ tab\t newline\n é ü ß 漢字 🧪 '
  let s = ''
  for (let i = 0; s.length < 100000; i++) s += `${i}: ${unit}`
  return s
}

const ledger = (collection, text, extra = {}) => JSON.stringify({ collection, text, ...extra })

// [label, key index, kind, created_at, tags, content]
const CASES = [
  ['ascii', 0, 1, T, [], 'hello nostr'],
  ['empty-content', 2, 1, T, [], ''],
  ['single-space', 2, 1, T, [], ' '],
  ['printable-ascii', 3, 1, T, [], Array.from({ length: 95 }, (_, i) => String.fromCharCode(32 + i)).join('')],
  ['emoji-astral', 2, 1, T, [], '🧪👩‍🔬 test 🏳️‍🌈 👍🏽 𝕳𝖊𝖑𝖑𝖔 🀄 \u{1F600}\u{10FFFF}'],
  ['cjk', 3, 1, T, [], '日本語のテキスト、中文文本，한국어 텍스트。〜「引用」'],
  ['rtl-arabic-hebrew', 2, 1, T, [], 'مرحبا بالعالم — שלום עולם \u200f\u202eevil\u202c\u200e mixed 123'],
  ['combining-marks', 3, 1, T, [], 'e\u0301 vs \u00e9; a\u0308\u0304; Z̤͔ͧ̑̓ä͖̭̈̇lͮ̒ͫǧ̗͚̚o̙̔ͮ̇͐̇; \ufeffBOM \u200bZWSP \u200dZWJ'],
  ['nfc-nfd-distinct', 2, 1, T, [], 'caf\u00e9 / cafe\u0301 / \u212b / \u00c5'],
  ['control-chars-all', 2, 1, T, [], controls],
  ['control-chars-embedded', 3, 1, T, [], `a${controls}b${controls}c`],
  ['nul-only', 2, 1, T, [], '\u0000'],
  ['line-separators', 2, 1, T, [], 'line\u2028separator and\u2029paragraph \u0085NEL'],
  ['backslashes-quotes', 3, 1, T, [], '\\ \\\\ \\" \\n \\u0000 "double" \'single\' `back` \\u00e9 /slash/ <\/script>'],
  ['json-looking-text', 2, 1, T, [], '{"id":"x","sig":"y"}[0,"a",1,2,[],""]'],
  ['html-and-entities', 3, 1, T, [], '<b>bold</b> &amp; &lt; &#x1F600; <script>alert(1)</script>'],
  ['whitespace-mix', 2, 1, T, [], '  leading and trailing  \t\r\n\u00a0\u2003\u3000'],
  ['surrogate-pairs-boundary', 3, 1, T, [], '\u{10000}\u{FFFF}\u{FFFE}\u{E000}\u{F8FF}\u{D7FF}'],
  ['long-100k', 2, 1, T, [], longContent()],
  ['created-at-zero', 2, 1, 0, [], 'at the epoch'],
  ['created-at-2pow40', 3, 1, 2 ** 40, [], 'far future'],
  ['created-at-2pow32', 2, 1, 2 ** 32, [], 'past 2106'],
  ['kind-0-metadata', 0, 0, T, [['p', P[2]], ['t', 'nostr']], JSON.stringify({ name: 'Tëst 🧪', about: 'line1\nline2 "q"', picture: 'https://example.com/a.png' })],
  ['kind-0-empty', 3, 0, T, [], '{}'],
  ['key-n-minus-1', 1, 1, T, [], 'signed by n-1'],
  ['key-one-same-pubkey', 0, 1, T, [], 'signed by 1'],
  ['tags-nasty-values', 2, 1, T, [['e', '0'.repeat(64), '', 'root'], ['t', '🧪'], ['subject', 'ق\u0000\n"\\\u2028'], ['x'], []], 'tags with odd values'],
  ['tags-many', 3, 1, T, Array.from({ length: 50 }, (_, i) => ['p', P[i % P.length], `relay-${i}`]), 'many tags'],
  ['kind-4701-evidence', 2, 4701, T, [['t', 'mcas']], ledger('mcas', 'Observed: dosage 5 mg → 10 mg; "flare" after 2h\nnotes\\')],
  ['kind-4702-claim', 3, 4702, T, [['e', 'a'.repeat(64)]], ledger('mcas', 'Claim: 🧪 histamine ↑ correlates with 症状')],
  ['kind-4703-link', 2, 4703, T, [['e', 'b'.repeat(64)], ['e', 'c'.repeat(64)]], ledger('mcas', 'supports', { relation: 'supports' })],
  ['kind-4704-contradiction', 3, 4704, T, [['e', 'd'.repeat(64)]], ledger('mcas', 'لا يتفق مع \u2028 הטענה')],
  ['kind-4705-members', 2, 4705, T, [['p', P[0]], ['p', P[3]]], ledger('mcas', 'members', { members: [P[0], P[3]] })],
  ['kind-4706-terms', 3, 4706, T, [], ledger('mcas', `terms with controls: ${controls}`)],
  ['kind-4707-request', 2, 4707, T, [['p', P[2]]], ledger('mcas', '', { nested: { a: [1, 2.5, null, true], b: 'x' } })],
  ['kind-27235-http-auth', 3, 27235, T, [['u', 'https://example.com/api/events?x=1&y=ü'], ['method', 'POST'], ['payload', 'f'.repeat(64)]], ''],
  ['kind-max-65535', 2, 65535, T, [], 'largest kind'],
  ['content-only-emoji-zwj', 3, 1, T, [], '👨‍👩‍👧‍👦'],
  ['replacement-and-noncharacters', 2, 1, T, [], '\ufffd\ufffe\uffff\u{1FFFE}'],
  ['bidi-overrides', 3, 1, T, [], '\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069'],
]

const events = []
const cases = []
for (const [label, key, kind, created_at, tags, content] of CASES) {
  const event = finalizeEvent({ kind, created_at, tags, content }, hexToBytes(SECRETS[key]))
  if (getEventHash(event) !== event.id) throw new Error(`${label}: getEventHash disagrees with finalizeEvent`)
  // verifyEvent caches its result on the object, so check a fresh copy.
  if (!verifyEvent(JSON.parse(JSON.stringify(event)))) throw new Error(`${label}: does not verify`)
  if (event.pubkey !== keys[key].pubkey) throw new Error(`${label}: unexpected pubkey`)
  events.push(event)
  cases.push({ label, key })
}

const doc = { generator: `nostr-tools ${pkg.version}`, keys, events, cases }
process.stdout.write(JSON.stringify(doc, null, 1) + '\n')
