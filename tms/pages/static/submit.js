// The submit page: evidence (fetched by the server, or pasted), rows of claim, relation, quote
// and reason, each quote checked as you type with the server's normalization; then every event
// signed with NIP-07 and published as one batch.
//
// A ledger keeps every mistake forever, so the page checks what it can before anything is
// signed: each row's claim against the collection (POST /c/<slug>/lookup: an id names a claim,
// link or contradiction, or is refused; a text that already exists is offered as the stored
// claim), the evidence (the same text or URL already stored is offered instead), the size of
// each record as signed, the nearest passage of a quote that is not in the text (POST
// /quotes/nearest). It says how many signatures the extension will be asked for, and after a
// refusal that nothing was stored. Once stored, the form locks until "Publish another".
import { $, postJSON, publish, failedPosition, say, sign } from './nostr.js'
import { QuoteIndex, loadRules, normalize } from './quotes.js'
import { sha256Hex } from './digest.js'

const form = $('#submit-form')
const editable = $('#editable')
const text = $('#text')
const rows = $('#rows')
const template = $('#row-template')
const publishStatus = $('#publish-status')
const publishButton = $('#publish')
const signPlan = $('#sign-plan')
const evidenceCheck = $('#evidence-check')
const CLAIM_HINT = template ? template.content.querySelector('.claim-label-hint').textContent : ''
const MAX_CONTENT = Number(form ? form.dataset.maxContent : 0) || 2000000
const LOOKUP_ROWS = 20 // rows per look-up (the server's bound)
const LOOKUP_TEXT_CHARS = 2000 // a longer claim is looked up by its key
const HINT_QUOTE_CHARS = 8000
const CONTEXT = 80
const SHOWN = 240 // characters of a stored record shown in a check
const PLACEHOLDER_ID = '0'.repeat(64) // an id's length, to measure contents before signing
const KIND_NAMES = { claim: 'claim', link: 'link', contradiction: 'contradiction' }

let index = null // the evidence text, normalized once per edit
let rowCount = 0
let ready = false
let stored = null // the stored evidence the rows link from, instead of signing the text anew
let warned = '' // the duplicates last warned about: publishing again with them goes ahead
let busy = false
const hashed = { text: null, hash: null } // the text's sha256, as last computed

// --- small helpers ------------------------------------------------------------------------------

function debounce (fn, ms) {
  let timer = null
  return (...args) => { clearTimeout(timer); timer = setTimeout(() => fn(...args), ms) }
}

const collection = () => $('#collection').value
const capital = value => value.charAt(0).toUpperCase() + value.slice(1)
const cut = (value, size = SHOWN) => value.length > size ? value.slice(0, size - 1) + '…' : value
const plural = (n, one, many = one + 's') => `${n.toLocaleString('en')} ${n === 1 ? one : many}`

function element (tag, className, ...children) {
  const made = document.createElement(tag)
  if (className) made.className = className
  made.append(...children)
  return made
}

function anchor (href, label) {
  const a = element('a', '', label)
  a.href = href
  return a
}

function button (label, onClick, className = '') {
  const b = element('button', className, label)
  b.type = 'button'
  b.addEventListener('click', onClick)
  return b
}

function show (box, kind, ...children) {
  box.replaceChildren(...children)
  box.className = box.className.replace(/\b(ok|error|warn)\b/g, '').trim()
  if (kind) box.classList.add(kind)
  box.hidden = children.length === 0
}

// Code points, as the server counts a content's characters (Python's len).
function characters (value) {
  const pairs = value.match(/[\uD800-\uDBFF][\uDC00-\uDFFF]/g)
  return value.length - (pairs ? pairs.length : 0)
}

async function textHash () {
  const value = text.value
  if (hashed.text === value) return hashed.hash
  const hash = await sha256Hex(value)
  hashed.text = value
  hashed.hash = hash
  return hash
}

