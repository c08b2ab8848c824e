// Copy buttons: every <button data-copy="..."> copies its value to the clipboard and says so.
// Shared by the pages that show full ids (the claim and evidence pages); a page loads it
// directly or imports it. The Clipboard API needs a secure context (https, or localhost); where
// it is missing or refused, a hidden textarea and execCommand('copy') do it, and if that fails
// too the id is selected on the page so Ctrl+C (Cmd+C) copies it.

const SHOWN_MS = 2000

async function copyText (text) {
  if (navigator.clipboard && window.isSecureContext) {
    try {
      await navigator.clipboard.writeText(text)
      return true
    } catch { /* refused (no permission, page not focused): try the old way */ }
  }
  const buffer = document.createElement('textarea')
  buffer.value = text
  buffer.setAttribute('readonly', '')
  buffer.className = 'copy-buffer'
  document.body.append(buffer)
  buffer.select()
  let done = false
  try { done = document.execCommand('copy') } catch { done = false }
  buffer.remove()
  return done
}

function selectShown (button) {
  const code = button.parentElement && button.parentElement.querySelector('code')
  if (!code) return
  const range = document.createRange()
  range.selectNodeContents(code)
  const selection = window.getSelection()
  selection.removeAllRanges()
  selection.addRange(range)
}

function flash (button, text) {
  if (!button.dataset.label) button.dataset.label = button.textContent
  button.textContent = text
  clearTimeout(Number(button.dataset.timer || 0))
  button.dataset.timer = String(setTimeout(() => { button.textContent = button.dataset.label }, SHOWN_MS))
}

export function attachCopyButtons (root = document) {
  for (const button of root.querySelectorAll('button[data-copy]')) {
    if (button.dataset.copyReady) continue
    button.dataset.copyReady = '1'
    button.addEventListener('click', async () => {
      if (await copyText(button.dataset.copy)) {
        flash(button, 'Copied')
      } else {
        selectShown(button)
        flash(button, 'Press Ctrl+C')
      }
    })
  }
}

attachCopyButtons()
document.documentElement.dataset.copy = 'ready' // copy buttons attached: what tests wait for
