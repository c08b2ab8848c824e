// Looking up a key's newest profile (kind 0) on the profile relays: a NIP-01 REQ over
// WebSocket to each, answers gathered until every relay says EOSE or the time is up. A relay
// that fails or is slow is skipped quietly: a profile is a convenience, never a requirement.

export function lookupProfile (pubkey, relays, ms = 4000) {
  return new Promise(resolve => {
    const found = []
    let pending = relays.length
    const sockets = []
    const finish = () => {
      for (const socket of sockets) { try { socket.close() } catch { /* already closed */ } }
      found.sort((a, b) => b.created_at - a.created_at || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0))
      resolve(found[0] || null)
    }
    const timer = setTimeout(finish, ms)
    const done = () => { if (--pending <= 0) { clearTimeout(timer); finish() } }
    if (!pending) { clearTimeout(timer); finish(); return }
    for (const url of relays) {
      let socket
      try { socket = new WebSocket(url) } catch { done(); continue }
      sockets.push(socket)
      const id = 'tms-' + Math.random().toString(36).slice(2, 10)
      let closed = false
      const close = () => { if (!closed) { closed = true; done() } }
      socket.onopen = () => socket.send(JSON.stringify(['REQ', id, { kinds: [0], authors: [pubkey], limit: 1 }]))
      socket.onmessage = message => {
        let data
        try { data = JSON.parse(message.data) } catch { return }
        if (!Array.isArray(data) || data[1] !== id) return
        if (data[0] === 'EVENT' && data[2] && data[2].kind === 0 && data[2].pubkey === pubkey) found.push(data[2])
        if (data[0] === 'EOSE' || data[0] === 'CLOSED') close()
      }
      socket.onerror = close
      socket.onclose = close
    }
  })
}

// What a profile event says, if it can be stored here: TMS needs a non-blank `name`.
export function profileFields (event) {
  let content = null
  try { content = JSON.parse(event.content) } catch { return null }
  if (!content || typeof content !== 'object') return null
  const name = typeof content.name === 'string' ? content.name : ''
  return {
    name,
    usable: name.trim() !== '',
    displayName: typeof content.display_name === 'string' ? content.display_name : '',
    about: typeof content.about === 'string' ? content.about : ''
  }
}