// Textareas grow with what they hold (CSS field-sizing where the browser has it, else here).
const GROWS = typeof CSS !== 'undefined' && CSS.supports && CSS.supports('field-sizing', 'content')
function grow (area) {
  if (GROWS) return
  area.style.height = 'auto'
  area.style.height = `${Math.min(area.scrollHeight + 4, 420)}px`
}

function setValue (area, value) {
  area.value = value
  grow(area)
}

// --- the evidence -------------------------------------------------------------------------------

function evidenceContent () {
  const content = { collection: collection(), text: text.value }
  for (const name of ['url', 'title', 'source']) {
    const value = $(`#${name}`).value.trim()
    if (value) content[name] = value
  }
  return content
}

function evidenceSize () {
  return characters(JSON.stringify(evidenceContent()))
}

function tooLarge (size) {
  return `The evidence would be ${size.toLocaleString('en')} characters as signed (JSON escapes ` +
    'its line breaks, quotes and backslashes; the URL, title and source count too), ' +
    `${(size - MAX_CONTENT).toLocaleString('en')} more than the ${MAX_CONTENT.toLocaleString('en')} ` +
    'one evidence holds. Shorten the title or the source, or split the text into parts and ' +
    'publish each part as its own evidence.'
}

function reindex () {
  index = ready && text.value.trim() ? new QuoteIndex(text.value) : null
  updateCount()
  for (const row of rows.children) checkQuote(row)
}

// The text's length, and near the limit its size as signed (the URL, title and source count).
function updateCount () {
  let count = `${characters(text.value).toLocaleString('en')} characters`
  if (text.value.length > MAX_CONTENT * 0.9) {
    const size = evidenceSize()
    count += ` · ${size.toLocaleString('en')} of the ${MAX_CONTENT.toLocaleString('en')} one evidence holds, as signed`
    if (size > MAX_CONTENT && !stored) count += ': too long'
  }
  $('#text-count').textContent = count
}

// What the collection already holds of this evidence: shown, with the stored one offered.
async function checkEvidence () {
  if (stored) return showStored()
  const slug = collection()
  const url = $('#url').value.trim()
  const value = text.value
  if (!value.trim() && !url) { show(evidenceCheck, ''); return { evidence: [] } }
  const asked = { evidence: {} }
  if (value.trim()) asked.evidence.sha256 = await textHash()
  if (url) asked.evidence.url = url
  const answer = await postJSON(`/c/${encodeURIComponent(slug)}/lookup`, asked)
  if (slug !== collection() || value !== text.value || url !== $('#url').value.trim() || stored) {
    return null // the form changed meanwhile: a newer check follows
  }
  if (!answer.ok) {
    show(evidenceCheck, 'error', `Could not check the collection for this evidence: ${answer.data.error}`)
    return { error: answer.data.error }
  }
  showEvidence(slug, answer.data.evidence)
  return answer.data
}

function showEvidence (slug, found) {
  const parts = []
  for (const record of found) {
    const title = record.title || record.url || 'Untitled document'
    const link = anchor(`/c/${slug}/evidence/${record.id}`, title)
    link.target = '_blank'
    if (record.same_text) {
      parts.push(element('p', '', 'This exact text is already evidence in ', slug, ': ', link,
        ` (${plural(record.chars, 'character')}). Publishing it again would store a second copy forever.`))
      parts.push(element('p', 'actions', button('Link the rows to the stored evidence',
        () => useStored(record), 'use-stored')))
    } else {
      parts.push(element('p', '', 'This URL is already evidence in ', slug, ': ', link,
        `, stored with a different text (${plural(record.chars, 'character')}). Publishing stores the text above as new evidence; if it is the same document, quote the stored one instead.`))
    }
  }
  show(evidenceCheck, parts.length ? 'warn' : '', ...parts)
}

function useStored (record) {
  stored = record
  for (const name of ['url', 'title', 'source', 'text']) $(`#${name}`).readOnly = true
  $('#fetch').disabled = true
  showStored()
  updatePlan()
}

