// bench/latency.mjs: commit-to-client latency of shape_sync's live mode, against the
// LISTEN/NOTIFY round trip on the same cluster. Run through bench/run.sh, which starts a
// throwaway cluster and exports PGHOST/PGPORT/PGUSER/PGDATABASE and SHAPE_SYNC_URL.
//
// One commit at a time: the writer (main thread, one pg connection) runs
//   BEGIN; INSERT INTO <table> VALUES (i, ...); [SELECT pg_notify(...)]; t0; COMMIT
// where t0 is taken just before COMMIT is sent. t1 is taken by a client once it has parsed
// the message carrying row i (raw clients: the insert in the JSON body of a live long-poll
// response; official client: the insert in a ShapeStream subscriber callback; NOTIFY: the
// notification event of a LISTENing pg connection). The writer waits until every client has
// seen row i, then sleeps a random 0-20 ms, then commits i+1.
//
// Clients run in worker threads (so that a hundred of them do not queue behind the writer
// or behind each other in one event loop); t0 and t1 come from process.hrtime, one monotonic
// clock for all threads of the process.
//
// Scenarios (each repeated RUNS times, COMMITS measured commits after WARMUP unmeasured ones,
// a fresh table and shape per run):
//   notify       1 LISTEN connection; INSERT + pg_notify in the transaction: the floor
//   raw-1        1 raw long-poll client (fetch, live=true loop)
//   client-1     1 @electric-sql/client ShapeStream (long-poll)
//   raw-100      100 raw long-poll clients on the same shape
//   sock-1       1 long-poll client on a plain keep-alive socket (own HTTP/1.1 + chunked
//                decoding, no fetch), as the NOTIFY client reads its socket
//   sock-100     100 long-poll clients on plain keep-alive sockets (own HTTP/1.1 + chunked
//                decoding, no fetch): a diagnostic, how much of raw-100 is Node's fetch
//   client-100   100 ShapeStreams on the same shape
// For N clients, a commit's latency is the time until the last of them has the row ("all"),
// and also the median over the clients ("median client") and the first one ("first client").
//
// Output: a summary on stdout and a JSON file (BENCH_JSON, default bench/latency.json) that
// bench/run.sh turns into bench/RESULTS.md.

import { createRequire } from 'node:module'
import { dirname, join } from 'node:path'
import { pathToFileURL, fileURLToPath } from 'node:url'
import { Worker, isMainThread, parentPort, workerData } from 'node:worker_threads'
import { setTimeout as sleep } from 'node:timers/promises'
import { writeFileSync } from 'node:fs'
import { setMaxListeners } from 'node:events'
import net from 'node:net'

const httpRequire = createRequire(new URL('../test/package.json', import.meta.url))
const pg = httpRequire('pg')
const now = () => Number(process.hrtime.bigint()) / 1e6 // ms, monotonic, process-wide

const BASE_URL = (process.env.SHAPE_SYNC_URL ?? 'http://localhost:3000').replace(/\/+$/, '')
const SHAPE_URL = `${BASE_URL}/v1/shape`

// ------------------------------------------------------------------------------------------
// worker side

async function loadClient() {
  const clientDir = dirname(httpRequire.resolve('@electric-sql/client/package.json'))
  return import(pathToFileURL(join(clientDir, 'dist/index.mjs')).href)
}

// A raw client: catches up from offset -1, then loops on live=true requests. Calls
// onRows(ids, t1) with the ids of the inserts of every live response, t1 after parsing.
async function rawClient(table, signal, onReady, onRows) {
  let offset = '-1'
  let handle = null
  let cursor = ''
  let live = false
  let ready = false
  while (!signal.aborted) {
    const q = new URLSearchParams({ table, offset })
    if (handle) q.set('handle', handle)
    if (live) {
      q.set('live', 'true')
      q.set('cursor', cursor)
    }
    let res, text
    try {
      res = await fetch(`${SHAPE_URL}?${q}`, { signal })
      text = await res.text()
    } catch (e) {
      if (signal.aborted) return
      await sleep(50)
      continue
    }
    if (res.status === 409) {
      handle = res.headers.get('electric-handle')
      offset = '-1'
      live = false
      continue
    }
    if (res.status !== 200) {
      await sleep(50)
      continue
    }
    const body = JSON.parse(text)
    const t1 = now()
    const ids = []
    let upToDate = false
    for (const m of body) {
      if (m.key !== undefined && m.headers.operation === 'insert') ids.push(Number(m.value.id))
      else if (m.headers?.control === 'up-to-date') upToDate = true
    }
    handle = res.headers.get('electric-handle') ?? handle
    offset = res.headers.get('electric-offset') ?? offset
    cursor = res.headers.get('electric-cursor') ?? cursor
    if (live && ids.length) onRows(ids, t1)
    if (upToDate) {
      live = true
      if (!ready) {
        ready = true
        onReady()
      }
    }
  }
}

