// A corpus of hostile requests, sent as raw bytes over TCP: each must get a prompt, clean
// answer (the status listed, a JSON body where the answer is JSON) with no side effect: no
// shape created, no table touched, the worker alive, nothing in the server log. The corpus is in
// hostile_corpus.mjs (test/fuzz/http_fuzz.mjs sends and mutates it too).

import { after, before, describe, it } from 'node:test'
import assert from 'node:assert/strict'
import net from 'node:net'
import { readFileSync } from 'node:fs'

import { BASE_URL, closePool, query, sleep, uniqueSuffix } from '../lib/helpers.mjs'
import { hostileCorpus } from '../lib/hostile_corpus.mjs'
import { resetGuc, setGuc } from '../lib/live_helpers.mjs'

// A request the server leaves waiting is closed, unanswered, at request_header_timeout: set
// far above what a busy machine takes to answer, so that a close before half of it is the
// server's own answer to the bytes, not that timeout.
const HEADER_TIMEOUT_MS = 60000

const sfx = uniqueSuffix()
const T = `hostile_${sfx}`
const { hostname, port } = new URL(BASE_URL)

// Sends `raw` (a string of bytes, latin1) and reads until the server closes or answers
// a whole response; resolves {status, headers, body, ms}.  Times out after 90 s: a deadline
// against a hang, past shape_sync.request_header_timeout (set to 60 s below).
function send(raw, { timeoutMs = 90000 } = {}) {
  return new Promise((resolve, reject) => {
    const t0 = Date.now()
    const chunks = []
    const sock = net.connect({ host: hostname === 'localhost' ? '127.0.0.1' : hostname, port: Number(port) })
    const timer = setTimeout(() => {
      sock.destroy()
      reject(new Error(`no answer within ${timeoutMs} ms`))
    }, timeoutMs)
    sock.on('data', (d) => chunks.push(d))
    sock.on('error', () => {})
    sock.on('close', () => {
      clearTimeout(timer)
      const text = Buffer.concat(chunks).toString('latin1')
      const m = /^HTTP\/1\.[01] (\d{3})/.exec(text)
      const split = text.indexOf('\r\n\r\n')
      const head = split >= 0 ? text.slice(0, split) : text
      const headers = {}
      for (const line of head.split('\r\n').slice(1)) {
        const i = line.indexOf(':')
        if (i > 0) headers[line.slice(0, i).toLowerCase()] = line.slice(i + 1).trim()
      }
      let body = split >= 0 ? text.slice(split + 4) : ''
      if (/chunked/i.test(headers['transfer-encoding'] ?? '')) {
        let out = ''
        let rest = body
        for (;;) {
          const nl = rest.indexOf('\r\n')
          const n = parseInt(rest.slice(0, nl), 16)
          if (!(n > 0)) break
          out += rest.slice(nl + 2, nl + 2 + n)
          rest = rest.slice(nl + 2 + n + 2)
        }
        body = out
      }
      resolve({ status: m ? Number(m[1]) : 0, headers, body, ms: Date.now() - t0 })
    })
    sock.write(Buffer.from(raw, 'latin1'))
  })
}

const CORPUS = hostileCorpus({ table: T, port, suffix: sfx })
const get = (target, headers = '') =>
  `GET ${target} HTTP/1.1\r\nHost: localhost:${port}\r\nConnection: close\r\n${headers}\r\n`

describe('hostile requests', () => {
  let pidBefore
  let shapesBefore
  let logStart

  before(async () => {
    await query(`CREATE TABLE public.${T} (id int PRIMARY KEY, title text)`)
    await query(`ALTER TABLE public.${T} REPLICA IDENTITY FULL`)
    await query(`INSERT INTO public.${T} VALUES (1, 'a')`)
    await query('CREATE EXTENSION IF NOT EXISTS shape_sync')
    pidBefore = (await query(`SELECT pid FROM pg_stat_activity WHERE backend_type = 'shape_sync'`)).rows[0]?.pid
    shapesBefore = Number((await query('SELECT count(*) FROM shape_sync.shapes')).rows[0].count)
    logStart = process.env.SHAPE_SYNC_LOG ? readFileSync(process.env.SHAPE_SYNC_LOG, 'latin1').length : 0
    await setGuc('shape_sync.request_header_timeout', `${HEADER_TIMEOUT_MS}ms`)
    await sleep(1500) // the worker applies a reload within about a second
  })

  after(async () => {
    await resetGuc('shape_sync.request_header_timeout').catch(() => {})
    await query(`DROP TABLE IF EXISTS public.${T}`)
    await closePool()
  })

  for (const [name, raw, status, pattern] of CORPUS) {
    it(`${name}: ${status ?? 'a clean answer or a close'}`, async () => {
      const res = await send(raw)
      // an answer (a status) is the server's own; a close must come before the header timeout
      assert.ok(res.status !== 0 || res.ms < HEADER_TIMEOUT_MS / 2,
        `answered or closed by the server, not left to request_header_timeout (${res.ms} ms)`)
      if (status === null) {
        assert.ok(res.status === 0 || (res.status >= 400 && res.status < 500) || res.status === 200,
          `no 5xx (got ${res.status})`)
        return
      }
      assert.equal(res.status, status, `status (body: ${res.body.slice(0, 300)})`)
      if (status >= 400 && status !== 404 && status !== 414 && status !== 405) {
        assert.match(res.headers['content-type'] ?? '', /^application\/json/)
        JSON.parse(res.body)
      }
      if (pattern) assert.match(res.body, pattern)
    })
  }

  it('leaves the worker alive, creates no shape from the refused requests, and logs nothing', async () => {
    const health = await send(get('/v1/health'))
    assert.equal(health.status, 200)
    const pid = (await query(`SELECT pid FROM pg_stat_activity WHERE backend_type = 'shape_sync'`)).rows[0]?.pid
    assert.equal(pid, pidBefore, 'the same worker process')
    // the three valid requests of the corpus share one shape (comment, nesting, NUL key are
    // different definitions: at most three new shapes)
    const shapes = Number((await query('SELECT count(*) FROM shape_sync.shapes')).rows[0].count)
    assert.ok(shapes - shapesBefore <= 3, `at most the corpus' 3 valid definitions became shapes (${shapes - shapesBefore})`)
    const { rows } = await query(`SELECT count(*) AS n FROM shape_sync.shapes WHERE relation <> '"public"."${T}"' AND created_at > now() - interval '5 minutes' AND relation LIKE '%hostile%'`)
    assert.equal(Number(rows[0].n), 0)
    if (process.env.SHAPE_SYNC_LOG) {
      const log = readFileSync(process.env.SHAPE_SYNC_LOG, 'latin1').slice(logStart)
      const bad = log.split('\n').filter((l) => /ERROR|FATAL|PANIC|TRAP|terminated by signal|could not resolve a shape/.test(l))
      assert.deepEqual(bad, [], 'no error in the server log')
    }
  })
})
