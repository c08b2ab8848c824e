// The submit page: evidence (fetched by the server, or pasted), rows of claim, relation, quote
// and reason, each quote checked as you type with the server's normalization; then every event
// signed with NIP-07 and published as one batch. A refusal names the failing event, shown on
// its row with the server's message; nothing is stored.
import { $, postJSON, publish, failedPosition, say, sign } from './nostr.js'
import { QuoteIndex, loadRules } from './quotes.js'

const form = $('#submit-form')
const text = $('#text')
const rows = $('#rows')
const template = $('#row-template')
const publishStatus = $('#publish-status')
const HEX64 = /^[0-9a-f]{64}$/
const CONTEXT = 80
let index = null // the evidence text, normalized once per edit
let rowCount = 0
let ready = false

function debounce (fn, ms) {
  let timer = null
  return (...args) => { clearTimeout(timer); timer = setTimeout(() => fn(...args), ms) }
}

function reindex () {
  index = ready && text.value.trim() ? new QuoteIndex(text.value) : null
  $('#text-count').textContent = `${text.value.length.toLocaleString('en')} characters`
  for (const row of rows.children) checkQuote(row)
}

// The row's quote against the text: where it matched (with a preview), or "not found".
function checkQuote (row) {
  const quote = row.querySelector('.quote').value
  const out = row.querySelector('.quote-check')
  out.className = 'quote-check'
  out.replaceChildren()
  row.dataset.quote = ''
  if (!quote.trim()) return
  if (!ready) { out.textContent = 'Loading the quote rules…'; return }
  if (!index) { out.textContent = 'Paste or fetch the evidence text to check this quote.'; return }
  const span = index.find(quote)
  if (!span) {
    out.classList.add('missing')
    out.textContent = '✗ Not found verbatim in the text.'
    row.dataset.quote = 'missing'
    return
  }
  const [start, end] = span
  const source = text.value
  out.classList.add('found')
  row.dataset.quote = 'found'
  out.append(`✓ Found at characters ${start.toLocaleString('en')}–${end.toLocaleString('en')}:`)
  const preview = document.createElement('span')
  preview.className = 'preview'
  const mark = document.createElement('mark')
  mark.textContent = source.slice(start, end)
  const before = source.slice(Math.max(0, start - CONTEXT), start)
  const after = source.slice(end, end + CONTEXT)
  preview.append((start > CONTEXT ? '…' : '') + before, mark, after + (end + CONTEXT < source.length ? '…' : ''))
  out.append(preview)
}

function addRow () {
  rowCount += 1
  const row = template.content.firstElementChild.cloneNode(true)
  const n = rowCount
  row.querySelector('.row-title').textContent = `Row ${n}`
  for (const name of ['claim', 'relation', 'quote', 'reason']) {
    const field = row.querySelector(`.${name}`)
    field.id = `row-${n}-${name}`
    row.querySelector(`.${name}-label`).htmlFor = field.id
  }
  row.querySelector('.remove').addEventListener('click', () => { row.remove() })
  row.querySelector('.quote').addEventListener('input', debounce(() => checkQuote(row), 120))
  rows.append(row)
  return row
}

async function fetchUrl () {
  const url = $('#url').value.trim()
  const status = $('#fetch-status')
  if (!url) { say(status, 'Paste a URL first.', 'error'); $('#url').focus(); return }
  const button = $('#fetch')
  button.disabled = true
  say(status, 'Fetching… (up to 30 seconds)')
  const answer = await postJSON('/fetch', { url })
  button.disabled = false
  if (!answer.ok) { say(status, answer.data.error, 'error'); return }
  const page = answer.data
  $('#url').value = page.url
  $('#title').value = page.title
  text.value = page.text
  reindex()
  say(status, `Fetched ${page.chars.toLocaleString('en')} characters: read them, they are what you vouch for.`, 'ok')
}

function clearErrors () {
  for (const row of rows.children) {
    row.classList.remove('failed')
    const error = row.querySelector('.row-error')
    error.hidden = true
    error.textContent = ''
  }
  say(publishStatus, '')
}

function rowFailed (row, message) {
  row.classList.add('failed')
  const error = row.querySelector('.row-error')
  error.textContent = message
  error.hidden = false
  row.scrollIntoView({ block: 'center' })
}

