// The claim page, live (./live.js): a new link pointing at this claim appears at the end of its
// relation's section with its quote, and a new contradiction naming it at the end of the
// contradictions, each marked "new" with a quiet highlight, as the server would list them
// (oldest first). A new REBUTS link aimed at a link the page shows marks that link disputed, as
// the server's page does (templates/_disputes.html), and is listed under it. A link's evidence title and each author's name are looked up through the same
// relay when the page does not show them already. A section the page shows cut (more records
// than a page holds) gets nothing added: a reload would not show the newcomer there either.
import { attachCopyButtons } from './copy.js'
import { Names, arrivedText, contentOf, cut, el, follow, liveMark } from './live.js'

const QUOTE_CHARS = 1000 // as tms/ledger/excerpts.py cuts them
const REASON_CHARS = 2000
const TITLE_CHARS = 300
const CLAIM_CHARS = 300
const CLAIMS_PER_CONTRADICTION = 20
const RELATIONS = { SUPPORTS: 'supports', REBUTS: 'rebuts', QUALIFIES: 'qualifies' }
const isId = value => typeof value === 'string' && /^[0-9a-f]{64}$/.test(value)

const where = liveMark()
const form = document.getElementById('contradicts')
const claimId = form ? form.dataset.claim : null
const announcer = document.getElementById('live-news')

