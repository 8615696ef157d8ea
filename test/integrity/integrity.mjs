// test/integrity/integrity.mjs: randomized end-to-end integrity test of shape_sync's live mode.
//
// Run through test/integrity/run.sh, which starts a throwaway cluster with
// shape_sync.long_poll_timeout = 2s and shape_sync.chunk_bytes_threshold = 16kB and exports
// PGHOST/PGPORT/PGUSER/PGDATABASE, SHAPE_SYNC_URL, SHAPE_SYNC_PGDATA, SHAPE_SYNC_LOG and
// SHAPE_SYNC_PG_BINDIR.
//
// What it does (all waits bounded; about 60-80 s in all):
//   1. creates three tables (int pk; composite pk; int pk) with a few hundred rows each;
//   2. defines several shapes (where `n > 50`, `n % 3 = 0`, none; column subsets; replica
//      default and full) and follows each with
//        - the official client (ShapeStream + Shape) in long-poll mode,
//        - the official client with `liveSse: true` (INTEGRITY_SSE=0 turns this off),
//        - a raw HTTP materializer (our own code, applying insert/update/delete to a Map, with
//          replica-default merge semantics) that also checks protocol invariants message by
//          message: offsets strictly increase, `last` closes every transaction, no up-to-date
//          in the middle of a transaction, no insert of a present key, no update/delete of an
//          absent key, column projection, replica default/full value contents, headers;
//      and, half-way through the workload, a late official client for every shape plus one
//      shape definition that is first requested mid-workload (a fresh snapshot stitched to
//      the replication stream while writers run);
//   3. runs WRITERS concurrent pg connections doing random transactions for DURATION seconds:
//      inserts, upserts, updates moving rows in and out of the where clauses, primary-key
//      changes, deletes, no-op updates, updates of unchanged TOASTed rows, savepoint
//      rollbacks, full rollbacks, large transactions (500+ rows) and multi-table transactions;
//   4. stops the writers and waits (bounded) until every client's rows equal the shape's
//      SELECT, then checks each one;
//   5. restart phase: writers start again, PostgreSQL is restarted (pg_ctl restart -m fast)
//      while clients are live, writers continue after it; clients must recover (409 /
//      network errors, re-sync) and again end equal to the SELECT.
//
// Output is TAP-like (`ok N - ...` / `not ok N - ...`, then `1..N`); the exit status is 1 when
// any check failed. The seed is printed first; SEED=<n> replays the same sequence of random
// operations per writer (the interleaving of concurrent writers is up to the scheduler, so a
// replay is faithful for single-writer failures and likely, not certain, for the others).
//
// Environment knobs: SEED, DURATION (s, phase 1 writer time, default 16), RESTART_DURATION
// (s, phase 2, default 10), WRITERS (default 4), INTEGRITY_SSE (1/0, default 1),
// INTEGRITY_RESTART (1/0, default 1), CONVERGE_TIMEOUT (s, default 25), VERBOSE=1.
//
// Dependencies: this directory has no package.json of its own. It reuses the pinned
// @electric-sql/client and pg of test/http/ (test/http/package-lock.json, installed by
// scripts/install-deps.sh), loaded by path below: ESM ignores NODE_PATH, and a second
// package-lock.json here would need its own `npm ci` step in scripts/install-deps.sh.

import { createRequire } from 'node:module'
import { dirname, join } from 'node:path'
import { pathToFileURL } from 'node:url'
import { execFile } from 'node:child_process'
import { setTimeout as sleep } from 'node:timers/promises'

const httpRequire = createRequire(new URL('../http/package.json', import.meta.url))
const pg = httpRequire('pg')
const clientDir = dirname(httpRequire.resolve('@electric-sql/client/package.json'))
const { ShapeStream, Shape } = await import(pathToFileURL(join(clientDir, 'dist/index.mjs')).href)

// @electric-sql/client keeps a module-level UpToDateTracker that throttles its localStorage
// writes with a plain setTimeout of up to 60 s, which keeps Node alive. Unref exactly that
// timer (same trick as test/http/helpers.mjs).
{
  const realSetTimeout = globalThis.setTimeout
  globalThis.setTimeout = function setTimeout(fn, ms, ...args) {
    const timer = realSetTimeout(fn, ms, ...args)
    if (typeof fn === 'function' && typeof timer?.unref === 'function') {
      const src = Function.prototype.toString.call(fn)
      if (src.includes('pendingSaveTimer') && src.includes('lastWriteTime')) timer.unref()
    }
    return timer
  }
}

// The client warns (with a stack trace) when it gives up on SSE after three short SSE
// connections in a row; count that instead of printing it.
let sseFallbackWarnings = 0
{
  const realWarn = console.warn
  console.warn = (...a) => {
    if (typeof a[0] === 'string' && a[0].includes('Falling back to long polling')) sseFallbackWarnings++
    else realWarn(...a)
  }
}

// ---------------------------------------------------------------------------------------------
// configuration

const env = process.env
const SEED = env.SEED !== undefined && env.SEED !== '' ? Number(env.SEED) >>> 0 : (Math.random() * 2 ** 32) >>> 0
const DURATION_S = Number(env.DURATION ?? 16)
const RESTART_DURATION_S = Number(env.RESTART_DURATION ?? 10)
const WRITERS = Number(env.WRITERS ?? 4)
const USE_SSE = (env.INTEGRITY_SSE ?? '1') !== '0'
const DO_RESTART = (env.INTEGRITY_RESTART ?? '1') !== '0'
const CONVERGE_TIMEOUT_MS = Number(env.CONVERGE_TIMEOUT ?? 25) * 1000
const VERBOSE = env.VERBOSE === '1'
const BASE_URL = (env.SHAPE_SYNC_URL ?? 'http://localhost:3000').replace(/\/+$/, '')
const SHAPE_URL = `${BASE_URL}/v1/shape`
const T0 = Date.now()

const log = (...a) => console.log(`# [${((Date.now() - T0) / 1000).toFixed(1)}s]`, ...a)
const vlog = (...a) => VERBOSE && log(...a)

// ---------------------------------------------------------------------------------------------
// TAP

let checks = 0
let failures = 0
function ok(cond, what, detail) {
  checks++
  if (cond) {
    console.log(`ok ${checks} - ${what}`)
  } else {
    failures++
    console.log(`not ok ${checks} - ${what}`)
    if (detail) for (const line of String(detail).split('\n')) console.log(`#   ${line}`)
  }
  return cond
}

