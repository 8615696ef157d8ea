// The Node side of test/integration/nginx_proxy.sh: what needs a browser or many clients,
// against the nginx that the script started in front of shape_sync and of the example's server
// (PROXY_URL, https with a self-signed certificate: NODE_TLS_REJECT_UNAUTHORIZED=0), and
// shape_sync itself (SHAPE_SYNC_URL, SHAPE_SYNC_SECRET, PG*). Requests carry the application's
// token (EXAMPLE_TOKEN). Prints "ok - ..." and "not ok - ..." lines; exits non-zero when it
// could not go on.
//
//   1. the example's page of 12 live shapes over HTTP/1.1, through the example server's own
//      proxy (no nginx): Chromium holds 6 connections to the origin, so 6 live requests reach
//      shape_sync, and a change for a shape whose request waits in the browser does not arrive
//      while the others wait;
//   2. the same page through nginx (HTTP/2): 12 live requests reach shape_sync, and a change
//      in every group shows;
//   3. 1,000 live clients of one shape through nginx: about one request reaches shape_sync per
//      change (proxy_cache_lock), and every client gets the change;
//   4. a rotation (TRUNCATE) behind nginx: the official client gets 409, re-syncs on the new
//      handle and ends equal to the table, with few 409s (not a loop).

import https from 'node:https'

import { ShapeStream } from '@electric-sql/client'

import { closePool, query, sleep } from '../lib/helpers.mjs'
import { waitFor } from '../lib/live_helpers.mjs'
import { launchBrowser } from '../lib/browser.mjs'
import { metricTotal, parseMetrics } from '../lib/metrics.mjs'
import { startExample } from '../../examples/web/serve.mjs'

const SHAPE_SYNC_URL = process.env.SHAPE_SYNC_URL
const PROXY_URL = process.env.PROXY_URL
const SECRET = process.env.SHAPE_SYNC_SECRET
const TOKEN = process.env.EXAMPLE_TOKEN
const AUTH = { Authorization: `Bearer ${TOKEN}` }
const GROUPS = 12
let failures = 0

function check(what, ok, detail = '') {
  if (ok) console.log(`ok - ${what}`)
  else {
    failures++
    console.log(`not ok - ${what}${detail ? `: ${detail}` : ''}`)
  }
}

async function metric(name, labels = {}) {
  const text = await (await fetch(`${SHAPE_SYNC_URL}/metrics?secret=${encodeURIComponent(SECRET)}`)).text()
  return metricTotal(parseMetrics(text), name, labels)
}
const liveWaiters = () => metric('shape_sync_live_waiters')
const liveRequests = () => metric('shape_sync_http_requests_total', { kind: 'live' })

async function groupTitles(page, k) {
  return page.getByTestId(`titles-${k}`).textContent()
}
async function allLoaded(page) {
  for (let k = 0; k < GROUPS; k++) {
    const group = page.getByTestId(`group-${k}`)
    await group.getByText('rows, live').waitFor({ timeout: 60000 }).catch(async (e) => {
      throw new Error(`group ${k} did not load: ${await group.textContent().catch(() => '?')} (${e.message})`)
    })
  }
}

