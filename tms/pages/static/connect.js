// The Connect page: one signature, a one-time login (a NIP-98 event for POST /login with the
// server's nonce in the URL), which sets the session cookie. The extension's public key comes
// with the signed event, so the extension asks once, not twice.
import { $, copyButtons, hexToNpub, now, say, sayRefused, waitForNostr } from './nostr.js'

const panel = $('#connect')
const button = $('#connect-button')
const status = $('#connect-status')
const refusedKey = $('#not-approved')
const NOT_LOGGED_IN = 'Nothing was stored; you are not logged in.'

function base64 (text) {
  const bytes = new TextEncoder().encode(text)
  let binary = ''
  for (const byte of bytes) binary += String.fromCharCode(byte)
  return btoa(binary)
}

// The key is neither approved nor a member: what to do next, with the npub to send.
function notApproved (pubkey) {
  const npub = hexToNpub(pubkey)
  $('#refused-npub').textContent = npub
  $('#copy-npub').dataset.copy = npub
  // What works from a checkout of TMS (README's way to run it); the page says the other.
  $('#approve-command').textContent = `uv run tms approve ${npub}`
  $('#copy-command').dataset.copy = `uv run tms approve ${npub}`
  refusedKey.hidden = false
  say(status, '')
}

async function connect () {
  if (!await waitForNostr(300)) {
    $('#no-extension').hidden = false
    say(status, 'No Nostr extension answered.', 'error')
    return
  }
  button.disabled = true
  refusedKey.hidden = true
  try {
    let challenge
    try {
      const answer = await fetch('/login/challenge', { credentials: 'same-origin' })
      challenge = await answer.json()
      if (!answer.ok) throw new Error(challenge.error || `the server answered ${answer.status}`)
    } catch (error) {
      throw new Error(`Could not start the login (${error.message || error}).`)
    }
    say(status, 'Sign the one-time login in your extension…')
    let event
    try {
      event = await window.nostr.signEvent({
        kind: 27235,
        created_at: now(),
        tags: [['u', challenge.url], ['method', challenge.method]],
        content: ''
      })
    } catch (error) {
      const reason = String(error.message || error).replace(/[.\s]+$/, '')
      throw new Error(`Your extension did not sign the login (${reason}).`)
    }
    const response = await fetch(challenge.url, {
      method: 'POST',
      credentials: 'same-origin',
      headers: { Authorization: 'Nostr ' + base64(JSON.stringify(event)) }
    })
    const answer = await response.json().catch(() => ({ error: `the server answered ${response.status}` }))
    if (!response.ok) {
      const message = answer.error || 'Login refused.'
      if (/is not approved and is not a member of any collection/.test(message) && /^[0-9a-f]{64}$/.test(event.pubkey || '')) {
        notApproved(event.pubkey)
      } else {
        sayRefused(status, `The server refused the login: ${message}`, NOT_LOGGED_IN)
      }
      button.disabled = false
      return
    }
    say(status, 'Logged in.', 'ok')
    window.location.assign(panel.dataset.next || '/')
  } catch (error) {
    sayRefused(status, error, NOT_LOGGED_IN)
    button.disabled = false
  }
}

button.addEventListener('click', connect)
copyButtons(panel)
waitForNostr().then(present => { if (!present) $('#no-extension').hidden = false })

document.documentElement.dataset.js = 'ready' // scripts attached: what tests wait for
