// Quote matching as the server does it (tms/rules/quotes.py, tms/rules/spans.py): case-fold
// (Python's full case folding, which JavaScript lacks, so the server sends its table), map
// quotes, dashes, soft hyphens, ligatures and whitespace, collapse runs of spaces, trim. Every
// normalized character remembers where in the original it came from, so a match can be shown.

let rules = null

export async function loadRules () {
  if (!rules) {
    const response = await fetch('/quotes/normalization.json', { credentials: 'same-origin' })
    if (!response.ok) throw new Error('could not load the quote rules')
    rules = await response.json()
  }
  return rules
}

// {text: the normalized string, starts, ends}: for each UTF-16 unit of the normalized text,
// the [start, end) of the original character it came from.
export function normalizeWithOrigins (text) {
  if (!rules) throw new Error('call loadRules() first')
  const { casefold, map } = rules
  const out = []
  const starts = []
  const ends = []
  let lastSpace = true // leading spaces are dropped
  let i = 0
  for (const char of text) {
    const start = i
    i += char.length
    const folded = casefold[char] ?? char
    for (const f of folded) {
      const mapped = map[f] ?? f
      for (const r of mapped) {
        if (r === ' ') {
          if (lastSpace) continue
          lastSpace = true
        } else {
          lastSpace = false
        }
        out.push(r)
        for (let k = 0; k < r.length; k++) { starts.push(start); ends.push(i) }
      }
    }
  }
  if (out.length && out[out.length - 1] === ' ') { out.pop(); starts.pop(); ends.pop() }
  return { text: out.join(''), starts, ends }
}

export const normalize = text => normalizeWithOrigins(text).text

// An evidence text prepared once; find() gives a quote's [start, end) in the original text
// (UTF-16 units, for slicing), or null when it is not found verbatim.
export class QuoteIndex {
  constructor (text) { this.origins = normalizeWithOrigins(text) }

  find (quote) {
    const needle = normalize(quote)
    if (!needle) return null
    const at = this.origins.text.indexOf(needle)
    if (at < 0) return null
    return [this.origins.starts[at], this.origins.ends[at + needle.length - 1]]
  }
}