// ---------------------------------------------------------------------------------------------
// seeded PRNG (mulberry32)

function prng(seed) {
  let a = seed >>> 0
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0
    let t = a
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
  const r = {
    next,
    int: (lo, hi) => lo + Math.floor(next() * (hi - lo + 1)), // inclusive
    chance: (p) => next() < p,
    pick: (arr) => arr[Math.floor(next() * arr.length)],
  }
  return r
}

const SPECIAL_TEXT = [
  'quote"d',
  'back\\slash\\',
  'sl/ash//and/',
  'new\nline\ttab\r',
  'ünïcödé 漢字 🙂',
  '{"json":[1,2]}',
  'NULL',
  "it's",
  'ctrl\u0001\u001f',
  ' leading and trailing ',
  'a,b"c\'d',
  '%_*',
  'line\u2028sep\u2029',
  '',
  '\\x00ff',
  '"',
  '/',
]

function randomText(r) {
  const x = r.next()
  if (x < 0.05) return null
  if (x < 0.2) return r.pick(SPECIAL_TEXT)
  if (x < 0.22) {
    // big and poorly compressible: stored out of line (TOAST)
    const len = r.int(3000, 6000)
    const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/'
    let s = ''
    for (let i = 0; i < len; i++) s += alphabet[Math.floor(r.next() * 64)]
    return s
  }
  return `w${r.int(0, 1e6)}`
}
const randomN = (r) => (r.chance(0.06) ? null : r.int(0, 100))
const randomM = (r) => (r.chance(0.1) ? null : r.int(0, 1000))

// ---------------------------------------------------------------------------------------------
// tables and shapes

const TABLES = {
  integ_a: {
    ddl: 'CREATE TABLE integ_a (id int PRIMARY KEY, s text, n int, m int)',
    cols: ['id', 's', 'n', 'm'],
    pk: ['id'],
  },
  integ_b: {
    ddl: 'CREATE TABLE integ_b (a int, b int, s text, n int, PRIMARY KEY (a, b))',
    cols: ['a', 'b', 's', 'n'],
    pk: ['a', 'b'],
  },
  integ_c: {
    ddl: 'CREATE TABLE integ_c (id int PRIMARY KEY, s text, n int)',
    cols: ['id', 's', 'n'],
    pk: ['id'],
  },
}

// name, table, where, columns (null: all), replica, late (first requested mid-workload)
const SHAPES = [
  { name: 'a_all', table: 'integ_a', where: null, columns: null, replica: 'default' },
  { name: 'a_gt50_cols', table: 'integ_a', where: 'n > 50', columns: ['id', 'n'], replica: 'default' },
  { name: 'a_mod3_full', table: 'integ_a', where: 'n % 3 = 0', columns: null, replica: 'full' },
  { name: 'b_gt50_full', table: 'integ_b', where: 'n > 50', columns: null, replica: 'full' },
  { name: 'b_cols', table: 'integ_b', where: null, columns: ['a', 'b', 's'], replica: 'default' },
  { name: 'c_mod3_cols', table: 'integ_c', where: 'n % 3 = 0', columns: ['id', 's'], replica: 'default' },
  { name: 'c_all_full', table: 'integ_c', where: null, columns: null, replica: 'full' },
  // first requested half-way through phase 1: snapshot taken while writers run
  { name: 'a_le50_late', table: 'integ_a', where: 'n <= 50', columns: ['id', 's', 'n'], replica: 'default', late: true },
  { name: 'b_mod3_late_full', table: 'integ_b', where: 'n % 3 = 0', columns: ['a', 'b', 'n'], replica: 'full', late: true },
]
for (const s of SHAPES) {
  s.cols = s.columns ?? TABLES[s.table].cols
  s.pk = TABLES[s.table].pk
}

const quoteIdent = (n) => `"${String(n).replace(/"/g, '""')}"`

// Electric key: "schema"."table"/"pk1"/"pk2" (inside a value / becomes //, NULL is _)
function rowKey(shape, row) {
  let k = `"public"."${shape.table}"`
  for (const c of shape.pk) {
    const v = row[c]
    k += v === null || v === undefined ? '/_' : `/"${String(v).replace(/\//g, '//')}"`
  }
  return k
}

function shapeQueryParams(shape) {
  const q = new URLSearchParams()
  q.set('table', shape.table)
  if (shape.where) q.set('where', shape.where)
  if (shape.columns) q.set('columns', shape.columns.map(quoteIdent).join(','))
  if (shape.replica !== 'default') q.set('replica', shape.replica)
  return q
}

// The shape's rows as PostgreSQL has them now: Map key -> row (pg parses int4 to Number and
// leaves text as strings, like the client's parser for int4/text).
async function expectedRows(db, shape) {
  const cols = shape.cols.map(quoteIdent).join(', ')
  const where = shape.where ? ` WHERE ${shape.where}` : ''
  const res = await db.query(`SELECT ${cols} FROM ${shape.table}${where}`)
  const m = new Map()
  for (const row of res.rows) m.set(rowKey(shape, row), row)
  return m
}

// ---------------------------------------------------------------------------------------------
// comparing materialized rows

function stableRow(row, asText) {
  const o = {}
  for (const k of Object.keys(row).sort()) {
    const v = row[k]
    o[k] = asText && typeof v === 'number' ? String(v) : v
  }
  return JSON.stringify(o)
}

function short(v, n = 160) {
  const s = typeof v === 'string' ? v : JSON.stringify(v)
  return s.length > n ? `${s.slice(0, n)}...(${s.length} chars)` : s
}

// Returns null when equal, else a description of the first differences.
function diffRows(expected, actual, asText) {
  const out = []
  let missing = 0
  let extra = 0
  let differ = 0
  for (const [k, row] of expected) {
    if (!actual.has(k)) {
      if (++missing <= 3) out.push(`missing ${k}: ${short(stableRow(row, asText))}`)
    } else {
      const a = stableRow(actual.get(k), false)
      const e = stableRow(row, asText)
      if (a !== e && ++differ <= 3) out.push(`differs ${k}: expected ${short(e)} got ${short(a)}`)
    }
  }
  for (const [k, row] of actual) {
    if (!expected.has(k) && ++extra <= 3) out.push(`extra ${k}: ${short(stableRow(row, false))}`)
  }
  if (!missing && !extra && !differ) return null
  return `expected ${expected.size} rows, client has ${actual.size}: ${missing} missing, ${extra} extra, ${differ} differ\n${out.join('\n')}`
}

