// Helpers for the live-mode HTTP tests (live_*.test.mjs): runtime GUCs, transactions that
// report their xid and WAL position, a raw shape session that follows the log with live
// requests, an SSE reader, and polling.

import assert from 'node:assert/strict'
import { Shape, ShapeStream } from '@electric-sql/client'

import { fetchRaw, fetchShape, pool, query, shapeQuery, SHAPE_URL, sleep, walkShape } from './helpers.mjs'

export const CACHE_LIVE = 'public, max-age=5, stale-while-revalidate=5'
export const CACHE_SSE = 'public, max-age=59'
export const DIGITS = /^\d+$/
export const OFFSET_RE = /^(\d+)_(\d+)$/

// ---------------------------------------------------------------------------------------
// Runtime configuration

const GUC_NAME = /^shape_sync\.[a-z_]+$/

export async function setGuc(name, value) {
  assert.match(name, GUC_NAME)
  await query(`ALTER SYSTEM SET ${name} = '${String(value).replace(/'/g, "''")}'`)
  await query('SELECT pg_reload_conf()')
}

export async function resetGuc(name) {
  assert.match(name, GUC_NAME)
  await query(`ALTER SYSTEM RESET ${name}`)
  await query('SELECT pg_reload_conf()')
}

// Polls until `fn` returns a truthy value; returns it. Throws with `what` after timeoutMs: a
// deadline against a hang, not a time target (the tests run on busy machines).
export async function waitFor(fn, { timeoutMs = 30000, intervalMs = 50, what = 'condition' } = {}) {
  const deadline = Date.now() + timeoutMs
  let last
  for (;;) {
    last = await fn()
    if (last) return last
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`)
    await sleep(intervalMs)
  }
}

// Turns on shape_sync.allow_shape_deletion at runtime and waits until the worker applies it
// (a DELETE stops answering 405).
export async function enableShapeDeletion() {
  await setGuc('shape_sync.allow_shape_deletion', 'on')
  await waitFor(
    async () => {
      const res = await fetchRaw(`${SHAPE_URL}?handle=live-probe-no-such-handle`, { method: 'DELETE' })
      return res.status !== 405
    },
    { timeoutMs: 5000, what: 'DELETE /v1/shape to stop answering 405 after allow_shape_deletion = on' },
  )
}

export async function resetShapeDeletion() {
  await resetGuc('shape_sync.allow_shape_deletion')
}

// Sets shape_sync.long_poll_timeout at runtime and waits until a live request on a probe shape
// times out nearer that time than the default (20 s): the midpoint tells them apart, and a busy
// machine does not reach it.
const DEFAULT_LONG_POLL_MS = 20000
export async function setLongPollTimeout(ms) {
  const applied = Math.max(ms + 1500, (ms + DEFAULT_LONG_POLL_MS) / 2)
  await setGuc('shape_sync.long_poll_timeout', `${ms}ms`)
  const table = `live_probe_${process.pid}_${Date.now().toString(36)}`
  await query(`CREATE TABLE public.${table} (id int PRIMARY KEY)`)
  try {
    const { handle, offset } = await syncRaw({ table })
    await sleep(300)
    await waitFor(
      async () => {
        const t0 = Date.now()
        try {
          const res = await fetchShape(
            { table, handle, offset, live: 'true', cursor: '' },
            { timeoutMs: applied },
          )
          return res.status === 200 && Date.now() - t0 < applied
        } catch (err) {
          if (err.name === 'TimeoutError') return false
          throw err
        }
      },
      { timeoutMs: 60000 + 2 * applied, intervalMs: 0, what: `shape_sync.long_poll_timeout = ${ms}ms to apply` },
    )
  } finally {
    await query(`DROP TABLE IF EXISTS public.${table}`)
  }
}

export async function resetLongPollTimeout() {
  await resetGuc('shape_sync.long_poll_timeout')
}

// ---------------------------------------------------------------------------------------
// Database

export async function currentLsn(client = pool) {
  const { rows } = await client.query(`SELECT (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::text AS lsn`)
  return BigInt(rows[0].lsn)
}

// Runs `statements` in one committed transaction. Returns {xid, before, after}: the
// transaction's xid (a Number, 32-bit) and the WAL insert positions before and after it.
// Waits until the worker has decoded everything written so far: its slot's confirmed
// position passes the WAL insert position of now (a write before it may be replayed late,
// after the test made a shape, which then sees it as a change). A commit after that point
// gives decoding a record to pass it with.
export async function waitDecoded({ timeoutMs = 30000 } = {}) {
  const lsn = await currentLsn()
  await pool.query('SELECT txid_current()')
  await waitFor(async () => {
    const { rows } = await pool.query(
      `SELECT bool_or((confirmed_flush_lsn - '0/0'::pg_lsn) >= $1::numeric) AS done
         FROM pg_replication_slots WHERE plugin = 'shape_sync'`, [lsn.toString()])
    return rows[0].done === true
  }, { timeoutMs, what: `the worker to decode past ${lsn}` })
}

export async function runTx(statements) {
  const client = await pool.connect()
  try {
    const before = await currentLsn(client)
    await client.query('BEGIN')
    for (const s of statements) await client.query(s)
    const { rows } = await client.query(`SELECT pg_current_xact_id()::text AS xid`)
    await client.query('COMMIT')
    const after = await currentLsn(client)
    return { xid: Number(BigInt(rows[0].xid) & 0xffffffffn), before, after }
  } catch (err) {
    await client.query('ROLLBACK').catch(() => {})
    throw err
  } finally {
    client.release()
  }
}

// Runs `statements` in a transaction that is rolled back.
export async function runRolledBack(statements) {
  const client = await pool.connect()
  try {
    await client.query('BEGIN')
    for (const s of statements) await client.query(s)
    await client.query('ROLLBACK')
  } finally {
    client.release()
  }
}

// ---------------------------------------------------------------------------------------
// Offsets

export function parseOffset(text) {
  const m = OFFSET_RE.exec(text ?? '')
  assert.ok(m, `offset ${JSON.stringify(text)} has the form <lsn>_<op>`)
  return [BigInt(m[1]), BigInt(m[2])]
}

export function compareOffsets(a, b) {
  const [al, ao] = parseOffset(a)
  const [bl, bo] = parseOffset(b)
  if (al !== bl) return al < bl ? -1 : 1
  return ao < bo ? -1 : ao > bo ? 1 : 0
}

export function msgOffset(m) {
  return `${m.headers.lsn}_${m.headers.op_position}`
}

// ---------------------------------------------------------------------------------------
// Raw shape sessions

// Syncs a shape with raw requests (offset=-1, then catch-up until up-to-date).
// Returns {handle, offset (the last electric-offset), messages}.
export async function syncRaw(params) {
  const walk = await walkShape(params)
  const last = walk.responses[walk.responses.length - 1].res
  return { handle: walk.handle, offset: last.headers.get('electric-offset'), messages: walk.messages }
}

// Checks the parts of a 200 long-poll response that do not depend on its content.
export function assertLiveResponse(res, { handle, label = 'live response' } = {}) {
  assert.equal(res.status, 200, `${label}: status (${res.text.slice(0, 300)})`)
  assert.match(res.headers.get('content-type') ?? '', /^application\/json/, `${label}: content-type`)
  assert.equal(res.headers.get('cache-control'), CACHE_LIVE, `${label}: cache-control`)
  assert.match(res.headers.get('electric-cursor') ?? '', DIGITS, `${label}: electric-cursor is an integer string`)
  assert.equal(res.headers.get('electric-schema'), null, `${label}: no electric-schema on a live response`)
  if (handle) assert.equal(res.headers.get('electric-handle'), handle, `${label}: electric-handle`)
  assert.ok(res.headers.has('electric-up-to-date'), `${label}: electric-up-to-date present`)
  assert.ok(Array.isArray(res.body) && res.body.length > 0, `${label}: body is a non-empty array: ${res.text}`)
  const last = res.body[res.body.length - 1]
  assert.deepEqual(Object.keys(last), ['headers'], `${label}: last message is a control message`)
  assert.deepEqual(Object.keys(last.headers).sort(), ['control', 'global_last_seen_lsn'], `${label}: up-to-date keys`)
  assert.equal(last.headers.control, 'up-to-date', `${label}: last message is up-to-date`)
  assert.match(last.headers.global_last_seen_lsn, DIGITS, `${label}: global_last_seen_lsn is decimal`)
  for (const m of res.body.slice(0, -1)) assert.ok('key' in m, `${label}: only changes before up-to-date: ${JSON.stringify(m)}`)
  const changes = res.body.filter((m) => 'key' in m)
  const offset = res.headers.get('electric-offset')
  if (changes.length > 0) {
    assert.equal(res.headers.get('electric-has-data'), 'true', `${label}: electric-has-data`)
    assert.match(offset ?? '', OFFSET_RE, `${label}: electric-offset is <lsn>_<op>`)
    assert.ok(!offset.startsWith('0_'), `${label}: electric-offset ${offset} does not start with 0_`)
    assert.equal(offset, msgOffset(changes[changes.length - 1]), `${label}: electric-offset is the last change's offset`)
    assert.equal(last.headers.global_last_seen_lsn, offset.split('_')[0], `${label}: global_last_seen_lsn is the tx part of electric-offset`)
  } else {
    assert.equal(res.headers.get('electric-has-data'), 'false', `${label}: electric-has-data of an empty live response`)
  }
  for (const m of changes) assertChangeHeaders(m, label)
  return changes
}

const CHANGE_HEADER_KEYS = new Set(['operation', 'relation', 'lsn', 'op_position', 'txids', 'last', 'key_change_to', 'key_change_from'])

export function assertChangeHeaders(m, label = 'change') {
  const h = m.headers
  for (const k of Object.keys(h)) assert.ok(CHANGE_HEADER_KEYS.has(k), `${label}: unexpected header ${k} in ${JSON.stringify(m)}`)
  assert.ok(['insert', 'update', 'delete'].includes(h.operation), `${label}: operation ${h.operation}`)
  assert.equal(typeof h.lsn, 'string', `${label}: lsn is a string: ${JSON.stringify(m)}`)
  assert.match(h.lsn, DIGITS, `${label}: lsn is decimal`)
  assert.equal(typeof h.op_position, 'number', `${label}: op_position is a number: ${JSON.stringify(m)}`)
  assert.ok(Array.isArray(h.txids) && h.txids.length >= 1, `${label}: txids is an array`)
  for (const x of h.txids) assert.equal(typeof x, 'number', `${label}: txids holds numbers: ${JSON.stringify(m)}`)
  if ('last' in h) assert.equal(h.last, true, `${label}: last is true when present`)
  for (const [k, v] of Object.entries(m.value ?? {})) {
    assert.ok(v === null || typeof v === 'string', `${label}: value.${k} is a string or null`)
  }
}

// Starts a live request of a RawShape and checks that the server still holds it after
// `ms`, so that what the test commits next is seen by a request already waiting (one that
// came after would be answered for the new state instead). Returns {response}: a promise
// inside an object, so that awaiting holdLive does not await the response.
export async function holdLive(shape, ms = 300, { timeoutMs = 10000 } = {}) {
  let settled = false
  const response = shape.request({ timeoutMs }).finally(() => {
    settled = true
  })
  await sleep(ms)
  assert.equal(settled, false, `the live request is held (${ms} ms, no change yet)`)
  return { response }
}

// A raw client of one shape: follows the log with long-poll requests.
export class RawShape {
  constructor(params) {
    this.params = params
    this.handle = undefined
    this.offset = undefined
    this.cursor = ''
  }

  async sync() {
    const { handle, offset, messages } = await syncRaw(this.params)
    this.handle = handle
    this.offset = offset
    this.snapshot = messages
    return this
  }

  // Starts one live request from the current offset (does not update state).
  request({ timeoutMs = 15000, extra = {}, offset = this.offset, cursor = this.cursor } = {}) {
    return fetchShape(
      { ...this.params, handle: this.handle, offset, live: 'true', cursor, ...extra },
      { timeoutMs },
    )
  }

  // Records a live 200 response's offset and cursor; checks it; returns its change messages.
  accept(res, label) {
    const changes = assertLiveResponse(res, { handle: this.handle, label })
    const next = res.headers.get('electric-offset')
    if (changes.length > 0) {
      if (!this.offset.startsWith('0_')) {
        assert.ok(
          compareOffsets(msgOffset(changes[0]), this.offset) > 0,
          `${label}: first change ${msgOffset(changes[0])} is after the requested offset ${this.offset}`,
        )
      }
    } else {
      assert.equal(next, this.offset, `${label}: electric-offset unchanged by an empty live response`)
    }
    this.offset = next
    this.cursor = res.headers.get('electric-cursor')
    return changes
  }

  // Live requests until a change satisfies `until`; returns every change received (in order).
  async collectUntil(until, { timeoutMs = 30000, label = 'collect' } = {}) {
    const deadline = Date.now() + timeoutMs
    const all = []
    for (let i = 0; ; i++) {
      const res = await this.request()
      const changes = this.accept(res, `${label} #${i}`)
      all.push(...changes)
      if (changes.some(until)) return all
      if (Date.now() > deadline) throw new Error(`${label}: no matching change after ${timeoutMs} ms; got ${JSON.stringify(all)}`)
    }
  }
}

// Checks the offsets of a list of changes: strictly increasing, op positions even within a tx
// except a key change's insert (delete op + 1), and `last` exactly on the final change of each tx.
export function assertTxStructure(changes, label) {
  for (let i = 1; i < changes.length; i++) {
    assert.ok(
      compareOffsets(msgOffset(changes[i - 1]), msgOffset(changes[i])) < 0,
      `${label}: offsets strictly increase: ${msgOffset(changes[i - 1])} then ${msgOffset(changes[i])}`,
    )
  }
  for (let i = 0; i < changes.length; i++) {
    const m = changes[i]
    const next = changes[i + 1]
    const lastOfTx = !next || next.headers.lsn !== m.headers.lsn
    if (lastOfTx) assert.equal(m.headers.last, true, `${label}: last:true on the final change of tx ${m.headers.lsn}: ${JSON.stringify(m)}`)
    else assert.ok(!('last' in m.headers), `${label}: no 'last' header before the end of the tx: ${JSON.stringify(m)}`)
  }
}

// ---------------------------------------------------------------------------------------
// SSE

// Opens an SSE request; resolves once the response headers arrive.
// Returns {res, next(timeoutMs) -> {data, raw} | {comment, raw} | null (end), close(), rawText()}.
export async function openSse(params, { timeoutMs = 30000 } = {}) {
  const controller = new AbortController()
  const url = `${SHAPE_URL}?${shapeQuery({ ...params, live: 'true', live_sse: 'true', experimental_live_sse: 'true' })}`
  const timer = setTimeout(() => controller.abort(new Error('SSE headers timeout')), timeoutMs)
  let res
  try {
    res = await fetch(url, { headers: { Accept: 'text/event-stream' }, signal: controller.signal })
  } finally {
    clearTimeout(timer)
  }
  const reader = res.body.getReader()
  const decoder = new TextDecoder()
  let buffer = ''
  let all = ''
  let ended = false
  let pending = null

  function takeEvent() {
    const i = buffer.indexOf('\n\n')
    if (i < 0) return undefined
    const raw = buffer.slice(0, i + 2)
    buffer = buffer.slice(i + 2)
    const lines = raw.slice(0, -2).split('\n')
    if (lines.every((l) => l.startsWith(':'))) return { comment: lines.join('\n'), raw }
    const data = lines.filter((l) => l.startsWith('data:')).map((l) => l.slice(5).replace(/^ /, '')).join('\n')
    let parsed
    try {
      parsed = JSON.parse(data)
    } catch {
      parsed = undefined
    }
    return { data: parsed, rawData: data, raw }
  }

  async function next(ms = 30000) {
    for (;;) {
      const ev = takeEvent()
      if (ev) return ev
      if (ended) {
        if (buffer.length > 0) throw new Error(`SSE stream ended inside an event: ${JSON.stringify(buffer)}`)
        return null
      }
      if (!pending) pending = reader.read()
      let t
      const timeout = new Promise((resolve) => {
        t = setTimeout(() => resolve('timeout'), ms)
      })
      const r = await Promise.race([pending, timeout])
      clearTimeout(t)
      if (r === 'timeout') throw new Error(`no SSE event within ${ms} ms (buffer: ${JSON.stringify(buffer)})`)
      pending = null
      if (r.done) ended = true
      else {
        const chunk = decoder.decode(r.value, { stream: true })
        buffer += chunk
        all += chunk
      }
    }
  }

  // Data events until (and including) the next up-to-date, skipping keep-alive comments.
  async function nextBatch(ms = 30000) {
    const out = []
    const deadline = Date.now() + ms
    for (;;) {
      const ev = await next(Math.max(1, deadline - Date.now()))
      if (ev === null) throw new Error(`SSE stream ended before up-to-date; got ${JSON.stringify(out)}`)
      if (ev.comment !== undefined) continue
      out.push(ev)
      if (ev.data?.headers?.control === 'up-to-date') return out
    }
  }

  // True if the stream ends within ms (no further data events allowed).  The default, 10 s, is
  // generous and still half of the default long_poll_timeout, where a stream that does not end
  // on its own would.
  async function expectEnd(ms = 10000) {
    const deadline = Date.now() + ms
    for (;;) {
      const ev = await next(Math.max(1, deadline - Date.now()))
      if (ev === null) return true
      if (ev.comment === undefined) throw new Error(`unexpected SSE event before the end: ${ev.raw}`)
    }
  }

  // Reads the rest of the body and returns the whole body text (for non-SSE answers, e.g. 409).
  async function text(ms = 30000) {
    const deadline = Date.now() + ms
    while (!ended) {
      if (!pending) pending = reader.read()
      let t
      const timeout = new Promise((resolve) => {
        t = setTimeout(() => resolve('timeout'), Math.max(1, deadline - Date.now()))
      })
      const r = await Promise.race([pending, timeout])
      clearTimeout(t)
      if (r === 'timeout') throw new Error(`body not complete within ${ms} ms: ${JSON.stringify(all)}`)
      pending = null
      if (r.done) ended = true
      else all += decoder.decode(r.value, { stream: true })
    }
    return all
  }

  function close() {
    controller.abort()
    reader.cancel().catch(() => {})
  }

  return { res, next, nextBatch, expectEnd, text, close, rawText: () => all }
}

// ---------------------------------------------------------------------------------------
// Official client

// Starts a ShapeStream + Shape. Records every request URL in `requests` and every error
// in `errors`. close() aborts the stream.
export function startClientShape(params, streamOptions = {}) {
  const controller = new AbortController()
  const requests = []
  const errors = []
  // Live requests whose bodies are still being read: the official client sometimes runs two
  // live loops at once (after requestSnapshot's pause, a loop asleep in its short-connection
  // backoff wakes beside the new one), and then both rightly get the same changes.
  let openLive = 0
  let liveOverlaps = 0
  const { fetchClient: callerFetch = fetch, ...options } = streamOptions
  const fetchClient = async (input, init) => {
    const url = new URL(typeof input === 'string' ? input : input.url)
    requests.push(url)
    if (url.searchParams.get('live') !== 'true') return callerFetch(input, init)
    if (openLive > 0) liveOverlaps++
    openLive++
    let open = true
    const done = () => {
      if (open) {
        open = false
        openLive--
      }
    }
    init?.signal?.addEventListener('abort', done, { once: true })
    let res
    try {
      res = await callerFetch(input, init)
    } catch (err) {
      done()
      throw err
    }
    if (res.status !== 200 || !res.body) {
      done()
      return res
    }
    const reader = res.body.getReader()
    const body = new ReadableStream({
      async pull(ctrl) {
        try {
          const { done: end, value } = await reader.read()
          if (end) {
            done()
            ctrl.close()
          } else ctrl.enqueue(value)
        } catch (err) {
          done()
          ctrl.error(err)
        }
      },
      cancel(reason) {
        done()
        return reader.cancel(reason)
      },
    })
    return new Response(body, { status: res.status, statusText: res.statusText, headers: res.headers })
  }
  const stream = new ShapeStream({
    url: SHAPE_URL,
    params,
    signal: controller.signal,
    fetchClient,
    backoffOptions: { initialDelay: 100, maxDelay: 1000, multiplier: 2, maxRetries: 8 },
    onError: (err) => {
      errors.push(err)
    },
    ...options,
  })
  const shape = new Shape(stream)
  return {
    stream,
    shape,
    requests,
    errors,
    liveOverlaps: () => liveOverlaps,
    close() {
      controller.abort()
      shape.unsubscribeAll()
      stream.unsubscribeAll()
    },
  }
}

const byId = (a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0)

// Polls until the client's rows equal the rows of `sql` (compared as sets by id); fails with
// a diff after timeoutMs.
export async function waitRowsEqual(client, sql, label, { timeoutMs = 30000 } = {}) {
  const deadline = Date.now() + timeoutMs
  let expected
  let actual
  for (;;) {
    expected = (await query(sql)).rows.sort(byId)
    actual = client.shape.currentRows.map((r) => ({ ...r })).sort(byId)
    if (client.errors.length > 0) {
      throw new Error(`${label}: client errors: ${client.errors.map((e) => `${e.name}: ${e.message}`).join('; ')}`)
    }
    if (Date.now() > deadline) break
    try {
      assert.deepEqual(actual, expected)
      return
    } catch {
      await sleep(25)
    }
  }
  assert.deepEqual(actual, expected, `${label}: client rows equal the SELECT`)
}

// A small deterministic PRNG (mulberry32).
export function prng(seed) {
  let a = seed >>> 0
  return () => {
    a = (a + 0x6d2b79f5) >>> 0
    let t = a
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
}

const WORDS = ['alpha', 'beta', 'γάμμα', 'δ', 'ü', '😀 emoji', "it's", 'back\\slash', 'a/b', '"quoted"', 'skip', '']

// Random statements for a table (id int PRIMARY KEY, a text, b int, c text): inserts, updates
// (including primary-key changes) and deletes. `ids` (a Set of existing ids) is kept up to date.
export function randomTxStatements(rand, table, ids, nextId) {
  const n = 1 + Math.floor(rand() * 4)
  const out = []
  const pick = () => [...ids][Math.floor(rand() * ids.size)]
  const lit = (s) => (s === null ? 'NULL' : `'${s.replace(/'/g, "''")}'`)
  const word = () => (rand() < 0.1 ? null : WORDS[Math.floor(rand() * WORDS.length)])
  const num = () => (rand() < 0.1 ? 'NULL' : String(Math.floor(rand() * 50)))
  for (let i = 0; i < n; i++) {
    const r = rand()
    if (ids.size < 3 || r < 0.4) {
      const id = nextId()
      out.push(`INSERT INTO ${table} VALUES (${id}, ${lit(word())}, ${num()}, ${lit(word())})`)
      ids.add(id)
    } else if (r < 0.8) {
      const id = pick()
      const sets = []
      if (rand() < 0.6) sets.push(`a = ${lit(word())}`)
      if (rand() < 0.6) sets.push(`b = ${num()}`)
      if (rand() < 0.3) sets.push(`c = ${lit(word())}`)
      if (rand() < 0.08) {
        const nid = nextId()
        sets.push(`id = ${nid}`)
        ids.delete(id)
        ids.add(nid)
      }
      if (sets.length === 0) sets.push(`b = b`)
      out.push(`UPDATE ${table} SET ${sets.join(', ')} WHERE id = ${id}`)
    } else {
      const id = pick()
      out.push(`DELETE FROM ${table} WHERE id = ${id}`)
      ids.delete(id)
    }
  }
  return out
}
