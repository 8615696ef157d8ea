// test/integrity/integrity.mjs: randomized end-to-end integrity test of shape_sync's live mode.
//
// Run through test/integrity/run.sh, which starts a throwaway cluster with
// shape_sync.long_poll_timeout = 2s and shape_sync.chunk_bytes_threshold = 16kB and exports
// PGHOST/PGPORT/PGUSER/PGDATABASE, SHAPE_SYNC_URL, SHAPE_SYNC_PGDATA, SHAPE_SYNC_LOG and
// SHAPE_SYNC_PG_BINDIR.
//
// What it does (all waits bounded; about 30 s without chaos, 50-70 s with it):
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
//   4. stops the writers and waits until every client's rows equal the shape's SELECT
//      (CONVERGE_TIMEOUT, and up to as long again while clients that are not done still move
//      through their logs: a client that resumed after an outage replays the log from its
//      offset), then checks each one (a DIVERGENCE when it is caught up and its rows differ;
//      a SERVER failure when it is still behind), and checks that every 409 of the phase is
//      explained (see "409s" below);
//   5. restart phase: writers start again (no chaos: no table event), and PostgreSQL goes
//      down while clients are live, in one of three ways drawn from the seed (printed; a
//      stream of its own, or INTEGRITY_RESTART_MODE): `fast` (pg_ctl restart -m fast),
//      `immediate` (pg_ctl stop -m immediate, then start: crash recovery) or `kill` (SIGKILL
//      of the shape_sync worker: the postmaster restarts the whole instance; the crash is
//      announced with cluster_expect_crash of scripts/lib/cluster.sh, so that the crash
//      checks let it pass); writers continue after it. Durable shape logs keep every shape
//      with its handle, so clients resume at their (handle, offset) through network errors
//      and 503s only: the checks are that no client got a 409 in this phase, that every
//      client follows the handle it had before the restart, and that each again ends equal
//      to the SELECT.
//
// Chaos (phase 1, INTEGRITY_CHAOS=0 turns it off): alongside the writers, one sequential
// "chaos" loop injects events at moments drawn from its own PRNG stream (derived from SEED
// alone, not from WRITERS, so a seed replays the same sequence of events; only how many fit
// in DURATION depends on timing). Every enabled kind happens at least once per seed (a
// shuffled first round), then kinds are drawn by weight. Kinds:
//   addcol      ALTER TABLE ADD COLUMN cxN (nullable, or DEFAULT, or NOT NULL DEFAULT), then
//               sometimes an UPDATE that sets it on part of the table
//   dropcol     DROP COLUMN of a column that addcol added
//   renamecol   RENAME COLUMN of such an added column, a pause, and back
//   altertype   ALTER COLUMN TYPE bigint of integ_a.n / integ_b.n / integ_c.n (read by shapes'
//               where clauses and column lists), integ_a.m (read only by the shapes of all
//               columns) or an added int column; back to int a few events later
//   renametable RENAME TABLE to <t>_renamed, a pause, and back (writers' statements fail
//               meanwhile, and shape requests get 400: both expected in that window)
//   replident   REPLICA IDENTITY DEFAULT, some writes of the chaos loop's own on that table,
//               and REPLICA IDENTITY FULL again a few events later (the cluster has
//               shape_sync.manage_replica_identity = on: a new shape may set it back sooner)
//   truncate    TRUNCATE of one table, alone or inside a multi-table transaction, sometimes
//               refilled in the same transaction
//   prepared    PREPARE TRANSACTION of a random write transaction, then after 0.1-1.5 s (on
//               another connection, while the loop goes on) COMMIT PREPARED or ROLLBACK
//               PREPARED; none is left at the end (checked)
//   bigtxn      one transaction of INTEGRITY_CHAOS_BIG_ROWS row changes (default 15000:
//               inserts, updates, deletes), over logical_decoding_work_mem (1MB), so the
//               reorder buffer spills to disk (pg_stat_replication_slots is printed)
//   terminate   pg_terminate_backend() of the worker (backend_type 'shape_sync'); the
//               postmaster starts it again after bgw_restart_time (5 s), and it restores
//               every shape with its handle: it explains no 409
//   standby     only with a synchronous standby (run.sh, INTEGRITY_SYNC_STANDBY=1): pg_ctl
//               stop of the standby for 0.5-3 s, so that commits stall, then start again
// At the end of phase 1 pending reversals are done (types back to int, REPLICA IDENTITY
// FULL), prepared transactions resolved, the standby running; added columns stay. Expected
// rows: the shape's SELECT now; for a shape of all columns, all of the table's columns now
// (a client that re-synced after a 409 sees the current columns). The events and their
// counts per kind are printed; a failing check lists the events before it.
//
// 409s. A shape is rotated (409 must-refetch, a new handle) only when its definition changed,
// so every 409 a client gets must follow a table event that changed what its shape reads:
// addcol, dropcol or renamecol on its table for a shape of all columns (the columns they touch
// are read by no other shape), altertype of a column the shape selects or its where clause
// reads, TRUNCATE of its table (not of another table in the same transaction), replident or
// renametable on its table. Such an event explains a 409 that ends handle H when it began
// before the 409 and either ended after the client first heard of H (the shape changed while
// H was current), or ended at most 5 s before the 409 (H was handed out before the worker
// decoded the event); those 5 s are longer when they meet a moment at which the worker
// decodes late or not at all (8 s after a terminate or a restart, 3 s after a stopped
// standby or a bigtxn). A restart of PostgreSQL or a terminate of the worker explains no
// 409: a 409 that no table event explains is a SERVER failure, "409 after a
// terminate/restart for a shape whose definition did not change" when one came in the 20 s
// before it (the detail names the handle, when the client heard of it and sent the request,
// the events before it and the server log's lines that name the handle). The 409s of each
// phase are printed by shape and by the kind of event that explains them.
//
// Failures are classed: DIVERGENCE (a client's rows differ from the SELECT: a server bug),
// SERVER (protocol anomalies, errors surfaced to the client, a 409 that no table event
// explains, a crash), HARNESS (this test's
// own machinery failed: a chaos statement that should not fail, a prepared transaction left
// behind, a writer error that no event explains, a timeout of the test itself). Writer
// errors are counted by cause: attributed to an event window (a lock timeout during DDL,
// 42P01 while renamed, connection errors during the restart), workload contention
// (55P03/40P01/23505 outside windows), or unexplained (a HARNESS failure).
//
// Output is TAP-like (`ok N - ...` / `not ok N - ...`, then `1..N`); the exit status is 1 when
// any check failed. The seed is printed first; SEED=<n> replays the same sequence of random
// operations per writer (the interleaving of concurrent writers is up to the scheduler, so a
// replay is faithful for single-writer failures and likely, not certain, for the others).
//
// Environment knobs: SEED, DURATION (s, phase 1 writer time, default 22 with chaos, 16
// without), RESTART_DURATION (s, phase 2, default 10), WRITERS (default 4), INTEGRITY_SSE
// (1/0, default 1), INTEGRITY_RESTART (1/0/force, default 1; phase 2 is skipped when phase 1
// already found a divergence or a crash, unless `force`), INTEGRITY_RESTART_MODE
// (fast/immediate/kill: how phase 2 restarts PostgreSQL; default: drawn from SEED),
// CONVERGE_TIMEOUT (s, default 25), VERBOSE=1, and for chaos:
//   INTEGRITY_CHAOS            1/0, default 1
//   INTEGRITY_CHAOS_EVENTS     which kinds and their weights, e.g. `addcol:3,truncate,terminate:0`
//                              (a kind without weight gets its default; kinds not named are
//                              off); default: all, weights addcol 2, dropcol 1.5, renamecol 1,
//                              altertype 1.5, renametable 1, replident 1.5, truncate 1,
//                              prepared 2, bigtxn 0.7, terminate 0.5, standby 1.5
//   INTEGRITY_CHAOS_GAP        mean pause between two events, s (default 0.7)
//   INTEGRITY_CHAOS_BIG_ROWS   row changes of a bigtxn (default 15000)
//   INTEGRITY_STANDBY_PGDATA / INTEGRITY_STANDBY_LOG   set by run.sh with INTEGRITY_SYNC_STANDBY=1
//
// Dependencies: the pinned @electric-sql/client and pg of test/package.json
// (test/package-lock.json, installed into test/node_modules by scripts/install-deps.sh).
// Node finds test/node_modules from here by itself; the client is loaded by path below,
// from its dist/index.mjs.

