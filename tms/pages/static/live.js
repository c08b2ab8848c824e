// The reading pages' live part: one WebSocket to this site's own relay for the page's collection
// (/c/<slug>, the page's own path), authenticated by the login cookie (the server takes it only
// from this very site: it checks the upgrade's Origin), subscribed to the kinds the page shows.
// Nothing is polled: each record arrives once its publish has committed, from any door.
//
// The page works the same without it. No WebSocket, a relay that is down: the page stays as it
// was rendered and says nothing; a lost connection is tried again, quietly, less and less often.
// A subscription the relay ends for good (the key removed from the collection, the login ended)
// is said, once, at the top of the page: the page stays as it was, but is no longer live. `<html data-live>`
// says where it stands ('connecting', 'on', 'off'), for tests; `#live` (a quiet "live" mark)
// shows only while it is on.
//
// What committed between the page's rendering and the subscription is not lost. The server
// read, before anything else on the page, the newest event of the small kinds the page follows
// (`data-after`: claims, links, contradictions; '' when there was none). The subscription asks
// for the newest few of those kinds too: a relay's stored answer is newest first in commit
// order, so those it sends before that event are exactly the ones committed since; the rest
// the page shows already. After a lost connection, the same from the last one it received.
// Evidence (whose texts may be megabytes) is followed live only, never caught up.

import { hexToNpub } from './nostr.js'

const BACKOFF_MS = [1000, 2000, 5000, 10000, 30000, 60000]
const LOOKUP_MS = 10000 // a look-up that gets no EOSE by then gives up
const CATCH_UP = 20 // committed between the page's rendering and its subscription, at most
const SUB = 'live'
const isId = value => typeof value === 'string' && /^[0-9a-f]{64}$/.test(value)

function setState (state) {
  document.documentElement.dataset.live = state
  const mark = document.getElementById('live')
  if (mark) mark.hidden = state !== 'on'
}

// follow({slug, kinds, caughtUp, after, known, onEvent}) -> {lookup(filter)}
//   kinds: what to follow; caughtUp: those of them to catch up;
//   after: the newest of caughtUp when the page was read ('': none; null: unknown, no catch-up);
//   known(id): whether the page shows that record already;
//   onEvent(event): each new record, once, in the order the relay sends them (commit order).
export function follow ({ slug, kinds, caughtUp, after, known, onEvent }) {
  const seen = new Set()
  const lookups = new Map() // sub id -> {events, done}
  let socket = null
  let attempts = 0
  let serial = 0
  let refused = false
  let stored = true // the subscription's stored answer is coming (until EOSE)
  let passed = false // the stored answer has reached `after`: the rest is not new

  function open () {
    if (typeof WebSocket === 'undefined') return
    const scheme = window.location.protocol === 'https:' ? 'wss:' : 'ws:'
    setState('connecting')
    try {
      socket = new WebSocket(`${scheme}//${window.location.host}/c/${encodeURIComponent(slug)}`)
    } catch {
      setState('off')
      return
    }
    socket.addEventListener('open', () => {
      stored = true
      passed = after === null
      const filters = [{ kinds, limit: 0 }]
      if (after !== null) filters.unshift({ kinds: caughtUp, limit: CATCH_UP })
      socket.send(JSON.stringify(['REQ', SUB, ...filters]))
    })
    socket.addEventListener('message', message => receive(message.data))
    socket.addEventListener('close', lost)
  }

  function lost () {
    socket = null
    for (const [id, pending] of lookups) {
      lookups.delete(id)
      pending.done(null)
    }
    setState('off')
    if (refused) return
    const wait = BACKOFF_MS[Math.min(attempts, BACKOFF_MS.length - 1)]
    attempts += 1
    setTimeout(open, wait * (0.75 + Math.random() / 2))
  }

  function arrived (event) {
    if (!event || !isId(event.id)) return
    if (stored) {
      if (passed) return
      if (event.id === after) { passed = true; return }
    } else if (caughtUp.includes(event.kind)) {
      after = event.id // where a catch-up after a lost connection starts
    }
    if (seen.has(event.id) || !kinds.includes(event.kind)) return
    seen.add(event.id)
    if (!known(event.id)) onEvent(event)
  }

  function receive (data) {
    let message
    try { message = JSON.parse(data) } catch { return }
    if (!Array.isArray(message)) return
    const [type, id] = message
    if (type === 'EVENT' && id === SUB) {
      arrived(message[2])
    } else if (type === 'EVENT' && lookups.has(id)) {
      lookups.get(id).events.push(message[2])
    } else if (type === 'EOSE' && id === SUB) {
      stored = false
      attempts = 0
      setState('on')
    } else if ((type === 'EOSE' || type === 'CLOSED') && lookups.has(id)) {
      const pending = lookups.get(id)
      lookups.delete(id)
      if (type === 'EOSE' && socket) socket.send(JSON.stringify(['CLOSE', id]))
      pending.done(type === 'EOSE' ? pending.events : null)
    } else if (type === 'CLOSED' && id === SUB) {
      // auth-required (the login ended) or restricted (no longer a reader): the page stays as
      // it is; anything else (the server busy, a rate limit) is tried again later
      const reason = String(message[2] || '')
      refused = /^(auth-required|restricted):/.test(reason)
      if (refused) stopped(slug, reason)
      if (socket) socket.close()
    }
  }

  // The stored events matching `filter` (newest first), or null when the relay did not say
  // (no connection, no answer in time, the look-up refused).
  function lookup (filter) {
    return new Promise(resolve => {
      if (!socket || socket.readyState !== WebSocket.OPEN) { resolve(null); return }
      const id = `q${++serial}`
      const timer = setTimeout(() => {
        if (lookups.delete(id)) resolve(null)
      }, LOOKUP_MS)
      lookups.set(id, { events: [], done: events => { clearTimeout(timer); resolve(events) } })
      socket.send(JSON.stringify(['REQ', id, filter]))
    })
  }

  open()
  return { lookup }
}

