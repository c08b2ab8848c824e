// The Connect page: the extension's public key, then a signed one-time login (a NIP-98 event
// for POST /login with the server's nonce in the URL), which sets the session cookie.
import { $, now, say, waitForNostr } from './nostr.js'

const panel = $('#connect')
const button = $('#connect-button')
const status = $('#connect-status')

function base64 (text) {
  const bytes = new TextEncoder().encode(text)
  let binary = ''
  for (const byte of bytes) binary += String.fromCharCode(byte)
  return btoa(binary)
}

async function connect () {
  if (!await waitForNostr(300)) {
    $('#no-extension').hidden = false
    say(status, 'No Nostr extension answered.', 'error')
    return
  }
  button.disabled = true
  try {
    say(status, 'Asking your extension for your public key…')
    const pubkey = await window.nostr.getPublicKey()
    say(status, 'Sign the one-time login in your extension…')
    const challenge = await (await fetch('/login/challenge', { credentials: 'same-origin' })).json()
    const event = await window.nostr.signEvent({
      kind: 27235,
      created_at: now(),
      tags: [['u', challenge.url], ['method', challenge.method]],
      content: ''
    })
    if (event.pubkey !== pubkey) throw new Error('the extension signed with another key')
    const response = await fetch(challenge.url, {
      method: 'POST',
      credentials: 'same-origin',
      headers: { Authorization: 'Nostr ' + base64(JSON.stringify(event)) }
    })
    const answer = await response.json().catch(() => ({ error: `the server answered ${response.status}` }))
    if (!response.ok) {
      say(status, answer.error || 'Login refused.', 'error')
      button.disabled = false
      return
    }
    say(status, 'Logged in.', 'ok')
    window.location.assign(panel.dataset.next || '/')
  } catch (error) {
    say(status, `Login did not complete: ${error.message || error}`, 'error')
    button.disabled = false
  }
}

button.addEventListener('click', connect)
waitForNostr().then(present => { if (!present) $('#no-extension').hidden = false })

document.documentElement.dataset.js = 'ready' // scripts attached: what tests wait for
