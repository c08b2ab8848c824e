// The members page: the owner's complete list, one npub per line. Every line is checked before
// anything is signed; the list is compared with the one standing now (a list saved meanwhile
// elsewhere is shown, not overwritten unseen), and the server checks it again under the
// collection's lock (`expected`); a save that loses the replaceable rule is said.
//
// Notes (after `#`) are not signed: the server writes each member's profile name as the note of
// its line; a note the owner typed instead is kept in this browser (localStorage) and put back
// on its line in place of the profile name, and shown beside the member below. A note left
// empty, or the profile name unchanged, forgets the typed one.
import { sha256Hex } from './digest.js'
import { $, hexToNpub, npubToHex, publish, say, sayRefused, sign, signing } from './nostr.js'

const panel = $('#members')
const form = $('#members-form')
const lines = $('#member-lines')
const problems = $('#members-problems')
const status = $('#members-status')
const button = $('#save-members')
const slug = panel.dataset.slug
const listId = panel.dataset.listId
const UNCHANGED = 'Nothing was changed: the member list stands as before.'
const NOTES = `tms-member-notes:${slug}`
const SAVED = `tms-members-saved:${slug}`

// The keys on the lines, in order, with their notes, or the problems, each naming its line.
function parse (text) {
  const keys = []
  const notes = {}
  const wrong = []
  const seen = new Map()
  text.split('\n').forEach((raw, index) => {
    const [before, ...after] = raw.split('#')
    const entry = before.trim()
    if (!entry) return
    const line = index + 1
    let hex = null
    if (/^[0-9a-f]{64}$/.test(entry)) {
      hex = entry
    } else {
      try { hex = npubToHex(entry) } catch (error) {
        const many = (entry.match(/npub1/g) || []).length > 1 ? ' (two npubs on one line? put each on a line of its own)' : ''
        wrong.push(`Line ${line}: ${entry.length > 24 ? entry.slice(0, 24) + '…' : entry} ${error.message}${many}.`)
        return
      }
    }
    if (seen.has(hex)) {
      wrong.push(`Line ${line}: the same key as line ${seen.get(hex)}.`)
      return
    }
    seen.set(hex, line)
    keys.push(hex)
    const note = after.join('#').trim()
    if (note) notes[hex] = note
  })
  return { keys, notes, wrong }
}

function showProblems (wrong) {
  problems.replaceChildren()
  if (!wrong.length) { lines.setAttribute('aria-invalid', 'false'); return }
  lines.setAttribute('aria-invalid', 'true')
  const intro = document.createElement('p')
  intro.textContent = 'Nothing was signed. Fix these lines first:'
  const list = document.createElement('ul')
  for (const text of wrong) {
    const item = document.createElement('li')
    item.textContent = text
    list.append(item)
  }
  problems.append(intro, list)
}

const when = seconds => new Date(seconds * 1000).toISOString().replace('T', ' ').slice(0, 16) + ' UTC'

function stored (storage, name) {
  try { return JSON.parse(storage.getItem(name) || 'null') } catch { return null }
}

function keep (storage, name, value) {
  try { storage.setItem(name, JSON.stringify(value)) } catch { /* private mode: not kept */ }
}

// Each listed key's profile name, as the server wrote it as a note (empty without a profile).
const profileNotes = Object.fromEntries([...document.querySelectorAll('#current-members li[data-note]')]
  .map(item => [item.dataset.pubkey, item.dataset.note]))

// The notes typed here before, on their lines in place of the profile names, and beside the
// members below.
function restoreNotes () {
  const notes = stored(localStorage, NOTES) || {}
  lines.value = lines.value.split('\n').map(raw => {
    const [before] = raw.split('#')
    const entry = before.trim()
    if (!entry) return raw
    let hex = null
    try { hex = /^[0-9a-f]{64}$/.test(entry) ? entry : npubToHex(entry) } catch { return raw }
    return notes[hex] ? `${hexToNpub(hex)}  # ${notes[hex]}` : raw
  }).join('\n')
  for (const item of document.querySelectorAll('#current-members li[data-note]')) {
    const note = notes[item.dataset.pubkey]
    const shown = item.querySelector('.note')
    if (!note || !shown) continue
    shown.textContent = ` — your note: ${note}`
    shown.hidden = false
  }
}

// The notes to keep after a save: those typed for the keys saved, except a profile name left as
// it was written; a key saved without a note forgets the one typed before.
function notesAfter (keys, typed) {
  const kept = { ...(stored(localStorage, NOTES) || {}) }
  for (const hex of keys) {
    const note = typed[hex]
    if (note && note !== profileNotes[hex]) kept[hex] = note
    else delete kept[hex]
  }
  return kept
}

