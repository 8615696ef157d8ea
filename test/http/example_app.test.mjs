// The example app (examples/web, issue 28 item 1) in headless Chromium: built from its pinned
// npm packages with esbuild, served from another origin than shape_sync (so the browser makes
// real CORS requests), it shows a live, filterable table with @electric-sql/react's useShape;
// rows changed with SQL reach the DOM, in long-poll and in SSE mode, and through the
// authorising proxy of examples/web/serve.mjs when a secret is set. Its page of 12 live shapes
// loads them all (staying live over HTTP/1.1 is test/integration/nginx_proxy.sh's matter).

import { after, before, describe, it } from 'node:test'
import assert from 'node:assert/strict'
import { execFileSync } from 'node:child_process'
import net from 'node:net'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'

import { BASE_URL, closePool, fetchRaw, query, uniqueSuffix } from '../lib/helpers.mjs'
import { resetGuc, setGuc, waitFor } from '../lib/live_helpers.mjs'
import { launchBrowser, openPage } from '../lib/browser.mjs'
import { startExample } from '../../examples/web/serve.mjs'

const EXAMPLE = join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'examples', 'web')
const sfx = uniqueSuffix()
const T = `ex_items_${sfx}`
const SECRET = `example-secret-${sfx}`
const TOKEN = `session-${sfx}`

let browser
let app // the example served alone: the page talks to shape_sync directly

// The status of a request with this exact target (fetch would normalise it).
function rawStatus(base, target, header) {
  const { hostname, port } = new URL(base)
  return new Promise((resolve, reject) => {
    const socket = net.connect(Number(port), hostname, () =>
      socket.write(`GET ${target} HTTP/1.1\r\nHost: ${hostname}\r\n${header}\r\nConnection: close\r\n\r\n`))
    let text = ''
    socket.on('data', (d) => (text += d))
    socket.on('end', () => resolve(Number(/^HTTP\/1\.1 (\d+)/.exec(text)?.[1])))
    socket.on('error', reject)
  })
}

// The ids the page's table shows, in order.
const shownIds = (page) =>
  page.$$eval('[data-testid^="row-"]', (rows) => rows.map((r) => Number(r.dataset.testid.slice(4))))
async function dbIds(where = 'true', params = []) {
  const { rows } = await query(`SELECT id FROM ${T} WHERE ${where} ORDER BY id`, params)
  return rows.map((r) => r.id)
}
// Waits until the page's table holds exactly the rows of the SELECT, with their titles.
async function pageEqualsDb(page, where = 'true', params = [], what = 'the page to equal the table') {
  await waitFor(
    async () => {
      const { rows } = await query(`SELECT id, title FROM ${T} WHERE ${where} ORDER BY id`, params)
      const shown = await page.$$eval('[data-testid^="row-"]', (trs) =>
        trs.map((tr) => [Number(tr.children[0].textContent), tr.children[1].textContent]))
      return JSON.stringify(shown) === JSON.stringify(rows.map((r) => [r.id, r.title]))
    },
    { timeoutMs: 30000, what },
  )
}

before(async () => {
  execFileSync('node', [join(EXAMPLE, 'build.mjs')], { stdio: 'inherit' })
  browser = await launchBrowser()
  app = await startExample({ port: 0, secret: null })
  await query(`CREATE TABLE ${T} (id serial PRIMARY KEY, title text NOT NULL, done boolean DEFAULT false)`)
  await query(`ALTER TABLE ${T} REPLICA IDENTITY FULL`)
  await query(`INSERT INTO ${T} (title, done) SELECT 'Item ' || g, g % 3 = 0 FROM generate_series(1, 40) g`)
})

after(async () => {
  await browser?.close()
  app?.server.close()
  await resetGuc('shape_sync.secret')
  await query(`DROP TABLE IF EXISTS ${T}`)
  await closePool()
})