// ---------------------------------------------------------------------------------------------
// official client

class OfficialClient {
  constructor(shape, mode, label) {
    this.shape = shape
    this.mode = mode // 'longpoll' | 'sse'
    this.label = label
    this.errors = []
    this.stats = { requests: 0, status: {}, sseRequests: 0, sseContentTypes: {}, netErrors: 0, liveRequests: 0, longPollAfterSse: 0 }
    this.ac = new AbortController()
    const params = { table: shape.table }
    if (shape.where) params.where = shape.where
    if (shape.columns) params.columns = shape.columns
    if (shape.replica !== 'default') params.replica = shape.replica
    const stats = this.stats
    const fetchClient = async (input, init) => {
      const url = typeof input === 'string' ? input : input instanceof URL ? input.href : input.url
      const sse = /[?&]live_sse=true/.test(url)
      stats.requests++
      if (/[?&]live=true/.test(url)) {
        stats.liveRequests++
        if (!sse && stats.sseRequests > 0) stats.longPollAfterSse++
      }
      if (sse) stats.sseRequests++
      try {
        const res = await fetch(input, init)
        stats.status[res.status] = (stats.status[res.status] ?? 0) + 1
        if (sse && res.ok) {
          const ct = res.headers.get('content-type') ?? '(none)'
          stats.sseContentTypes[ct] = (stats.sseContentTypes[ct] ?? 0) + 1
        }
        return res
      } catch (e) {
        if (e?.name !== 'AbortError') stats.netErrors++
        throw e
      }
    }
    this.stream = new ShapeStream({
      url: SHAPE_URL,
      params,
      liveSse: mode === 'sse',
      signal: this.ac.signal,
      fetchClient,
      // Quicker retries than the default (1 s .. 32 s) so that recovery after the restart
      // fits the test's time bounds; retries stay unlimited as by default.
      backoffOptions: { initialDelay: 100, maxDelay: 2000, multiplier: 1.5 },
      onError: (err) => {
        // Anything reaching onError is a 4xx other than 409/429 or a fatal client error: a
        // finding. Keep going (retry) so that the final state is still compared.
        if (this.stopped) return
        this.errors.push(`${err?.name}: ${err?.status ?? ''} ${short(err?.message ?? String(err), 300)} ${err?.json ? short(err.json, 300) : ''}`)
        vlog(`${this.label} onError`, this.errors.at(-1))
        return {}
      },
    })
    this.shapeObj = new Shape(this.stream)
  }
  rows() {
    return this.shapeObj.currentValue
  }
  stop() {
    this.stopped = true
    try {
      this.stream.unsubscribeAll()
    } catch {}
    this.ac.abort()
  }
  describe() {
    return `requests=${this.stats.requests} live=${this.stats.liveRequests} status=${JSON.stringify(this.stats.status)} netErrors=${this.stats.netErrors}` +
      (this.mode === 'sse' ? ` sseRequests=${this.stats.sseRequests} sseContentTypes=${JSON.stringify(this.stats.sseContentTypes)} liveLongPollsAfterSse=${this.stats.longPollAfterSse}${this.stats.longPollAfterSse ? ' (fell back to long-polling)' : ''}` : '')
  }
}

// ---------------------------------------------------------------------------------------------
// raw HTTP materializer

const lsnOf = (offset) => {
  const m = /^(\d+)_(\d+|inf)$/.exec(offset)
  return m ? [BigInt(m[1]), m[2] === 'inf' ? null : BigInt(m[2])] : null
}

