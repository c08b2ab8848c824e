// The claim page: copy buttons, and "Contradicts…": pick another claim of the collection, write
// a reason, sign one kind-4704 contradiction with the NIP-07 extension and publish it through
// POST /publish, as every page's record is published. Nothing is stored unless the server says
// so; after it does, the page reloads with the contradiction in its list.
import './copy.js'
import { $, publish, say, sayRefused, sign } from './nostr.js'

const form = $('#contradicts')
const open = $('#contradicts-open')
const search = $('#contradicts-search')
const choices = $('#contradicts-choices')
const found = $('#contradicts-found')
const reason = $('#contradicts-reason')
const status = $('#contradicts-status')
const button = $('#contradicts-publish')
const WAIT_MS = 250 // typing pause before the claims are looked up
let asked = 0 // the latest look-up: answers to older ones are dropped
let timer = 0

function show (visible) {
  form.hidden = !visible
  open.setAttribute('aria-expanded', String(visible))
  if (visible) {
    if (!choices.querySelector('input')) lookUp()
    search.focus()
  } else {
    open.focus()
  }
}

function picked () {
  const checked = choices.querySelector('input[name="other"]:checked')
  return checked ? checked.value : null
}

function listChoices (claims, words) {
  const keep = picked()
  for (const old of choices.querySelectorAll('.option')) old.remove()
  for (const claim of claims) {
    const label = document.createElement('label')
    label.className = 'option choice'
    const radio = document.createElement('input')
    radio.type = 'radio'
    radio.name = 'other'
    radio.value = claim.id
    radio.checked = claim.id === keep
    const text = document.createElement('span')
    text.className = 'choice-text'
    text.textContent = claim.text + (claim.more ? '…' : '')
    const id = document.createElement('code')
    id.className = 'choice-id'
    id.textContent = claim.id.slice(0, 12) + '…'
    label.append(radio, text, id)
    choices.append(label)
  }
  if (claims.length) {
    say(found, words ? `${claims.length} claim${claims.length === 1 ? '' : 's'} found: pick one.` : 'The newest claims: pick one, or search.')
  } else {
    say(found, words ? 'No claim of this collection matches. Try other words, or paste a claim id.' : 'This collection has no other claim yet.')
  }
}

async function lookUp () {
  const words = search.value.trim()
  const mine = ++asked
  const query = new URLSearchParams({ q: words, besides: form.dataset.claim })
  try {
    const response = await fetch(`/c/${encodeURIComponent(form.dataset.slug)}/claims.json?${query}`, { credentials: 'same-origin' })
    const data = await response.json()
    if (mine !== asked) return
    if (!response.ok) throw new Error(data.error || `the server answered ${response.status}`)
    listChoices(data.claims, words)
  } catch (error) {
    if (mine === asked) say(found, `Could not look up claims: ${error.message}`, 'error')
  }
}

async function contradict (event) {
  event.preventDefault()
  const other = picked()
  const why = reason.value.trim()
  if (!other) { say(status, 'Pick the other claim first.', 'error'); search.focus(); return }
  if (!why) { say(status, 'Write the reason first: why both cannot hold.', 'error'); reason.focus(); return }
  button.disabled = true
  let signed
  try {
    say(status, 'Sign the contradiction in your extension (one signature)…')
    signed = await sign(4704, { collection: form.dataset.slug, claims: [form.dataset.claim, other], reason: why })
  } catch (error) {
    sayRefused(status, error)
    button.disabled = false
    return
  }
  say(status, 'Publishing…')
  const answer = await publish([signed])
  if (!answer.ok) {
    // A one-event batch: "events[0] (ab12…): " names nothing the reader does not know.
    const why = String(answer.data.error).replace(/^events\[0\] \([^)]*\): /, '').replace(/[.\s]*$/, '')
    say(status, `Refused: ${why}. Nothing was stored.`, 'error')
    button.disabled = false
    return
  }
  say(status, 'Stored.', 'ok')
  window.location.assign(`${window.location.pathname}?added=${signed.id}#contradiction-${signed.id}`)
}

if (form) {
  open.addEventListener('click', () => show(form.hidden))
  $('#contradicts-cancel').addEventListener('click', () => show(false))
  search.addEventListener('input', () => {
    clearTimeout(timer)
    timer = setTimeout(lookUp, WAIT_MS)
  })
  search.addEventListener('keydown', event => {
    if (event.key === 'Enter') { // look up now; never submit the form from the search box
      event.preventDefault()
      clearTimeout(timer)
      lookUp()
    }
  })
  form.addEventListener('submit', contradict)
  for (const field of [reason, choices]) { // a problem said before is gone once it is fixed
    field.addEventListener('input', () => { if (status.classList.contains('error')) say(status, '') })
  }
}

document.documentElement.dataset.js = 'ready' // scripts attached: what tests wait for
