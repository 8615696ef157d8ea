// Headless Chromium for the tests that need a real browser (the status page, the example app):
// Debian's chromium, driven by playwright-core (pinned in test/package-lock.json), which
// downloads no browser of its own.
//
//   CHROMIUM: the browser's executable (default /usr/bin/chromium, which
//             scripts/install-deps.sh installs)
//
// A page's console errors, uncaught exceptions and every request it makes are recorded, so that
// a test can say that nothing failed and nothing left the origins it expects.

import { existsSync } from 'node:fs'

import { chromium } from 'playwright-core'

export const CHROMIUM = process.env.CHROMIUM ?? '/usr/bin/chromium'

export async function launchBrowser() {
  if (!existsSync(CHROMIUM)) {
    throw new Error(`no browser at ${CHROMIUM}: scripts/install-deps.sh installs Debian's chromium`)
  }
  return chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    // root (CI) cannot use Chromium's sandbox; the pages are the project's own, on localhost
    args: process.getuid?.() === 0 ? ['--no-sandbox'] : [],
  })
}

// A new page whose problems and requests are kept in page.problems and page.requests.
export async function openPage(browser, { width = 1280, height = 900 } = {}) {
  const context = await browser.newContext({ viewport: { width, height } })
  const page = await context.newPage()
  page.problems = []
  page.requests = []
  page.on('console', (m) => {
    if (m.type() === 'error') page.problems.push(`console: ${m.text()}`)
  })
  page.on('pageerror', (e) => page.problems.push(`uncaught: ${e.message}`))
  page.on('request', (r) => page.requests.push(r.url()))
  return page
}

// Counts a screenshot's pixels of each given colour ('#rrggbb', exactly), by drawing the PNG
// into a canvas of a blank page of the same browser.
export async function countColours(browser, png, colours) {
  const page = await browser.newPage()
  try {
    return await page.evaluate(
      async ({ data, colours }) => {
        const img = new Image()
        img.src = `data:image/png;base64,${data}`
        await img.decode()
        const canvas = document.createElement('canvas')
        canvas.width = img.width
        canvas.height = img.height
        const ctx = canvas.getContext('2d')
        ctx.drawImage(img, 0, 0)
        const px = ctx.getImageData(0, 0, img.width, img.height).data
        const want = new Map(colours.map((c) => [parseInt(c.slice(1), 16), c]))
        const counts = Object.fromEntries(colours.map((c) => [c, 0]))
        const seen = new Set()
        for (let i = 0; i < px.length; i += 4) {
          const rgb = (px[i] << 16) | (px[i + 1] << 8) | px[i + 2]
          seen.add(rgb)
          const c = want.get(rgb)
          if (c) counts[c]++
        }
        return { counts, distinct: seen.size, width: img.width, height: img.height }
      },
      { data: png.toString('base64'), colours },
    )
  } finally {
    await page.close()
  }
}