class RawClient {
  constructor(shape, label) {
    this.shape = shape
    this.label = label
    this.rowsMap = new Map()
    this.anomalies = []
    this.anomalyCount = 0
    this.stats = { requests: 0, status: {}, netErrors: 0, resets: 0, changes: 0, upToDates: 0 }
    this.globalLsn = 0n
    this.ac = new AbortController()
    this.upToDate = false
    this.stopped = false
  }
  anomaly(msg) {
    this.anomalyCount++
    if (this.anomalies.length < 12) this.anomalies.push(`[${((Date.now() - T0) / 1000).toFixed(1)}s] ${msg}`)
    vlog(`${this.label} ANOMALY ${msg}`)
  }
  rows() {
    return this.rowsMap
  }
  reset(handle) {
    this.rowsMap = new Map()
    this.handle = handle
    this.offset = '-1'
    this.live = false
    this.upToDate = false
    this.lastPos = null // [lsn, op] of the last change applied
    this.openTxn = null // lsn of a transaction whose `last` has not been seen
    this.inLog = false // a change with an lsn has been seen since the last reset
  }
  start() {
    this.reset(null)
    this.cursor = ''
    this.done = this.#loop()
    return this
  }
  async stop() {
    this.stopped = true
    this.ac.abort()
    await this.done.catch(() => {})
  }
  async #loop() {
    while (!this.stopped) {
      const q = shapeQueryParams(this.shape)
      q.set('offset', this.offset)
      if (this.handle) q.set('handle', this.handle)
      if (this.live) {
        q.set('live', 'true')
        q.set('cursor', this.cursor)
      }
      const url = `${SHAPE_URL}?${q}`
      let res
      let text
      this.stats.requests++
      try {
        const signal = AbortSignal.any([this.ac.signal, AbortSignal.timeout(30000)])
        res = await fetch(url, { signal })
        text = await res.text()
      } catch (e) {
        if (this.stopped) return
        this.stats.netErrors++
        if (e?.name === 'TimeoutError') this.anomaly(`request took over 30 s: ${url}`)
        await sleep(200)
        continue
      }
      this.stats.status[res.status] = (this.stats.status[res.status] ?? 0) + 1
      if (res.status === 409) {
        const h = res.headers.get('electric-handle')
        let body
        try {
          body = JSON.parse(text)
        } catch {}
        if (!Array.isArray(body) || body[0]?.headers?.control !== 'must-refetch')
          this.anomaly(`409 body is not [must-refetch]: ${short(text)}`)
        this.stats.resets++
        this.reset(h)
        continue
      }
      if (res.status >= 500 || res.status === 429) {
        await sleep(200)
        continue
      }
      if (res.status !== 200) {
        this.anomaly(`${res.status} for ${url}: ${short(text, 300)}`)
        await sleep(500)
        continue
      }
      this.#handle200(url, res, text)
    }
  }
  #handle200(url, res, text) {
    const h = res.headers
    const handle = h.get('electric-handle')
    const offset = h.get('electric-offset')
    if (!handle || !offset) this.anomaly(`200 without electric-handle/electric-offset: ${url}`)
    if (this.live && !h.get('electric-cursor')) this.anomaly(`live 200 without electric-cursor: ${url}`)
    if (!this.live && !h.get('electric-schema')) this.anomaly(`non-live 200 without electric-schema: ${url}`)
    if (this.handle && handle && handle !== this.handle)
      this.anomaly(`200 for handle ${this.handle} carries electric-handle ${handle} (no 409): ${url}`)
    let body
    try {
      body = text === '' ? [] : JSON.parse(text)
    } catch (e) {
      this.anomaly(`body is not JSON (${e.message}): ${short(text)}`)
      return
    }
    if (!Array.isArray(body)) {
      this.anomaly(`body is not an array: ${short(text)}`)
      return
    }
    let sawUpToDate = false
    let lastChangeOffset = null
    for (let i = 0; i < body.length; i++) {
      const msg = body[i]
      if (msg && typeof msg === 'object' && 'key' in msg) {
        const pos = this.#applyChange(msg, url)
        if (pos) lastChangeOffset = `${pos[0]}_${pos[1]}`
      } else if (msg?.headers?.control === 'up-to-date') {
        if (i !== body.length - 1) this.anomaly(`up-to-date is not the last message: ${url}`)
        if (this.openTxn !== null)
          this.anomaly(`up-to-date in the middle of transaction lsn ${this.openTxn} (no message with last:true): ${url}`)
        const g = msg.headers.global_last_seen_lsn
        if (typeof g !== 'string' || !/^\d+$/.test(g)) this.anomaly(`global_last_seen_lsn is not a decimal string: ${JSON.stringify(g)}`)
        else if (BigInt(g) > this.globalLsn) this.globalLsn = BigInt(g)
        sawUpToDate = true
        this.stats.upToDates++
      } else if (msg?.headers?.control === 'snapshot-end') {
        if (this.inLog) this.anomaly(`snapshot-end after log entries: ${url}`)
      } else {
        this.anomaly(`unexpected message ${short(msg)}`)
      }
    }
    if (lastChangeOffset && offset !== lastChangeOffset)
      this.anomaly(`electric-offset ${offset} is not the offset of the last change ${lastChangeOffset}: ${url}`)
    if (sawUpToDate !== (h.get('electric-up-to-date') !== null))
      this.anomaly(`electric-up-to-date header ${h.get('electric-up-to-date') === null ? 'absent' : 'present'} but up-to-date message ${sawUpToDate ? 'present' : 'absent'}: ${url}`)
    if (offset) {
      const cur = lsnOf(this.offset)
      const nxt = lsnOf(offset)
      if (cur && nxt && (nxt[0] < cur[0] || (nxt[0] === cur[0] && cur[1] !== null && nxt[1] !== null && nxt[1] < cur[1])))
        this.anomaly(`electric-offset went backwards: ${this.offset} -> ${offset}`)
      this.offset = offset
    }
    if (handle) this.handle = handle
    if (h.get('electric-cursor')) this.cursor = h.get('electric-cursor')
    if (sawUpToDate) {
      this.live = true
      this.upToDate = true
    }
  }
  // Applies one change message; returns its [lsn, op_position] when it has one.
  #applyChange(msg, url) {
    const shape = this.shape
    const hd = msg.headers ?? {}
    const op = hd.operation
    const key = msg.key
    const value = msg.value ?? {}
    this.stats.changes++
    let pos = null
    if (hd.lsn !== undefined) {
      if (typeof hd.lsn !== 'string' || !/^\d+$/.test(hd.lsn)) this.anomaly(`lsn is not a decimal string: ${short(msg)}`)
      if (typeof hd.op_position !== 'number') this.anomaly(`op_position is not a number: ${short(msg)}`)
      if (!Array.isArray(hd.txids) || hd.txids.some((x) => typeof x !== 'number'))
        this.anomaly(`txids is not an array of numbers: ${short(msg)}`)
      pos = [BigInt(hd.lsn), BigInt(hd.op_position)]
      if (this.lastPos && (pos[0] < this.lastPos[0] || (pos[0] === this.lastPos[0] && pos[1] <= this.lastPos[1])))
        this.anomaly(`change offset ${pos[0]}_${pos[1]} not after ${this.lastPos[0]}_${this.lastPos[1]} (${op} ${key})`)
      if (this.openTxn !== null && this.openTxn !== pos[0])
        this.anomaly(`transaction lsn ${this.openTxn} ended without last:true; next is ${pos[0]}`)
      this.openTxn = hd.last === true ? null : pos[0]
      this.lastPos = pos
      this.inLog = true
    } else if (this.inLog) {
      this.anomaly(`change without lsn after log entries: ${short(msg)}`)
    }
    if (!Array.isArray(hd.relation) || hd.relation[0] !== 'public' || hd.relation[1] !== shape.table)
      this.anomaly(`bad relation ${JSON.stringify(hd.relation)}`)
    for (const c of Object.keys(value))
      if (!shape.cols.includes(c)) this.anomaly(`${op} value has unselected column ${c}: ${short(msg)}`)
    for (const c of shape.pk) if (!(c in value)) this.anomaly(`${op} value lacks pk column ${c}: ${short(msg)}`)
    if (key !== rowKey(shape, value)) this.anomaly(`key ${key} does not match the value's pk: ${short(msg)}`)
    for (const v of Object.values(value))
      if (v !== null && typeof v !== 'string') this.anomaly(`value is not a string or null: ${short(msg)}`)
    const full = shape.replica === 'full'
    if (op === 'insert') {
      if (this.rowsMap.has(key)) this.anomaly(`insert of present key ${key} at ${pos ? pos.join('_') : 'snapshot'}`)
      if (Object.keys(value).length !== shape.cols.length) this.anomaly(`insert lacks columns: ${short(msg)}`)
      if ('old_value' in msg) this.anomaly(`insert with old_value: ${short(msg)}`)
      this.rowsMap.set(key, { ...value })
    } else if (op === 'update') {
      if (!pos) this.anomaly(`update in the snapshot: ${short(msg)}`)
      if (full) {
        if (Object.keys(value).length !== shape.cols.length) this.anomaly(`replica=full update lacks columns: ${short(msg)}`)
        if (msg.old_value) for (const c of Object.keys(msg.old_value))
          if (!shape.cols.includes(c) || shape.pk.includes(c)) this.anomaly(`old_value has column ${c}: ${short(msg)}`)
      } else if ('old_value' in msg) {
        this.anomaly(`replica=default update with old_value: ${short(msg)}`)
      }
      const prev = this.rowsMap.get(key)
      if (!prev) {
        this.anomaly(`update of absent key ${key} at ${pos ? pos.join('_') : '?'}: ${short(msg)}`)
        this.rowsMap.set(key, { ...value })
      } else {
        if (full && msg.old_value) for (const [c, v] of Object.entries(msg.old_value))
          if (prev[c] !== v) this.anomaly(`old_value.${c}=${short(v, 40)} but the row had ${short(prev[c], 40)}: ${key}`)
        this.rowsMap.set(key, { ...prev, ...value })
      }
    } else if (op === 'delete') {
      if (!pos) this.anomaly(`delete in the snapshot: ${short(msg)}`)
      if (full) {
        if (Object.keys(value).length !== shape.cols.length) this.anomaly(`replica=full delete lacks columns: ${short(msg)}`)
        const prev = this.rowsMap.get(key)
        if (prev && stableRow(prev) !== stableRow(value))
          this.anomaly(`replica=full delete value ${short(stableRow(value), 80)} differs from the row ${short(stableRow(prev), 80)}`)
      } else if (Object.keys(value).length !== shape.pk.length) {
        this.anomaly(`replica=default delete carries non-pk columns: ${short(msg)}`)
      }
      if (!this.rowsMap.delete(key)) this.anomaly(`delete of absent key ${key} at ${pos ? pos.join('_') : '?'}`)
    } else {
      this.anomaly(`unknown operation ${op}: ${short(msg)}`)
    }
    return pos
  }
  describe() {
    return `requests=${this.stats.requests} status=${JSON.stringify(this.stats.status)} netErrors=${this.stats.netErrors} resets=${this.stats.resets} changes=${this.stats.changes} upToDates=${this.stats.upToDates}`
  }
}

