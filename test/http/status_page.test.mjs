// GET /: the operator's page (issue 28, item 3), in headless Chromium. It serves, with no
// build step and nothing fetched from elsewhere, the shapes, connections, admission, decoder
// lag and request rates that /metrics holds, refreshed live; it is protected as /metrics is.
// A screenshot (log/status_page.png) is checked for the page's header and its "serving" state,
// pixel by pixel.

import { after, before, describe, it } from 'node:test'
import assert from 'node:assert/strict'
import { mkdirSync, writeFileSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'

import { BASE_URL, closePool, fetchRaw, fetchShape, query, uniqueSuffix } from '../lib/helpers.mjs'
import { resetGuc, setGuc, waitFor } from '../lib/live_helpers.mjs'
import { countColours, launchBrowser, openPage } from '../lib/browser.mjs'

const sfx = uniqueSuffix()
const T = `status_${sfx}`
const SECRET = `status-page-secret-${sfx}`
const LOG_DIR = join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'log')
const text = (page, id) => page.locator(`#${id}`).textContent()
const number = async (page, id) => Number((await text(page, id)).replace(/,/g, ''))

let browser

before(async () => {
  browser = await launchBrowser()
  await query(`CREATE TABLE ${T} (id int PRIMARY KEY, v text)`)
  await query(`ALTER TABLE ${T} REPLICA IDENTITY FULL`)
  await query(`INSERT INTO ${T} SELECT g, 'v' || g FROM generate_series(1, 5) g`)
})

after(async () => {
  await browser?.close()
  await resetGuc('shape_sync.secret')
  await query(`DROP TABLE IF EXISTS ${T}`)
  await closePool()
})

describe('the status page', () => {
  it('is one HTML page that may run its own script and read this origin only', async () => {
    const res = await fetchRaw(`${BASE_URL}/`)
    assert.equal(res.status, 200)
    assert.equal(res.headers.get('content-type'), 'text/html; charset=utf-8')
    assert.equal(res.headers.get('cache-control'), 'no-store')
    assert.equal(res.headers.get('referrer-policy'), 'no-referrer')
    const csp = res.headers.get('content-security-policy')
    assert.match(csp, /default-src 'none'/)
    assert.match(csp, /connect-src 'self'/)
    assert.match(csp, /frame-ancestors 'none'/)
  })

  it('shows the shapes and requests of /metrics, and follows them live', async () => {
    const page = await openPage(browser)
    const res = await page.goto(`${BASE_URL}/?refresh=1`)
    assert.equal(res.status(), 200)
    await page.locator('#state', { hasText: 'serving' }).waitFor({ timeout: 30000 })
    assert.match(await text(page, 'version'), /^shape_sync\/\d+\.\d+\.\d+$/)

    // a new shape: the page counts it within a refresh or two
    const before = await number(page, 'shapes-ready')
    const made = await fetchShape({ table: T, offset: '-1' })
    assert.equal(made.status, 200)
    await waitFor(async () => (await number(page, 'shapes-ready')) >= before + 1, {
      timeoutMs: 30000,
      what: 'the page to count the new shape',
    })
    // /metrics says the same
    const metrics = (await fetchRaw(`${BASE_URL}/metrics`)).text
    const ready = Number(/^shape_sync_shapes\{state="ready"\} (\d+)$/m.exec(metrics)[1])
    assert.ok(Math.abs((await number(page, 'shapes-ready')) - ready) <= 1, `page vs /metrics: ${ready}`)

    // requests and decoded changes show as rates over the last interval
    await query(`UPDATE ${T} SET v = v || '!'`)
    await waitFor(
      async () => (await number(page, 'requests-rate')) > 0 && (await number(page, 'decoder-transactions-rate')) > 0,
      { timeoutMs: 30000, what: 'request and decoding rates above zero' },
    )
    assert.match(await text(page, 'admission-existing'), /^\d[\d,]* of [\d,]+$/)
    assert.match(await text(page, 'decoder-lag'), /^\d+(\.\d)? (B|kB|MB|GB)$/)
    assert.match(await text(page, 'log-memory-total'), /^\d+(\.\d)? (kB|MB|GB)$/)
    assert.ok((await number(page, 'connections')) >= 1)

    // the picture: the header's colour across its width, the green of "serving"
    mkdirSync(LOG_DIR, { recursive: true })
    const png = await page.screenshot({ fullPage: true })
    writeFileSync(join(LOG_DIR, 'status_page.png'), png)
    const seen = await countColours(browser, png, ['#1d2433', '#7be495', '#ffffff'])
    assert.ok(seen.counts['#1d2433'] > seen.width * 30, `header: ${JSON.stringify(seen)}`)
    assert.ok(seen.counts['#7be495'] > 50, `the serving state: ${JSON.stringify(seen)}`)
    assert.ok(seen.counts['#ffffff'] > seen.width * 100, `the cards: ${JSON.stringify(seen)}`)
    assert.ok(seen.distinct > 20, `text was drawn: ${JSON.stringify(seen)}`)

    // nothing failed, nothing but this origin's page and its /metrics was asked for
    assert.deepEqual(page.problems, [])
    const origin = new URL(BASE_URL).origin
    for (const url of page.requests) {
      const u = new URL(url)
      assert.equal(u.origin, origin, url)
      assert.ok(u.pathname === '/' || u.pathname === '/metrics', url)
    }
    await page.context().close()
  })

  it('is protected as /metrics is, and passes its secret on to /metrics', async () => {
    await setGuc('shape_sync.secret', SECRET)
    await waitFor(async () => (await fetchRaw(`${BASE_URL}/`)).status === 401, {
      timeoutMs: 10000,
      what: 'GET / to need the secret',
    })
    const page = await openPage(browser)
    const refused = await page.goto(`${BASE_URL}/`)
    assert.equal(refused.status(), 401)
    assert.match(await page.content(), /Unauthorized - Invalid API secret/)

    const served = await page.goto(`${BASE_URL}/?secret=${encodeURIComponent(SECRET)}&refresh=1`)
    assert.equal(served.status(), 200)
    await page.locator('#state', { hasText: 'serving' }).waitFor({ timeout: 30000 })
    assert.ok((await number(page, 'shapes-ready')) >= 1)
    // the secret is in no text of the page
    assert.ok(!(await page.locator('body').innerText()).includes(SECRET))

    // the secret changes under the open page: its /metrics requests are refused, and it says so
    await setGuc('shape_sync.secret', `${SECRET}-next`)
    await page.locator('#state', { hasText: 'unreachable: /metrics answered 401' }).waitFor({ timeout: 30000 })
    await page.context().close()
    await resetGuc('shape_sync.secret')
    await waitFor(async () => (await fetchRaw(`${BASE_URL}/`)).status === 200, {
      timeoutMs: 10000,
      what: 'GET / to be open again',
    })
  })
})
