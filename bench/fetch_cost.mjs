// bench/fetch_cost.mjs RUNS COMMITS: what Node's fetch costs a long-poll client by itself
// (see bench/fetch_cost.sh). A child process serves long-polls that it answers only when
// told to, at once and with no work: a response shaped like a live response of shape_sync
// (its headers, one row and up-to-date). The parent parks one request, tells the child to
// answer (the clock starts), and stops the clock once the client has parsed the body: with
// fetch and res.text() as bench/latency.mjs's raw client reads, and on a plain keep-alive
// socket parsed by hand as its socket client reads. Prints one JSON line per run.
import { fork } from 'node:child_process'
import http from 'node:http'
import net from 'node:net'

if (process.argv[2] === 'serve') {
  const parked = []
  const body = JSON.stringify([
    { key: '"public"."bench"/"1"', value: { id: '1', payload: 'x'.repeat(40) },
      headers: { operation: 'insert', lsn: '24017272', op_position: 0, txids: [751], relation: ['public', 'bench'] } },
    { headers: { control: 'up-to-date', global_last_seen_lsn: '24017272' } }])
  const headers = {
    'content-type': 'application/json', 'content-length': Buffer.byteLength(body),
    'cache-control': 'public, max-age=5, stale-while-revalidate=5',
    'electric-handle': '2842154217-1765081234567890', 'electric-offset': '24017272_0',
    'electric-cursor': '1765081234', 'electric-up-to-date': '', etag: '"2842154217-1765081234567890:24017016_0:24017272_0"',
    'access-control-allow-origin': '*',
    'access-control-expose-headers': 'electric-cursor,electric-handle,electric-offset,electric-schema,electric-up-to-date,electric-chunk-last-offset,retry-after'
  }
  const srv = http.createServer((req, res) => { res.socket.setNoDelay(true); parked.push(res) })
  srv.keepAliveTimeout = 60000
  srv.listen(0, '127.0.0.1', () => {
    const ctl = net.createServer((s) => {
      s.setNoDelay(true)
      s.on('data', () => { for (const res of parked.splice(0)) { res.writeHead(200, headers); res.end(body) } })
    }).listen(0, '127.0.0.1', () => process.send({ http: srv.address().port, ctl: ctl.address().port }))
  })
} else {
  const RUNS = Number(process.argv[2] ?? 3)
  const COMMITS = Number(process.argv[3] ?? 500)
  const child = fork(new URL(import.meta.url).pathname, ['serve'])
  const ports = await new Promise((r) => child.once('message', r))
  const ctl = net.connect(ports.ctl, '127.0.0.1')
  ctl.setNoDelay(true)
  await new Promise((r) => ctl.once('connect', r))
  const url = `http://127.0.0.1:${ports.http}/v1/shape?table=bench&offset=24017016_0&handle=2842154217-1765081234567890&live=true`
  const sleep = (ms) => new Promise((r) => setTimeout(r, ms))
  const now = () => process.hrtime.bigint()
  const ms = (a, b) => Number(b - a) / 1e6
  const stats = (xs) => {
    const s = [...xs].sort((a, b) => a - b)
    return { median: s[s.length >> 1], p99: s[Math.min(s.length - 1, Math.floor(s.length * 0.99))] }
  }
  // one measured answer: park (start), wait a random 5-15 ms, answer, until parsed
  async function measure(start) {
    const done = start()
    await sleep(5 + Math.random() * 10)
    const t0 = now()
    ctl.write('x')
    return ms(t0, await done)
  }
  async function viaFetch(n) {
    const t = []
    for (let i = 0; i < n; i++)
      t.push(await measure(() => fetch(url).then((r) => r.text()).then((x) => { JSON.parse(x); return now() })))
    return t
  }
  async function viaSocket(n) {
    const s = net.connect(ports.http, '127.0.0.1')
    s.setNoDelay(true)
    await new Promise((r) => s.once('connect', r))
    const u = new URL(url)
    let buf = Buffer.alloc(0)
    let waiter = null
    s.on('data', (d) => {
      buf = Buffer.concat([buf, d])
      const end = buf.indexOf('\r\n\r\n')
      if (end < 0) return
      const len = Number(/content-length: *(\d+)/i.exec(buf.subarray(0, end).toString())[1])
      if (buf.length < end + 4 + len) return
      JSON.parse(buf.subarray(end + 4, end + 4 + len).toString())
      buf = buf.subarray(end + 4 + len)
      const w = waiter
      waiter = null
      w(now())
    })
    const t = []
    for (let i = 0; i < n; i++)
      t.push(await measure(() => {
        const p = new Promise((r) => { waiter = r })
        s.write(`GET ${u.pathname}${u.search} HTTP/1.1\r\nHost: ${u.host}\r\n\r\n`)
        return p
      }))
    s.destroy()
    return t
  }
  await viaFetch(20)
  await viaSocket(20)
  for (let r = 0; r < RUNS; r++) {
    // alternate which client goes first
    const first = r % 2 === 0 ? viaFetch : viaSocket
    const second = r % 2 === 0 ? viaSocket : viaFetch
    const a = await first(COMMITS)
    const b = await second(COMMITS)
    const [f, s] = r % 2 === 0 ? [a, b] : [b, a]
    console.log(JSON.stringify({ fetch: stats(f), socket: stats(s) }))
  }
  child.kill()
  process.exit(0)
}