// ---------------------------------------------------------------------------------------------
// writers

const PG_CONN_ERRORS = new Set(['57P01', '57P02', '57P03', '08000', '08003', '08006', '08001', '08004'])
const isConnError = (e) =>
  PG_CONN_ERRORS.has(e?.code) || /Connection terminated|ECONNREFUSED|ENOENT|not queryable|ECONNRESET|EPIPE|Client has encountered a connection error/i.test(e?.message ?? '')

class Writer {
  constructor(id, seed) {
    this.id = id
    this.r = prng(seed)
    this.stats = { commits: 0, rollbacks: 0, errors: {}, large: 0, reconnects: 0, ops: 0 }
    this.running = false
  }
  async connect() {
    for (;;) {
      const c = new pg.Client()
      c.on('error', () => {}) // lost connections show up as failed queries
      try {
        await c.connect()
        await c.query("SET lock_timeout = '300ms'")
        this.db = c
        return
      } catch {
        c.end().catch(() => {})
        if (!this.running) return
        await sleep(100)
      }
    }
  }
  start() {
    this.running = true
    this.done = this.#loop()
  }
  async stop() {
    this.running = false
    await this.done
    await this.db?.end().catch(() => {})
    this.db = null
  }
  async #loop() {
    if (!this.db) await this.connect()
    while (this.running) {
      const stmts = this.#transaction()
      try {
        if (stmts.length === 1 && !stmts.rollback) {
          await this.db.query(stmts[0][0], stmts[0][1])
        } else {
          await this.db.query('BEGIN')
          for (const [sql, params] of stmts) await this.db.query(sql, params)
          await this.db.query(stmts.rollback ? 'ROLLBACK' : 'COMMIT')
        }
        if (stmts.rollback) this.stats.rollbacks++
        else this.stats.commits++
        if (stmts.large) this.stats.large++
        this.stats.ops += stmts.length
      } catch (e) {
        const code = e?.code ?? e?.message?.slice(0, 40) ?? String(e)
        this.stats.errors[code] = (this.stats.errors[code] ?? 0) + 1
        if (isConnError(e) || !this.db) {
          this.stats.reconnects++
          this.db?.end().catch(() => {})
          this.db = null
          await sleep(50)
          if (this.running) await this.connect()
          continue
        }
        await this.db.query('ROLLBACK').catch(() => {})
      }
      if (this.r.chance(0.7)) await sleep(this.r.int(0, 25))
    }
  }
  // One random transaction: a list of [sql, params]; .rollback / .large flags.
  #transaction() {
    const r = this.r
    const x = r.next()
    let stmts
    if (x < 0.05) {
      stmts = this.#large()
      stmts.large = true
    } else if (x < 0.3) {
      stmts = this.#ops()
    } else {
      stmts = []
      const k = r.int(2, 6)
      for (let i = 0; i < k; i++) stmts.push(...this.#ops())
      if (r.chance(0.12)) {
        // a savepoint whose work is rolled back, then more work
        const inner = [['SAVEPOINT sp', []], ...this.#ops(), ...this.#ops(), ['ROLLBACK TO SAVEPOINT sp', []], ...this.#ops()]
        stmts.splice(r.int(0, stmts.length), 0, ...inner)
      }
      if (r.chance(0.08)) stmts.rollback = true
    }
    return stmts
  }
  #large() {
    const r = this.r
    const k = r.int(1, 1e6)
    switch (r.int(0, 5)) {
      case 0: { // bulk insert, 500..1500 rows
        const lo = r.int(5000, 30000)
        const cnt = r.int(500, 1500)
        return [[`INSERT INTO integ_a (id, s, n, m) SELECT g, 'bulk' || g || '-' || $3::int, CASE WHEN g % 17 = 0 THEN NULL ELSE (g * 7 + $3::int) % 101 END, g % 1000
                  FROM generate_series($1::int, $2::int) g ON CONFLICT DO NOTHING`, [lo, lo + cnt - 1, k]]]
      }
      case 1: { // bulk update moving many rows in and out of the where clauses
        const mod = r.int(2, 3)
        return [[`UPDATE integ_a SET n = (coalesce(n, 0) + $1::int) % 101 WHERE id % $2::int = $3::int`, [r.int(1, 100), mod, r.int(0, mod - 1)]]]
      }
      case 2: { // bulk delete
        const lo = r.int(0, 30000)
        return [[`DELETE FROM integ_a WHERE id BETWEEN $1::int AND $2::int`, [lo, lo + r.int(1000, 8000)]]]
      }
      case 3: { // composite-pk bulk insert + bulk update in one transaction
        const a0 = r.int(100, 400)
        return [
          [`INSERT INTO integ_b (a, b, s, n) SELECT a, b, 'bb' || a || '/' || b, (a * 31 + b + $3::int) % 101
            FROM generate_series($1::int, $2::int) a, generate_series(1, 12) b ON CONFLICT DO NOTHING`, [a0, a0 + r.int(45, 90), k]],
          [`UPDATE integ_b SET n = (coalesce(n, 0) + 1) % 101 WHERE a % 4 = $1::int`, [r.int(0, 3)]],
        ]
      }
      case 4: { // many rows of integ_c plus deletes in integ_b
        const lo = r.int(5000, 20000)
        return [
          [`INSERT INTO integ_c (id, s, n) SELECT g, md5(g::text || $3::text), (g + $3::int) % 101 FROM generate_series($1::int, $2::int) g
            ON CONFLICT (id) DO UPDATE SET n = EXCLUDED.n, s = EXCLUDED.s`, [lo, lo + r.int(500, 1200), k]],
          [`DELETE FROM integ_b WHERE a BETWEEN $1::int AND $2::int`, [r.int(100, 400), r.int(100, 500)]],
        ]
      }
      default: { // bulk primary-key change (shift a range of ids)
        const up = r.chance(0.5)
        const lo = r.int(5000, 30000) + (up ? 0 : 100000)
        return [[`UPDATE integ_a SET id = id + $3::int WHERE id BETWEEN $1::int AND $2::int
                    AND NOT EXISTS (SELECT 1 FROM integ_a x WHERE x.id BETWEEN $1::int + $3::int AND $2::int + $3::int)`,
          [lo, lo + r.int(500, 2000), up ? 100000 : -100000]]]
      }
    }
  }
  // one operation: a list of [sql, params] (usually one statement)
  #ops() {
    const o = this.#op()
    return Array.isArray(o[0]) ? o : [o]
  }
  #op() {
    const r = this.r
    const t = r.pick(['integ_a', 'integ_a', 'integ_b', 'integ_c'])
    const id = () => r.int(1, 3000)
    const pkWhere = t === 'integ_b' ? 'a = $1::int AND b = $2::int' : 'id = $1::int'
    const pkVals = () => (t === 'integ_b' ? [r.int(1, 60), r.int(1, 60)] : [id()])
    const np = t === 'integ_b' ? 3 : 2 // first free parameter number
    const x = r.next()
    if (x < 0.25) {
      const conflict = r.chance(0.25)
      if (t === 'integ_a')
        return [`INSERT INTO integ_a (id, s, n, m) VALUES ($1, $2, $3, $4) ON CONFLICT (id) DO ${conflict ? 'UPDATE SET s = EXCLUDED.s, n = EXCLUDED.n' : 'NOTHING'}`,
          [id(), randomText(r), randomN(r), randomM(r)]]
      if (t === 'integ_b')
        return [`INSERT INTO integ_b (a, b, s, n) VALUES ($1, $2, $3, $4) ON CONFLICT (a, b) DO ${conflict ? 'UPDATE SET n = EXCLUDED.n' : 'NOTHING'}`,
          [r.int(1, 60), r.int(1, 60), randomText(r), randomN(r)]]
      return [`INSERT INTO integ_c (id, s, n) VALUES ($1, $2, $3) ON CONFLICT (id) DO ${conflict ? 'UPDATE SET s = EXCLUDED.s' : 'NOTHING'}`,
        [id(), randomText(r), randomN(r)]]
    }
    if (x < 0.45) return [`UPDATE ${t} SET n = $${np}::int WHERE ${pkWhere}`, [...pkVals(), randomN(r)]]
    if (x < 0.52) return [`UPDATE ${t} SET s = $${np}::text WHERE ${pkWhere}`, [...pkVals(), randomText(r)]]
    if (x < 0.57) {
      // touches neither s nor the where columns: an unchanged (maybe TOASTed) s stays out of the WAL's new tuple
      if (t === 'integ_a') return [`UPDATE integ_a SET m = $2::int WHERE id = $1::int`, [id(), randomM(r)]]
      return [`UPDATE ${t} SET n = n WHERE ${pkWhere}`, pkVals()] // no-op update
    }
    if (x < 0.65) {
      // range update moving rows in and out of `n > 50` / `n % 3 = 0`
      const lo = r.int(1, 3000)
      const col = t === 'integ_b' ? 'a' : 'id'
      const hi = t === 'integ_b' ? lo % 60 + r.int(0, 5) : lo + r.int(3, 40)
      const lo2 = t === 'integ_b' ? lo % 60 : lo
      return [`UPDATE ${t} SET n = CASE WHEN n IS NULL THEN $3::int ELSE (n + $3::int) % 101 END WHERE ${col} BETWEEN $1::int AND $2::int`, [lo2, hi, r.int(1, 60)]]
    }
    if (x < 0.77) {
      // primary-key change, sometimes together with a where-column change
      const withN = r.chance(0.5)
      if (t === 'integ_b') {
        const a = r.int(1, 60)
        const b = r.int(1, 60)
        const nb = r.int(1, 60)
        return [`UPDATE integ_b SET b = $3::int${withN ? ', n = $4::int' : ''} WHERE a = $1::int AND b = $2::int
                 AND NOT EXISTS (SELECT 1 FROM integ_b x WHERE x.a = $1::int AND x.b = $3::int)`,
          withN ? [a, b, nb, randomN(r)] : [a, b, nb]]
      }
      const from = id()
      const to = id()
      return [`UPDATE ${t} SET id = $2::int${withN ? ', n = $3::int' : ''} WHERE id = $1::int
               AND NOT EXISTS (SELECT 1 FROM ${t} x WHERE x.id = $2::int)`, withN ? [from, to, randomN(r)] : [from, to]]
    }
    if (x < 0.87) return [`DELETE FROM ${t} WHERE ${pkWhere}`, pkVals()]
    if (x < 0.92) {
      const lo = r.int(1, 3000)
      if (t === 'integ_b') return [`DELETE FROM integ_b WHERE a = $1::int AND b BETWEEN $2::int AND $3::int`, [r.int(1, 60), lo % 60, lo % 60 + 5]]
      return [`DELETE FROM ${t} WHERE id BETWEEN $1::int AND $2::int`, [lo, lo + r.int(1, 15)]]
    }
    // the same row several times in one transaction
    if (t === 'integ_b') {
      const a = r.int(1, 60)
      const b = r.int(1, 60)
      return [
        [`DELETE FROM integ_b WHERE a = $1::int AND b = $2::int`, [a, b]],
        [`INSERT INTO integ_b (a, b, s, n) VALUES ($1, $2, $3, $4)`, [a, b, randomText(r), randomN(r)]],
      ]
    }
    const k = id()
    if (r.chance(0.5))
      return [
        [`DELETE FROM ${t} WHERE id = $1::int`, [k]],
        [`INSERT INTO ${t} (id, s, n) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING`, [k, randomText(r), randomN(r)]],
      ]
    return [
      [`UPDATE ${t} SET n = 99 WHERE id = $1::int`, [k]],
      [`UPDATE ${t} SET n = CASE WHEN n > 50 THEN 10 ELSE 90 END, s = coalesce(s, '') || '+' WHERE id = $1::int`, [k]],
      [`UPDATE ${t} SET n = n + 1 WHERE id = $1::int`, [k]],
    ]
  }
}