for (const mode of ['long-poll', 'sse']) {
  describe(`the live table (${mode}), from another origin`, () => {
    it('shows the table, follows SQL changes, and filters as one types', async () => {
      const page = await openPage(browser)
      const live = mode === 'sse' ? '&live=sse' : ''
      await page.goto(`${app.url}/?server=${encodeURIComponent(BASE_URL)}&table=${T}${live}`)
      assert.notEqual(new URL(app.url).origin, new URL(BASE_URL).origin)
      await pageEqualsDb(page, 'true', [], 'the first rows')
      assert.match(await page.getByTestId('count').textContent(), /rows, live$/)

      await query(`UPDATE ${T} SET title = title || ' (${mode})' WHERE id = 5`)
      await query(`INSERT INTO ${T} (title) VALUES ('Added in ${mode}')`)
      await query(`DELETE FROM ${T} WHERE id = (SELECT max(id) FROM ${T} WHERE title LIKE 'Item %' AND id <> 5)`)
      await pageEqualsDb(page, 'true', [], 'an update, an insert and a delete')

      await page.getByTestId('filter').fill('item 1')
      await pageEqualsDb(page, 'title ILIKE $1', ['%item 1%'], 'the filtered rows')
      assert.ok((await shownIds(page)).length < (await dbIds()).length)
      await query(`UPDATE ${T} SET title = 'Item 1 renamed' WHERE id = 2`)
      await pageEqualsDb(page, 'title ILIKE $1', ['%item 1%'], 'a row that entered the filter')

      // the shapes were read across origins, live, in the mode asked for
      const shapeRequests = page.requests.filter((u) => u.startsWith(`${BASE_URL}/v1/shape`))
      assert.ok(shapeRequests.some((u) => u.includes('live=true')), 'live requests were made')
      assert.equal(shapeRequests.some((u) => u.includes('live_sse=true')), mode === 'sse')
      assert.deepEqual(page.problems, [])
      await page.context().close()
    })
  })
}

describe('the page of 12 live shapes', () => {
  it('loads every shape', async () => {
    const page = await openPage(browser)
    await page.goto(`${app.url}/?server=${encodeURIComponent(BASE_URL)}&table=${T}#/many`)
    for (let k = 0; k < 12; k++) {
      const want = (await dbIds(`id % 12 = ${k}`)).length
      await page.getByTestId(`group-${k}`).getByText(`${want} rows, live`).waitFor({ timeout: 30000 })
    }
    assert.deepEqual(page.problems, [])
    await page.context().close()
  })
})

describe('through the authorising proxy, with a secret set', () => {
  it('the browser holds no secret, the proxy adds it, and the table stays live', async () => {
    await setGuc('shape_sync.secret', SECRET)
    await waitFor(async () => (await fetchRaw(`${BASE_URL}/v1/shape?table=${T}&offset=-1`)).status === 401, {
      timeoutMs: 10000,
      what: 'shape_sync to need the secret',
    })
    const proxy = await startExample({ port: 0, upstream: BASE_URL, secret: SECRET, token: TOKEN })
    try {
      // without the application's token the proxy refuses, and the page says so
      const refused = await fetchRaw(`${proxy.url}/v1/shape?table=${T}&offset=-1`)
      assert.equal(refused.status, 401)
      // a target that names another host never takes the secret there
      for (const target of ['//evil.invalid/v1/shape?offset=-1', 'http://evil.invalid/v1/shape?offset=-1']) {
        const status = await rawStatus(proxy.url, target, `Authorization: Bearer ${TOKEN}`)
        assert.equal(status, 400, target)
      }
      const page = await openPage(browser)
      await page.goto(`${proxy.url}/?server=${encodeURIComponent(proxy.url)}&table=${T}`)
      await page.getByTestId('error').waitFor({ timeout: 30000 })

      await page.goto(`${proxy.url}/?server=${encodeURIComponent(proxy.url)}&table=${T}&token=${TOKEN}`)
      await pageEqualsDb(page, 'true', [], 'the rows through the proxy')
      await query(`UPDATE ${T} SET done = NOT done, title = 'through the proxy' WHERE id = 3`)
      await pageEqualsDb(page, 'true', [], 'a change through the proxy')
      for (const url of page.requests) assert.ok(!url.includes(SECRET), `the browser asked for ${url}`)
      assert.ok(page.requests.some((u) => u.startsWith(`${proxy.url}/v1/shape`) && u.includes('live=true')))
      await page.context().close()
    } finally {
      proxy.server.close()
      await resetGuc('shape_sync.secret')
    }
  })
})