async function main() {
  await query('CREATE TABLE web_items (id int PRIMARY KEY, title text NOT NULL, done boolean DEFAULT false)')
  await query('ALTER TABLE web_items REPLICA IDENTITY FULL')
  await query("INSERT INTO web_items SELECT g, 'Item ' || g, false FROM generate_series(1, 48) g")
  // the example's server with its own proxy: HTTP/1.1 all the way
  const app = await startExample({ port: 0, upstream: SHAPE_SYNC_URL, secret: SECRET, token: TOKEN })
  const browser = await launchBrowser()
  try {
    // 1. HTTP/1.1
    {
      const context = await browser.newContext()
      const page = await context.newPage()
      await page.goto(`${app.url}/?server=${encodeURIComponent(app.url)}&token=${TOKEN}&table=web_items#/many`)
      await allLoaded(page)
      await waitFor(async () => (await liveWaiters()) >= 6, { timeoutMs: 30000, what: '6 live requests' })
      await sleep(1000)
      const waiting = await liveWaiters()
      check('over HTTP/1.1, only 6 of the 12 live requests reach shape_sync', waiting === 6, `${waiting}`)
      // a group whose shape has no request parked: its request waits in the browser
      const { rows } = await query(
        "SELECT \"where\" AS w FROM shape_sync.shapes WHERE relation LIKE '%web_items%' AND waiters = 0 AND \"where\" IS NOT NULL",
      )
      const idle = rows.map((r) => Number(/=\s*(\d+)/.exec(r.w)?.[1])).filter((k) => Number.isInteger(k))
      check('and 6 groups have none parked', idle.length === 6, JSON.stringify(rows))
      if (idle.length) {
        const k = idle[0]
        const id = k === 0 ? 12 : k
        await query(`UPDATE web_items SET title = 'stalled ${k}' WHERE id = ${id}`)
        await sleep(3000)
        check(
          `a change for group ${k}, whose request waits in the browser, has not arrived 3 s later`,
          !(await groupTitles(page, k)).includes(`stalled ${k}`) && (await liveWaiters()) === 6,
        )
      }
      await context.close()
      await waitFor(async () => (await liveWaiters()) === 0, { timeoutMs: 30000, what: 'the parked requests to go' })
    }

    // 2. through nginx, HTTP/2
    {
      const context = await browser.newContext({ ignoreHTTPSErrors: true })
      const page = await context.newPage()
      // the page itself comes through nginx from the application: one origin
      await page.goto(`${PROXY_URL}/?server=${encodeURIComponent(PROXY_URL)}&token=${TOKEN}&table=web_items#/many`)
      await allLoaded(page)
      const h2 = await page.evaluate(() =>
        performance.getEntriesByType('resource').filter((e) => e.name.includes('/v1/shape')).map((e) => e.nextHopProtocol))
      check('through nginx the page speaks HTTP/2', h2.length > 0 && h2.every((p) => p === 'h2'), JSON.stringify([...new Set(h2)]))
      await waitFor(async () => (await liveWaiters()) >= GROUPS, { timeoutMs: 30000, what: '12 live requests' }).catch(() => {})
      const waiting = await liveWaiters()
      check('through nginx all 12 live requests reach shape_sync', waiting === GROUPS, `${waiting}`)
      await query(`UPDATE web_items SET title = 'live ' || (id % ${GROUPS}) WHERE id <= ${GROUPS}`)
      let shown = 0
      for (let k = 0; k < GROUPS; k++) {
        const ok = await waitFor(async () => (await groupTitles(page, k)).includes(`live ${k}`), {
          timeoutMs: 30000,
          what: `group ${k}`,
        }).then(() => true, () => false)
        if (ok) shown++
      }
      check('a change in every one of the 12 groups shows', shown === GROUPS, `${shown} of ${GROUPS}`)
      await context.close()
    }

    // 3. 1,000 live clients of one shape through nginx
    {
      const agent = new https.Agent({ keepAlive: true, maxSockets: Infinity, rejectUnauthorized: false })
      let sent = 0 // requests written whole to their (TLS) connection
      const get = (url) =>
        new Promise((resolve, reject) => {
          const req = https.get(url, { agent, headers: AUTH }, (res) => {
            let body = ''
            res.setEncoding('utf8')
            res.on('data', (c) => (body += c))
            res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body }))
          })
          req.on('error', reject)
          req.on('finish', () => sent++)
          req.setTimeout(120000, () => req.destroy(new Error('timed out')))
        })
      const shapeUrl = `${PROXY_URL}/v1/shape?table=web_items&where=${encodeURIComponent('id <= 3')}`
      let res = await get(`${shapeUrl}&offset=-1`)
      let handle = res.headers['electric-handle']
      let offset = res.headers['electric-offset']
      for (let i = 0; i < 20 && !('electric-up-to-date' in res.headers); i++) {
        res = await get(`${shapeUrl}&handle=${handle}&offset=${offset}`)
        offset = res.headers['electric-offset']
      }
      const liveUrl = `${shapeUrl}&handle=${handle}&offset=${offset}&live=true&cursor=${res.headers['electric-cursor'] ?? 0}`
      const before = await liveRequests()
      sent = 0
      const clients = Array.from({ length: 1000 }, () => get(liveUrl))
      // every request sent before the change (1,000 TLS handshakes take a while on a busy
      // machine: one sent after the answer would be a request of its own upstream, unless
      // it comes while the answer is cached), then a moment for nginx to read them
      await waitFor(async () => sent === 1000, { timeoutMs: 60000, what: '1,000 requests sent' })
      await sleep(500)
      await query("UPDATE web_items SET title = 'for the thousand' WHERE id = 2")
      const answers = await Promise.allSettled(clients)
      const got = answers.filter((a) => a.status === 'fulfilled' && a.value.status === 200 && a.value.body.includes('for the thousand'))
      const upstream = (await liveRequests()) - before
      check('every one of 1,000 live clients through nginx gets the change', got.length === 1000, `${got.length}`)
      check(`shape_sync answered ${upstream} live requests for them (about one per change)`, upstream >= 1 && upstream <= 3)
      agent.destroy()
    }

    // 4. a rotation behind nginx
    {
      const rows = new Map()
      let refetches = 0
      const handles = new Set()
      const stream = new ShapeStream({ url: `${PROXY_URL}/v1/shape`, params: { table: 'web_items' }, headers: AUTH })
      stream.subscribe((messages) => {
        for (const m of messages) {
          if (m.headers?.control === 'must-refetch') {
            refetches++
            rows.clear()
          } else if (m.headers?.operation === 'delete') rows.delete(m.key)
          else if (m.headers?.operation) rows.set(m.key, { ...(rows.get(m.key) ?? {}), ...m.value })
        }
        if (stream.shapeHandle) handles.add(stream.shapeHandle)
      })
      const equal = async () => {
        const { rows: db } = await query('SELECT id, title FROM web_items ORDER BY id')
        const mine = [...rows.values()].map((r) => [Number(r.id), r.title]).sort((a, b) => a[0] - b[0])
        return stream.isUpToDate && JSON.stringify(mine) === JSON.stringify(db.map((r) => [r.id, r.title]))
      }
      await waitFor(equal, { timeoutMs: 30000, what: 'the client to sync' })
      await query('TRUNCATE web_items')
      await query("INSERT INTO web_items SELECT g, 'after the rotation ' || g FROM generate_series(1, 7) g")
      const synced = await waitFor(equal, { timeoutMs: 60000, what: 'the client to re-sync' }).then(() => true, () => false)
      check('after a rotation behind nginx the official client re-syncs and equals the table', synced)
      check(`on a new handle, after ${refetches} must-refetch (not a loop)`, handles.size >= 2 && refetches >= 1 && refetches <= 3,
        `${handles.size} handles`)
      stream.unsubscribeAll()
    }
  } finally {
    await browser.close()
    app.server.close()
    await query('DROP TABLE IF EXISTS web_items')
    await closePool()
  }
}

main().then(
  () => process.exit(failures ? 1 : 0),
  (e) => {
    console.log(`not ok - nginx_proxy.mjs stopped: ${e.stack ?? e}`)
    process.exit(2)
  },
)