import { createRequire } from 'node:module'
import { readFileSync, statSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { pathToFileURL } from 'node:url'
import { execFile } from 'node:child_process'
import { setTimeout as sleep } from 'node:timers/promises'

const httpRequire = createRequire(new URL('../package.json', import.meta.url))
const pg = httpRequire('pg')
const clientDir = dirname(httpRequire.resolve('@electric-sql/client/package.json'))
const { ShapeStream, Shape } = await import(pathToFileURL(join(clientDir, 'dist/index.mjs')).href)

// @electric-sql/client keeps a module-level UpToDateTracker that throttles its localStorage
// writes with a plain setTimeout of up to 60 s, which keeps Node alive. Unref exactly that
// timer (same trick as test/lib/helpers.mjs).
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
let noHandle409Warnings = 0 // a 409 without electric-handle (the server sends none when it has no new shape yet)
let retryExhaustedWarnings = [] // the client gave up after 50 onError retries in a row
// The client got a handle that it (or another client of the same shape: the client keeps one
// expired handle per shape URL for the whole process) had marked expired after a 409.
const staleHandleWarnings = []
{
  const realWarn = console.warn
  console.warn = (...a) => {
    if (typeof a[0] === 'string' && a[0].includes('Falling back to long polling')) sseFallbackWarnings++
    else if (typeof a[0] === 'string' && a[0].includes('409 response without a shape handle header')) noHandle409Warnings++
    else if (typeof a[0] === 'string' && a[0].includes('Received stale cached response with expired shape handle'))
      staleHandleWarnings.push(`[${((Date.now() - T0) / 1000).toFixed(1)}s] ${/handle "([^"]*)"/.exec(a[0])?.[1] ?? '?'}`)
    else if (typeof a[0] === 'string' && a[0].includes('onError retry loop exhausted')) retryExhaustedWarnings.push(`[${((Date.now() - T0) / 1000).toFixed(1)}s] ${a[0].slice(0, 300)}`)
    else realWarn(...a)
  }
}

// ---------------------------------------------------------------------------------------------
// configuration

const env = process.env
const SEED = env.SEED !== undefined && env.SEED !== '' ? Number(env.SEED) >>> 0 : (Math.random() * 2 ** 32) >>> 0
const CHAOS = (env.INTEGRITY_CHAOS ?? '1') !== '0'
const DURATION_S = Number(env.DURATION ?? (CHAOS ? 22 : 16))
const RESTART_DURATION_S = Number(env.RESTART_DURATION ?? 10)
const WRITERS = Number(env.WRITERS ?? 4)
const USE_SSE = (env.INTEGRITY_SSE ?? '1') !== '0'
// set by run.sh from INTEGRITY_COMPACTION_FACTOR: whether shape logs are compacted
const COMPACTION = Number(env.INTEGRITY_COMPACTION_FACTOR ?? '0') > 0
// "<tx>_<op>" offsets in their order ("inf" last)
function offsetCmp(a, b) {
  const op = (x) => { const [t, o] = x.split('_'); return [BigInt(t), o === 'inf' ? 2n ** 64n : BigInt(o)] }
  const [at, ao] = op(a)
  const [bt, bo] = op(b)
  return at < bt ? -1 : at > bt ? 1 : ao < bo ? -1 : ao > bo ? 1 : 0
}
const DO_RESTART = (env.INTEGRITY_RESTART ?? '1') !== '0'
const FORCE_RESTART = env.INTEGRITY_RESTART === 'force'
// How phase 2 restarts PostgreSQL: drawn from SEED (a stream of its own), or
// INTEGRITY_RESTART_MODE.
const RESTART_MODES = {
  fast: 'pg_ctl restart -m fast',
  immediate: 'pg_ctl stop -m immediate, then pg_ctl start',
  kill: 'SIGKILL of the shape_sync worker (PostgreSQL restarts the instance after the crash)',
}
const RESTART_MODE = env.INTEGRITY_RESTART_MODE || Object.keys(RESTART_MODES)[Math.floor(prng((SEED ^ 0x2c1b3c6d) >>> 0).next() * 3)]
if (!(RESTART_MODE in RESTART_MODES))
  throw new Error(`INTEGRITY_RESTART_MODE: unknown mode ${RESTART_MODE} (known: ${Object.keys(RESTART_MODES).join(', ')})`)
const CONVERGE_TIMEOUT_MS = Number(env.CONVERGE_TIMEOUT ?? 25) * 1000
const VERBOSE = env.VERBOSE === '1'
const BASE_URL = (env.SHAPE_SYNC_URL ?? 'http://localhost:3000').replace(/\/+$/, '')
const SHAPE_URL = `${BASE_URL}/v1/shape`
const T0 = Date.now()
const STANDBY_PGDATA = env.INTEGRITY_STANDBY_PGDATA || null
const STANDBY_LOG = env.INTEGRITY_STANDBY_LOG || null
const CHAOS_GAP_MS = Number(env.INTEGRITY_CHAOS_GAP ?? 0.7) * 1000
const CHAOS_BIG_ROWS = Number(env.INTEGRITY_CHAOS_BIG_ROWS ?? 15000)
const CHAOS_DEFAULT_WEIGHTS = {
  addcol: 2, dropcol: 1.5, renamecol: 1, altertype: 1.5, renametable: 1, replident: 1.5,
  truncate: 1, prepared: 2, bigtxn: 0.7, terminate: 0.5, standby: 1.5,
}
function chaosWeights() {
  const spec = env.INTEGRITY_CHAOS_EVENTS
  let w = {}
  if (spec === undefined || spec.trim() === '') w = { ...CHAOS_DEFAULT_WEIGHTS }
  else
    for (const part of spec.split(',').map((x) => x.trim()).filter(Boolean)) {
      const [k, v] = part.split(':')
      if (!(k in CHAOS_DEFAULT_WEIGHTS)) throw new Error(`INTEGRITY_CHAOS_EVENTS: unknown kind ${k} (known: ${Object.keys(CHAOS_DEFAULT_WEIGHTS).join(', ')})`)
      w[k] = v === undefined ? CHAOS_DEFAULT_WEIGHTS[k] : Number(v)
    }
  if (!STANDBY_PGDATA) delete w.standby
  for (const k of Object.keys(w)) if (!(w[k] > 0)) delete w[k]
  return w
}
const CHAOS_WEIGHTS = CHAOS ? chaosWeights() : {}
const nowS = () => (Date.now() - T0) / 1000

const log = (...a) => console.log(`# [${((Date.now() - T0) / 1000).toFixed(1)}s]`, ...a)
const vlog = (...a) => VERBOSE && log(...a)

// ---------------------------------------------------------------------------------------------
// TAP

let checks = 0
let failures = 0
const failuresByClass = { DIVERGENCE: 0, SERVER: 0, HARNESS: 0 }
// cls: what a failure means. DIVERGENCE: a client's rows differ from PostgreSQL's (server
// bug); SERVER: another misbehaviour of the server; HARNESS: this test's own machinery.
function ok(cond, what, detail, cls = 'SERVER') {
  checks++
  if (cond) {
    console.log(`ok ${checks} - ${what}`)
  } else {
    failures++
    failuresByClass[cls] = (failuresByClass[cls] ?? 0) + 1
    console.log(`not ok ${checks} - [${cls}] ${what}`)
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
// INTEGRITY_EQUALITY_SHAPES=N adds N shapes on integ_a that the equality index routes
// (src/pg/worker/equality_index.c): `n = k`, `n IN (k, k + 50)`, `m = k`, `n = k AND m > j`,
// each followed by one raw materializer only (no official clients: they are many).
const EQUALITY_SHAPES = Number(env.INTEGRITY_EQUALITY_SHAPES ?? 0)
for (let i = 0; i < EQUALITY_SHAPES; i++) {
  const k = Math.floor(i / 4)
  const where = [`n = ${k % 101}`, `n IN (${k % 101}, ${(k + 50) % 101})`, `m = ${(k * 7) % 1001}`,
    `n = ${k % 101} AND m > ${(k * 13) % 1000}`][i % 4]
  SHAPES.push({ name: `eq${i}`, table: 'integ_a', where, columns: null, replica: i % 2 ? 'full' : 'default', equality: true })
}
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
// leaves text and int8 as strings; the client's parser makes int4 a Number, int8 a BigInt,
// which stableRow writes as a string). A shape without a column list reads all of the
// table's columns as they are now (chaos may have added some). Map.cols: the column names.
async function expectedRows(db, shape) {
  const cols = shape.columns ? shape.columns.map(quoteIdent).join(', ') : '*'
  const where = shape.where ? ` WHERE ${shape.where}` : ''
  const res = await db.query(`SELECT ${cols} FROM ${shape.table}${where}`)
  const m = new Map()
  for (const row of res.rows) m.set(rowKey(shape, row), row)
  m.cols = res.fields.map((f) => f.name)
  return m
}

// ---------------------------------------------------------------------------------------------
// comparing materialized rows

function stableRow(row, asText) {
  const o = {}
  for (const k of Object.keys(row).sort()) {
    const v = row[k]
    o[k] = typeof v === 'bigint' ? String(v) : asText && typeof v === 'number' ? String(v) : v
  }
  return JSON.stringify(o)
}

function short(v, n = 160) {
  const s = typeof v === 'string' ? v : JSON.stringify(v, (k, x) => (typeof x === 'bigint' ? String(x) : x))
  return s.length > n ? `${s.slice(0, n)}...(${s.length} chars)` : s
}

// Whether the rows are equal, at a low cost (converge asks many times, for many clients, while
// they catch up: a CPU-bound comparison would slow down the clients of this very process): the
// expected rows' strings are made once, and the first difference ends it.
const expectedStrings = new WeakMap() // expected Map -> { text: Map, typed: Map } of key -> stableRow
function sameRows(expected, actual, asText) {
  if (expected.size !== actual.size) return false
  let cache = expectedStrings.get(expected)
  if (!cache) expectedStrings.set(expected, (cache = {}))
  const kind = asText ? 'text' : 'typed'
  if (!cache[kind]) cache[kind] = new Map([...expected].map(([k, row]) => [k, stableRow(row, asText)]))
  for (const [k, e] of cache[kind]) {
    const a = actual.get(k)
    if (a === undefined || stableRow(a, false) !== e) return false
  }
  return true
}

// Returns null when equal, else a description of the first differences.
function diffRows(expected, actual, asText) {
  const out = []
  let missing = 0
  let extra = 0
  let differ = 0
  if (expected.cols) {
    // column sets first: after a schema change a client that did not re-sync has the old ones
    const seen = new Map()
    for (const row of actual.values()) {
      const ks = Object.keys(row).sort().join(',')
      seen.set(ks, (seen.get(ks) ?? 0) + 1)
    }
    const want = [...expected.cols].sort().join(',')
    const other = [...seen].filter(([ks]) => ks !== want)
    if (other.length)
      out.push(`columns: SELECT has [${want}]; client rows have ${[...seen].map(([ks, n]) => `[${ks}] (${n} rows)`).join(', ')}`)
  }
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
// handles and 409s, as a client sees them

function noteHandle(c, h) {
  if (h && !c.handleSeen.has(h)) c.handleSeen.set(h, nowS())
}
// The client's last request, for a check that failed: when it was sent, when and how it ended.
function describeLastRequest(c) {
  const r = c.lastRequest
  if (!r) return ''
  const q = r.url.includes('?') ? r.url.slice(r.url.indexOf('?') + 1) : r.url
  return ` lastRequest=[sent at ${r.sent.toFixed(1)}s, ${r.t === null ? 'not answered yet' : `${r.status} at ${r.t.toFixed(1)}s`}: ${short(q, 200)}]`
}
// A 409 answered at t to a request sent at `sent` for `handle`, naming `next` as the new handle
// (null when the server has none yet); `since`: when the client first heard of `handle`.
function note409(c, sent, handle, next) {
  c.conflicts.push({ t: nowS(), sent, handle, next, since: handle ? c.handleSeen.get(handle) ?? null : null })
  noteHandle(c, next)
}

// ---------------------------------------------------------------------------------------------
// official client

class OfficialClient {
  constructor(shape, mode, label) {
    this.shape = shape
    this.mode = mode // 'longpoll' | 'sse'
    this.label = label
    this.errors = [] // { t, status, text }
    this.excusedErrors = 0 // 4xx while the shape's table had another name (renametable)
    this.resyncTimes = [] // when a 409 came
    this.conflicts = [] // each 409 (see note409)
    this.handleSeen = new Map() // handle -> when this client first heard of it
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
      const sentAt = nowS()
      const req = (this.lastRequest = { sent: sentAt, url, status: null, t: null })
      try {
        const res = await fetch(input, init)
        req.status = res.status
        req.t = nowS()
        stats.status[res.status] = (stats.status[res.status] ?? 0) + 1
        if (res.status === 409) {
          this.resyncTimes.push(nowS())
          let handle = null
          try {
            handle = new URL(url).searchParams.get('handle')
          } catch {}
          note409(this, sentAt, handle, res.headers.get('electric-handle'))
        } else if (res.ok) {
          noteHandle(this, res.headers.get('electric-handle'))
        }
        if (sse && res.ok) {
          const ct = res.headers.get('content-type') ?? '(none)'
          stats.sseContentTypes[ct] = (stats.sseContentTypes[ct] ?? 0) + 1
        }
        return res
      } catch (e) {
        req.status = e?.name ?? 'error'
        req.t = nowS()
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
        this.errors.push({ t: nowS(), status: err?.status, text: `${err?.name}: ${err?.status ?? ''} ${short(err?.message ?? String(err), 300)} ${err?.json ? short(err.json, 300) : ''}` })
        vlog(`${this.label} onError`, this.errors.at(-1).text)
        return {}
      },
    })
    this.shapeObj = new Shape(this.stream)
  }
  rows() {
    return this.shapeObj.currentValue
  }
  currentHandle() {
    return this.stream.shapeHandle ?? null
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
      ` 409s at [${this.resyncTimes.slice(-6).map((t) => t.toFixed(1)).join(', ')}]${this.resyncTimes.length > 6 ? ` (${this.resyncTimes.length} in all)` : ''}` +
      describeLastRequest(this) +
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
    this.stats = { requests: 0, status: {}, netErrors: 0, resets: 0, changes: 0, upToDates: 0, excused4xx: 0 }
    this.resyncTimes = []
    this.conflicts = [] // each 409 (see note409)
    this.handleSeen = new Map() // handle -> when this client first heard of it
    this.firstAnomalyT = null
    this.globalLsn = 0n
    this.ac = new AbortController()
    this.upToDate = false
    this.stopped = false
  }
  anomaly(msg) {
    this.anomalyCount++
    if (this.firstAnomalyT === null) this.firstAnomalyT = nowS()
    if (this.anomalies.length < 12) this.anomalies.push(`[${((Date.now() - T0) / 1000).toFixed(1)}s] ${msg}`)
    vlog(`${this.label} ANOMALY ${msg}`)
  }
  rows() {
    return this.rowsMap
  }
  currentHandle() {
    return this.handle ?? null
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
    // the columns of the shape's rows: its column list, or (all columns) the keys of the
    // electric-schema header of this handle's first answer
    this.cols = this.shape.columns ?? null
    this.schemaKeys = null
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
      const sentAt = nowS()
      const req = (this.lastRequest = { sent: sentAt, url, status: null, t: null })
      this.stats.requests++
      try {
        const signal = AbortSignal.any([this.ac.signal, AbortSignal.timeout(30000)])
        res = await fetch(url, { signal })
        text = await res.text()
        req.status = res.status
        req.t = nowS()
      } catch (e) {
        req.status = e?.name ?? 'error'
        req.t = nowS()
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
        this.resyncTimes.push(nowS())
        note409(this, sentAt, this.handle, h)
        this.reset(h)
        continue
      }
      if (res.status >= 500 || res.status === 429) {
        await sleep(200)
        continue
      }
      if (res.status !== 200) {
        if (res.status >= 400 && res.status < 500 && renamedDuring(this.shape.table, sentAt, nowS())) {
          this.stats.excused4xx++ // the table had another name: expected
          await sleep(200)
          continue
        }
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
    if (!this.live && h.get('electric-schema')) {
      let keys = null
      try {
        keys = Object.keys(JSON.parse(h.get('electric-schema'))).sort().join(',')
      } catch (e) {
        this.anomaly(`electric-schema is not JSON: ${short(h.get('electric-schema'))}`)
      }
      if (keys !== null) {
        if (this.schemaKeys !== null && keys !== this.schemaKeys)
          this.anomaly(`electric-schema changed within handle ${handle} without a 409: [${this.schemaKeys}] -> [${keys}]`)
        if (this.shape.columns && keys !== [...this.shape.columns].sort().join(','))
          this.anomaly(`electric-schema columns [${keys}] are not the shape's columns [${this.shape.columns}]`)
        this.schemaKeys = keys
        if (!this.shape.columns) this.cols = keys.split(',')
      }
    }
    // a handle sent with offset=-1 is ignored (Electric's rule too): after back-to-back
    // rotations the answer is the newest shape of the definition, a fresh start either way
    if (this.handle && handle && handle !== this.handle && this.offset !== '-1')
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
    // A transaction left open by an earlier response, from an offset in its middle (a chunk
    // end): if compaction dropped the rest of it, this client never sees its last:true.
    this.openTxnCarried = COMPACTION && this.openTxn !== null
    for (let i = 0; i < body.length; i++) {
      const msg = body[i]
      if (msg && typeof msg === 'object' && 'key' in msg) {
        const pos = this.#applyChange(msg, url)
        if (pos) lastChangeOffset = `${pos[0]}_${pos[1]}`
      } else if (msg?.headers?.control === 'up-to-date') {
        if (i !== body.length - 1) this.anomaly(`up-to-date is not the last message: ${url}`)
        if (this.openTxn !== null && !this.openTxnCarried)
          this.anomaly(`up-to-date in the middle of transaction lsn ${this.openTxn} (no message with last:true): ${url}`)
        if (this.openTxnCarried) this.openTxn = null
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
    // A compacted chunk may end with deletes of rows this client never had, which it is not
    // sent (see src/contract/log_compact.c): its offset may then pass the last change it got.
    if (lastChangeOffset && offset !== lastChangeOffset &&
        (!COMPACTION || offsetCmp(offset, lastChangeOffset) < 0))
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
    noteHandle(this, handle)
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
      if (this.openTxn !== null && this.openTxn !== pos[0] && !this.openTxnCarried)
        this.anomaly(`transaction lsn ${this.openTxn} ended without last:true; next is ${pos[0]} (${op} ${key}): ${url}`)
      this.openTxn = hd.last === true ? null : pos[0]
      this.openTxnCarried = false
      this.lastPos = pos
      this.inLog = true
    } else if (this.inLog) {
      this.anomaly(`change without lsn after log entries: ${short(msg)}`)
    }
    if (!Array.isArray(hd.relation) || hd.relation[0] !== 'public' || hd.relation[1] !== shape.table)
      this.anomaly(`bad relation ${JSON.stringify(hd.relation)}`)
    const cols = this.cols ?? Object.keys(value)
    for (const c of Object.keys(value))
      if (!cols.includes(c)) this.anomaly(`${op} value has unselected column ${c} (columns: ${cols}): ${short(msg)}`)
    for (const c of shape.pk) if (!(c in value)) this.anomaly(`${op} value lacks pk column ${c}: ${short(msg)}`)
    if (key !== rowKey(shape, value)) this.anomaly(`key ${key} does not match the value's pk: ${short(msg)}`)
    for (const v of Object.values(value))
      if (v !== null && typeof v !== 'string') this.anomaly(`value is not a string or null: ${short(msg)}`)
    const full = shape.replica === 'full'
    if (op === 'insert') {
      if (this.rowsMap.has(key)) this.anomaly(`insert of present key ${key} at ${pos ? pos.join('_') : 'snapshot'}`)
      if (Object.keys(value).length !== cols.length) this.anomaly(`insert lacks columns (${cols}): ${short(msg)}`)
      if ('old_value' in msg) this.anomaly(`insert with old_value: ${short(msg)}`)
      this.rowsMap.set(key, { ...value })
    } else if (op === 'update') {
      if (!pos) this.anomaly(`update in the snapshot: ${short(msg)}`)
      if (full) {
        if (Object.keys(value).length !== cols.length) this.anomaly(`replica=full update lacks columns (${cols}): ${short(msg)}`)
        if (msg.old_value) for (const c of Object.keys(msg.old_value))
          if (!cols.includes(c) || shape.pk.includes(c)) this.anomaly(`old_value has column ${c}: ${short(msg)}`)
      } else if ('old_value' in msg) {
        this.anomaly(`replica=default update with old_value: ${short(msg)}`)
      }
      const prev = this.rowsMap.get(key)
      if (!prev) {
        this.anomaly(`update of absent key ${key} at ${pos ? pos.join('_') : '?'} (${url}): ${short(msg)}`)
        this.rowsMap.set(key, { ...value })
      } else {
        if (full && msg.old_value) for (const [c, v] of Object.entries(msg.old_value))
          if (prev[c] !== v) this.anomaly(`old_value.${c}=${short(v, 40)} but the row had ${short(prev[c], 40)}: ${key}`)
        this.rowsMap.set(key, { ...prev, ...value })
      }
    } else if (op === 'delete') {
      if (!pos) this.anomaly(`delete in the snapshot: ${short(msg)}`)
      if (full) {
        if (Object.keys(value).length !== cols.length) this.anomaly(`replica=full delete lacks columns (${cols}): ${short(msg)}`)
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
    return `requests=${this.stats.requests} status=${JSON.stringify(this.stats.status)} netErrors=${this.stats.netErrors} resets=${this.stats.resets} changes=${this.stats.changes} upToDates=${this.stats.upToDates} excused4xx=${this.stats.excused4xx}` +
      ` columns=[${this.cols ?? '?'}] 409s at [${this.resyncTimes.slice(-6).map((t) => t.toFixed(1)).join(', ')}]${this.resyncTimes.length > 6 ? ` (${this.resyncTimes.length} in all)` : ''}` +
      describeLastRequest(this)
  }
}

// ---------------------------------------------------------------------------------------------
// writers

const PG_CONN_ERRORS = new Set(['57P01', '57P02', '57P03', '08000', '08003', '08006', '08001', '08004'])
const isConnError = (e) =>
  PG_CONN_ERRORS.has(e?.code) || /Connection terminated|ECONNREFUSED|ENOENT|not queryable|ECONNRESET|EPIPE|Client has encountered a connection error/i.test(e?.message ?? '')

class Writer {
  // seed: a number, or a prng to draw from (the chaos loop uses a Writer only to make
  // random transactions from its own stream)
  constructor(id, seed) {
    this.id = id
    this.r = typeof seed === 'object' ? seed : prng(seed)
    this.stats = { commits: 0, rollbacks: 0, errors: {}, large: 0, reconnects: 0, ops: 0 }
    this.errorLog = [] // { t, code, conn, msg } of every failed transaction
    this.running = false
    this.current = null // the statement running now (for a writer that does not stop)
  }
  randomTransaction() {
    return this.#transaction()
  }
  randomOps() {
    return this.#ops()
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
          this.current = stmts[0][0]
          await this.db.query(stmts[0][0], stmts[0][1])
        } else {
          await this.db.query('BEGIN')
          for (const [sql, params] of stmts) {
            this.current = sql
            await this.db.query(sql, params)
          }
          this.current = stmts.rollback ? 'ROLLBACK' : 'COMMIT'
          await this.db.query(this.current)
        }
        this.current = null
        if (stmts.rollback) this.stats.rollbacks++
        else this.stats.commits++
        if (stmts.large) this.stats.large++
        this.stats.ops += stmts.length
      } catch (e) {
        const code = e?.code ?? e?.message?.slice(0, 40) ?? String(e)
        this.stats.errors[code] = (this.stats.errors[code] ?? 0) + 1
        if (this.errorLog.length < 50000)
          this.errorLog.push({ t: nowS(), code, conn: isConnError(e) || !this.db, msg: `${short(e?.message ?? String(e), 200)} [in: ${short(this.current ?? '?', 120)}]` })
        this.current = null
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

// cluster_expect_crash of scripts/lib/cluster.sh: a marker line in the server log that lets the
// next crash pass the crash checks (run.sh's and cluster_stop's). Resolves to null, or an error.
const CLUSTER_SH = new URL('../../scripts/lib/cluster.sh', import.meta.url).pathname
function expectCrash(reason) {
  return new Promise((resolve) => {
    execFile('bash', ['-c', 'source "$1" && cluster_expect_crash "$2"', 'expect-crash', CLUSTER_SH, reason], { timeout: 10000 },
      (err, stdout, stderr) => resolve(err ? `${err.message} ${stderr}` : null))
  })
}

// Restarts PostgreSQL as RESTART_MODES[mode] says; resolves to null, or what went wrong.
async function restartPostgres(mode) {
  const pgdata = env.SHAPE_SYNC_PGDATA
  const fail = (what, res) => `${what}: ${res.err.message}\n${res.stderr}`
  if (mode === 'fast') {
    const res = await pgCtl(['-D', pgdata, '-l', env.SHAPE_SYNC_LOG, '-m', 'fast', '-w', '-t', '60', 'restart'])
    return res.err ? fail('pg_ctl restart -m fast', res) : null
  }
  if (mode === 'immediate') {
    const stop = await pgCtl(['-D', pgdata, '-m', 'immediate', '-w', '-t', '60', 'stop'])
    if (stop.err) return fail('pg_ctl stop -m immediate', stop)
    const start = await pgCtl(['-D', pgdata, '-l', env.SHAPE_SYNC_LOG, '-w', '-t', '60', 'start'])
    return start.err ? fail('pg_ctl start', start) : null
  }
  // kill: the postmaster sees its child die by a signal and restarts the whole instance
  const pids = await withDb(async (db) => (await db.query(`SELECT pid FROM pg_stat_activity WHERE backend_type = 'shape_sync'`)).rows.map((x) => x.pid))
  if (pids.length !== 1) return `found ${pids.length} processes of backend_type shape_sync (${pids.join(', ')}), not one`
  const pid = pids[0]
  const marked = await expectCrash(`integrity.mjs (seed ${SEED}): SIGKILL to the shape_sync worker, PID ${pid}`)
  if (marked) return `cluster_expect_crash failed: ${marked}`
  try {
    process.kill(pid, 'SIGKILL')
  } catch (e) {
    return `kill -KILL ${pid}: ${e.message}`
  }
  for (const t = Date.now(); Date.now() - t < 10000; await sleep(50)) {
    try {
      process.kill(pid, 0)
    } catch {
      return null // gone (reaped by the postmaster)
    }
  }
  return `the worker (PID ${pid}) still runs 10 s after SIGKILL`
}

// ---------------------------------------------------------------------------------------------
// chaos: events injected while the writers run (see the header)

// Every event, of the chaos loop and of the restart phase: { n, kind, tables ([]: global),
// what, t0, t1 } (seconds since the start); t1 null while it lasts.
const chaosEvents = []
const fmtEvent = (e) =>
  `${e.t0.toFixed(1)}-${e.t1 === null ? '...' : e.t1.toFixed(1)}s ${e.kind}${e.tables.length ? ` ${e.tables.join('+')}` : ''}: ${e.what}`

// Was `table` renamed at some moment in [a, b] (seconds, with a margin for the answer's way)?
function renamedDuring(table, a, b) {
  for (const e of chaosEvents)
    if (e.kind === 'renametable' && e.tables.includes(table) && a <= (e.t1 ?? Infinity) + 2 && b >= e.t0 - 0.2) return true
  return false
}

// Events that touched `table` (or every table: terminate, standby, restart) up to tEnd.
function eventsBefore(table, tEnd, n = 12, tFrom = -Infinity) {
  const es = chaosEvents.filter((e) => e.t0 <= tEnd && (e.t1 ?? Infinity) >= tFrom && (table === null || !e.tables.length || e.tables.includes(table)))
  const lines = es.slice(-n).map((e) => `  ${fmtEvent(e)}`)
  if (es.length > n) lines.unshift(`  (${es.length - n} earlier ones left out)`)
  return lines.length ? lines.join('\n') : '  (none)'
}

const LOCKISH = new Set(['55P03', '40P01']) // lock_not_available, deadlock_detected
const CONTENTION = new Set(['55P03', '40P01', '23505', '40001'])
// how long after an event a writer's lock timeout still counts as its doing (s)
const GRACE_S = { replident: 5, terminate: 8, standby: 3, restart: 4, truncate: 2, renametable: 2 }

// Why a writer's failed transaction failed: the kind of an event whose window holds it,
// 'contention' (writers among themselves), or 'unexplained'.
function attributeWriterError(err) {
  for (const e of chaosEvents) {
    if (err.t < e.t0 - 0.1 || err.t > (e.t1 ?? Infinity) + (GRACE_S[e.kind] ?? 1.5)) continue
    if (err.conn) {
      if (e.kind === 'restart') return e.kind
      continue
    }
    if (LOCKISH.has(err.code)) return e.kind
    if (err.code === '42P01' && e.kind === 'renametable') return e.kind
  }
  if (!err.conn && CONTENTION.has(err.code)) return 'contention'
  return 'unexplained'
}

const CHAOS_TABLES = Object.keys(TABLES)
const pkCol = (t) => (t === 'integ_b' ? 'a' : 'id')
const tablesIn = (stmts) => [...new Set(stmts.flatMap(([sql]) => sql.match(/\binteg_[abc]\b/g) ?? []))].sort()
// the shapes that read column `col` of table `t` (selected, in the where clause, or all columns)
const readersOf = (t, col) =>
  SHAPES.filter((s) => s.table === t && (!s.columns || s.columns.includes(col) || new RegExp(`\\b${col}\\b`).test(s.where ?? ''))).map((s) => s.name)

// ---------------------------------------------------------------------------------------------
// 409s: which event explains one
//
// A shape is rotated (its clients get 409 must-refetch and a new handle) only when its
// definition changed: a table event that changes what the shape reads. A restart of
// PostgreSQL (fast, immediate, or the crash-restart after a SIGKILL of the worker) and a
// pg_terminate_backend() of the worker keep every shape with its handle and log (durable shape
// logs: src/pg/worker/log_files.c), so they explain no 409; they only delay the 409s of table
// events that the worker decodes after them.

// The shapes (names) whose definition event `e` changes: those it may rotate.
function shapesChangedBy(e) {
  const on = (t) => SHAPES.filter((s) => s.table === t)
  switch (e.kind) {
    case 'addcol': // an added column is read only by the shapes of all columns
    case 'dropcol':
    case 'renamecol':
      return on(e.tables[0]).filter((s) => !s.columns).map((s) => s.name)
    case 'altertype':
      return readersOf(e.tables[0], e.col)
    case 'truncate': // the truncated table only, not the others its transaction wrote
      return on(e.truncated).map((s) => s.name)
    case 'renametable':
    case 'replident': // every shape needs its table's old rows in full
      return e.tables.flatMap(on).map((s) => s.name)
    default: // prepared, bigtxn: rows only; terminate, standby, restart: no table at all
      return []
  }
}

// How long after an event's end its 409s may still come (s): the worker decodes its commit,
// rotates the shape between two decoding batches, and the clients' next requests (after a
// long poll of 2 s, a retry's backoff of up to 2 s) get 409.
const ROTATION_GRACE_S = 5
// Events during which, and this long after their end, the worker decodes late or not at all
// (s): after a terminate it starts again bgw_restart_time (5 s) later and restores its shapes
// first; a stopped synchronous standby holds decoding back; a big transaction takes a while to
// decode. A table event's window that meets one of these lasts that much longer.
const DECODING_HELD_S = { terminate: 8, restart: 8, standby: 3, bigtxn: 3 }

// The end of the window in which event `e` explains the 409s of the shapes it changed.
function rotationDeadline(e) {
  let end = (e.t1 ?? Infinity) + ROTATION_GRACE_S
  for (let longer = true; longer; ) {
    longer = false
    for (const h of chaosEvents) {
      if (!(h.kind in DECODING_HELD_S)) continue
      const held = (h.t1 ?? Infinity) + DECODING_HELD_S[h.kind]
      if (h.t0 <= end && held >= e.t0 && held + ROTATION_GRACE_S > end) {
        end = held + ROTATION_GRACE_S
        longer = true
      }
    }
  }
  return end
}

// The event (the latest one, begun since `since`) that explains 409 `x` (note409) of
// `shape`, or null: an event that changed the shape's definition, began before the 409, and
// either ended after the client first heard of the handle that the 409 ends (the shape
// changed while that handle was current: the 409 is right however late the client asked
// again, after a long poll or an SSE stream that the rotation should have ended at once, or
// a backoff), or ended shortly enough before the 409 (rotationDeadline: a handle handed out
// after the event's commit and before the worker decoded it).
function explain409(shape, x, since) {
  let by = null
  for (const e of chaosEvents) {
    if (e.t0 < since || e.t0 > x.t || !shapesChangedBy(e).includes(shape.name)) continue
    if ((x.since !== null && (e.t1 ?? Infinity) >= x.since) || x.t <= rotationDeadline(e)) by = e
  }
  return by
}

// The server log's lines from byte `from` that match `re` (at most `max`, the last ones).
function serverLogLines(re, max = 8, from = 0) {
  try {
    const lines = readFileSync(env.SHAPE_SYNC_LOG).subarray(from).toString('utf8').split('\n').filter((l) => re.test(l))
    return lines.slice(-max)
  } catch (e) {
    return [`(server log not readable: ${e.message})`]
  }
}
const serverLogSize = () => {
  try {
    return statSync(env.SHAPE_SYNC_LOG).size
  } catch {
    return 0
  }
}
const escapeRe = (x) => x.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')

// Every 409 that a client got since `since`, each explained by an event of the phase (since
// `since`) that changed its shape's definition, or not. Prints the 409s of the phase by shape
// and by explaining event; one check: none is unexplained. In the restart phase (`restartEv`)
// there is no table event, so the check is that there is no 409 at all.
function check409s(clients, phase, since, restartEv = null) {
  const all = []
  for (const c of clients) for (const x of c.conflicts) if (x.t >= since) all.push({ c, ...x, by: explain409(c.shape, x, since) })
  all.sort((a, b) => a.t - b.t)
  const byShape = {}
  const byKind = {}
  let latest = null // the explained 409 that came longest after its event's end
  for (const x of all) {
    byShape[x.c.shape.name] = (byShape[x.c.shape.name] ?? 0) + 1
    if (!x.by) continue
    byKind[x.by.kind] = (byKind[x.by.kind] ?? 0) + 1
    if (latest === null || x.t - x.by.t1 > latest.t - latest.by.t1) latest = x
  }
  const bad = all.filter((x) => !x.by)
  log(`${phase}: ${all.length} 409s on ${new Set(all.map((x) => x.c)).size} clients${all.length ? ` ${JSON.stringify(byShape)}` : ''}` +
    (all.length > bad.length ? `; explained by ${JSON.stringify(byKind)}, the latest ${(latest.t - latest.by.t1).toFixed(1)} s after its event ended (${latest.c.label}, request sent at ${latest.sent.toFixed(1)}s, ${fmtEvent(latest.by)})` : '') +
    (bad.length ? `; ${bad.length} unexplained` : ''))
  const detail = []
  for (const x of bad.slice(0, 10)) {
    const rs = chaosEvents.filter((e) => (e.kind === 'restart' || e.kind === 'terminate') && e.t0 <= x.t && e.t0 >= x.t - 20).at(-1)
    detail.push(`[${x.t.toFixed(1)}s] ${x.c.label}: 409 for handle ${x.handle ?? '(none)'} (first heard of at ${x.since?.toFixed(1) ?? '?'}s; request sent at ${x.sent.toFixed(1)}s; new handle: ${x.next ?? '(none)'}): ` +
      (rs ? `409 after a ${rs.kind === 'restart' ? `restart (${rs.what})` : 'terminate of the worker'} at ${rs.t0.toFixed(1)}s for a shape whose definition did not change`
        : `no table event that changed ${x.c.shape.name}'s definition explains it`))
  }
  if (bad.length > 10) detail.push(`(${bad.length - 10} more)`)
  if (bad.length) {
    const first = bad[0]
    detail.push(`events on ${first.c.shape.table} (and global ones) in the 20 s before the first one:`, eventsBefore(first.c.shape.table, first.t, 12, first.t - 20))
    for (const h of [...new Set(bad.map((x) => x.handle).filter(Boolean))].slice(0, 3))
      detail.push(`server log lines that name handle ${h}:`, ...serverLogLines(new RegExp(escapeRe(h)), 6).map((l) => `  ${l}`))
  }
  const title = restartEv
    ? `${phase}: no client got a 409 across the ${restartEv.what} (no table event in this phase: every shape keeps its handle)`
    : `${phase}: every 409 follows a table event that changed its shape's definition (a terminate of the worker explains none)`
  ok(bad.length === 0, title, detail.join('\n'), 'SERVER')
  return all.length
}

class Chaos {
  constructor(seed) {
    this.r = prng(seed)
    this.gen = new Writer('chaos', this.r) // random write transactions from this stream
    this.counts = {}
    this.notes = {} // aborted / skipped events, by reason
    this.harnessErrors = []
    this.retries = 0
    this.eventNo = 0
    this.pending = [] // { due, what, revert }
    this.preparedPending = new Set() // promises of COMMIT/ROLLBACK PREPARED to come
    this.added = [] // { table, name, type, busy }
    this.typePending = new Set() // 'table.col' now bigint
    this.identPending = new Set()
    this.renamed = null
    this.colSeq = 0
    this.prepSeq = 0
    this.bigSeq = 0
    this.lastTerminate = -Infinity
    this.fatal = false
  }
  async #client() {
    const c = new pg.Client()
    c.on('error', () => {})
    await c.connect()
    await c.query("SET lock_timeout = '3s'")
    await c.query("SET statement_timeout = '30s'")
    await c.query("SET application_name = 'integrity_chaos'")
    return c
  }
  async connect() {
    this.db = await this.#client()
    this.resolver = await this.#client() // COMMIT/ROLLBACK PREPARED, while the loop goes on
  }
  async close() {
    await this.db?.end().catch(() => {})
    await this.resolver?.end().catch(() => {})
  }
  note(k) {
    this.notes[k] = (this.notes[k] ?? 0) + 1
  }
  begin(kind, tables, what, count = true) {
    if (count) this.counts[kind] = (this.counts[kind] ?? 0) + 1
    const e = { n: chaosEvents.length + 1, kind, tables, what, t0: nowS(), t1: null }
    chaosEvents.push(e)
    vlog(`chaos: ${fmtEvent(e)}`)
    return e
  }
  end(e) {
    e.t1 = nowS()
  }
  // fn() again after a lock timeout / deadlock (the random values are drawn before, so a
  // retry does the same); a connection error reconnects first.
  async retrying(fn, tries = 10) {
    for (let i = 1; ; i++) {
      try {
        return await fn()
      } catch (e) {
        await this.db.query('ROLLBACK').catch(() => {})
        if (i >= tries || !(LOCKISH.has(e?.code) || isConnError(e))) throw e
        this.retries++
        if (isConnError(e)) {
          await this.db.end().catch(() => {})
          this.db = await this.#client().catch(() => this.db)
        }
        await sleep(100 * i)
      }
    }
  }
  async txn(stmts) {
    await this.db.query('BEGIN')
    const res = []
    for (const [sql, params] of stmts) res.push(await this.db.query(sql, params))
    await this.db.query('COMMIT')
    return res
  }
  fail(kind, e) {
    if (CONTENTION.has(e?.code) && ['prepared', 'truncate', 'replident'].includes(kind)) {
      this.note(`${kind} aborted by ${e.code}`)
      return
    }
    if (isConnError(e) || e?.code === '57P03') {
      // PostgreSQL went away (a crash-restart: the writers' check reports it as SERVER)
      this.note(`${kind} failed: lost the connection`)
      return
    }
    const msg = `[${nowS().toFixed(1)}s] ${kind}: ${e?.code ?? ''} ${e?.message ?? e}`
    this.harnessErrors.push(msg)
    log(`chaos event failed: ${msg}`)
  }

  async run(untilMs) {
    const r = this.r
    const kinds = Object.keys(CHAOS_WEIGHTS)
    const first = [...kinds]
    for (let i = first.length - 1; i > 0; i--) {
      const j = r.int(0, i)
      ;[first[i], first[j]] = [first[j], first[i]]
    }
    const total = kinds.reduce((a, k) => a + CHAOS_WEIGHTS[k], 0)
    const weighted = () => {
      let x = r.next() * total
      for (const k of kinds) if ((x -= CHAOS_WEIGHTS[k]) < 0) return k
      return kinds.at(-1)
    }
    while (Date.now() < untilMs && !this.fatal) {
      this.eventNo++
      await this.#revertDue(false)
      const kind = first.length ? first.shift() : weighted()
      const from = chaosEvents.length
      try {
        await this[kind]()
      } catch (e) {
        this.fail(kind, e)
        for (const ev of chaosEvents.slice(from))
          if (ev.t1 === null && ev.kind !== 'prepared') {
            ev.t1 = nowS()
            ev.what += ` (FAILED: ${e?.code ?? ''} ${short(e?.message ?? String(e), 100)})`
          }
      }
      await sleep(r.int(100, Math.max(200, 2 * CHAOS_GAP_MS - 100)))
    }
  }
  async #revertDue(all) {
    const due = this.pending.filter((p) => all || p.due <= this.eventNo)
    this.pending = this.pending.filter((p) => !due.includes(p))
    for (const p of due) {
      try {
        await p.revert()
      } catch (e) {
        this.fail(`${p.kind} (back)`, e)
      }
    }
  }
  // Reversals, prepared transactions resolved, the standby up: then the check of leftovers.
  async finish() {
    await this.#revertDue(true)
    const t = Date.now()
    const left = await Promise.race([Promise.all([...this.preparedPending]).then(() => 0), sleep(40000).then(() => this.preparedPending.size)])
    if (left) this.harnessErrors.push(`${left} COMMIT/ROLLBACK PREPARED did not finish within 40 s`)
    vlog(`chaos: prepared transactions resolved in ${Date.now() - t} ms`)
    if (this.renamed) await this.#renameBack(this.renamed).catch((e) => this.fail('renametable (back)', e))
  }

  #pickAdded() {
    const c = this.added.filter((a) => !a.busy)
    return c.length ? this.r.pick(c) : null
  }
  async addcol() {
    const r = this.r
    const t = r.pick(CHAOS_TABLES)
    const name = `cx${++this.colSeq}`
    const k = r.int(0, 100)
    const [type, extra] = [['int', ''], ['text', ''], ['int', `DEFAULT ${k}`], ['text', `DEFAULT 'dflt${k}'`], ['int', `NOT NULL DEFAULT ${k}`]][r.int(0, 4)]
    const fill = r.chance(0.5) ? r.int(0, 3) : null
    const ev = this.begin('addcol', [t], `${name} ${type}${extra ? ` ${extra}` : ''}${fill !== null ? `; then UPDATE SET ${name} where ${pkCol(t)} % 4 = ${fill}` : ''}`)
    await this.retrying(() => this.db.query(`ALTER TABLE ${t} ADD COLUMN ${name} ${type} ${extra}`))
    const col = { table: t, name, type, busy: false }
    this.added.push(col)
    if (fill !== null) {
      const pk = pkCol(t)
      const val = type === 'int' ? `(${pk} * 7) % 101` : `'cx' || ${pk}`
      await this.retrying(() => this.db.query(`UPDATE ${t} SET ${name} = ${val} WHERE ${pk} % 4 = $1`, [fill]))
    }
    this.end(ev)
    return col
  }
  async dropcol() {
    let c = this.#pickAdded()
    if (!c) {
      c = await this.addcol()
      await sleep(300)
    }
    const ev = this.begin('dropcol', [c.table], c.name)
    await this.retrying(() => this.db.query(`ALTER TABLE ${c.table} DROP COLUMN ${c.name}`))
    this.added = this.added.filter((a) => a !== c)
    this.end(ev)
  }
  async renamecol() {
    let c = this.#pickAdded()
    if (!c) {
      c = await this.addcol()
      await sleep(300)
    }
    const hold = this.r.int(200, 1500)
    const ev = this.begin('renamecol', [c.table], `${c.name} -> ${c.name}_renamed for ${hold} ms, and back`)
    c.busy = true
    await this.retrying(() => this.db.query(`ALTER TABLE ${c.table} RENAME COLUMN ${c.name} TO ${c.name}_renamed`))
    await sleep(hold)
    await this.retrying(() => this.db.query(`ALTER TABLE ${c.table} RENAME COLUMN ${c.name}_renamed TO ${c.name}`), 30)
    c.busy = false
    this.end(ev)
  }
  async altertype() {
    const r = this.r
    const cands = [
      { table: 'integ_a', name: 'n' }, { table: 'integ_a', name: 'm' }, { table: 'integ_b', name: 'n' }, { table: 'integ_c', name: 'n' },
      ...this.added.filter((a) => a.type === 'int' && !a.busy),
    ].filter((c) => !this.typePending.has(`${c.table}.${c.name}`))
    if (!cands.length) return this.note('altertype skipped: every candidate is bigint already')
    const c = r.pick(cands)
    const after = r.int(1, 3)
    const key = `${c.table}.${c.name}`
    const readers = readersOf(c.table, c.name)
    const ev = this.begin('altertype', [c.table], `${c.name} int -> bigint (read by ${readers.join(', ') || 'no shape'}); back ${after} event(s) later`)
    ev.col = c.name
    await this.retrying(() => this.db.query(`ALTER TABLE ${c.table} ALTER COLUMN ${c.name} TYPE bigint`))
    this.end(ev)
    this.typePending.add(key)
    if (c.busy !== undefined) c.busy = true
    this.pending.push({
      kind: 'altertype', due: this.eventNo + after,
      revert: async () => {
        const back = this.begin('altertype', [c.table], `${c.name} bigint -> int (back)`, false)
        back.col = c.name
        await this.retrying(() => this.db.query(`ALTER TABLE ${c.table} ALTER COLUMN ${c.name} TYPE int`), 30)
        this.typePending.delete(key)
        if (c.busy !== undefined) c.busy = false
        this.end(back)
      },
    })
  }
  async #renameBack(t) {
    await this.retrying(() => this.db.query(`ALTER TABLE ${t}_renamed RENAME TO ${t}`), 30)
    this.renamed = null
  }
  async renametable() {
    const t = this.r.pick(CHAOS_TABLES)
    const hold = this.r.int(300, 2000)
    const ev = this.begin('renametable', [t], `-> ${t}_renamed for ${hold} ms, and back`)
    await this.retrying(() => this.db.query(`ALTER TABLE ${t} RENAME TO ${t}_renamed`))
    this.renamed = t
    await sleep(hold)
    try {
      await this.#renameBack(t)
    } catch (e) {
      this.fatal = true // the shapes' table is gone for good: nothing after this means anything
      throw e
    } finally {
      this.end(ev)
    }
  }
  #identWrites(t) {
    const r = this.r
    const pk = pkCol(t)
    const out = []
    for (let i = r.int(3, 6); i > 0; i--) {
      const lo = t === 'integ_b' ? r.int(1, 60) : r.int(1, 3000)
      const hi = lo + (t === 'integ_b' ? r.int(0, 5) : r.int(5, 60))
      switch (r.int(0, 4)) {
        case 0:
          out.push([`UPDATE ${t} SET n = CASE WHEN n IS NULL THEN $3::int ELSE (n + $3::int) % 101 END WHERE ${pk} BETWEEN $1::int AND $2::int`, [lo, hi, r.int(1, 60)]])
          break
        case 1:
          out.push([`DELETE FROM ${t} WHERE ${pk} BETWEEN $1::int AND $2::int`, [lo, lo + r.int(0, 4)]])
          break
        case 2: // leaves a TOASTed s unchanged (and out of the new tuple)
          if (t === 'integ_a') out.push([`UPDATE integ_a SET m = $3::int WHERE id BETWEEN $1::int AND $2::int`, [lo, hi, r.int(0, 1000)]])
          else out.push([`UPDATE ${t} SET n = n WHERE ${pk} BETWEEN $1::int AND $2::int`, [lo, hi]])
          break
        case 3: // key change
          if (t === 'integ_b')
            out.push([`UPDATE integ_b SET b = b + 1000 WHERE a = $1::int AND b <= 60 AND NOT EXISTS (SELECT 1 FROM integ_b x WHERE x.a = $1::int AND x.b > 1000)`, [lo]])
          else
            out.push([`UPDATE ${t} SET id = id + 700000 WHERE id BETWEEN $1::int AND $2::int AND NOT EXISTS (SELECT 1 FROM ${t} x WHERE x.id BETWEEN $1::int + 700000 AND $2::int + 700000)`, [lo, lo + r.int(0, 5)]])
          break
        default:
          out.push([`UPDATE ${t} SET s = $3::text, n = $4::int WHERE ${pk} BETWEEN $1::int AND $2::int`, [lo, lo + r.int(0, 3), randomText(r), randomN(r)]])
      }
    }
    return out
  }
  async replident() {
    const r = this.r
    const cands = CHAOS_TABLES.filter((t) => !this.identPending.has(t))
    if (!cands.length) return this.note('replident skipped: every table is DEFAULT already')
    const t = r.pick(cands)
    const after = r.int(1, 3)
    const writes = this.#identWrites(t)
    const ev = this.begin('replident', [t], `REPLICA IDENTITY DEFAULT, ${writes.length} writes; FULL again ${after} event(s) later`)
    await this.retrying(() => this.db.query(`ALTER TABLE ${t} REPLICA IDENTITY DEFAULT`))
    this.identPending.add(t)
    for (const [sql, params] of writes) {
      try {
        await this.db.query(sql, params)
      } catch (e) {
        if (!CONTENTION.has(e?.code)) throw e
        this.note(`replident write aborted by ${e.code}`)
      }
    }
    this.end(ev)
    this.pending.push({
      kind: 'replident', due: this.eventNo + after,
      revert: async () => {
        const back = this.begin('replident', [t], 'REPLICA IDENTITY FULL (back)', false)
        await this.retrying(() => this.db.query(`ALTER TABLE ${t} REPLICA IDENTITY FULL`), 30)
        this.identPending.delete(t)
        this.end(back)
      },
    })
  }
  #refill(t, k) {
    if (t === 'integ_a')
      return [`INSERT INTO integ_a (id, s, n, m) SELECT g, 'rf' || g || '-' || $1::int, (g * 13 + $1::int) % 101, g % 1000 FROM generate_series(1, 400) g ON CONFLICT DO NOTHING`, [k]]
    if (t === 'integ_b')
      return [`INSERT INTO integ_b (a, b, s, n) SELECT a, b, 'rf' || a || '/' || b, (a * 7 + b + $1::int) % 101 FROM generate_series(1, 20) a, generate_series(1, 20) b ON CONFLICT DO NOTHING`, [k]]
    return [`INSERT INTO integ_c (id, s, n) SELECT g, md5(g::text || $1::text), (g + $1::int) % 101 FROM generate_series(1, 350) g ON CONFLICT DO NOTHING`, [k]]
  }
  async truncate() {
    const r = this.r
    const t = r.pick(CHAOS_TABLES)
    const multi = r.chance(0.4)
    const refill = r.chance(0.5) ? this.#refill(t, r.int(0, 1e6)) : null
    const pre = []
    const post = []
    if (multi) {
      for (let i = r.int(1, 3); i > 0; i--) pre.push(...this.gen.randomOps())
      post.push(...this.gen.randomOps())
    }
    const stmts = [...pre, [`TRUNCATE ${t}`, []], ...(refill ? [refill] : []), ...post]
    const ev = this.begin('truncate', multi ? tablesIn(stmts) : [t],
      `TRUNCATE ${t}${multi ? ` inside a transaction of ${stmts.length} statements on ${tablesIn(stmts).join(', ')}` : ' alone'}${refill ? ', refilled' : ''}`)
    ev.truncated = t
    try {
      if (multi) await this.retrying(() => this.txn(stmts))
      else {
        await this.retrying(() => this.db.query(`TRUNCATE ${t}`))
        if (refill) await this.retrying(() => this.db.query(refill[0], refill[1]))
      }
    } catch (e) {
      if (!multi || !CONTENTION.has(e?.code)) throw e
      ev.what += ` (aborted by ${e.code}; TRUNCATE alone instead)`
      this.note(`truncate's transaction aborted by ${e.code}`)
      await this.retrying(() => this.db.query(`TRUNCATE ${t}`))
    } finally {
      this.end(ev)
    }
  }
  async prepared() {
    const r = this.r
    const gid = `integ_chaos_${SEED}_${++this.prepSeq}`
    const stmts = this.gen.randomTransaction()
    const delay = r.int(100, 1500)
    const commit = r.chance(0.6)
    const verb = commit ? 'COMMIT PREPARED' : 'ROLLBACK PREPARED'
    const ev = this.begin('prepared', tablesIn(stmts), `${gid}: ${stmts.length} statements, PREPARE TRANSACTION, ${verb} after ${delay} ms`)
    try {
      await this.db.query('BEGIN')
      for (const [sql, params] of stmts) await this.db.query(sql, params)
      await this.db.query(`PREPARE TRANSACTION '${gid}'`)
    } catch (e) {
      await this.db.query('ROLLBACK').catch(() => {})
      ev.what += ` (aborted before PREPARE by ${e?.code})`
      this.end(ev)
      throw e
    }
    const p = (async () => {
      await sleep(delay)
      for (let i = 1; ; i++) {
        try {
          await this.resolver.query(`${verb} '${gid}'`)
          break
        } catch (e) {
          if (i >= 5) {
            this.harnessErrors.push(`[${nowS().toFixed(1)}s] ${verb} '${gid}' failed: ${e?.code} ${e?.message}`)
            break
          }
          if (isConnError(e)) {
            await this.resolver.end().catch(() => {})
            this.resolver = await this.#client().catch(() => this.resolver)
          }
          await sleep(200 * i)
        }
      }
      this.end(ev)
    })()
    this.preparedPending.add(p)
    p.finally(() => this.preparedPending.delete(p))
  }
  async bigtxn() {
    const r = this.r
    const t = r.pick(CHAOS_TABLES)
    const n = Math.max(1, Math.floor(CHAOS_BIG_ROWS / 3))
    const k = r.int(1, 1e6)
    const seq = ++this.bigSeq
    let stmts
    if (t === 'integ_b') {
      const na = Math.ceil(n / 50)
      const a0 = 1000 + seq * (na + 10)
      const keep = r.int(0, 6)
      stmts = [
        [`INSERT INTO integ_b (a, b, s, n) SELECT a, b, md5(a::text || '/' || b || $3::text), (a * 31 + b + $3::int) % 101
          FROM generate_series($1::int, $2::int) a, generate_series(1, 50) b`, [a0, a0 + na - 1, k]],
        [`UPDATE integ_b SET n = (coalesce(n, 0) + $3::int) % 101, s = s || 'u' WHERE a BETWEEN $1::int AND $2::int`, [a0, a0 + na - 1, k % 100]],
        [`DELETE FROM integ_b WHERE a BETWEEN $1::int AND $2::int`, [a0, a0 + na - 1 - keep]],
      ]
    } else {
      const base = 300000 + seq * (n + 1000)
      const keep = r.int(0, 300)
      const cols = t === 'integ_a' ? '(id, s, n, m)' : '(id, s, n)'
      const vals = t === 'integ_a' ? ', g % 1000' : ''
      stmts = [
        [`INSERT INTO ${t} ${cols} SELECT g, md5(g::text || $3::text), (g * 7 + $3::int) % 101${vals} FROM generate_series($1::int, $2::int) g`, [base, base + n - 1, k]],
        [`UPDATE ${t} SET n = (coalesce(n, 0) + $3::int) % 101, s = s || 'u' WHERE id BETWEEN $1::int AND $2::int`, [base, base + n - 1, k % 100]],
        [`DELETE FROM ${t} WHERE id BETWEEN $1::int AND $2::int`, [base, base + n - 1 - keep]],
      ]
    }
    const ev = this.begin('bigtxn', [t], `one transaction of ~${3 * n} row changes`)
    const t0 = Date.now()
    const res = await this.retrying(() => this.txn(stmts))
    const counts = res.map((x) => x.rowCount)
    ev.what = `one transaction of ${counts.reduce((a, b) => a + b, 0)} row changes (${counts[0]} inserts, ${counts[1]} updates, ${counts[2]} deletes) in ${Date.now() - t0} ms`
    this.end(ev)
  }
  async terminate() {
    if (nowS() - this.lastTerminate < 8) return this.note('terminate skipped: the last one was less than 8 s ago')
    const ev = this.begin('terminate', [], 'pg_terminate_backend() of backend_type shape_sync')
    const res = await this.db.query(`SELECT pid, pg_terminate_backend(pid) AS t FROM pg_stat_activity WHERE backend_type = 'shape_sync'`)
    ev.what += res.rows.length ? `: pid ${res.rows.map((x) => `${x.pid}${x.t ? '' : ' (not terminated)'}`).join(', ')}` : ': no such backend (restarting?)'
    if (!res.rows.length) this.note('terminate found no worker')
    this.lastTerminate = nowS()
    this.end(ev)
  }
  async standby() {
    const hold = this.r.int(500, 3000)
    const ev = this.begin('standby', [], `synchronous standby stopped for ${hold} ms`)
    try {
      const stop = await pgCtl(['-D', STANDBY_PGDATA, '-m', 'fast', '-w', '-t', '30', 'stop'])
      if (stop.err) throw new Error(`pg_ctl stop of the standby: ${stop.err.message} ${stop.stderr}`)
      await sleep(hold)
    } finally {
      const start = await pgCtl(['-D', STANDBY_PGDATA, '-l', STANDBY_LOG, '-w', '-t', '60', 'start'])
      if (start.err) {
        // commits would wait for ever: let them go
        this.fatal = true
        await this.db.query("ALTER SYSTEM SET synchronous_standby_names = ''").catch(() => {})
        await this.db.query('SELECT pg_reload_conf()').catch(() => {})
        this.end(ev)
        throw new Error(`pg_ctl start of the standby: ${start.err.message} ${start.stderr}; synchronous_standby_names cleared`)
      }
    }
    // bounded wait until it is the synchronous standby again (a read: no commit to wait for)
    const t = Date.now()
    let state = null
    while (Date.now() - t < 20000) {
      state = (await this.db.query(`SELECT sync_state FROM pg_stat_replication WHERE application_name = $1`, [env.INTEGRITY_STANDBY_NAME ?? 'integ_standby'])).rows[0]?.sync_state ?? null
      if (state === 'sync') break
      await sleep(100)
    }
    ev.what += state === 'sync' ? `; sync again ${Date.now() - t} ms after pg_ctl start` : `; NOT sync 20 s after pg_ctl start (${state})`
    if (state !== 'sync') this.harnessErrors.push(`[${nowS().toFixed(1)}s] the standby is not the synchronous standby 20 s after it started (${state})`)
    this.end(ev)
  }
  summary() {
    const c = Object.entries(this.counts).map(([k, v]) => `${k}=${v}`).join(' ')
    const n = Object.entries(this.notes).map(([k, v]) => `${k}: ${v}`).join('; ')
    return `${c || '(none)'}${n ? ` | ${n}` : ''}${this.retries ? ` | statements retried after lock timeouts: ${this.retries}` : ''}`
  }
}

// Writer errors since tFrom, by cause. Checks: no connection lost outside the restart (that
// is PostgreSQL restarting after a crash: SERVER), no other error that no event explains
// (HARNESS).
let lostConnections = 0
function writerErrorReport(writers, phase, tFrom) {
  const by = {}
  const lost = []
  const unexplained = []
  for (const w of writers)
    for (const e of w.errorLog) {
      if (e.t < tFrom) continue
      const cause = attributeWriterError(e)
      by[cause] ??= {}
      by[cause][e.code] = (by[cause][e.code] ?? 0) + 1
      if (cause === 'unexplained') (e.conn ? lost : unexplained).push({ t: e.t, text: `[${e.t.toFixed(1)}s] writer ${w.id}: ${e.code} ${e.msg}` })
    }
  log(`${phase}: writer errors by cause: ${JSON.stringify(by)}`)
  lostConnections += lost.length
  ok(lost.length === 0, `${phase}: no writer lost its connection outside a restart of PostgreSQL`,
    lost.length ? `${lost.length} lost connections (PostgreSQL restarting after a crash? see the server log), first ones:\n${lost.sort((a, b) => a.t - b.t).slice(0, 4).map((x) => x.text).join('\n')}\nevents in the 6 s before the first one:\n${eventsBefore(null, lost[0].t, 10, lost[0].t - 6)}` : '', 'SERVER')
  ok(unexplained.length === 0, `${phase}: every other writer error is explained by an event or by contention among the writers`,
    `${unexplained.length} unexplained, first ones:\n${unexplained.sort((a, b) => a.t - b.t).slice(0, 8).map((x) => x.text).join('\n')}`, 'HARNESS')
}

// ---------------------------------------------------------------------------------------------
// main

// A connection of the test's own; connecting is retried for up to 30 s (PostgreSQL may be
// restarting, or recovering after a crash of the worker).
async function withDb(fn) {
  let c
  for (const t = Date.now(); ; ) {
    c = new pg.Client()
    c.on('error', () => {})
    try {
      await c.connect()
      break
    } catch (e) {
      c.end().catch(() => {})
      if (!(isConnError(e) || e?.code === '57P03') || Date.now() - t > 30000) throw e
      await sleep(250)
    }
  }
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
  if (shape.equality) return late ? [] : [new RawClient(shape, `${shape.name} raw`).start()]
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

// Where a client is in its shape's log: its handle and offset.
const logPosition = (c) => (c instanceof RawClient ? `${c.handle}@${c.offset}` : `${c.stream.shapeHandle}@${c.stream.lastOffset}`)
// How long a client counts as still catching up after its position last moved (ms).
const CATCHING_UP_MS = 3000

// After the writers stopped: waits until each client equals the SELECT (and, for raw clients,
// has seen a global_last_seen_lsn at or past the end of the workload); then one check per client.
// The wait is CONVERGE_TIMEOUT, and up to as long again while a client that is not done still
// moves through its log (a client that resumed after an outage replays the log from its
// offset, 16 kB a request, where it used to fetch a new snapshot after a 409). A client that is
// not done at the end is a DIVERGENCE when it is caught up (up-to-date, not moving) and its rows
// differ; a SERVER failure when it is still behind.
async function converge(clients, phase, phaseStart) {
  const { lsnBefore } = await withDb(async (db) => {
    const l = (await db.query(`SELECT (pg_current_wal_lsn() - '0/0')::text AS l`)).rows[0].l
    await db.query('INSERT INTO integ_marker DEFAULT VALUES') // a commit after the workload
    return { lsnBefore: BigInt(l) }
  })
  const expected = await snapshotExpected()
  const tEnd = nowS()
  const start = Date.now()
  const pending = new Set(clients)
  const doneAt = new Map()
  const moved = new Map(clients.map((c) => [c, { pos: logPosition(c), at: Date.now() }])) // when its position last changed
  const stillMoving = (c) => Date.now() - moved.get(c).at < CATCHING_UP_MS
  for (;;) {
    const waited = Date.now() - start
    if (!pending.size || waited >= 2 * CONVERGE_TIMEOUT_MS || (waited >= CONVERGE_TIMEOUT_MS && ![...pending].some(stillMoving))) break
    for (const c of [...pending]) {
      const pos = logPosition(c)
      if (pos !== moved.get(c).pos) moved.set(c, { pos, at: Date.now() })
      const exp = expected.get(c.shape.name)
      const isRaw = c instanceof RawClient
      const upToDate = isRaw ? c.upToDate && c.globalLsn >= lsnBefore : c.stream.isUpToDate
      if (upToDate && sameRows(exp, c.rows(), isRaw)) {
        pending.delete(c)
        doneAt.set(c, Date.now() - start)
      }
    }
    if (pending.size) await sleep(200)
  }
  const waited = Date.now() - start
  if (waited > CONVERGE_TIMEOUT_MS + 500)
    log(`${phase}: waited ${waited} ms for the clients, past CONVERGE_TIMEOUT (${CONVERGE_TIMEOUT_MS} ms) while clients not done yet still moved through their logs`)
  for (const c of clients) {
    const exp = expected.get(c.shape.name)
    const isRaw = c instanceof RawClient
    const d = diffRows(exp, c.rows(), isRaw)
    const extra = []
    let behind = false
    if (isRaw && !(c.globalLsn >= lsnBefore)) {
      extra.push(`raw client's last global_last_seen_lsn ${c.globalLsn} < ${lsnBefore} (pg_current_wal_lsn after the writers stopped)`)
      behind = true
    }
    if (!isRaw && !c.stream.isUpToDate) {
      extra.push('the ShapeStream is not up-to-date')
      behind = true
    }
    if (!doneAt.has(c) && stillMoving(c)) {
      extra.push(`still moving through its log: at ${logPosition(c)} ${Date.now() - moved.get(c).at} ms ago`)
      behind = true
    }
    const detail = [`shape ${c.shape.name}: table ${c.shape.table}, where ${c.shape.where ?? '(none)'}, columns ${c.shape.columns ?? '(all)'}, replica ${c.shape.replica}; client kind: ${c instanceof RawClient ? 'raw materializer' : `official client, ${c.mode}`}`,
      d, ...extra, c.describe()]
    if (d !== null || extra.length) detail.push(`events on ${c.shape.table} (and global ones) during ${phase}:`, eventsBefore(c.shape.table, tEnd, 14, phaseStart))
    ok(d === null && extra.length === 0,
      `${phase}: ${c.label} equals SELECT (${exp.size} rows)${doneAt.has(c) ? ` after ${doneAt.get(c)} ms` : ` - not within ${waited} ms${behind ? ' (not caught up)' : ''}`}`,
      detail.filter(Boolean).join('\n'), d !== null && !behind ? 'DIVERGENCE' : 'SERVER')
  }
}

function checkClientHealth(clients, phase) {
  for (const c of clients) {
    if (c instanceof RawClient) {
      ok(c.anomalyCount === 0, `${phase}: ${c.label}: no protocol anomalies`,
        c.anomalyCount ? `${c.anomalyCount} anomalies, first ones:\n${c.anomalies.join('\n')}\nevents in the 6 s before the first one:\n${eventsBefore(c.shape.table, c.firstAnomalyT, 10, c.firstAnomalyT - 6)}` : '')
      c.anomalyCount = 0
      c.anomalies = []
      c.firstAnomalyT = null
    } else {
      // a 4xx while the table had another name is the right answer
      const real = c.errors.filter((e) => !(e.status >= 400 && e.status < 500 && renamedDuring(c.shape.table, e.t - 1, e.t)))
      c.excusedErrors += c.errors.length - real.length
      ok(real.length === 0, `${phase}: ${c.label}: no errors surfaced to onError${c.excusedErrors ? ` (besides ${c.excusedErrors} 4xx while its table was renamed)` : ''}`,
        real.length ? `${real.length} errors, first ones:\n${real.slice(0, 6).map((e) => `[${e.t.toFixed(1)}s] ${e.text}`).join('\n')}\nevents in the 6 s before the first one:\n${eventsBefore(c.shape.table, real[0].t, 10, real[0].t - 6)}` : '')
      c.errors = []
      if (c.mode === 'sse') {
        const cts = Object.keys(c.stats.sseContentTypes)
        ok(c.stats.sseRequests > 0 && cts.length > 0 && cts.every((ct) => ct.startsWith('text/event-stream')),
          `${phase}: ${c.label}: live_sse requests answered with text/event-stream`,
          `sseRequests=${c.stats.sseRequests} content-types of 2xx answers: ${JSON.stringify(c.stats.sseContentTypes)}`)
      }
    }
  }
  ok(retryExhaustedWarnings.length === 0, `${phase}: no official client gave up (onError retry loop exhausted)`, retryExhaustedWarnings.join('\n'))
  retryExhaustedWarnings = []
}

function writerSummary(writers) {
  const sum = { commits: 0, rollbacks: 0, large: 0, reconnects: 0, ops: 0, errors: {} }
  for (const w of writers) {
    for (const k of ['commits', 'rollbacks', 'large', 'reconnects', 'ops']) sum[k] += w.stats[k]
    for (const [k, v] of Object.entries(w.stats.errors)) sum.errors[k] = (sum.errors[k] ?? 0) + v
  }
  return JSON.stringify(sum)
}

// Stops the writers, within a bound: a writer stuck in a statement is a finding, not a hang.
async function stopWriters(writers, phase) {
  const res = await Promise.race([Promise.all(writers.map((w) => w.stop())).then(() => true), sleep(45000).then(() => false)])
  if (!res) {
    const stuck = writers.filter((w) => w.running === false && w.current !== null).map((w) => `writer ${w.id}: ${short(w.current, 200)}`)
    ok(false, `${phase}: the writers stopped within 45 s`, `stuck:\n${stuck.join('\n')}`, 'HARNESS')
    throw new Error('writers did not stop')
  }
  log(`writers stopped: ${writerSummary(writers)}`)
}

async function printSpillStats() {
  await withDb(async (db) => {
    const r = await db.query('SELECT slot_name, spill_txns, spill_count, spill_bytes, total_txns FROM pg_stat_replication_slots')
    log(`pg_stat_replication_slots: ${r.rows.map((x) => `${x.slot_name}: spill_txns=${x.spill_txns} spill_count=${x.spill_count} spill_bytes=${x.spill_bytes} total_txns=${x.total_txns}`).join('; ') || '(no slot)'}`)
  }).catch((e) => log(`pg_stat_replication_slots: ${e.message}`))
}

async function checkNoPrepared(phase) {
  await withDb(async (db) => {
    const left = (await db.query(`SELECT gid, prepared FROM pg_prepared_xacts`)).rows
    for (const x of left) await db.query(`ROLLBACK PREPARED '${x.gid}'`).catch(() => {})
    ok(left.length === 0, `${phase}: no prepared transaction left behind`, left.map((x) => `${x.gid} prepared at ${x.prepared} (rolled back now)`).join('\n'), 'HARNESS')
  })
}

let stage = 'start'

async function main() {
  console.log(`# seed ${SEED} (replay: SEED=${SEED} bash test/integrity/run.sh)`)
  console.log(`# writers=${WRITERS} duration=${DURATION_S}s restart=${DO_RESTART ? `${RESTART_DURATION_S}s (${RESTART_MODE}: ${RESTART_MODES[RESTART_MODE]})` : 'off'} sse=${USE_SSE ? 'on' : 'off'} url=${BASE_URL}`)
  console.log(`# chaos=${CHAOS ? `on: ${Object.entries(CHAOS_WEIGHTS).map(([k, v]) => `${k}:${v}`).join(',')} gap=${CHAOS_GAP_MS / 1000}s big_rows=${CHAOS_BIG_ROWS}` : 'off'} sync_standby=${STANDBY_PGDATA ? 'on' : 'off'}`)
  const master = prng(SEED)
  stage = 'setup'
  await setup(prng(master.int(0, 2 ** 31)))
  const writerSeeds = Array.from({ length: WRITERS }, () => master.int(0, 2 ** 31))
  if (STANDBY_PGDATA) {
    const rows = await withDb(async (db) => (await db.query('SELECT application_name, state, sync_state FROM pg_stat_replication')).rows)
    ok(rows.some((x) => x.sync_state === 'sync'), 'a synchronous standby streams from the primary', JSON.stringify(rows), 'HARNESS')
  }

  const clients = []
  for (const s of SHAPES.filter((s) => !s.late)) clients.push(...startClients(s, { late: false }))
  log(`${clients.length} clients started on ${SHAPES.filter((s) => !s.late).length} shapes`)

  // phase 1: workload and chaos, late clients half-way
  stage = 'phase 1 (workload)'
  const phase1Start = nowS()
  const writers = writerSeeds.map((seed, i) => new Writer(i, seed))
  for (const w of writers) await w.connect()
  for (const w of writers) w.start()
  const chaos = CHAOS && Object.keys(CHAOS_WEIGHTS).length ? new Chaos((SEED ^ 0x5bd1e995) >>> 0) : null
  let chaosDone = Promise.resolve()
  if (chaos) {
    await chaos.connect()
    const until = Date.now() + DURATION_S * 1000 - 500
    chaosDone = chaos.run(until).catch((e) => chaos.harnessErrors.push(`chaos loop: ${e?.stack ?? e}`))
  }
  await sleep((DURATION_S * 1000) / 2)
  for (const s of SHAPES) clients.push(...startClients(s, { late: true }))
  log(`late clients started; ${clients.length} clients in all`)
  await sleep((DURATION_S * 1000) / 2)
  if (chaos) {
    stage = 'phase 1 (chaos finishing)'
    const finished = await Promise.race([chaosDone.then(() => true), sleep(60000).then(() => false)])
    if (!finished) chaos.harnessErrors.push('the chaos loop did not end within 60 s of the end of phase 1')
    else await chaos.finish()
  }
  stage = 'phase 1 (stopping writers)'
  await stopWriters(writers, 'phase 1')
  ok(writers.reduce((a, w) => a + w.stats.commits, 0) > 50, 'phase 1: the writers committed transactions', writerSummary(writers), 'HARNESS')
  if (chaos) {
    log(`chaos events (seed ${SEED}): ${chaos.summary()}`)
    for (const e of chaosEvents) console.log(`#   ${fmtEvent(e)}`)
    ok(chaos.harnessErrors.length === 0, 'phase 1: every chaos event ran as meant', chaos.harnessErrors.slice(0, 10).join('\n'), 'HARNESS')
    await chaos.close()
    await checkNoPrepared('phase 1')
    await printSpillStats()
  }
  writerErrorReport(writers, 'phase 1', phase1Start)

  stage = 'phase 1 (converging)'
  await converge(clients, 'phase 1', phase1Start)
  checkClientHealth(clients, 'phase 1')
  check409s(clients, 'phase 1', phase1Start)
  if (chaos?.fatal) throw new Error('a chaos event left the cluster in a state the test cannot go on from (see above)')

  const phase1Bad = failuresByClass.DIVERGENCE > 0 || lostConnections > 0
  if (DO_RESTART && phase1Bad && !FORCE_RESTART)
    log('phase 2 (restart) skipped: phase 1 already found divergences or a crash (INTEGRITY_RESTART=force runs it anyway)')
  if (DO_RESTART && (!phase1Bad || FORCE_RESTART)) {
    // phase 2: writers again, PostgreSQL restarted under live clients, writers continue
    stage = 'phase 2 (restart)'
    const phase2Start = nowS()
    for (const w of writers) w.start()
    await sleep(2500)
    // the handle each client follows now: the same after the restart (no re-sync)
    const handlesBefore = new Map(clients.map((c) => [c, c.currentHandle()]))
    const logFrom = serverLogSize()
    log(`restarting PostgreSQL (${RESTART_MODE}): ${RESTART_MODES[RESTART_MODE]}`)
    const ev = { n: chaosEvents.length + 1, kind: 'restart', tables: [], what: RESTART_MODES[RESTART_MODE], t0: nowS(), t1: null }
    chaosEvents.push(ev)
    const t = Date.now()
    const err = await restartPostgres(RESTART_MODE)
    ok(!err, `phase 2: ${RESTART_MODES[RESTART_MODE]} succeeded in ${Date.now() - t} ms`, err ?? '', 'HARNESS')
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
    ev.t1 = nowS()
    ok(healthy, `phase 2: /v1/health answers 200 after the restart (${Date.now() - hStart} ms)`)
    for (const l of serverLogLines(/restored \d+ of \d+ shapes|is not restored|cannot be restored|discards its stored/, 10, logFrom))
      log(`server log: ${l}`)
    await sleep(Math.max(0, RESTART_DURATION_S * 1000 - 2500))
    await stopWriters(writers, 'phase 2')
    writerErrorReport(writers, 'phase 2', phase2Start)
    stage = 'phase 2 (converging)'
    await converge(clients, 'phase 2 (after restart)', phase2Start)
    checkClientHealth(clients, 'phase 2 (after restart)')
    check409s(clients, 'phase 2 (after restart)', phase2Start, ev)
    const moved = clients.filter((c) => c.currentHandle() !== handlesBefore.get(c))
    ok(moved.length === 0, `phase 2 (after restart): every client follows the shape handle it had before the restart (${RESTART_MODE})`,
      moved.slice(0, 10).map((c) => `${c.label}: ${handlesBefore.get(c)} before, ${c.currentHandle()} now`).join('\n'))
    for (const c of clients) if (c instanceof RawClient) log(`${c.label}: ${c.describe()}`)
    if (chaos) await checkNoPrepared('phase 2')
  }

  for (const c of clients) if (VERBOSE || (c instanceof OfficialClient && c.mode === 'sse')) log(`${c.label}: ${c.describe()}`)
  log(`SSE clients that fell back to long-polling (client warning): ${sseFallbackWarnings}; 409s without electric-handle (client warning): ${noHandle409Warnings}` +
    `; responses with a handle marked expired after a 409 (client warning): ${staleHandleWarnings.length}${staleHandleWarnings.length ? ` (${staleHandleWarnings.slice(0, 6).join(', ')})` : ''}`)
  if (chaos) log(`chaos events (seed ${SEED}): ${chaos.summary()}`)
  stage = 'stopping clients'
  await Promise.race([Promise.all(clients.map((c) => c.stop())), sleep(10000)])
}

const WATCHDOG_S = 170
const watchdog = setTimeout(() => {
  ok(false, `the test finished within ${WATCHDOG_S} s (it was at: ${stage})`,
    `events so far:\n${chaosEvents.slice(-20).map((e) => `  ${fmtEvent(e)}`).join('\n')}`, 'HARNESS')
  console.log(`1..${checks}`)
  process.exit(1)
}, WATCHDOG_S * 1000)
watchdog.unref()

try {
  await main()
} catch (e) {
  ok(false, `test harness error (at: ${stage}): ${e?.stack ?? e}`, '', 'HARNESS')
}
console.log(`1..${checks}`)
const byClass = Object.entries(failuresByClass).filter(([, n]) => n).map(([k, n]) => `${k} ${n}`).join(', ')
console.log(`# seed ${SEED}: ${failures ? `${failures} of ${checks} checks failed (${byClass})` : `all ${checks} checks passed`} in ${((Date.now() - T0) / 1000).toFixed(1)} s`)
process.exit(failures ? 1 : 0)