if (where && claimId && /^[0-9a-f]{64}$/.test(claimId)) {
  const { slug } = where
  const base = `/c/${encodeURIComponent(slug)}`
  let queue = Promise.resolve() // records are shown one at a time, in the order they came
  const live = follow({
    ...where,
    known: id => Boolean(document.getElementById(`link-${id}`) || document.getElementById(`contradiction-${id}`) ||
      document.querySelector(`[data-dispute="${id}"]`)),
    onEvent: event => { queue = queue.then(() => show(event)).catch(() => {}) }
  })
  const names = new Names(live)
  const titles = new Map()

  async function show (event) {
    const content = contentOf(event)
    if (!content) return
    if (event.kind === 4703 && content.to === claimId && RELATIONS[content.relation]) {
      await addLink(event, content)
    } else if (event.kind === 4703 && content.relation === 'REBUTS' && isId(content.to) &&
        document.getElementById(`link-${content.to}`)) {
      await addDispute(event, content)
    } else if (event.kind === 4704 && Array.isArray(content.claims) && content.claims.includes(claimId)) {
      await addContradiction(event, content)
    }
  }

  async function titleOf (evidenceId) {
    const shown = document.querySelector(`.link a[href^="${base}/evidence/${evidenceId}"]`)
    if (shown && !titles.has(evidenceId)) titles.set(evidenceId, shown.textContent)
    if (!titles.has(evidenceId)) {
      const found = await live.lookup({ ids: [evidenceId], kinds: [4701], limit: 1 })
      if (!found || !found.length) return 'its evidence' // not told: said plainly, asked again
      const content = contentOf(found[0])
      titles.set(evidenceId, cut((content && content.title) || 'Untitled document', TITLE_CHARS))
    }
    return titles.get(evidenceId)
  }

  async function addLink (event, link) {
    const relation = RELATIONS[link.relation]
    const section = document.getElementById(relation)
    if (!section || document.getElementById('links-cut') || !/^[0-9a-f]{64}$/.test(link.from)) return
    const [title, author] = await Promise.all([titleOf(link.from), names.of(event.pubkey)])
    if (document.getElementById(`link-${event.id}`)) return
    const quote = cut(link.quote, QUOTE_CHARS)
    const evidence = `${base}/evidence/${link.from}`
    const article = el('article', { className: 'link fresh', attrs: { id: `link-${event.id}` } },
      el('p', { className: 'meta' },
        el('span', { className: `badge ${relation}`, text: link.relation }), ' from ',
        el('a', { text: title, attrs: { href: evidence } }),
        ` · ${author} · ${arrivedText()} `, newBadge()),
      el('blockquote', { className: 'context' }, el('mark', { text: quote })))
    if (quote !== String(link.quote)) {
      article.append(el('p', { className: 'fine' }, 'The quote is shortened here; ',
        el('a', { text: 'its evidence', attrs: { href: evidence } }), ' shows it whole.'))
    }
    article.append(
      el('p', { className: 'reason' }, el('span', { className: 'label', text: 'Reason' }), ` ${cut(link.reason, REASON_CHARS)}`),
      recordId(event.id))
    append(section, article, '.link')
    tell(`A new ${link.relation.toLowerCase()} link from ${author}.`)
  }

  async function addDispute (event, link) {
    const article = document.getElementById(`link-${link.to}`)
    if (!article || !isId(link.from)) return
    const [title, author] = await Promise.all([titleOf(link.from), names.of(event.pubkey)])
    if (article.querySelector(`[data-dispute="${event.id}"]`)) return
    let box = article.querySelector(':scope > .disputes')
    if (!box) {
      box = el('div', { className: 'disputes', attrs: { 'data-disputed': link.to } },
        el('p', { className: 'disputes-head' },
          'Disputed by ', el('span', { className: 'count', text: '0' }), ' ', el('span', { className: 'noun', text: 'rebutting link' })),
        el('ul', { className: 'dispute-list' }))
      const id = article.querySelector(':scope > .record-id')
      if (id) id.before(box); else article.append(box)
      article.classList.add('disputed')
      const relation = article.querySelector(':scope > .meta .badge')
      if (relation) relation.after(' ', el('span', { className: 'badge disputed', text: 'disputed' }))
    }
    const count = box.querySelector('.disputes-head .count')
    if (count && count.textContent.endsWith('+')) return // the page lists only the first few
    box.querySelector('.dispute-list').append(
      el('li', { className: 'dispute fresh', attrs: { 'data-dispute': event.id } },
        'From ',
        el('a', { text: title, attrs: { href: `${base}/evidence/${link.from}#quote-${event.id}` } }),
        ` · ${author} `, newBadge(),
        el('span', { className: 'dispute-reason', text: cut(link.reason, REASON_CHARS) })))
    const shown = box.querySelectorAll('.dispute').length
    if (count) count.textContent = String(shown)
    const noun = box.querySelector('.disputes-head .noun')
    if (noun) noun.textContent = shown === 1 ? 'rebutting link' : 'rebutting links'
    tell(`${author} disputed a link on this page.`)
  }

  async function addContradiction (event, contradiction) {
    const section = document.getElementById('contradictions')
    if (!section || document.getElementById('contradictions-cut')) return
    const listed = contradiction.claims.slice(0, CLAIMS_PER_CONTRADICTION)
    const others = listed.filter(id => id !== claimId && /^[0-9a-f]{64}$/.test(id))
    const [found, author] = await Promise.all([
      others.length ? live.lookup({ ids: others, kinds: [4702], limit: others.length }) : [],
      names.of(event.pubkey)
    ])
    if (document.getElementById(`contradiction-${event.id}`)) return
    const texts = new Map((found || []).map(claim => [claim.id, (contentOf(claim) || {}).text]))
    const items = []
    for (const id of listed) {
      if (id === claimId) {
        items.push(el('li', {}, el('strong', { text: 'this claim' })))
      } else if (texts.get(id) !== undefined) {
        items.push(el('li', {}, el('a', { text: cut(texts.get(id), CLAIM_CHARS), attrs: { href: `${base}/claims/${id}` } })))
      }
    }
    const more = contradiction.claims.length - items.length
    if (more > 0) items.push(el('li', { className: 'fine', text: `and ${more} more` }))
    const article = el('article', { className: 'contradiction fresh', attrs: { id: `contradiction-${event.id}` } },
      el('p', { className: 'reason', text: cut(contradiction.reason, REASON_CHARS) }),
      el('ul', {}, ...items),
      el('p', { className: 'meta' }, `${author} · ${arrivedText()} `, newBadge()),
      recordId(event.id))
    append(section, article, '.contradiction')
    tell(`A new contradiction from ${author}.`)
  }

  function recordId (id) {
    const target = `/submit?c=${encodeURIComponent(slug)}&to=${id}&relation=REBUTS`
    const block = el('div', { className: 'record-id' },
      el('span', { className: 'id-text' }, el('span', { className: 'label', text: 'Id' }), ' ',
        el('code', { className: 'id full-id', text: id })), ' ',
      el('button', { className: 'copy', text: 'Copy', attrs: { type: 'button', 'data-copy': id, 'aria-label': `Copy the id ${id.slice(0, 8)}…` } }), ' ',
      el('a', { className: 'dispute', text: 'Dispute', attrs: { href: target } }))
    attachCopyButtons(block)
    return block
  }
}

function newBadge () {
  return el('span', { className: 'badge new', text: 'new' })
}

// After the section's last record of that kind (or in place of its "None."), its count raised.
function append (section, article, selector) {
  const records = section.querySelectorAll(selector)
  const empty = section.querySelector(':scope > .empty')
  if (records.length) {
    records[records.length - 1].after(article)
  } else if (empty) {
    empty.replaceWith(article)
  } else {
    section.append(article)
  }
  const count = section.querySelector('h2 .count')
  if (count) count.textContent = String(section.querySelectorAll(selector).length)
}

function tell (text) {
  if (announcer) announcer.textContent = text
}
