// What every page's script shares: the NIP-07 extension, signing, posting to this server with
// the session's CSRF token, and NIP-19 npubs. Plain ES modules, no bundler, no dependencies.

const $ = (selector, root = document) => root.querySelector(selector)
export { $ }

// --- the extension (NIP-07) ----------------------------------------------------------------

// Extensions inject window.nostr a little after the page loads: wait for it, up to `ms`.
export async function waitForNostr (ms = 1500) {
  const start = Date.now()
  while (!window.nostr && Date.now() - start < ms) {
    await new Promise(resolve => setTimeout(resolve, 50))
  }
  return Boolean(window.nostr)
}

export const now = () => Math.floor(Date.now() / 1000)

// The extension said no (its user rejected the prompt, or it failed): nothing was signed.
export class NotSigned extends Error {
  constructor (cause) {
    const reason = String((cause && cause.message) || cause || 'no reason given').replace(/[.\s]+$/, '')
    super(`Your extension did not sign (${reason}).`)
    this.name = 'NotSigned'
    this.reason = reason // the extension's own words, for a page that says more around them
  }
}

// Sign `content` (an object, serialized as JSON.stringify does, which the server hashes as is)
// as an event of `kind`. The logged-in key must be the one that signs. A refusal from the
// extension is a `NotSigned`.
// `createdAt` (seconds) only when the caller must sign later than a record it has seen.
export async function sign (kind, content, tags = [], createdAt = now()) {
  if (!window.nostr) throw new Error('No Nostr extension: install one that supports NIP-07.')
  const text = typeof content === 'string' ? content : JSON.stringify(content)
  let event
  try {
    event = await window.nostr.signEvent({ kind, created_at: createdAt, tags, content: text })
  } catch (error) {
    throw new NotSigned(error)
  }
  const expected = loggedInKey()
  if (expected && event.pubkey !== expected) {
    throw new Error('Your extension signed with another key than the one you logged in with. ' +
      'Switch accounts in the extension, or log out and connect again.')
  }
  return event
}

export function loggedInKey () {
  const meta = $('meta[name="tms-pubkey"]')
  return meta ? meta.content : null
}

// --- this server ----------------------------------------------------------------------------

export function csrf () {
  const meta = $('meta[name="tms-csrf"]')
  return meta ? meta.content : ''
}

// POST JSON; resolves to {ok, status, data} whatever happens (a network failure included).
export async function postJSON (url, body) {
  try {
    const response = await fetch(url, {
      method: 'POST',
      credentials: 'same-origin',
      headers: { 'Content-Type': 'application/json', 'X-CSRF-Token': csrf() },
      body: JSON.stringify(body)
    })
    let data = null
    try { data = await response.json() } catch { data = { error: `the server answered ${response.status}` } }
    return { ok: response.ok, status: response.status, data }
  } catch (error) {
    return { ok: false, status: 0, data: { error: `could not reach the server (${error.message})` } }
  }
}

// `expected`: what the page saw of the collections it writes to, checked by the server under
// their locks ({slug: null} not created yet, "" no member list yet, or the list's id).
export const publish = (events, expected) => postJSON('/publish', expected ? { events, expected } : { events })

// The position a refusal names: "events[3] (ab12…): ..." -> 3.
export function failedPosition (message) {
  const match = /events\[(\d+)\]/.exec(message || '')
  return match ? Number(match[1]) : null
}

export function say (element, text, kind = '') {
  if (!element) return
  element.textContent = text
  element.classList.remove('error', 'ok')
  if (kind) element.classList.add(kind)
}

// --- telling people what the extension will ask, and what a refusal left -----------------------

// Said before an action's first prompt. `what` names each signature, in the order asked:
// signaturesNeeded(['your profile', 'the terms']) ->
// "This needs 2 signatures from your extension: your profile, then the terms."
export function signaturesNeeded (what) {
  if (!what.length) return 'This needs no signature from your extension.'
  const count = what.length === 1 ? 'one signature' : `${what.length} signatures`
  return `This needs ${count} from your extension: ${what.join(', then ')}.`
}

// Said while the extension asks: "Signature 1 of 2 in your extension: your profile…"
export function signing (what, index) {
  const step = what.length > 1 ? `Signature ${index + 1} of ${what.length}` : 'Sign'
  return `${step} in your extension: ${what[index]}…`
}

