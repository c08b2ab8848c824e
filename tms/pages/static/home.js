// The home page: the terms (I agree signs them and the profile, in one batch: publish takes no
// profile before the terms), the profile step, and creating a collection. Each action says
// beforehand how many signatures it needs, and after a refusal that nothing was stored.
import { $, csrf, loggedInKey, publish, say, sayRefused, sign, signaturesNeeded, signing } from './nostr.js'
import { lookupProfile, profileFields } from './relays.js'

const panel = $('#profile-panel')
const welcome = $('#welcome')
const status = $('#welcome-status')
let found = null // a usable kind-0 event found on the relays, stored as it is if chosen

function choice () {
  const checked = $('input[name="profile-choice"]:checked')
  return checked ? checked.value : 'new'
}

// What the action about to run signs, in order: a profile found on the relays is stored as it
// was signed, so it costs no signature.
function toSign () {
  const profile = choice() === 'found' && found ? [] : ['your profile']
  return welcome ? [...profile, 'the terms'] : profile
}

function showChoice () {
  const fields = $('#new-profile')
  fields.hidden = choice() === 'found'
  const save = $('#save-profile')
  if (save) save.textContent = choice() === 'found' ? 'Use this profile here' : 'Sign and save profile'
  const what = toSign()
  const kept = choice() === 'found' && found ? ' Your Nostr profile is stored exactly as you signed it before.' : ''
  const together = welcome ? ' Both are stored together, or neither.' : ''
  say($('#agree-needs') || $('#profile-needs'), signaturesNeeded(what) + (what.length > 1 ? together : kept))
}

