// Shared helpers for the HTTP test suite of shape_sync.
//
// Environment (set by the harness):
//   PGHOST (unix socket dir), PGPORT, PGUSER, PGDATABASE: read by `pg` itself.
//   SHAPE_SYNC_URL: base URL of the shape_sync HTTP server, e.g. http://localhost:3457

import { randomBytes } from 'node:crypto'
import pg from 'pg'
import { Shape, ShapeStream } from '@electric-sql/client'

// @electric-sql/client keeps a module-level UpToDateTracker that throttles its
// localStorage writes with a plain (not unref'd) setTimeout of up to 60 s. In
// Node that timer keeps a test file's process alive for up to a minute after
// its last test. Unref exactly that timer (recognised by its callback).
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

export const BASE_URL = (process.env.SHAPE_SYNC_URL ?? 'http://localhost:3457').replace(/\/+$/, '')
export const SHAPE_URL = `${BASE_URL}/v1/shape`

// Settings the server uses for the text output of snapshot values (protocol §4.2).
export const OUTPUT_SETTINGS = [
  `SET LOCAL DateStyle = 'ISO, DMY'`,
  `SET LOCAL TimeZone = 'UTC'`,
  `SET LOCAL extra_float_digits = 1`,
  `SET LOCAL bytea_output = 'hex'`,
  `SET LOCAL IntervalStyle = 'iso_8601'`,
]

// Connection parameters come from PGHOST/PGPORT/PGUSER/PGDATABASE.
// allowExitOnIdle: idle clients never keep a test process alive.
export const pool = new pg.Pool({ max: 4, allowExitOnIdle: true })
pool.on('error', (err) => {
  // An idle client lost its connection (e.g. server restart): not a test failure by itself.
  console.error('pg pool idle client error:', err.message)
})

export async function closePool() {
  if (!pool.ended && !pool.ending) await pool.end()
}

export function query(text, values) {
  return pool.query(text, values)
}

// Keeps every column as the raw text PostgreSQL sent (no pg type parsing).
const RAW_TYPES = { getTypeParser: () => (value) => value }

// Runs `text` inside a transaction with the server's output settings and
// returns the rows with every value as PostgreSQL's raw text output (or null).
export async function queryAsServerText(text, values) {
  const client = await pool.connect()
  try {
    await client.query('BEGIN')
    for (const s of OUTPUT_SETTINGS) await client.query(s)
    const res = await client.query({ text, values, types: RAW_TYPES })
    await client.query('COMMIT')
    return res.rows
  } catch (err) {
    await client.query('ROLLBACK').catch(() => {})
    throw err
  } finally {
    client.release()
  }
}

// Quotes an identifier the PostgreSQL way.
export function quoteIdent(name) {
  return `"${String(name).replace(/"/g, '""')}"`
}

// A fresh, lower-case table name that needs no quoting: `${prefix}_<time>_<random>`.
export function uniqueTable(prefix = 't') {
  const clean = String(prefix).toLowerCase().replace(/[^a-z0-9_]/g, '_').slice(0, 30)
  const suffix = `${Date.now().toString(36)}_${randomBytes(4).toString('hex')}`
  return `${clean}_${suffix}`
}

// A short random suffix, for names built by hand (quoted names, enum types).
export function uniqueSuffix() {
  return randomBytes(4).toString('hex')
}

// Runs one or more DDL/DML statements.
export async function createTable(sql) {
  const statements = Array.isArray(sql) ? sql : [sql]
  for (const s of statements) await pool.query(s)
}

// Drops a table by its (unquoted) name, in `schema` (default public).
export async function dropTable(name, schema = 'public') {
  await pool.query(`DROP TABLE IF EXISTS ${quoteIdent(schema)}.${quoteIdent(name)} CASCADE`)
}

export async function dropType(name, schema = 'public') {
  await pool.query(`DROP TYPE IF EXISTS ${quoteIdent(schema)}.${quoteIdent(name)} CASCADE`)
}

