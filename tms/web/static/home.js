// The home page: the terms (I agree signs them and the profile, in one batch: publish takes no
// profile before the terms), the profile step, and creating a collection.
import { $, loggedInKey, publish, say, sign } from './nostr.js'
import { lookupProfile, profileFields } from './relays.js'

const panel = $('#profile-panel')
const welcome = $('#welcome')
const status = $('#welcome-status')
let found = null // a usable kind-0 event found on the relays, stored as it is if chosen

function choice () {
  const checked = $('input[name="profile-choice"]:checked')
  return checked ? checked.value : 'new'
}

function showChoice () {
  const fields = $('#new-profile')
  fields.hidden = choice() === 'found'
  const save = $('#save-profile')
  if (save) save.textContent = choice() === 'found' ? 'Use this profile here' : 'Sign and save profile'
}

async function lookUp () {
  const relays = (panel.dataset.relays || '').split(' ').filter(Boolean)
  const event = await lookupProfile(loggedInKey(), relays)
  const lookup = $('#lookup-status')
  const fields = event ? profileFields(event) : null
  if (!event || !fields) {
    say(lookup, 'No Nostr profile found for your key: sign a short one here.')
    return
  }
  if (!fields.usable) {
    say(lookup, 'Your Nostr profile has no name, which TMS needs: sign one here.')
    $('#profile-name').value = fields.displayName
    return
  }
  found = event
  say(lookup, 'Found your Nostr profile.')
  $('#found-name').textContent = fields.name
  $('#found-about').textContent = fields.about ? `— ${fields.about}` : ''
  $('#found-choice').hidden = false
  $('#choice-new-label').hidden = false
  $('#choice-found').checked = true
  showChoice()
}

// The chosen profile as an event: the one found (as signed), or a new one signed now.
async function profileEvent () {
  if (choice() === 'found' && found) return found
  const name = $('#profile-name').value.trim()
  if (!name) {
    $('#profile-name').focus()
    throw new Error('Type a name for your profile.')
  }
  const kind = $('input[name="profile-kind"]:checked').value
  const note = $('#profile-about').value.trim()
  return sign(0, { name, about: note ? `${kind}: ${note}` : kind })
}

async function send (button, events) {
  button.disabled = true
  say(status, 'Publishing…')
  const answer = await publish(events)
  if (answer.ok) {
    say(status, 'Done.', 'ok')
    window.location.reload()
  } else {
    say(status, answer.data.error, 'error')
    button.disabled = false
  }
}

if (panel) {
  for (const radio of document.querySelectorAll('input[name="profile-choice"]')) {
    radio.addEventListener('change', showChoice)
  }
  lookUp()
}

if (welcome) {
  $('#agree').addEventListener('click', async event => {
    const button = event.currentTarget
    try {
      const profile = await profileEvent()
      say(status, 'Sign the terms in your extension…')
      const terms = await sign(4706, { version: welcome.dataset.version, sha256: welcome.dataset.sha256 })
      await send(button, [terms, profile])
    } catch (error) {
      say(status, error.message, 'error')
      button.disabled = false
    }
  })
}

const save = $('#save-profile')
if (save) {
  save.addEventListener('click', async () => {
    try {
      await send(save, [await profileEvent()])
    } catch (error) {
      say(status, error.message, 'error')
      save.disabled = false
    }
  })
}

// --- creating a collection ---------------------------------------------------------------------

const form = $('#create-form')
if (form) {
  const input = $('#slug')
  const check = $('#slug-check')
  const mine = new Set([...document.querySelectorAll('#collections .card h2')].map(h => h.textContent.trim()))
  const problem = slug => {
    if (!slug) return 'Type a name: 1 to 64 lowercase letters, digits, - and _.'
    if (slug.length > 64) return `Too long: ${slug.length} characters, at most 64.`
    if (/[A-Z]/.test(slug)) return 'Use lowercase letters only.'
    const bad = [...slug].find(c => !/[a-z0-9_-]/.test(c))
    if (bad) return `${JSON.stringify(bad)} is not allowed: only a-z, 0-9, - and _.`
    if (mine.has(slug)) return `You already have ${slug}.`
    return null
  }
  input.addEventListener('input', () => {
    const slug = input.value
    const wrong = problem(slug)
    say(check, wrong || `${slug} is a valid name.`, wrong && slug ? 'error' : (wrong ? '' : 'ok'))
    input.setAttribute('aria-invalid', wrong && slug ? 'true' : 'false')
  })
  form.addEventListener('submit', async event => {
    event.preventDefault()
    const slug = input.value
    const wrong = problem(slug)
    const out = $('#create-status')
    if (wrong) { say(check, wrong, 'error'); input.focus(); return }
    const button = $('#create-button')
    button.disabled = true
    try {
      say(out, 'Sign the new collection in your extension…')
      // The first event naming a collection creates it: an empty member list (the owner
      // always belongs), which the members page then replaces.
      const created = await sign(4705, { collection: slug, members: [] })
      const answer = await publish([created])
      if (answer.ok) {
        say(out, `Created ${slug}.`, 'ok')
        window.location.assign(`/c/${slug}`)
      } else {
        const taken = /is not a member of collection/.test(answer.data.error)
        say(out, taken ? `The name ${slug} is taken by another collection: choose another.` : answer.data.error, 'error')
        button.disabled = false
      }
    } catch (error) {
      say(out, error.message, 'error')
      button.disabled = false
    }
  })
}

document.documentElement.dataset.js = 'ready' // scripts attached: what tests wait for