function showStored () {
  if (!stored) return null
  const link = anchor(`/c/${collection()}/evidence/${stored.id}`, stored.title || stored.url || 'the stored evidence')
  link.target = '_blank'
  show(evidenceCheck, 'ok',
    element('p', '', 'The rows will link from the stored evidence ', link,
      ' (the same text); no new evidence will be signed.'),
    element('p', 'actions', button('Sign the text as new evidence instead', () => newEvidence(), 'quiet')))
  return { evidence: [] }
}

function newEvidence () {
  stored = null
  for (const name of ['url', 'title', 'source', 'text']) $(`#${name}`).readOnly = false
  $('#fetch').disabled = false
  updatePlan()
  checkEvidence()
}

// --- rows ---------------------------------------------------------------------------------------

// The row's quote against the text: where it matched (with a preview), or "not found" and the
// nearest passage, asked of the server.
function checkQuote (row) {
  const quote = row.querySelector('.quote').value
  const out = row.querySelector('.quote-check')
  out.className = 'quote-check'
  out.replaceChildren()
  row.dataset.quote = ''
  if (!quote.trim()) { show(row.querySelector('.quote-hint'), ''); return }
  if (!ready) { out.textContent = 'Loading the quote rules…'; return }
  if (!index) { out.textContent = 'Paste or fetch the evidence text to check this quote.'; return }
  const span = index.find(quote)
  if (!span) {
    out.classList.add('missing')
    out.textContent = '✗ Not found verbatim in the text.'
    row.dataset.quote = 'missing'
    row.askHint()
    return
  }
  show(row.querySelector('.quote-hint'), '')
  const [start, end] = span
  const source = text.value
  out.classList.add('found')
  row.dataset.quote = 'found'
  // where the ledger and the docs say it is: in code points, not the UTF-16 units sliced here
  const first = characters(source.slice(0, start))
  const last = first + characters(source.slice(start, end))
  out.append(`✓ Found at characters ${first.toLocaleString('en')}–${last.toLocaleString('en')}:`)
  const mark = element('mark', '', source.slice(start, end))
  const before = source.slice(Math.max(0, start - CONTEXT), start)
  const after = source.slice(end, end + CONTEXT)
  out.append(element('span', 'preview', (start > CONTEXT ? '…' : '') + before, mark,
    after + (end + CONTEXT < source.length ? '…' : '')))
}

async function hint (row) {
  const area = row.querySelector('.quote')
  const box = row.querySelector('.quote-hint')
  const quote = area.value
  const value = text.value
  if (row.dataset.quote !== 'missing') return
  show(box, '', element('p', 'fine', 'Looking for the nearest passage…'))
  const sha256 = await textHash()
  const asked = { sha256, quote: quote.slice(0, HINT_QUOTE_CHARS) }
  let answer = await postJSON('/quotes/nearest', asked)
  if (answer.ok && answer.data.need_text) answer = await postJSON('/quotes/nearest', { ...asked, text: value })
  if (area.value !== quote || text.value !== value || row.dataset.quote !== 'missing') return
  if (!answer.ok) {
    show(box, '', element('p', 'fine', `No hint: ${answer.data.error}`))
    return
  }
  const found = answer.data.nearest
  if (!found) {
    show(box, '', element('p', 'fine', 'Nothing in the text reads like this quote: copy it from the text.'))
    return
  }
  const similar = `${Math.round(found.similarity * 100)} % similar`
  const parts = [
    element('p', '', `The nearest passage of the text (characters ${found.start.toLocaleString('en')}–${found.end.toLocaleString('en')}, ${similar}):`),
    element('blockquote', 'passage', cut(found.passage, 600))
  ]
  if (!found.cut) {
    parts.push(element('p', 'actions', button('Use this passage', () => {
      setValue(area, found.passage)
      checkQuote(row)
      updatePlan()
      area.focus()
    }, 'use-passage')))
  }
  show(box, 'warn', ...parts)
}