// Builds the query string of a shape request.
//   params: array -> params[1]=..&params[2]=.. ; object -> params[k]=v
//   columns: array -> each column quoted, joined by commas (as the client does); string -> as is
//   undefined/null values are left out.
export function shapeQuery(params = {}) {
  const qs = new URLSearchParams()
  for (const [k, v] of Object.entries(params)) {
    if (v === undefined || v === null) continue
    if (k === 'params' && typeof v === 'object') {
      const entries = Array.isArray(v) ? v.map((x, i) => [String(i + 1), x]) : Object.entries(v)
      for (const [i, x] of entries) qs.append(`params[${i}]`, String(x))
    } else if (k === 'columns' && Array.isArray(v)) {
      qs.append('columns', v.map(quoteIdent).join(','))
    } else {
      qs.append(k, String(v))
    }
  }
  return qs.toString()
}

function parseBody(text) {
  if (text === '') return text
  try {
    return JSON.parse(text)
  } catch {
    return text
  }
}

// Raw request to any path of the server. Returns {status, headers, body, text, url}.
// body is the parsed JSON when the body is JSON, else the text.
export async function fetchRaw(path, { method = 'GET', headers = {}, timeoutMs = 15000 } = {}) {
  const url = path.startsWith('http') ? path : `${BASE_URL}${path}`
  const res = await fetch(url, { method, headers, signal: AbortSignal.timeout(timeoutMs) })
  const text = await res.text()
  return { status: res.status, headers: res.headers, body: parseBody(text), text, url }
}

// Raw GET /v1/shape with the given query params (see shapeQuery).
export function fetchShape(params = {}, opts = {}) {
  return fetchRaw(`${SHAPE_URL}?${shapeQuery(params)}`, opts)
}

// Syncs a shape with the official client and returns once it is up to date.
//   params: {table, where, params, columns, replica}, passed to ShapeStream as is.
// Returns {rows, value (Map key -> row), handle, offset, errors}.
//
// After the first up-to-date the client sends a live request: 0.1.0 answers it
// with 400 (no live mode yet), a later version holds it as a long-poll. The
// onError handler records errors and returns undefined, which tells the client
// to stop; the stream is also aborted right after the first up-to-date, so no
// request is left in flight and no rejection is left unhandled.
export async function syncShape(params, { timeoutMs = 20000 } = {}) {
  const controller = new AbortController()
  const errors = []
  let upToDate = false
  let failSync
  const failed = new Promise((_, reject) => {
    failSync = reject
  })
  failed.catch(() => {})

  const stream = new ShapeStream({
    url: SHAPE_URL,
    params,
    signal: controller.signal,
    // Retry 5xx and network errors a few times only, so a dead server fails
    // the test in seconds rather than at the timeout.
    backoffOptions: { initialDelay: 100, maxDelay: 1000, multiplier: 2, maxRetries: 8 },
    onError: (err) => {
      errors.push(err)
      if (!upToDate) failSync(err)
      // returning undefined: the stream stops
    },
  })
  const shape = new Shape(stream)

  let timer
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(
      () => reject(new Error(`syncShape(${JSON.stringify(params)}) not up-to-date after ${timeoutMs} ms`)),
      timeoutMs,
    )
  })
  timeout.catch(() => {})

  try {
    const rows = await Promise.race([shape.rows, failed, timeout])
    upToDate = true
    return {
      rows,
      value: new Map(shape.currentValue),
      handle: stream.shapeHandle,
      offset: stream.lastOffset,
      errors,
    }
  } finally {
    upToDate = true
    clearTimeout(timer)
    controller.abort()
    shape.unsubscribeAll()
    stream.unsubscribeAll()
  }
}