// ---------------------------------------------------------------------------------------------
// cluster control

function pgCtl(args) {
  const bindir = env.SHAPE_SYNC_PG_BINDIR
  const pgCtlPath = `${bindir}/pg_ctl`
  const asRoot = process.getuid?.() === 0
  const cmd = asRoot ? 'runuser' : pgCtlPath
  const argv = asRoot ? ['-u', env.SHAPE_SYNC_PG_OS_USER || 'shapesync', '--', pgCtlPath, ...args] : args
  return new Promise((resolve) => {
    execFile(cmd, argv, { cwd: '/', timeout: 90000 }, (err, stdout, stderr) => resolve({ err, stdout, stderr }))
  })
}

// ---------------------------------------------------------------------------------------------
// main

async function withDb(fn) {
  const c = new pg.Client()
  c.on('error', () => {})
  await c.connect()
  try {
    return await fn(c)
  } finally {
    await c.end().catch(() => {})
  }
}

async function setup(r) {
  await withDb(async (db) => {
    for (const t of Object.keys(TABLES)) await db.query(`DROP TABLE IF EXISTS ${t}`)
    await db.query('DROP TABLE IF EXISTS integ_marker')
    for (const t of Object.values(TABLES)) await db.query(t.ddl)
    await db.query('CREATE TABLE integ_marker (id serial PRIMARY KEY, at timestamptz DEFAULT now())')
    const a = []
    for (let id = 1; id <= 600; id++) if (r.chance(0.8)) a.push([id, randomText(r), randomN(r), randomM(r)])
    for (const row of a) await db.query('INSERT INTO integ_a VALUES ($1, $2, $3, $4)', row)
    for (let i = 0; i < 400; i++)
      await db.query('INSERT INTO integ_b VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING', [r.int(1, 60), r.int(1, 60), randomText(r), randomN(r)])
    for (let id = 1; id <= 500; id++) if (r.chance(0.7)) await db.query('INSERT INTO integ_c VALUES ($1, $2, $3)', [id, randomText(r), randomN(r)])
  })
}