// Each row's claim as the collection knows it (`check`): for {"as": "id"}, the record it names
// (`target`) or why it names none (`error`); for {"as": "text"}, the claims of the same text.
async function lookupRows (list) {
  const slug = collection()
  const asked = []
  for (const row of list) {
    const value = row.querySelector('.claim').value
    asked.push(value.length <= LOOKUP_TEXT_CHARS ? { text: value } : { key: await sha256Hex(normalize(value)) })
  }
  const results = []
  for (let i = 0; i < asked.length; i += LOOKUP_ROWS) {
    const answer = await postJSON(`/c/${encodeURIComponent(slug)}/lookup`, { rows: asked.slice(i, i + LOOKUP_ROWS) })
    if (!answer.ok) throw new Error(`Could not check the claims against ${slug}: ${answer.data.error}`)
    results.push(...answer.data.rows)
  }
  return results.map((check, i) => ({ slug, value: list[i].querySelector('.claim').value, check }))
}

async function checkClaim (row) {
  const value = row.querySelector('.claim').value
  if (!value.trim()) { row.check = null; showClaim(row); updatePlan(); return }
  try {
    const [result] = await lookupRows([row])
    if (result.value !== row.querySelector('.claim').value || result.slug !== collection()) return
    row.check = result
  } catch (error) {
    row.check = null
    show(row.querySelector('.claim-check'), 'error', error.message)
    return
  }
  showClaim(row)
  updatePlan()
}

function targetLabel (slug, target) {
  const what = target.kind === 'link' ? `${target.relation} link` : KIND_NAMES[target.kind]
  const label = [`${what}: “${cut(target.text)}”`]
  if (target.kind === 'claim') {
    const link = anchor(`/c/${slug}/claims/${target.id}`, 'open')
    link.target = '_blank'
    label.push(' (', link, ')')
  }
  return label
}

// The row's first field names what it holds: a claim (new text or an id), or the link or
// contradiction that the row disputes or backs (a "Dispute" on a link lands here with its id).
function labelTarget (row) {
  const result = row.check
  const kind = result && result.check.as === 'id' && !result.check.error && result.check.target
    ? result.check.target.kind
    : 'claim'
  const label = row.querySelector('.claim-label-text')
  if (label) label.textContent = kind === 'claim' ? 'Claim' : `The ${kind === 'link' ? 'link' : 'contradiction'} this row disputes or backs`
  const hint = row.querySelector('.claim-label-hint') // what else the field takes, after what it holds
  if (hint) hint.textContent = kind === 'claim' ? CLAIM_HINT : "(or, in its place, new claim text or a claim's id)"
}

function showClaim (row) {
  labelTarget(row)
  const box = row.querySelector('.claim-check')
  const result = row.check
  if (!result) { show(box, ''); return }
  const { slug, check } = result
  if (check.as === 'id' && check.error) {
    show(box, 'error', `✗ ${capital(check.error)}`)
  } else if (check.as === 'id') {
    show(box, 'ok', '→ Links to the ', ...targetLabel(slug, check.target))
  } else if (check.same.length) {
    const [first] = check.same
    const link = anchor(`/c/${slug}/claims/${first.id}`, 'open it')
    link.target = '_blank'
    show(box, 'warn',
      element('p', '', `This claim is already in ${slug}: “${cut(first.text)}” (`, link, '). A new one would be a duplicate forever.'),
      element('p', 'actions', button('Link to the existing claim', () => {
        setValue(row.querySelector('.claim'), first.id)
        checkClaim(row)
      }, 'use-claim')))
  } else {
    show(box, '')
  }
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
  row.check = null
  row.askHint = debounce(() => hint(row), 600)
  row.querySelector('.remove').addEventListener('click', () => { row.remove(); rowsChanged(); updatePlan() })
  row.querySelector('.quote').addEventListener('input', debounce(() => checkQuote(row), 120))
  const claimChanged = debounce(() => checkClaim(row), 400)
  row.querySelector('.claim').addEventListener('input', () => { row.check = null; claimChanged(); updatePlan() })
  row.querySelector('.relation').addEventListener('change', updatePlan)
  for (const area of row.querySelectorAll('textarea')) area.addEventListener('input', () => grow(area))
  rows.append(row)
  updatePlan()
  return row
}