// A socket client: catches up with fetch like rawClient, then sends its live requests as
// plain HTTP/1.1 on one keep-alive socket and decodes the (chunked) responses itself. It has
// far less per-request overhead than fetch, so with many clients in one process it shows how
// much of the latency is the server's and how much is Node's fetch.
async function sockClient(table, signal, onReady, onRows) {
  // catch-up: offset -1 .. up-to-date
  let offset = '-1'
  let handle = null
  for (;;) {
    const q = new URLSearchParams({ table, offset })
    if (handle) q.set('handle', handle)
    const res = await fetch(`${SHAPE_URL}?${q}`, { signal })
    const body = await res.json()
    handle = res.headers.get('electric-handle')
    offset = res.headers.get('electric-offset')
    if (body.some((m) => m.headers?.control === 'up-to-date')) break
  }
  const u = new URL(SHAPE_URL)
  let cursor = ''
  let buf = Buffer.alloc(0)
  let ready = false
  const sock = net.connect({ host: u.hostname === 'localhost' ? '127.0.0.1' : u.hostname, port: Number(u.port) })
  sock.setNoDelay(true)
  signal.addEventListener('abort', () => sock.destroy())
  sock.on('error', () => {})
  const send = () => {
    const q = new URLSearchParams({ table, offset, handle, live: 'true', cursor })
    sock.write(`GET ${u.pathname}?${q} HTTP/1.1\r\nHost: ${u.host}\r\nConnection: keep-alive\r\n\r\n`)
  }
  // Returns [status, headers, bodyText, consumedBytes] or null when incomplete.
  const parse = () => {
    const he = buf.indexOf('\r\n\r\n')
    if (he < 0) return null
    const lines = buf.subarray(0, he).toString('latin1').split('\r\n')
    const status = Number(lines[0].split(' ')[1])
    const headers = {}
    for (const l of lines.slice(1)) {
      const i = l.indexOf(':')
      headers[l.slice(0, i).trim().toLowerCase()] = l.slice(i + 1).trim()
    }
    let pos = he + 4
    if (headers['content-length'] !== undefined) {
      const n = Number(headers['content-length'])
      if (buf.length < pos + n) return null
      return [status, headers, buf.subarray(pos, pos + n).toString('utf8'), pos + n]
    }
    const parts = []
    for (;;) {
      const le = buf.indexOf('\r\n', pos)
      if (le < 0) return null
      const size = parseInt(buf.subarray(pos, le).toString('latin1'), 16)
      if (size === 0) {
        if (buf.length < le + 4) return null
        return [status, headers, Buffer.concat(parts).toString('utf8'), le + 4]
      }
      if (buf.length < le + 2 + size + 2) return null
      parts.push(buf.subarray(le + 2, le + 2 + size))
      pos = le + 2 + size + 2
    }
  }
  sock.on('data', (d) => {
    buf = buf.length ? Buffer.concat([buf, d]) : d
    for (;;) {
      const r = parse()
      if (!r) return
      buf = buf.subarray(r[3])
      const [status, headers, text] = r
      if (status === 200) {
        const body = JSON.parse(text)
        const t1 = now()
        const ids = []
        for (const m of body) if (m.key !== undefined && m.headers.operation === 'insert') ids.push(Number(m.value.id))
        offset = headers['electric-offset'] ?? offset
        cursor = headers['electric-cursor'] ?? cursor
        if (ids.length) onRows(ids, t1)
      }
      if (!signal.aborted) send()
    }
  })
  sock.once('connect', () => {
    send()
    if (!ready) {
      ready = true
      onReady()
    }
  })
}

async function officialClient(ShapeStream, table, signal, onReady, onRows) {
  const stream = new ShapeStream({ url: SHAPE_URL, params: { table }, signal })
  let ready = false
  stream.subscribe((messages) => {
    const t1 = now()
    const ids = []
    let upToDate = false
    for (const m of messages) {
      if (m.key !== undefined && m.headers.operation === 'insert') ids.push(Number(m.value.id))
      else if (m.headers?.control === 'up-to-date') upToDate = true
    }
    if (ready && ids.length) onRows(ids, t1)
    if (upToDate && !ready) {
      ready = true
      onReady()
    }
  }, () => {})
}

