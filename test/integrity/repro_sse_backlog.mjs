// test/integrity/repro_sse_backlog.mjs: reproducer for SSE losing data when a live_sse
// request finds more than one chunk of log waiting.
//
// A live_sse request that finds data waiting is answered with the log up to the end of
// the chunk holding the next entry, and the stream then ends. When that is not the end of
// the log (a backlog larger than shape_sync.chunk_bytes_threshold, e.g. one large
// transaction), the stream has no up-to-date event. @electric-sql/client buffers SSE events
// until an up-to-date event and drops the buffer when the stream ends, but it has already
// taken electric-offset (the chunk end) from the response headers: the events of that
// response are lost for good, and the client's Shape misses those rows.
//
// Usage (a cluster with a small chunk threshold, as test/integrity/run.sh starts):
//   node test/integrity/repro_sse_backlog.mjs      # exit 1 and "not ok" while the bug is there
// Needs PGHOST/PGPORT/PGUSER/PGDATABASE and SHAPE_SYNC_URL; ROWS (default 2000) rows are
// inserted in one transaction right before the client's first live_sse request goes out.

import { createRequire } from 'node:module'
import { dirname, join } from 'node:path'
import { pathToFileURL } from 'node:url'
import { setTimeout as sleep } from 'node:timers/promises'

const httpRequire = createRequire(new URL('../package.json', import.meta.url))
const pg = httpRequire('pg')
const clientDir = dirname(httpRequire.resolve('@electric-sql/client/package.json'))
const { ShapeStream, Shape } = await import(pathToFileURL(join(clientDir, 'dist/index.mjs')).href)

const SHAPE_URL = `${(process.env.SHAPE_SYNC_URL ?? 'http://localhost:3000').replace(/\/+$/, '')}/v1/shape`
const ROWS = Number(process.env.ROWS ?? 2000)
const table = `sse_backlog_${Date.now().toString(36)}`

const db = new pg.Client()
await db.connect()
await db.query(`CREATE TABLE ${table} (id int PRIMARY KEY, s text)`)

let injected = false
const sseAnswers = []
const fetchClient = async (input, init) => {
  const url = typeof input === 'string' ? input : input.url ?? String(input)
  if (/[?&]live_sse=true/.test(url) && !injected) {
    injected = true
    // the client is up to date and about to open its first SSE stream: commit a backlog
    await db.query(`INSERT INTO ${table} SELECT g, 'row ' || g FROM generate_series(1, ${ROWS}) g`)
  }
  const res = await fetch(input, init)
  if (/[?&]live_sse=true/.test(url))
    sseAnswers.push(`${res.status} ${res.headers.get('content-type')} electric-offset=${res.headers.get('electric-offset')}`)
  return res
}

const ac = new AbortController()
const stream = new ShapeStream({ url: SHAPE_URL, params: { table }, liveSse: true, signal: ac.signal, fetchClient })
const shape = new Shape(stream)

const deadline = Date.now() + 15000
let n = 0
while (Date.now() < deadline) {
  n = shape.currentValue.size
  if (injected && n === ROWS) break
  await sleep(100)
}
// let it run a little longer: later requests do not bring the rows back
await sleep(1500)
n = shape.currentValue.size
ac.abort()
stream.unsubscribeAll()
await db.query(`DROP TABLE ${table}`)
await db.end()

console.log(`# first live_sse answers: ${sseAnswers.slice(0, 3).join(' | ')}`)
if (n === ROWS) {
  console.log(`ok 1 - the SSE client has all ${ROWS} rows of a backlog committed before its live_sse request`)
  process.exit(0)
}
console.log(`not ok 1 - the SSE client has ${n} of ${ROWS} rows of a backlog committed before its live_sse request`)
process.exit(1)
