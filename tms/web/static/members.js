// The members page: the owner's complete list, one npub per line. Every line is checked before
// anything is signed; the list is compared with the one standing now (a list saved meanwhile
// elsewhere is shown, not overwritten unseen); a save that loses the replaceable rule is said.
import { $, npubToHex, publish, say, sign } from './nostr.js'

const panel = $('#members')
const form = $('#members-form')
const lines = $('#member-lines')
const problems = $('#members-problems')
const status = $('#members-status')
const button = $('#save-members')
const slug = panel.dataset.slug

// The keys on the lines, in order, or the problems, each naming its line.
function parse (text) {
  const keys = []
  const wrong = []
  const seen = new Map()
  text.split('\n').forEach((raw, index) => {
    const entry = raw.split('#')[0].trim()
    if (!entry) return
    const line = index + 1
    let hex = null
    if (/^[0-9a-f]{64}$/.test(entry)) {
      hex = entry
    } else {
      try { hex = npubToHex(entry) } catch (error) {
        wrong.push(`Line ${line}: ${entry.length > 24 ? entry.slice(0, 24) + '…' : entry} ${error.message}.`)
        return
      }
    }
    if (seen.has(hex)) {
      wrong.push(`Line ${line}: the same key as line ${seen.get(hex)}.`)
      return
    }
    seen.set(hex, line)
    keys.push(hex)
  })
  return { keys, wrong }
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

lines.addEventListener('input', () => { if (problems.childElementCount) showProblems(parse(lines.value).wrong) })

form.addEventListener('submit', async event => {
  event.preventDefault()
  const { keys, wrong } = parse(lines.value)
  showProblems(wrong)
  if (wrong.length) { lines.focus(); return }
  button.disabled = true
  try {
    // The list standing now, against the one this page showed.
    const response = await fetch(`/c/${encodeURIComponent(slug)}/members.json`, { credentials: 'same-origin' })
    const current = await response.json()
    if (!response.ok) throw new Error(current.error || 'could not read the current list')
    if ((current.list_id || '') !== panel.dataset.listId) {
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
    say(status, 'Sign the member list in your extension…')
    const list = await sign(4705, { collection: slug, members: keys })
    const answer = await publish([list])
    if (!answer.ok) throw new Error(answer.data.error)
    if ((answer.data.superseded || []).includes(list.id)) {
      say(status, 'Your list was stored but is not the current one: a newer list stands (signed later, or in the same second with a lower id). Reload to see it.', 'error')
      button.disabled = false
      return
    }
    say(status, `Saved: ${keys.length} member${keys.length === 1 ? '' : 's'}.`, 'ok')
    window.location.reload()
  } catch (error) {
    say(status, error.message, 'error')
    button.disabled = false
  }
})


document.documentElement.dataset.js = 'ready' // scripts attached: what tests wait for
