// bench/recovery_watch.mjs PIDFILE OLD_PID URL MARKER READY_FILE: the moment a restarted server
// accepts connections again, for bench/recovery.sh.
//
// Started before the restart (it creates READY_FILE once running, so that its own start-up is
// not timed). Every 20 ms: once PIDFILE (the cluster's postmaster.pid) names a postmaster other
// than OLD_PID, so that the old one and its children are gone, GET URL/v1/health; at the first
// 200 it sets the payload of one row per shape of bench_recovery to MARKER, in one transaction,
// over a connection it opens then (libpq's environment: PGHOST, PGPORT, ...). Prints the epoch
// seconds of that 200 and of the commit's end. Exits 1 after 60 s without a 200.
//
// The HTTP port is free while the server is down, and on a shared machine another cluster may
// take it: the 200 counts only if the process that listens on the port (ss -tlnp) is a child of
// the new postmaster; otherwise it exits 1 and says who listens.
import { readFileSync, writeFileSync } from 'node:fs'
import { execFileSync } from 'node:child_process'
import http from 'node:http'
import { createRequire } from 'node:module'

const require = createRequire(new URL('../test/package.json', import.meta.url))
const pg = require('pg')
const [pidFile, oldPid, url, marker, readyFile] = process.argv.slice(2)
const sleep = (ms) => new Promise((r) => setTimeout(r, ms))

function postmaster() {
  try {
    return readFileSync(pidFile, 'utf8').split('\n')[0].trim()
  } catch {
    return '' // between the old server's end and the new one's start
  }
}

// the pids that listen on the URL's port, and the parent of each
function listeners() {
  const port = new URL(url).port
  const out = execFileSync('ss', ['-Htlnp', `sport = :${port}`], { encoding: 'utf8' })
  return [...new Set([...out.matchAll(/pid=(\d+)/g)].map((m) => m[1]))].map((pid) => {
    let parent = '?'
    try {
      parent = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ')[1]
    } catch {}
    return { pid, parent }
  })
}

function health() {
  return new Promise((resolve) => {
    const req = http.get(`${url}/v1/health`, { agent: false }, (res) => {
      res.resume()
      res.on('end', () => resolve(res.statusCode))
      res.on('error', () => resolve(0))
    })
    req.setTimeout(1000, () => req.destroy(new Error('timeout')))
    req.on('error', () => resolve(0))
  })
}

writeFileSync(readyFile, '')
const deadline = Date.now() + 60000
let accepted = null
let pid = ''
while (accepted === null && Date.now() < deadline) {
  pid = postmaster()
  if (pid !== '' && pid !== oldPid && (await health()) === 200) accepted = Date.now() / 1000
  else await sleep(20)
}
if (accepted !== null) {
  const who = listeners()
  if (!who.some((l) => l.parent === pid)) {
    console.error(`${url} is answered by a process that is not a child of the new postmaster ` +
      `${pid}: ${JSON.stringify(who)} (another cluster took the port while the server was down?)`)
    process.exit(1)
  }
}
if (accepted === null) {
  console.error('the server did not accept connections within 60 s')
  process.exit(1)
}
const client = new pg.Client()
let committed
try {
  await client.connect()
  await client.query('UPDATE bench_recovery SET payload = $1 WHERE id = 1', [marker])
  committed = Date.now() / 1000
  await client.end()
} catch (e) {
  console.error(`the marker could not be written: ${e.message}`)
  process.exit(1)
}
console.log(`${accepted} ${committed}`)