// --- the plan: what will be signed ------------------------------------------------------------

// Whether a row's claim is an id (as its last check says) or text: new claims are signed once
// per distinct text (rows with the same text share one claim).
function isReference (row) {
  const result = row.check
  return Boolean(result && result.value === row.querySelector('.claim').value && result.check.as === 'id')
}

function claimKey (value) {
  return ready ? normalize(value) : value.trim()
}

function counts () {
  const filled = [...rows.children].filter(row => row.querySelector('.claim').value.trim())
  const claims = new Set(filled.filter(row => !isReference(row)).map(row => claimKey(row.querySelector('.claim').value)))
  return { evidence: stored ? 0 : 1, claims: claims.size, links: filled.length }
}

function updatePlan () {
  if (!signPlan) return
  const { evidence, claims, links } = counts()
  const total = evidence + claims + links
  const parts = []
  if (evidence) parts.push('the evidence')
  if (claims) parts.push(plural(claims, 'new claim'))
  if (links) parts.push(plural(links, 'link'))
  const list = parts.length > 1 ? `${parts.slice(0, -1).join(', ')} and ${parts.at(-1)}` : parts[0]
  signPlan.textContent = links
    ? `Publishing asks your extension for ${plural(total, 'signature')}: ${list}. ` +
      (total > 1 ? 'If it asks for each one, approve each. ' : '') +
      'Nothing is sent until every record is signed; then all are stored together, or none.'
    : 'Your extension signs every record; they are stored as one batch, all or nothing.'
}

// --- publishing -------------------------------------------------------------------------------

function clearErrors () {
  for (const row of rows.children) {
    row.classList.remove('failed')
    const error = row.querySelector('.row-error')
    error.hidden = true
    error.textContent = ''
  }
  say(publishStatus, '')
}

// A row removed: a refusal that named rows marked in red is stale once none is left marked.
function rowsChanged () {
  if ([...rows.children].some(row => row.classList.contains('failed'))) return
  if (/rows? marked in red/.test(publishStatus.textContent)) say(publishStatus, '')
}

function rowFailed (row, message) {
  row.classList.add('failed')
  const error = row.querySelector('.row-error')
  error.textContent = message
  error.hidden = false
}

function title (row) {
  return row.querySelector('.row-title').textContent
}

// What the page can tell before asking the collection.
function problems () {
  if (!collection()) return ['Pick a collection.']
  if (!text.value.trim()) return ['Paste or fetch the evidence text.']
  if (!rows.children.length) return ['Add a row: evidence goes in with at least one claim it bears on.']
  const found = []
  for (const row of rows.children) {
    const missing = ['claim', 'quote', 'reason'].filter(name => !row.querySelector(`.${name}`).value.trim())
    if (missing.length) found.push([row, `${title(row)}: fill in the ${missing.join(', ')}.`])
    else if (row.dataset.quote === 'missing') found.push([row, `${title(row)}: the quote is not found verbatim in the text.`])
  }
  if (!stored) {
    const size = evidenceSize()
    if (size > MAX_CONTENT) found.push(tooLarge(size))
  }
  return found
}

// What the collection says: ids that name nothing, QUALIFIES on a link, duplicates.
function reviewChecks (checked) {
  const found = []
  const duplicates = []
  for (const row of rows.children) {
    const { slug, check } = row.check
    const relation = row.querySelector('.relation').value
    if (check.as === 'id' && check.error) {
      found.push([row, `${title(row)}: ${check.error}.`])
    } else if (check.as === 'id' && check.target.kind !== 'claim' && relation === 'QUALIFIES') {
      found.push([row, `${title(row)}: QUALIFIES only targets a claim; to dispute a ${check.target.kind}, pick SUPPORTS or REBUTS.`])
    } else if (check.as === 'text' && check.same.length) {
      duplicates.push([row, `${title(row)}: this claim is already in ${slug}.`, check.same[0].id])
    }
  }
  if (checked.evidence) {
    for (const record of checked.evidence.filter(r => r.same_text)) {
      duplicates.push([null, `This exact text is already evidence in ${collection()}.`, record.id])
    }
  }
  return { found, duplicates }
}