async function notifyClient(channel, signal, onReady, onRows) {
  const c = new pg.Client()
  c.on('error', () => {})
  await c.connect()
  c.on('notification', (n) => {
    const t1 = now()
    onRows([Number(n.payload)], t1)
  })
  await c.query(`LISTEN ${channel}`)
  onReady()
  signal.addEventListener('abort', () => c.end().catch(() => {}))
}

async function workerMain() {
  const { kind, table, first, count } = workerData
  const ac = new AbortController()
  setMaxListeners(0, ac.signal) // one listener per client
  let readyCount = 0
  const onReady = () => {
    if (++readyCount === count) parentPort.postMessage({ type: 'ready' })
  }
  const mod = kind === 'client' ? await loadClient() : null
  for (let i = 0; i < count; i++) {
    const client = first + i
    const onRows = (ids, t1) => parentPort.postMessage({ type: 'rows', client, ids, t1 })
    if (kind === 'raw') rawClient(table, ac.signal, onReady, onRows)
    else if (kind === 'sock') sockClient(table, ac.signal, onReady, onRows)
    else if (kind === 'client') officialClient(mod.ShapeStream, table, ac.signal, onReady, onRows)
    else notifyClient(table, ac.signal, onReady, onRows)
  }
  parentPort.on('message', (m) => {
    if (m === 'stop') {
      ac.abort()
      setTimeout(() => process.exit(0), 100).unref()
    }
  })
}

// ------------------------------------------------------------------------------------------
// main side

function quantile(sorted, q) {
  if (!sorted.length) return NaN
  const pos = (sorted.length - 1) * q
  const lo = Math.floor(pos)
  const hi = Math.ceil(pos)
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo)
}
const stats = (xs) => {
  const s = [...xs].sort((a, b) => a - b)
  return { median: quantile(s, 0.5), p90: quantile(s, 0.9), p99: quantile(s, 0.99), max: s.at(-1), n: s.length }
}
const median = (xs) => quantile([...xs].sort((a, b) => a - b), 0.5)

async function runScenario({ kind, clients, run, commits, warmup, threads }) {
  const db = new pg.Client()
  db.on('error', () => {})
  await db.connect()
  const table = `bench_${kind}_${clients}_${run}_${Date.now().toString(36)}`
  await db.query(`CREATE TABLE ${table} (id int PRIMARY KEY, v text)`)

  // per commit: Map client -> t1
  const seen = new Map()
  let waiting = null // { id, resolve }
  const nWorkers = Math.min(threads, clients)
  const workers = []
  let ready = 0
  let readyResolve
  const allReady = new Promise((r) => (readyResolve = r))
  const wkind = kind
  for (let w = 0, first = 0; w < nWorkers; w++) {
    const count = Math.floor(clients / nWorkers) + (w < clients % nWorkers ? 1 : 0)
    const worker = new Worker(fileURLToPath(import.meta.url), { workerData: { kind: wkind, table, first, count } })
    first += count
    worker.on('message', (m) => {
      if (m.type === 'ready') {
        if (++ready === nWorkers) readyResolve()
      } else if (m.type === 'rows') {
        for (const id of m.ids) {
          let per = seen.get(id)
          if (!per) seen.set(id, (per = new Map()))
          if (!per.has(m.client)) per.set(m.client, m.t1)
          if (waiting && waiting.id === id && per.size === clients) waiting.resolve()
        }
      }
    })
    worker.on('error', (e) => console.error(`worker error: ${e?.stack ?? e}`))
    workers.push(worker)
  }
  await Promise.race([allReady, sleep(60000).then(() => { throw new Error(`${kind}: clients not ready after 60 s`) })])
  await sleep(300) // let the first live requests park

  const all = []
  const med = []
  const first = []
  let timeouts = 0
  const total = warmup + commits
  for (let i = 1; i <= total; i++) {
    await db.query('BEGIN')
    await db.query(`INSERT INTO ${table} VALUES ($1, $2)`, [i, `row ${i}`])
    if (kind === 'notify') await db.query(`SELECT pg_notify($1, $2)`, [table, String(i)])
    const done = new Promise((resolve) => {
      waiting = { id: i, resolve }
    })
    const t0 = now()
    await db.query('COMMIT')
    if ((seen.get(i)?.size ?? 0) < clients) {
      const t = await Promise.race([done.then(() => false), sleep(10000).then(() => true)])
      if (t) timeouts++
    }
    waiting = null
    if (i > warmup) {
      const per = seen.get(i)
      if (per && per.size === clients) {
        const lat = [...per.values()].map((t1) => t1 - t0)
        all.push(Math.max(...lat))
        med.push(median(lat))
        first.push(Math.min(...lat))
      }
    }
    seen.delete(i)
    await sleep(Math.random() * 20)
  }
  for (const w of workers) w.postMessage('stop')
  await Promise.all(workers.map((w) => new Promise((r) => { w.once('exit', r); setTimeout(() => { w.terminate().then(r, r) }, 2000).unref() })))
  await db.query(`DROP TABLE ${table}`).catch(() => {})
  await db.end()
  return { all: stats(all), medianClient: stats(med), firstClient: stats(first), timeouts }
}

