// bench/recovery.mjs URL SHAPES CLIENTS ROWS DIR PHASES: clients that come back after
// restarts of PostgreSQL (see bench/recovery.sh).
//
// CLIENTS raw clients, spread evenly over SHAPES shapes (`where tenant = k`, ROWS rows each),
// sync from offset=-1 and then follow their shape with long-polls, as the official client
// does, through node:http with keep-alive (lighter than fetch, so that 1,000 clients in one
// process take less of the machine's CPU from the server): a 409 starts over from -1, a 503 waits its retry-after (plus up to 10% jitter), a
// network error (a cut connection, a refused one while the server is down) waits 100-300 ms
// and asks again for the same handle and offset.
//
// Once every client is live it creates DIR/ready. Then, for each phase n = 1..PHASES, it
// waits for DIR/phase<n> ("MARKER"), notes each client's handle, creates DIR/phase<n>.ack
// (the caller then restarts PostgreSQL and, once the server accepts connections again, sets
// the payload of one row per shape to MARKER), and times each client until it is served
// again: it holds all ROWS rows, has received MARKER and is up to date. It then writes
// DIR/phase<n>.json: the epoch seconds at which each client was served, how many were
// served on the handle they held before the restart, the responses by status from the
// phase's start (network: a request that got no response), and the longest delay of this
// process's event loop meanwhile (seconds: how long the clients themselves were held up) and
// the CPU time this process used over the phase (seconds). A phase ends after 60 s even if
// some clients were not served; they are counted as such.
import { monitorEventLoopDelay } from 'node:perf_hooks'
import { existsSync, readFileSync, renameSync, writeFileSync } from 'node:fs'
import http from 'node:http'

const [url, shapes, clients, rows, dir, phases] = process.argv.slice(2)
const SHAPES = Number(shapes)
const CLIENTS = Number(clients)
const ROWS = Number(rows)
const PHASES = Number(phases)
const sleep = (ms) => new Promise((r) => setTimeout(r, ms))
const agent = new http.Agent({ keepAlive: true, maxSockets: Infinity })

// GET: { status, headers, body (a string) }; rejects when no whole response came
function get(target) {
  return new Promise((resolve, reject) => {
    const req = http.get(target, { agent }, (res) => {
      const parts = []
      res.setEncoding('utf8')
      res.on('data', (d) => parts.push(d))
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body: parts.join('') }))
      res.on('error', reject)
      res.on('aborted', () => reject(new Error('aborted')))
    })
    req.setTimeout(60000, () => req.destroy(new Error('timeout')))
    req.on('error', reject)
  })
}
const writeAtomic = (path, text) => {
  writeFileSync(`${path}.tmp`, text)
  renameSync(`${path}.tmp`, path)
}

let phase = null // { marker, statuses, served }
let live = 0
const state = [] // per client: { handle, before, seen, done }

async function client(i) {
  const tenant = i % SHAPES
  const base = `${url}/v1/shape?table=bench_recovery&where=${encodeURIComponent(`tenant = ${tenant}`)}`
  const st = { handle: null, before: null, seen: false, done: false }
  state[i] = st
  let offset = '-1'
  let rowsHeld = new Set()
  let wasLive = false
  for (;;) {
    const q = `${base}&offset=${offset}${st.handle ? `&handle=${st.handle}` : ''}${wasLive && offset !== '-1' ? '&live=true' : ''}`
    let res
    try {
      res = await get(q)
    } catch {
      if (phase) phase.statuses.network = (phase.statuses.network ?? 0) + 1
      await sleep(100 + Math.random() * 200)
      continue
    }
    if (phase) phase.statuses[res.status] = (phase.statuses[res.status] ?? 0) + 1
    if (res.status === 409) {
      st.handle = null
      offset = '-1'
      rowsHeld = new Set()
      wasLive = false
      continue
    }
    if (res.status === 503 || res.status === 429) {
      if (phase) phase.unavailable.push(Date.now() / 1000)
      const after = Number(res.headers['retry-after'] ?? 1)
      await sleep(after * 1000 * (1 + Math.random() * 0.1))
      continue
    }
    if (res.status !== 200) {
      await sleep(200)
      continue
    }
    let body
    try {
      body = JSON.parse(res.body)
    } catch {
      if (phase) phase.statuses.bad_body = (phase.statuses.bad_body ?? 0) + 1
      await sleep(200)
      continue
    }
    st.handle = res.headers['electric-handle']
    offset = res.headers['electric-offset']
    for (const m of body) {
      const op = m.headers?.operation
      if (op === 'insert') rowsHeld.add(m.key)
      else if (op === 'delete') rowsHeld.delete(m.key)
      if (phase && (op === 'insert' || op === 'update') && m.value?.payload === phase.marker) st.seen = true
    }
    if (res.headers['electric-up-to-date'] !== undefined) {
      if (!wasLive) {
        wasLive = true
        if (!phase) live++
      }
      if (phase && !st.done && st.seen && rowsHeld.size === ROWS) {
        st.done = true
        phase.served.push(Date.now() / 1000)
        if (st.handle === st.before) phase.sameHandle++
      }
    }
  }
}

for (let i = 0; i < CLIENTS; i++) client(i)
while (live < CLIENTS) await sleep(50)
writeAtomic(`${dir}/ready`, '')
for (let n = 1; n <= PHASES; n++) {
  const file = `${dir}/phase${n}`
  while (!existsSync(file)) await sleep(20)
  const marker = readFileSync(file, 'utf8').trim()
  for (const st of state) {
    st.before = st.handle
    st.seen = false
    st.done = false
  }
  const stall = monitorEventLoopDelay({ resolution: 10 })
  stall.enable()
  const cpuFrom = process.cpuUsage()
  phase = { marker, statuses: {}, served: [], sameHandle: 0, unavailable: [] }
  writeAtomic(`${file}.ack`, '')
  const deadline = Date.now() + 60000
  while (phase.served.length < CLIENTS && Date.now() < deadline) await sleep(20)
  const p = phase
  phase = null
  stall.disable()
  const cpu = process.cpuUsage(cpuFrom)
  writeAtomic(`${file}.json`, JSON.stringify({
    served: p.served,
    unserved: CLIENTS - p.served.length,
    same_handle: p.sameHandle,
    statuses: p.statuses,
    unavailable: p.unavailable,
    stall_max: stall.max / 1e9,
    cpu: (cpu.user + cpu.system) / 1e6
  }))
}
process.exit(0)