// A refusal's words without where the batch had the record (`events[0] (d3cb…): `), for
// showing beside that record.
function plainWords (message) {
  return String(message || '').replace(/^events\[\d+\](?: \([0-9a-f]+…\))?: /, '')
}

function refuse (found) {
  for (const item of found) {
    if (Array.isArray(item)) rowFailed(item[0], item[1])
    else say(publishStatus, item, 'error')
  }
  if (Array.isArray(found[0])) {
    say(publishStatus, 'Nothing was signed: fix the rows marked in red.', 'error')
    found[0][0].scrollIntoView({ block: 'center' })
  }
}

function lock (locked) {
  editable.disabled = locked
  publishButton.disabled = locked
}

class NotSigned extends Error {}

async function submit (event) {
  event.preventDefault()
  if (busy || editable.disabled) return
  busy = true
  lock(true)
  try {
    await attempt()
  } catch (error) {
    say(publishStatus, error.message, 'error')
    lock(false)
  } finally {
    busy = false
  }
}

async function attempt () {
  clearErrors()
  reindex() // what is typed now, not what the debounced checks last saw
  const slug = collection()
  const wrong = problems()
  if (wrong.length) { refuse(wrong); lock(false); return }
  say(publishStatus, `Checking the rows against ${slug}…`)
  const list = [...rows.children]
  const results = await lookupRows(list)
  list.forEach((row, i) => { row.check = results[i]; showClaim(row) })
  const evidence = stored ? { evidence: [] } : await checkEvidence()
  if (!evidence || evidence.error) throw new Error(`Nothing was signed: ${evidence ? evidence.error : 'the form changed while it was checked'}; try again.`)
  updatePlan()
  const { found, duplicates } = reviewChecks(evidence)
  if (found.length) { refuse(found); lock(false); return }
  const seen = JSON.stringify(duplicates.map(d => [d[0] && title(d[0]), d[2]]))
  if (duplicates.length && seen !== warned) {
    warned = seen
    for (const [row, message] of duplicates) if (row) rowFailed(row, `${message} Link to the existing claim, or publish again to store a second one.`)
    say(publishStatus, `Nothing was signed yet: ${duplicates.map(d => d[1]).join(' ')} ` +
      'Use what is stored (the buttons above), or click “Sign and publish” again to store it anyway.', 'error')
    lock(false)
    return
  }
  await signAndPublish(slug)
}