function startClients(shape, { late }) {
  const clients = []
  const tag = late ? 'late ' : ''
  clients.push(new OfficialClient(shape, 'longpoll', `${shape.name} ${tag}client/long-poll`))
  if (USE_SSE && !late) clients.push(new OfficialClient(shape, 'sse', `${shape.name} ${tag}client/sse`))
  if (!late || shape.late) clients.push(new RawClient(shape, `${shape.name} ${tag}raw`).start())
  if (shape.late && USE_SSE) clients.push(new OfficialClient(shape, 'sse', `${shape.name} ${tag}client/sse`))
  return clients
}

async function snapshotExpected() {
  return withDb(async (db) => {
    // REPEATABLE READ: every shape's rows from one snapshot (no writer runs now anyway)
    await db.query('BEGIN ISOLATION LEVEL REPEATABLE READ')
    const m = new Map()
    for (const s of SHAPES) m.set(s.name, await expectedRows(db, s))
    await db.query('COMMIT')
    return m
  })
}

// After the writers stopped: waits until each client equals the SELECT (and, for raw clients,
// has seen a global_last_seen_lsn at or past the end of the workload); then one check per client.
async function converge(clients, phase) {
  const { lsnBefore } = await withDb(async (db) => {
    const l = (await db.query(`SELECT (pg_current_wal_lsn() - '0/0')::text AS l`)).rows[0].l
    await db.query('INSERT INTO integ_marker DEFAULT VALUES') // a commit after the workload
    return { lsnBefore: BigInt(l) }
  })
  const expected = await snapshotExpected()
  const start = Date.now()
  const pending = new Set(clients)
  const doneAt = new Map()
  while (pending.size && Date.now() - start < CONVERGE_TIMEOUT_MS) {
    for (const c of [...pending]) {
      const exp = expected.get(c.shape.name)
      const isRaw = c instanceof RawClient
      const upToDate = isRaw ? c.upToDate && c.globalLsn >= lsnBefore : c.stream.isUpToDate
      if (upToDate && diffRows(exp, c.rows(), isRaw) === null) {
        pending.delete(c)
        doneAt.set(c, Date.now() - start)
      }
    }
    if (pending.size) await sleep(200)
  }
  for (const c of clients) {
    const exp = expected.get(c.shape.name)
    const isRaw = c instanceof RawClient
    const d = diffRows(exp, c.rows(), isRaw)
    const extra = []
    if (isRaw && !(c.globalLsn >= lsnBefore))
      extra.push(`raw client's last global_last_seen_lsn ${c.globalLsn} < ${lsnBefore} (pg_current_wal_lsn after the writers stopped)`)
    if (!isRaw && !c.stream.isUpToDate) extra.push('the ShapeStream is not up-to-date')
    ok(d === null && extra.length === 0,
      `${phase}: ${c.label} equals SELECT (${exp.size} rows)${doneAt.has(c) ? ` after ${doneAt.get(c)} ms` : ` - not within ${CONVERGE_TIMEOUT_MS} ms`}`,
      [d, ...extra, c.describe()].filter(Boolean).join('\n'))
  }
}