async function lookUp () {
  const relays = (panel.dataset.relays || '').split(' ').filter(Boolean)
  if (!relays.length) return // the server names none (TMS_PROFILE_RELAYS empty): nothing to ask
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
async function profileEvent (what) {
  if (choice() === 'found' && found) return found
  const name = $('#profile-name').value.trim()
  if (!name) {
    $('#profile-name').focus()
    throw new Error('Type a name for your profile.')
  }
  const kind = $('input[name="profile-kind"]:checked').value
  const note = $('#profile-about').value.trim()
  say(status, signing(what, what.indexOf('your profile')))
  return sign(0, { name, about: note ? `${kind}: ${note}` : kind })
}

async function send (button, events) {
  say(status, 'Publishing…')
  const answer = await publish(events)
  if (answer.ok) {
    say(status, 'Done.', 'ok')
    window.location.reload()
  } else {
    sayRefused(status, `The server refused it: ${answer.data.error}`)
    button.disabled = false
  }
}

if (panel) {
  for (const radio of document.querySelectorAll('input[name="profile-choice"]')) {
    radio.addEventListener('change', showChoice)
  }
  showChoice()
  lookUp()
}

if (welcome) {
  $('#agree').addEventListener('click', async event => {
    const button = event.currentTarget
    button.disabled = true
    const what = toSign()
    try {
      const profile = await profileEvent(what)
      say(status, signing(what, what.indexOf('the terms')))
      const terms = await sign(4706, { version: welcome.dataset.version, sha256: welcome.dataset.sha256 })
      await send(button, [terms, profile])
    } catch (error) {
      sayRefused(status, error)
      button.disabled = false
    }
  })
}

const save = $('#save-profile')
if (save) {
  save.addEventListener('click', async () => {
    save.disabled = true
    try {
      await send(save, [await profileEvent(toSign())])
    } catch (error) {
      sayRefused(status, error)
      save.disabled = false
    }
  })
}

// --- changing the profile ----------------------------------------------------------------------

// A profile is replaceable: the newest created_at stands, a tie goes to the lower id. An edit
// signed in the same second as the standing profile (or with a clock behind it) would lose
// half the time, so it is dated one second after the standing one when that is not earlier.
function editedAt (standing, nowSeconds) {
  return standing >= nowSeconds ? standing + 1 : nowSeconds
}

const shown = $('#profile-shown')
if (shown) {
  const edit = $('#edit-profile')
  const editForm = $('#profile-edit')
  const editStatus = $('#edit-status')
  const saveEdit = $('#save-edit')
  const open = isOpen => {
    editForm.hidden = !isOpen
    edit.hidden = isOpen
    edit.setAttribute('aria-expanded', String(isOpen))
    if (isOpen) $('#edit-name').focus()
    else edit.focus()
  }
  edit.addEventListener('click', () => open(true))
  $('#cancel-edit').addEventListener('click', () => { say(editStatus, ''); open(false) })
  editForm.addEventListener('submit', async event => {
    event.preventDefault()
    const name = $('#edit-name').value.trim()
    if (!name) {
      say(editStatus, 'Type a name for your profile. Nothing was signed.', 'error')
      $('#edit-name').focus()
      return
    }
    const kind = $('input[name="edit-kind"]:checked').value
    const note = $('#edit-about').value.trim()
    saveEdit.disabled = true
    try {
      say(editStatus, signing(['your new profile'], 0))
      const createdAt = editedAt(Number(shown.dataset.createdAt), Math.floor(Date.now() / 1000))
      const profile = await sign(0, edited(shown, name, kind, note), storedTags(shown), createdAt)
      say(editStatus, 'Publishing…')
      const answer = await publish([profile])
      if (!answer.ok) throw new Error(`The server refused it: ${answer.data.error}`)
      if ((answer.data.superseded || []).includes(profile.id)) {
        say(editStatus, 'Your profile was stored but is not the current one: a newer profile stands (signed later, perhaps on another device). Reload to see it.', 'error')
        saveEdit.disabled = false
        return
      }
      say(editStatus, 'Saved.', 'ok')
      window.location.reload()
    } catch (error) {
      sayRefused(editStatus, error, 'Nothing was stored: your profile stands as before.')
      saveEdit.disabled = false
    }
  })
}

// The edited profile: the stored one's content with the name and about the form holds, so what
// other clients put there (picture, nip05, lud16, ...) is kept. An about written here before
// (`human`, `agent: note`) is written so again; any other stays as typed, unless the key now
// says it is an agent.
function edited (shown, name, kind, note) {
  let stored = {}
  try {
    const parsed = JSON.parse(shown.dataset.content || '{}')
    if (parsed && typeof parsed === 'object' && !Array.isArray(parsed)) stored = parsed
  } catch { /* a content that is no JSON object keeps nothing */ }
  const ours = shown.dataset.aboutKind === 'ours' || kind === 'agent'
  const about = ours ? (note ? `${kind}: ${note}` : kind) : note
  const content = { ...stored, name }
  if (about) content.about = about
  else delete content.about
  return content
}

function storedTags (shown) {
  try {
    const tags = JSON.parse(shown.dataset.tags || '[]')
    return Array.isArray(tags) ? tags : []
  } catch { return [] }
}

// --- creating a collection ---------------------------------------------------------------------

// What is wrong with a name, said with what is allowed and which characters are not.
function slugProblem (slug) {
  const allowed = 'A name has only lowercase letters a-z, digits 0-9, - and _, 1 to 64 of them.'
  if (!slug) return `Type a name. ${allowed}`
  const wrong = []
  ;[...slug].forEach((c, index) => {
    if (/[a-z0-9_-]/.test(c)) return
    const shown = /\s/.test(c) ? (c === ' ' ? 'the space' : 'a blank') : JSON.stringify(c)
    const why = /[A-Z]/.test(c) ? ', uppercase' : ''
    wrong.push(`${shown} (character ${index + 1}${why})`)
  })
  const long = [...slug].length > 64 ? `It is ${[...slug].length} characters long, more than 64. ` : ''
  if (!wrong.length && !long) return null
  const listed = wrong.length > 4 ? [...wrong.slice(0, 4), `${wrong.length - 4} more`] : wrong
  const not = listed.length
    ? `Not allowed: ${listed.length > 1 ? listed.slice(0, -1).join(', ') + ' and ' + listed.at(-1) : listed[0]}. `
    : ''
  const suggestion = slug.toLowerCase().trim().replace(/\s+/g, '-').replace(/[^a-z0-9_-]/g, '').slice(0, 64)
  const tryThis = suggestion && suggestion !== slug ? ` Try ${suggestion}.` : ''
  return `${not}${long}${allowed}${tryThis}`
}

const form = $('#create-form')
if (form) {
  const input = $('#slug')
  const check = $('#slug-check')
  const out = $('#create-status')
  const button = $('#create-button')
  let asked = 0 // the latest name check, so an older answer never overwrites a newer one

  // Is the name free? {exists, yours}, or null when the server could not say.
  const lookUpName = async slug => {
    try {
      const response = await fetch(`/collections/check?slug=${encodeURIComponent(slug)}`, {
        credentials: 'same-origin', headers: { 'X-CSRF-Token': csrf() }
      })
      return response.ok ? await response.json() : null
    } catch {
      return null
    }
  }
  const takenMessage = (slug, found) => found.yours
    ? `You already own ${slug}: open it from your collections above.`
    : `The name ${slug} is taken by another collection: choose another.`

  const show = (text, kind) => {
    say(check, text, kind)
    input.setAttribute('aria-invalid', kind === 'error' ? 'true' : 'false')
  }

  input.addEventListener('input', async () => {
    const slug = input.value
    const wrong = slugProblem(slug)
    if (wrong) { show(wrong, slug ? 'error' : ''); return }
    show(`${slug} is a valid name.`, 'ok')
    const mine = ++asked
    await new Promise(resolve => setTimeout(resolve, 250))
    if (mine !== asked) return
    const found = await lookUpName(slug)
    if (mine !== asked || !found) return
    if (found.exists) show(takenMessage(slug, found), 'error')
    else show(`${slug} is free.`, 'ok')
  })

  form.addEventListener('submit', async event => {
    event.preventDefault()
    const slug = input.value
    const wrong = slugProblem(slug)
    if (wrong) { show(wrong, 'error'); input.focus(); return }
    button.disabled = true
    try {
      // Again right before signing: the name may have been taken since the page loaded.
      const found = await lookUpName(slug)
      if (found && found.exists) {
        show(takenMessage(slug, found), 'error')
        say(out, `Nothing was signed: ${takenMessage(slug, found)}`, 'error')
        button.disabled = false
        input.focus()
        return
      }
      const what = ["the new collection's member list"]
      say(out, signing(what, 0))
      // The first event naming a collection creates it: an empty member list (the owner
      // always belongs), which the members page then replaces. `expected` makes the server
      // refuse it if the collection exists by then: never an empty list over a real one.
      const created = await sign(4705, { collection: slug, members: [] })
      say(out, 'Publishing…')
      const answer = await publish([created], { [slug]: null })
      if (answer.ok) {
        say(out, `Created ${slug}.`, 'ok')
        window.location.assign(`/c/${slug}`)
      } else {
        sayRefused(out, `The server refused it: ${answer.data.error}`)
        button.disabled = false
      }
    } catch (error) {
      sayRefused(out, error)
      button.disabled = false
    }
  })
}

document.documentElement.dataset.js = 'ready' // scripts attached: what tests wait for