// Parses a PostgreSQL array literal (array_out format) the way the client does:
// unquoted NULL -> null, quoted elements unescaped, each element passed to `parseElem`.
export function parsePgArray(text, parseElem = (x) => x) {
  let i = 0
  function parseArray() {
    if (text[i] !== '{') throw new Error(`bad array literal at ${i}: ${text}`)
    i++
    const out = []
    if (text[i] === '}') {
      i++
      return out
    }
    for (;;) {
      if (text[i] === '{') {
        out.push(parseArray())
      } else if (text[i] === '"') {
        i++
        let s = ''
        while (text[i] !== '"') {
          if (text[i] === '\\') i++
          if (i >= text.length) throw new Error(`unterminated array element: ${text}`)
          s += text[i++]
        }
        i++
        out.push(parseElem(s))
      } else {
        let j = i
        while (text[j] !== ',' && text[j] !== '}') j++
        const raw = text.slice(i, j)
        i = j
        out.push(raw === 'NULL' ? null : parseElem(raw))
      }
      if (text[i] === ',') {
        i++
        continue
      }
      if (text[i] === '}') {
        i++
        return out
      }
      throw new Error(`bad array literal at ${i}: ${text}`)
    }
  }
  // Arrays with explicit bounds ("[0:1]={...}") are not produced by these tests.
  return parseArray()
}

// What @electric-sql/client yields for a value of PostgreSQL type `type`
// (the typname of the element type for arrays) given its text output.
export function parseLikeClient(text, type, dims = 0) {
  if (text === null) return null
  const scalar = (v) => {
    switch (type) {
      case 'int2':
      case 'int4':
      case 'float4':
      case 'float8':
        return Number(v)
      case 'int8':
        return BigInt(v)
      case 'bool':
        return v === 'true' || v === 't'
      case 'json':
      case 'jsonb':
        return JSON.parse(v)
      default:
        return v
    }
  }
  if (dims > 0) return parsePgArray(text, scalar)
  return scalar(text)
}

// Electric key of a row: "schema"."table"/"pk1"/"pk2", with `/` doubled inside values
// and schema/table quoted the PostgreSQL way.
export function electricKey(schema, table, pkValues) {
  const rel = `${quoteIdent(schema)}.${quoteIdent(table)}`
  return [rel, ...pkValues.map((v) => (v === null ? '_' : `"${String(v).replace(/\//g, '//')}"`))].join('/')
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms))

// Sorts change messages by key (snapshot row order is not part of the protocol).
export function byKey(a, b) {
  return a.key < b.key ? -1 : a.key > b.key ? 1 : 0
}

// Walks a shape's log from offset -1 with raw requests until the up-to-date
// response. Returns {handle, schema, responses: [{offset(requested), res}], messages}.
export async function walkShape(params, { maxRequests = 1000 } = {}) {
  const responses = []
  let offset = '-1'
  let handle
  for (let n = 0; n < maxRequests; n++) {
    const res = await fetchShape({ ...params, offset, handle: offset === '-1' ? undefined : handle })
    responses.push({ offset, res })
    if (res.status !== 200) {
      throw new Error(`walkShape: offset=${offset} answered ${res.status}: ${res.text.slice(0, 500)}`)
    }
    // Stop at the up-to-date response (header or message: callers check both).
    const body = Array.isArray(res.body) ? res.body : []
    if (res.headers.has('electric-up-to-date') || body.some((m) => m?.headers?.control === 'up-to-date')) break
    handle = res.headers.get('electric-handle')
    const next = res.headers.get('electric-offset')
    if (!handle || !next) throw new Error(`walkShape: missing electric-handle/electric-offset at offset ${offset}`)
    if (next === offset) throw new Error(`walkShape: electric-offset did not advance past ${offset} and no up-to-date`)
    offset = next
  }
  const messages = responses.flatMap(({ res }) => (Array.isArray(res.body) ? res.body : []))
  return { handle: responses[0].res.headers.get('electric-handle'), responses, messages }
}

export const EXPOSED_HEADERS = [
  'electric-handle',
  'electric-offset',
  'electric-schema',
  'electric-cursor',
  'electric-up-to-date',
]

export function headerList(headers, name) {
  const v = headers.get(name)
  if (v === null) return []
  return v.split(',').map((s) => s.trim().toLowerCase()).filter(Boolean)
}