async function main() {
  const RUNS = Number(process.env.RUNS ?? 3)
  const COMMITS = Number(process.env.COMMITS ?? 500)
  const WARMUP = Number(process.env.WARMUP ?? 20)
  const THREADS = Number(process.env.THREADS ?? Math.min(4, (await import('node:os')).availableParallelism()))
  const only = process.env.SCENARIOS ? process.env.SCENARIOS.split(',') : null
  const scenarios = [
    { name: 'notify', kind: 'notify', clients: 1 },
    { name: 'raw-1', kind: 'raw', clients: 1 },
    { name: 'client-1', kind: 'client', clients: 1 },
    { name: 'raw-100', kind: 'raw', clients: 100 },
    { name: 'sock-1', kind: 'sock', clients: 1 },
    { name: 'sock-100', kind: 'sock', clients: 100 },
    { name: 'client-100', kind: 'client', clients: 100 },
  ].filter((s) => !only || only.includes(s.name))

  const results = {}
  for (const s of scenarios) results[s.name] = { clients: s.clients, runs: [] }
  // interleave the scenarios run by run, so that a drift of the machine hits all of them
  for (let run = 1; run <= RUNS; run++) {
    for (const s of scenarios) {
      const t = Date.now()
      const r = await runScenario({ kind: s.kind, clients: s.clients, run, commits: COMMITS, warmup: WARMUP, threads: THREADS })
      results[s.name].runs.push(r)
      const f = (x) => x.toFixed(2)
      console.log(`# run ${run} ${s.name.padEnd(10)} all: median ${f(r.all.median)} p90 ${f(r.all.p90)} p99 ${f(r.all.p99)} ms` +
        (s.clients > 1 ? ` | median client: median ${f(r.medianClient.median)} p90 ${f(r.medianClient.p90)} p99 ${f(r.medianClient.p99)} | first client: median ${f(r.firstClient.median)} ms` : '') +
        ` (n=${r.all.n}, timeouts=${r.timeouts}, ${((Date.now() - t) / 1000).toFixed(1)} s)`)
    }
  }
  for (const [name, r] of Object.entries(results)) {
    const pick = (which, q) => median(r.runs.map((x) => x[which][q]))
    r.summary = {
      all: { median: pick('all', 'median'), p90: pick('all', 'p90'), p99: pick('all', 'p99') },
      medianClient: { median: pick('medianClient', 'median'), p90: pick('medianClient', 'p90'), p99: pick('medianClient', 'p99') },
      firstClient: { median: pick('firstClient', 'median'), p90: pick('firstClient', 'p90'), p99: pick('firstClient', 'p99') },
      n: r.runs.reduce((a, x) => a + x.all.n, 0),
      timeouts: r.runs.reduce((a, x) => a + x.timeouts, 0),
    }
  }
  const out = { runs: RUNS, commits: COMMITS, warmup: WARMUP, threads: THREADS, url: BASE_URL, results }
  const file = process.env.BENCH_JSON ?? new URL('./latency.json', import.meta.url).pathname
  writeFileSync(file, JSON.stringify(out, null, 2))
  const base = results.notify?.summary.all.median
  console.log('# median of the runs\' medians (ms), ratio to the NOTIFY median:')
  for (const [name, r] of Object.entries(results)) {
    const s = r.summary
    console.log(`#   ${name.padEnd(10)} median ${s.all.median.toFixed(2)} p90 ${s.all.p90.toFixed(2)} p99 ${s.all.p99.toFixed(2)}` +
      (base ? `  x${(s.all.median / base).toFixed(2)}` : '') +
      (r.clients > 1 ? `  | median client ${s.medianClient.median.toFixed(2)}` : ''))
  }
  const failed = Object.values(results).some((r) => r.summary.timeouts > 0)
  process.exit(failed ? 1 : 0)
}

if (isMainThread) await main()
else await workerMain()