// After the reload a save ends with: say it was saved, if the list shown is the one saved.
function sayIfSaved () {
  const saved = stored(sessionStorage, SAVED)
  sessionStorage.removeItem(SAVED)
  if (!saved) return
  if (saved.id === listId) {
    say(status, `Saved: ${saved.count} member${saved.count === 1 ? '' : 's'}. This is the list now standing.`, 'ok')
  }
}

restoreNotes()
sayIfSaved()

lines.addEventListener('input', () => { if (problems.childElementCount) showProblems(parse(lines.value).wrong) })

form.addEventListener('submit', async event => {
  event.preventDefault()
  const { keys, notes, wrong } = parse(lines.value)
  showProblems(wrong)
  if (wrong.length) { lines.focus(); return }
  button.disabled = true
  try {
    // The list standing now, against the one this page showed.
    const response = await fetch(`/c/${encodeURIComponent(slug)}/members.json`, { credentials: 'same-origin' })
    const current = await response.json()
    if (!response.ok) throw new Error(current.error || 'could not read the current list')
    if ((current.list_id || '') !== listId) {
      say(status, `A newer member list was saved since you opened this page (signed ${when(current.list_created_at)}, ${current.members.length} keys). Nothing was signed: reload the page to see it, then make your change again.`, 'error')
      button.disabled = false
      return
    }
    const nowSeconds = Math.floor(Date.now() / 1000)
    if (current.list_created_at !== null && current.list_created_at > nowSeconds) {
      say(status, `The current list is dated ${when(current.list_created_at)}, later than your clock (${when(nowSeconds)}): a list signed now would lose to it. Nothing was signed; check your computer's clock.`, 'error')
      button.disabled = false
      return
    }
    keep(localStorage, NOTES, notesAfter(keys, notes))
    say(status, signing(['the complete member list'], 0))
    // A list saved in the same second as the one standing would lose to it half the time (the
    // lower id wins a tie): sign it one second later, well inside the server's 15 minutes.
    const createdAt = current.list_created_at === nowSeconds ? nowSeconds + 1 : nowSeconds
    const list = await sign(4705, { collection: slug, members: keys }, [], createdAt)
    say(status, 'Publishing…')
    const answer = await publish([list], { [slug]: listId })
    if (!answer.ok) throw new Error(`The server refused it: ${answer.data.error}`)
    if ((answer.data.superseded || []).includes(list.id)) {
      say(status, 'Your list was stored but is not the current one: a newer list stands (signed later, or in the same second with a lower id). Reload to see it.', 'error')
      button.disabled = false
      return
    }
    keep(sessionStorage, SAVED, { id: list.id, count: keys.length })
    say(status, `Saved: ${keys.length} member${keys.length === 1 ? '' : 's'}.`, 'ok')
    window.location.reload()
  } catch (error) {
    sayRefused(status, error, UNCHANGED)
    button.disabled = false
  }
})

document.documentElement.dataset.js = 'ready' // scripts attached: what tests wait for

// An invite (NIP-43 join, docs "Joining with an invite"): a random code made here, its SHA-256
// in a NIP-86 `createinvite` call on the collection's relay URL, signed as NIP-98 (the `payload`
// tag hashes the body). The code itself is shown here only, never sent.
const inviteButton = $('#make-invite')
const inviteStatus = $('#invite-status')
const inviteCode = $('#invite-code')
const hex = bytes => [...bytes].map(b => b.toString(16).padStart(2, '0')).join('')

inviteButton?.addEventListener('click', async () => {
  inviteButton.disabled = true
  inviteCode.hidden = true
  try {
    const code = hex(crypto.getRandomValues(new Uint8Array(16)))
    const url = `${location.origin}/c/${encodeURIComponent(slug)}`
    const body = JSON.stringify({ method: 'createinvite', params: [await sha256Hex(code)] })
    say(inviteStatus, signing(['the invite'], 0))
    const event = await sign(27235, '', [['u', url], ['method', 'POST'], ['payload', await sha256Hex(body)]])
    const response = await fetch(url, {
      method: 'POST',
      headers: { 'Content-Type': 'application/nostr+json+rpc', Authorization: `Nostr ${btoa(JSON.stringify(event))}` },
      body
    })
    const answer = await response.json()
    if (answer.error) throw new Error(answer.error)
    inviteCode.querySelector('code').textContent = code
    inviteCode.hidden = false
    say(inviteStatus, 'Invite signed and stored. Give this code to whoever should join: it works once.', 'ok')
  } catch (error) {
    sayRefused(inviteStatus, error)
  } finally {
    inviteButton.disabled = false
  }
})