// A refusal (the extension's or the server's), and what it left: `outcome` says that nothing
// was stored, or what stands unchanged.
export function sayRefused (element, error, outcome = 'Nothing was stored.') {
  const text = String((error && error.message) || error || 'Something went wrong').trim()
  const said = /nothing was (stored|signed|changed)/i.test(text) // the server's message says it
  say(element, said ? text : `${text}${/[.!?)]$/.test(text) ? '' : '.'} ${outcome}`, 'error')
}

// --- copying ---------------------------------------------------------------------------------

// Put `text` on the clipboard; false if the browser allows neither way.
export async function copyText (text) {
  try {
    await navigator.clipboard.writeText(text)
    return true
  } catch {
    const area = document.createElement('textarea')
    area.value = text
    area.setAttribute('readonly', '')
    area.style.position = 'fixed'
    area.style.opacity = '0'
    document.body.append(area)
    area.select()
    let done = false
    try { done = document.execCommand('copy') } catch { done = false }
    area.remove()
    return done
  }
}

// Every `button[data-copy]` under `root` copies its attribute's value, and says so on itself.
export function copyButtons (root = document) {
  for (const button of root.querySelectorAll('button[data-copy]')) {
    if (button.dataset.copyReady) continue
    button.dataset.copyReady = 'yes'
    const label = button.textContent
    button.addEventListener('click', async () => {
      const done = await copyText(button.dataset.copy)
      button.textContent = done ? 'Copied' : 'Select it and copy by hand'
      setTimeout(() => { button.textContent = label }, 2500)
    })
  }
}

// --- NIP-19 (bech32, BIP-173) ------------------------------------------------------------------

const CHARSET = 'qpzry9x8gf2tvdw0s3jn54khce6mua7l'
const GENERATOR = [0x3b6a57b2, 0x26508e6d, 0x1ea119fa, 0x3d4233dd, 0x2a1462b3]

function polymod (values) {
  let chk = 1
  for (const value of values) {
    const top = chk >>> 25
    chk = ((chk & 0x1ffffff) << 5) ^ value
    for (let i = 0; i < 5; i++) if ((top >>> i) & 1) chk ^= GENERATOR[i]
  }
  return chk >>> 0
}

const expand = hrp => [...[...hrp].map(c => c.charCodeAt(0) >> 5), 0, ...[...hrp].map(c => c.charCodeAt(0) & 31)]

function convert (data, from, to, pad) {
  let acc = 0; let bits = 0; const out = []; const max = (1 << to) - 1
  for (const value of data) {
    acc = (acc << from) | value; bits += from
    while (bits >= to) { bits -= to; out.push((acc >> bits) & max) }
  }
  if (pad) { if (bits) out.push((acc << (to - bits)) & max) } else if (bits >= from || ((acc << (to - bits)) & max)) {
    throw new Error('invalid padding')
  }
  return out
}

// An npub's hex public key, or an Error saying what is wrong with it.
export function npubToHex (text) {
  const npub = text.trim()
  if (npub.toLowerCase() !== npub && npub.toUpperCase() !== npub) throw new Error('mixes upper and lower case')
  const lower = npub.toLowerCase()
  if (!lower.startsWith('npub1')) throw new Error('is not an npub (it should start with npub1)')
  const data = []
  for (const c of lower.slice(5)) {
    const value = CHARSET.indexOf(c)
    if (value < 0) throw new Error(`has a character outside bech32's alphabet: ${JSON.stringify(c)}`)
    data.push(value)
  }
  if (data.length < 6 || polymod([...expand('npub'), ...data]) !== 1) {
    throw new Error('has a wrong checksum: it was mistyped or cut short')
  }
  const bytes = convert(data.slice(0, -6), 5, 8, false)
  if (bytes.length !== 32) throw new Error(`holds ${bytes.length} bytes, not 32`)
  return bytes.map(b => b.toString(16).padStart(2, '0')).join('')
}

export function hexToNpub (hex) {
  const bytes = hex.match(/../g).map(h => parseInt(h, 16))
  const data = convert(bytes, 8, 5, true)
  const mod = polymod([...expand('npub'), ...data, 0, 0, 0, 0, 0, 0]) ^ 1
  const checksum = [0, 1, 2, 3, 4, 5].map(i => (mod >>> (5 * (5 - i))) & 31)
  return 'npub1' + [...data, ...checksum].map(v => CHARSET[v]).join('')
}
