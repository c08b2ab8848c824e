// The collection page, live (./live.js). New claims are not pushed into the list under the
// reader's eyes: a quiet line above it says "2 new claims" with a Show button that puts them at
// the top of the Recent list, marked "new" (in another sort, or a search, Show opens Recent,
// where they are). New evidence joins the end of its list (oldest first, as the server lists it;
// nothing above moves), unless the list is cut. A new link or contradiction raises the counts
// of the claims and evidence it names, and the collection's counts above follow everything.
import { Names, arrivedText, contentOf, cut, el, follow, liveMark, plural } from './live.js'

const CLAIM_CHARS = 400 // as the page cuts them
const BADGES = {
  SUPPORTS: ['supports', n => plural(n, 'support', 'supports')],
  QUALIFIES: ['qualifies', n => plural(n, 'qualification', 'qualifications')], // nouns, as support, rebuttal
  REBUTS: ['rebuts', n => plural(n, 'rebuttal', 'rebuttals')]
}
const COUNTS = {
  4701: ['evidence', n => `${n.toLocaleString('en-US')} evidence`],
  4702: ['claims', n => plural(n, 'claim', 'claims')],
  4703: ['links', n => plural(n, 'link', 'links')],
  4704: ['contradictions', n => plural(n, 'contradiction', 'contradictions')]
}

const isId = value => typeof value === 'string' && /^[0-9a-f]{64}$/.test(value)
const findings = n => el('span', {
  className: 'badge findings', text: plural(n, 'contradiction', 'contradictions'), attrs: { title: 'contradictions it belongs to', 'data-n': String(n) }
})

const where = liveMark()
const claimsList = document.querySelector('#claims ol.claims')
const evidenceList = document.querySelector('#evidence .evidence-list')

if (where && claimsList && evidenceList) {
  const { slug } = where
  const base = `/c/${encodeURIComponent(slug)}`
  const recent = claimsList.dataset.view === 'recent'
  const waiting = [] // new claims not shown yet, oldest first: {event, content, author, n}
  let queue = Promise.resolve()
  const live = follow({
    ...where,
    known: id => Boolean(document.querySelector(`[data-id="${id}"]`)),
    onEvent: event => { queue = queue.then(() => show(event)).catch(() => {}) }
  })
  const names = new Names(live)
  const news = el('div', { className: 'live-news', attrs: { role: 'status', 'aria-live': 'polite', hidden: '' } })
  claimsList.before(news)

  async function show (event) {
    const content = contentOf(event)
    if (!content || !COUNTS[event.kind]) return
    count(event.kind)
    if (event.kind === 4702) {
      const n = { supports: 0, qualifies: 0, rebuts: 0, findings: 0 }
      waiting.push({ event, content, author: await names.of(event.pubkey), n })
      announce()
    } else if (event.kind === 4701) {
      await addEvidence(event, content)
    } else if (event.kind === 4703) {
      const badge = BADGES[content.relation]
      if (badge && isId(content.to)) {
        raise(`#claims [data-id="${content.to}"] .badge.${badge[0]}`, badge[1])
        for (const claim of waiting) if (claim.event.id === content.to) claim.n[badge[0]] += 1
      }
      if (isId(content.from)) {
        raise(`.evidence-list [data-id="${content.from}"] .quoted-by`, n => `quoted by ${plural(n, 'link', 'links')}`)
      }
    } else if (Array.isArray(content.claims)) {
      for (const id of new Set(content.claims.filter(isId))) {
        const rebuts = claimsList.querySelector(`[data-id="${id}"] .badge.rebuts`) // not in a search's list
        if (rebuts && !rebuts.parentElement.querySelector('.badge.findings')) rebuts.after(' ', findings(0))
        raise(`#claims [data-id="${id}"] .badge.findings`, n => plural(n, 'contradiction', 'contradictions'))
        for (const claim of waiting) if (claim.event.id === id) claim.n.findings += 1
      }
    }
  }

  // One more of what `selector` finds (a badge or a count), shown with a brief highlight.
  function raise (selector, words) {
    for (const node of document.querySelectorAll(selector)) {
      const n = Number(node.dataset.n || 0) + 1
      node.dataset.n = String(n)
      node.textContent = words(n)
      node.classList.remove('bumped')
      void node.offsetWidth // restart the highlight
      node.classList.add('bumped')
    }
  }

  function count (kind) {
    const [name, words] = COUNTS[kind]
    const node = document.querySelector(`#counts [data-count="${name}"]`)
    if (!node) return
    const n = Number(node.dataset.n || 0) + 1
    node.dataset.n = String(n)
    node.textContent = words(n)
  }

  function announce () {
    news.replaceChildren()
    if (!waiting.length) { news.hidden = true; return }
    const words = `${plural(waiting.length, 'new claim', 'new claims')} since you opened this page`
    const action = recent
      ? el('button', { className: 'quiet show', text: 'Show', attrs: { type: 'button', id: 'show-new' } })
      : el('a', { className: 'show', text: 'Show them in Recent', attrs: { href: `${base}?sort=recent#claims`, id: 'show-new' } })
    if (recent) action.addEventListener('click', showClaims)
    news.append(el('span', { text: words }), ' ', action)
    news.hidden = false
  }

  function showClaims () {
    const empty = claimsList.querySelector(':scope > .empty')
    if (empty) empty.remove()
    let first = null
    for (const { event, content, author, n } of waiting.splice(0)) {
      if (claimsList.querySelector(`[data-id="${event.id}"]`)) continue
      const badges = Object.values(BADGES).map(([relation, words]) => el('span', {
        className: `badge ${relation}`, text: words(n[relation]), attrs: { title: `${relation.toUpperCase()} links`, 'data-n': String(n[relation]) }
      }))
      if (n.findings) badges.push(findings(n.findings))
      const link = el('a', { className: 'text', text: cut(content.text, CLAIM_CHARS), attrs: { href: `${base}/claims/${event.id}` } })
      const item = el('li', { className: 'claim fresh', attrs: { 'data-id': event.id } }, link,
        el('p', { className: 'meta' }, ...badges.flatMap(badge => [badge, ' ']),
          `· ${author} · ${arrivedText()} `, el('span', { className: 'badge new', text: 'new' })))
      claimsList.prepend(item)
      first = link
    }
    announce()
    if (first) first.focus()
  }

  async function addEvidence (event, content) {
    if (evidenceList.dataset.cut) return // the list shows the oldest ones only: not this one
    const author = await names.of(event.pubkey)
    if (evidenceList.querySelector(`[data-id="${event.id}"]`)) return
    const chars = Array.from(String(content.text ?? '')).length
    const meta = el('p', { className: 'meta' })
    if (content.source) meta.append(`${content.source} · `)
    meta.append(`${chars.toLocaleString('en-US')} characters · `,
      el('span', { className: 'quoted-by', text: 'quoted by 0 links', attrs: { 'data-n': '0' } }),
      ` · ${author} · ${arrivedText()} `, el('span', { className: 'badge new', text: 'new' }))
    const item = el('li', { className: 'fresh', attrs: { 'data-id': event.id } },
      el('a', { text: content.title || 'Untitled document', attrs: { href: `${base}/evidence/${event.id}` } }), meta)
    const empty = evidenceList.querySelector(':scope > .empty')
    if (empty) empty.remove()
    evidenceList.append(item)
  }
}