// The plain words of a live page the relay stopped for good, at the top of the page.
function stopped (slug, reason) {
  if (document.getElementById('live-stopped')) return
  const why = reason.startsWith('restricted:')
    ? `your key is no longer a member of ${slug}`
    : 'your login ended'
  const notice = el('p', {
    className: 'notice live-stopped',
    text: `Live updates stopped: ${why}. This page still shows what it showed, but new records no longer appear; reload it to see what you may read now.`,
    attrs: { id: 'live-stopped', role: 'status' }
  })
  const main = document.querySelector('main') || document.body
  main.prepend(notice)
}

// --- what the pages show of a record, as the server's templates show it -----------------------

// A parsed `content`, or null (a record the page cannot read is left alone).
export function contentOf (event) {
  try {
    const content = JSON.parse(event.content)
    return content && typeof content === 'object' ? content : null
  } catch {
    return null
  }
}

// `text` cut to `limit` characters (code points, as the server counts them), with … if cut.
export function cut (text, limit) {
  const chars = Array.from(String(text ?? ''))
  return chars.length > limit ? chars.slice(0, limit).join('') + '…' : chars.join('')
}

// The time a record arrived, as the pages write it ("2026-12-01 15:53 UTC"): now.
export function arrivedText () {
  return new Date().toISOString().slice(0, 16).replace('T', ' ') + ' UTC'
}

// document.createElement with a class, text and attributes; text is always text, never HTML.
export function el (tag, { className, text, attrs } = {}, ...children) {
  const node = document.createElement(tag)
  if (className) node.className = className
  if (text !== undefined) node.textContent = text
  for (const [name, value] of Object.entries(attrs || {})) node.setAttribute(name, value)
  node.append(...children)
  return node
}

// A key as the pages write it where no name is known: "npub1abcdefgh…uvwxyz".
const shortKey = pubkey => { const npub = hexToNpub(pubkey); return `${npub.slice(0, 12)}…${npub.slice(-6)}` }

// Profile names of keys, looked up once each through the relay (the collection's people only).
export class Names {
  constructor (live) {
    this.live = live
    this.names = new Map()
  }

  async of (pubkey) {
    if (!this.names.has(pubkey)) {
      const found = await this.live.lookup({ kinds: [0], authors: [pubkey], limit: 1 })
      const content = found && found.length ? contentOf(found[0]) : null
      const name = content && typeof content.name === 'string' && content.name.trim() ? content.name : null
      if (found) this.names.set(pubkey, name) // an unanswered look-up is asked again next time
      if (!found) return shortKey(pubkey)
    }
    return this.names.get(pubkey) || shortKey(pubkey)
  }
}

// The page's own element says what to follow: `#live` carries the collection, the kinds, and
// where the page's view ended (./live.js's `follow`).
export function liveMark () {
  const mark = document.getElementById('live')
  if (!mark || !mark.dataset.slug) return null
  const numbers = text => String(text || '').split(' ').filter(Boolean).map(Number)
  return {
    slug: mark.dataset.slug,
    kinds: numbers(mark.dataset.kinds),
    caughtUp: numbers(mark.dataset.caughtUp),
    after: mark.dataset.after === undefined ? null : mark.dataset.after
  }
}

// "1 claim", "2 claims"
export const plural = (n, one, many) => `${n.toLocaleString('en-US')} ${n === 1 ? one : many}`