function checkClientHealth(clients, phase) {
  for (const c of clients) {
    if (c instanceof RawClient) {
      ok(c.anomalyCount === 0, `${phase}: ${c.label}: no protocol anomalies`,
        c.anomalyCount ? `${c.anomalyCount} anomalies, first ones:\n${c.anomalies.join('\n')}` : '')
      c.anomalyCount = 0
      c.anomalies = []
    } else {
      ok(c.errors.length === 0, `${phase}: ${c.label}: no errors surfaced to onError`,
        c.errors.length ? `${c.errors.length} errors, first ones:\n${c.errors.slice(0, 6).join('\n')}` : '')
      c.errors = []
      if (c.mode === 'sse') {
        const cts = Object.keys(c.stats.sseContentTypes)
        ok(c.stats.sseRequests > 0 && cts.length > 0 && cts.every((ct) => ct.startsWith('text/event-stream')),
          `${phase}: ${c.label}: live_sse requests answered with text/event-stream`,
          `sseRequests=${c.stats.sseRequests} content-types of 2xx answers: ${JSON.stringify(c.stats.sseContentTypes)}`)
      }
    }
  }
}

function writerSummary(writers) {
  const sum = { commits: 0, rollbacks: 0, large: 0, reconnects: 0, ops: 0, errors: {} }
  for (const w of writers) {
    for (const k of ['commits', 'rollbacks', 'large', 'reconnects', 'ops']) sum[k] += w.stats[k]
    for (const [k, v] of Object.entries(w.stats.errors)) sum.errors[k] = (sum.errors[k] ?? 0) + v
  }
  return JSON.stringify(sum)
}

async function main() {
  console.log(`# seed ${SEED} (replay: SEED=${SEED} bash test/integrity/run.sh)`)
  console.log(`# writers=${WRITERS} duration=${DURATION_S}s restart=${DO_RESTART ? `${RESTART_DURATION_S}s` : 'off'} sse=${USE_SSE ? 'on' : 'off'} url=${BASE_URL}`)
  const master = prng(SEED)
  await setup(prng(master.int(0, 2 ** 31)))
  const writerSeeds = Array.from({ length: WRITERS }, () => master.int(0, 2 ** 31))

  const clients = []
  for (const s of SHAPES.filter((s) => !s.late)) clients.push(...startClients(s, { late: false }))
  log(`${clients.length} clients started on ${SHAPES.filter((s) => !s.late).length} shapes`)

  // phase 1: workload, late clients half-way
  const writers = writerSeeds.map((seed, i) => new Writer(i, seed))
  for (const w of writers) await w.connect()
  for (const w of writers) w.start()
  await sleep((DURATION_S * 1000) / 2)
  for (const s of SHAPES) clients.push(...startClients(s, { late: true }))
  log(`late clients started; ${clients.length} clients in all`)
  await sleep((DURATION_S * 1000) / 2)
  await Promise.all(writers.map((w) => w.stop()))
  log(`writers stopped: ${writerSummary(writers)}`)
  ok(writers.reduce((a, w) => a + w.stats.commits, 0) > 50, 'phase 1: the writers committed transactions', writerSummary(writers))

  await converge(clients, 'phase 1')
  checkClientHealth(clients, 'phase 1')

  if (DO_RESTART) {
    // phase 2: writers again, PostgreSQL restarted under live clients, writers continue
    for (const w of writers) w.start()
    await sleep(2500)
    log('restarting PostgreSQL (pg_ctl restart -m fast)')
    const t = Date.now()
    const res = await pgCtl(['-D', env.SHAPE_SYNC_PGDATA, '-l', env.SHAPE_SYNC_LOG, '-m', 'fast', '-w', '-t', '60', 'restart'])
    ok(!res.err, `phase 2: pg_ctl restart -m fast succeeded in ${Date.now() - t} ms`, res.err ? `${res.err.message}\n${res.stderr}` : '')
    let healthy = false
    const hStart = Date.now()
    while (Date.now() - hStart < 30000) {
      try {
        const h = await fetch(`${BASE_URL}/v1/health`, { signal: AbortSignal.timeout(2000) })
        if (h.status === 200) {
          healthy = true
          break
        }
      } catch {}
      await sleep(100)
    }
    ok(healthy, `phase 2: /v1/health answers 200 after the restart (${Date.now() - hStart} ms)`)
    await sleep(Math.max(0, RESTART_DURATION_S * 1000 - 2500))
    await Promise.all(writers.map((w) => w.stop()))
    log(`writers stopped: ${writerSummary(writers)}`)
    await converge(clients, 'phase 2 (after restart)')
    checkClientHealth(clients, 'phase 2 (after restart)')
    for (const c of clients) if (c instanceof RawClient) log(`${c.label}: ${c.describe()}`)
  }

  for (const c of clients) if (VERBOSE || (c instanceof OfficialClient && c.mode === 'sse')) log(`${c.label}: ${c.describe()}`)
  log(`SSE clients that fell back to long-polling (client warning): ${sseFallbackWarnings}`)
  await Promise.all(clients.map((c) => c.stop()))
}

const watchdog = setTimeout(() => {
  ok(false, 'the test finished within 150 s')
  console.log(`1..${checks}`)
  process.exit(1)
}, 150000)
watchdog.unref()

try {
  await main()
} catch (e) {
  ok(false, `test harness error: ${e?.stack ?? e}`)
}
console.log(`1..${checks}`)
console.log(`# seed ${SEED}: ${failures ? `${failures} of ${checks} checks failed` : `all ${checks} checks passed`} in ${((Date.now() - T0) / 1000).toFixed(1)} s`)
process.exit(failures ? 1 : 0)