async function signAndPublish (slug) {
  const { evidence: evidenceCount, claims, links } = counts()
  const total = evidenceCount + claims + links
  let done = 0
  const signOne = async (kind, content) => {
    say(publishStatus, `Signing record ${done + 1} of ${total} in your extension…`)
    try {
      const signed = await sign(kind, content)
      done += 1
      return signed
    } catch (error) {
      throw new NotSigned(`Record ${done + 1} of ${total} was not signed (${error.reason || error.message || error}). ` +
        `Nothing was stored: the records are sent only once all ${total} are signed. ` +
        'Click “Sign and publish” to try again.')
    }
  }
  // Every content first, measured with an id's length where ids come later.
  const planned = []
  for (const row of rows.children) {
    const value = row.querySelector('.claim').value
    const reference = row.check.check.as === 'id' ? row.check.check.target.id : null
    planned.push({
      row,
      claim: reference ? null : { collection: slug, text: value.trim() },
      key: reference ? null : claimKey(value),
      to: reference,
      link: {
        collection: slug,
        from: PLACEHOLDER_ID,
        to: PLACEHOLDER_ID,
        relation: row.querySelector('.relation').value,
        quote: row.querySelector('.quote').value,
        reason: row.querySelector('.reason').value
      }
    })
  }
  const oversized = []
  for (const item of planned) {
    for (const content of [item.claim, item.link]) {
      const size = content ? characters(JSON.stringify(content)) : 0
      if (size > MAX_CONTENT) oversized.push([item.row, `${title(item.row)}: a record of ${size.toLocaleString('en')} characters as signed, more than the ${MAX_CONTENT.toLocaleString('en')} one record holds.`])
    }
  }
  if (oversized.length) { refuse(oversized); lock(false); return }
  const events = []
  const owners = [] // the row each event comes from (null: the evidence)
  let from = stored ? stored.id : null
  if (!stored) {
    const evidence = await signOne(4701, evidenceContent())
    events.push(evidence); owners.push(null)
    from = evidence.id
  }
  const made = new Map() // a new claim's normalized text -> its id (rows with one text share it)
  const targets = []
  for (const item of planned) {
    let to = item.to
    if (!to) {
      to = made.get(item.key)
      if (!to) {
        const claim = await signOne(4702, item.claim)
        events.push(claim); owners.push(item.row)
        made.set(item.key, claim.id)
        to = claim.id
      }
    }
    const link = await signOne(4703, { ...item.link, from, to })
    events.push(link); owners.push(item.row)
    targets.push({ row: item.row, to, link: link.id, check: item.row.check.check })
  }
  say(publishStatus, `Publishing ${plural(events.length, 'record')}…`)
  const answer = await publish(events)
  if (!answer.ok) {
    const position = failedPosition(answer.data.error)
    const row = position === null ? undefined : owners[position] // null: the evidence
    const words = plainWords(answer.data.error)
    if (row) {
      rowFailed(row, words)
      say(publishStatus, 'Refused: nothing was stored. The row marked in red says why.', 'error')
      row.scrollIntoView({ block: 'center' })
    } else if (row === null) {
      show(evidenceCheck, 'error', element('p', '', `Refused: ${words}`))
      say(publishStatus, 'Refused: nothing was stored. The evidence above says why.', 'error')
      evidenceCheck.scrollIntoView({ block: 'center' })
    } else {
      say(publishStatus, `Refused: nothing was stored. ${answer.data.error}`, 'error')
    }
    lock(false)
    return
  }
  warned = ''
  showDone(slug, from, targets, answer.data)
}

function showDone (slug, evidenceId, targets, result) {
  lock(true)
  publishButton.hidden = true
  signPlan.hidden = true
  publishStatus.replaceChildren()
  publishStatus.className = 'status ok'
  const head = element('p', 'done', `Stored ${plural(result.accepted.length, 'record')}` +
    (result.skipped.length ? ` (${result.skipped.length} already there)` : '') + '.')
  const list = element('ul', 'stored')
  list.append(element('li', '', anchor(`/c/${slug}/evidence/${evidenceId}`, 'The evidence, with its quotes marked')))
  for (const { row, to, check } of targets) {
    if (check.as === 'id' && check.target.kind !== 'claim') {
      list.append(element('li', '', `${title(row)}: a link to the ${check.target.kind === 'link' ? 'link' : 'contradiction'} “${cut(check.target.text, 120)}”`))
    } else {
      const claimText = check.as === 'id' ? check.target.text : row.querySelector('.claim').value.trim()
      list.append(element('li', '', `${title(row)}: `, anchor(`/c/${slug}/claims/${to}`, `the claim “${cut(claimText, 120)}”`)))
    }
  }
  const again = button('Publish another', reset, 'primary')
  again.id = 'publish-another'
  publishStatus.append(head, list, element('p', 'actions', again))
  again.focus()
}

// A fresh form in the same collection, once a batch is stored.
function reset () {
  stored = null
  for (const name of ['url', 'title', 'source']) { $(`#${name}`).value = ''; $(`#${name}`).readOnly = false }
  setValue(text, '')
  text.readOnly = false
  $('#fetch').disabled = false
  say($('#fetch-status'), '')
  show(evidenceCheck, '')
  rows.replaceChildren()
  rowCount = 0
  addRow()
  reindex()
  publishStatus.replaceChildren()
  publishStatus.className = 'status'
  publishButton.hidden = false
  signPlan.hidden = false
  updatePlan()
  lock(false)
  window.scrollTo(0, 0)
  $('#url').focus()
}