// Check what the page can before anything is signed.
function problems (collection) {
  if (!collection) return ['Pick a collection.']
  if (!text.value.trim()) return ['Paste or fetch the evidence text.']
  const found = []
  for (const row of rows.children) {
    const title = row.querySelector('.row-title').textContent
    const claim = row.querySelector('.claim').value.trim()
    const missing = ['claim', 'quote', 'reason'].filter(name => !row.querySelector(`.${name}`).value.trim())
    if (missing.length) found.push([row, `${title}: fill in the ${missing.join(', ')}.`])
    else if (row.dataset.quote === 'missing') found.push([row, `${title}: the quote is not found verbatim in the text.`])
    else if (/^[0-9a-fA-F]{64}$/.test(claim) && !HEX64.test(claim)) found.push([row, `${title}: a claim id is lowercase hex.`])
  }
  return found
}

async function submit (event) {
  event.preventDefault()
  clearErrors()
  reindex() // what is typed now, not what the debounced checks last saw
  const collection = $('#collection').value
  const wrong = problems(collection)
  if (wrong.length) {
    for (const item of wrong) {
      if (Array.isArray(item)) rowFailed(item[0], item[1])
      else say(publishStatus, item, 'error')
    }
    if (Array.isArray(wrong[0])) say(publishStatus, 'Nothing was signed: fix the rows marked in red.', 'error')
    return
  }
  const button = $('#publish')
  button.disabled = true
  try {
    say(publishStatus, 'Sign each record in your extension…')
    const content = { collection, text: text.value }
    for (const name of ['url', 'title', 'source']) {
      const value = $(`#${name}`).value.trim()
      if (value) content[name] = value
    }
    const evidence = await sign(4701, content)
    const events = [evidence]
    const owners = [null] // the row each event comes from (null: the evidence)
    const made = []
    for (const row of rows.children) {
      const claimText = row.querySelector('.claim').value.trim()
      let claimId = claimText
      if (!HEX64.test(claimText)) {
        const claim = await sign(4702, { collection, text: claimText })
        events.push(claim); owners.push(row)
        claimId = claim.id
      }
      const link = await sign(4703, {
        collection,
        from: evidence.id,
        to: claimId,
        relation: row.querySelector('.relation').value,
        quote: row.querySelector('.quote').value,
        reason: row.querySelector('.reason').value
      })
      events.push(link); owners.push(row)
      made.push(claimId)
    }
    say(publishStatus, `Publishing ${events.length} records…`)
    const answer = await publish(events)
    if (!answer.ok) {
      const position = failedPosition(answer.data.error)
      const row = position === null ? null : owners[position]
      if (row) {
        rowFailed(row, answer.data.error)
        say(publishStatus, 'Refused: nothing was stored. The row marked in red says why.', 'error')
      } else {
        say(publishStatus, `Refused: nothing was stored. ${answer.data.error}`, 'error')
      }
      button.disabled = false
      return
    }
    showDone(collection, evidence.id, made, answer.data)
  } catch (error) {
    say(publishStatus, error.message, 'error')
    button.disabled = false
  }
}

function showDone (collection, evidenceId, claims, result) {
  publishStatus.replaceChildren()
  publishStatus.className = 'status ok'
  const head = document.createElement('p')
  head.textContent = `Stored ${result.accepted.length} records` + (result.skipped.length ? ` (${result.skipped.length} already there)` : '') + '.'
  const list = document.createElement('ul')
  const item = (href, label) => {
    const li = document.createElement('li')
    const a = document.createElement('a')
    a.href = href
    a.textContent = label
    li.append(a)
    list.append(li)
  }
  item(`/c/${collection}/evidence/${evidenceId}`, 'The evidence, with its quotes marked')
  claims.forEach((id, i) => item(`/c/${collection}/claims/${id}`, `Claim of row ${i + 1}`))
  publishStatus.append(head, list)
  $('#publish').disabled = false
}

if (form) {
  $('#add-row').addEventListener('click', () => addRow().querySelector('.claim').focus())
  $('#fetch').addEventListener('click', fetchUrl)
  text.addEventListener('input', debounce(reindex, 200))
  form.addEventListener('submit', submit)
  addRow()
  loadRules().then(() => { ready = true; reindex() }).catch(error => say(publishStatus, error.message, 'error'))
}

document.documentElement.dataset.js = 'ready' // scripts attached: what tests wait for
