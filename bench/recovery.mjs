// bench/recovery.mjs URL SHAPES CLIENTS ROWS READY_FILE RESTART_FILE: clients that come back
// after a restart of PostgreSQL (see bench/recovery.sh).
//
// CLIENTS raw clients, spread evenly over SHAPES shapes (`where tenant = k`, ROWS rows each),
// sync from offset=-1 and then follow their shape with long-polls, as the official client
// does: a 409 starts over from -1, a 503 waits its retry-after (plus up to 10% jitter), a
// network error waits 100-300 ms. Once every client is live it creates READY_FILE; the
// caller then restarts PostgreSQL and writes the restart time (epoch seconds) into
// RESTART_FILE. Each client's recovery time is from then until it holds all ROWS rows again
// and is up to date on a handle it got after the restart. Prints one JSON line: the
// recovery times (median, p99, max, seconds), and the counts of responses by status after
// the restart.
import { existsSync, readFileSync, writeFileSync } from 'node:fs'

const [url, shapes, clients, rows, readyFile, restartFile] = process.argv.slice(2)
const SHAPES = Number(shapes)
const CLIENTS = Number(clients)
const ROWS = Number(rows)
const sleep = (ms) => new Promise((r) => setTimeout(r, ms))

let restartAt = null
const statuses = {}
const recovered = []
let live = 0

async function client(i) {
  const tenant = i % SHAPES
  const base = `${url}/v1/shape?table=bench_recovery&where=${encodeURIComponent(`tenant = ${tenant}`)}`
  let handle = null
  let offset = '-1'
  let rowsHeld = new Set()
  let wasLive = false
  let done = false
  let handleAfter = false
  while (!done) {
    const q = `${base}&offset=${offset}${handle ? `&handle=${handle}` : ''}${wasLive && offset !== '-1' ? '&live=true' : ''}`
    let res
    try {
      res = await fetch(q, { signal: AbortSignal.timeout(60000) })
    } catch {
      if (restartAt !== null) statuses.network = (statuses.network ?? 0) + 1
      await sleep(100 + Math.random() * 200)
      continue
    }
    if (restartAt !== null) statuses[res.status] = (statuses[res.status] ?? 0) + 1
    if (res.status === 409) {
      await res.arrayBuffer()
      handle = null
      offset = '-1'
      rowsHeld = new Set()
      wasLive = false
      continue
    }
    if (res.status === 503 || res.status === 429) {
      const after = Number(res.headers.get('retry-after') ?? 1)
      await res.arrayBuffer()
      await sleep(after * 1000 * (1 + Math.random() * 0.1))
      continue
    }
    if (res.status !== 200) {
      await res.arrayBuffer()
      await sleep(200)
      continue
    }
    let body
    try {
      body = await res.json()
    } catch {
      continue // cut by the restart
    }
    const h = res.headers.get('electric-handle')
    if (restartAt !== null && h !== handle && offset === '-1') handleAfter = true
    handle = h
    offset = res.headers.get('electric-offset')
    for (const m of body) {
      if (m.headers?.operation === 'insert') rowsHeld.add(m.key)
      else if (m.headers?.operation === 'delete') rowsHeld.delete(m.key)
    }
    if (res.headers.get('electric-up-to-date') !== null) {
      if (!wasLive) {
        wasLive = true
        if (restartAt === null) live++
      }
      if (restartAt !== null && handleAfter && rowsHeld.size === ROWS) {
        recovered.push(Date.now() / 1000 - restartAt)
        done = true
      }
    }
  }
}

const all = Array.from({ length: CLIENTS }, (_, i) => client(i))
while (live < CLIENTS) await sleep(50)
writeFileSync(readyFile, '')
while (!existsSync(restartFile) || readFileSync(restartFile, 'utf8').trim() === '') await sleep(20)
restartAt = Number(readFileSync(restartFile, 'utf8'))
const timeout = setTimeout(() => {
  console.log(JSON.stringify({ error: `only ${recovered.length} of ${CLIENTS} clients recovered in 300 s`, statuses }))
  process.exit(1)
}, 300000)
await Promise.all(all)
clearTimeout(timeout)
recovered.sort((a, b) => a - b)
const at = (q) => recovered[Math.min(recovered.length - 1, Math.floor(q * recovered.length))]
console.log(JSON.stringify({ median: at(0.5), p99: at(0.99), max: recovered[recovered.length - 1], statuses }))
process.exit(0)