// --- fetching -----------------------------------------------------------------------------------

async function fetchUrl () {
  if (stored || editable.disabled || $('#fetch').disabled) return
  const url = $('#url').value.trim()
  const status = $('#fetch-status')
  if (!url) { say(status, 'Paste a URL first.', 'error'); $('#url').focus(); return }
  const fetchButton = $('#fetch')
  fetchButton.disabled = true
  say(status, 'Fetching… (up to 30 seconds)')
  const answer = await postJSON('/fetch', { url })
  fetchButton.disabled = false
  if (!answer.ok) { say(status, answer.data.error, 'error'); return }
  const page = answer.data
  $('#url').value = page.url
  $('#title').value = page.title
  setValue(text, page.text)
  reindex()
  let message = `Fetched ${page.chars.toLocaleString('en')} characters: read them, they are what you vouch for.`
  const room = MAX_CONTENT - evidenceSize()
  if (room < 1400) { // less than the longest title and source the form takes
    message += ` It is close to what one evidence holds: ${plural(Math.max(room, 0), 'character')} are left for a longer title and the source.`
  }
  say(status, message, 'ok')
  checkEvidence()
}

// --- start --------------------------------------------------------------------------------------

if (form) {
  $('#add-row').addEventListener('click', () => addRow().querySelector('.claim').focus())
  $('#fetch').addEventListener('click', fetchUrl)
  text.addEventListener('input', debounce(reindex, 200))
  const evidenceChanged = debounce(() => checkEvidence(), 700)
  text.addEventListener('input', evidenceChanged)
  $('#url').addEventListener('input', evidenceChanged)
  for (const name of ['url', 'title', 'source']) $(`#${name}`).addEventListener('input', debounce(updateCount, 200))
  $('#collection').addEventListener('change', () => {
    if (stored) newEvidence()
    else checkEvidence()
    for (const row of rows.children) { row.check = null; checkClaim(row) }
  })
  // Enter in a one-line field never publishes: in the URL box it fetches, elsewhere nothing.
  form.addEventListener('keydown', event => {
    if (event.key !== 'Enter' || event.target.tagName !== 'INPUT') return
    event.preventDefault()
    if (event.target.id === 'url') fetchUrl()
  })
  form.addEventListener('submit', submit)
  const first = addRow()
  // Linked from a claim page ("Rebut or qualify", a link's "Dispute"): the row is prefilled.
  const asked = new URLSearchParams(window.location.search)
  const to = (asked.get('to') || '').trim()
  if (to) {
    setValue(first.querySelector('.claim'), to.slice(0, LOOKUP_TEXT_CHARS))
    const relation = (asked.get('relation') || '').toUpperCase()
    const select = first.querySelector('.relation')
    if ([...select.options].some(o => o.value === relation)) select.value = relation
    checkClaim(first).then(() => {
      const note = $('#prefill-note')
      const result = first.check
      if (!note || !result || result.check.as !== 'id' || !result.check.target) return
      const label = targetLabel(result.slug, result.check.target)
      // a quoted text that ends its sentence ends this one too: `placebo.”`, never `placebo.”.`
      const ended = typeof label[label.length - 1] === 'string' && /[.!?…]”$/.test(label[label.length - 1])
      note.replaceChildren('Row 1 links this evidence to the ', ...label,
        `${ended ? '' : '.'} Add the evidence (fetch or paste it), then the row's quote and reason.`)
      note.hidden = false
    })
  }
  loadRules().then(() => { ready = true; reindex(); updatePlan() }).catch(error => say(publishStatus, error.message, 'error'))
}

document.documentElement.dataset.js = 'ready' // scripts attached: what tests wait for
