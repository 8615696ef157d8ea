// Log compaction: a hot shape's log stays within a bounded size while its rows are updated
// thousands of times, its handle is kept, and every client converges to SELECT, strictly
// (no insert of a present key, no update or delete of an absent one), whatever offset it
// resumes from: before, inside or after the compacted part; so does a client behind a
// caching proxy that still holds responses computed before compactions (any subset of
// them: a proxy evicts as it likes). The official client stays live throughout. Seconds
// here; COMPACTION_SOAK_SECONDS makes it a soak.

import { after, before, describe, it } from 'node:test'
import assert from 'node:assert/strict'
import { Shape, ShapeStream } from '@electric-sql/client'

import { closePool, createTable, dropTable, fetchShape, query, SHAPE_URL, sleep, uniqueTable } from '../lib/helpers.mjs'
import { resetGuc, setGuc, waitFor } from '../lib/live_helpers.mjs'

const ROWS = 200
const SOAK_S = Number(process.env.COMPACTION_SOAK_SECONDS ?? 0)

// A strict materializer reading a shape with raw requests; `rows` maps key -> value.
class StrictClient {
  constructor(params, from = null) {
    this.params = params
    this.handle = from?.handle
    this.offset = from?.offset ?? '-1'
    this.rows = new Map(from ? [...from.rows].map(([k, v]) => [k, { ...v }]) : [])
    this.messages = 0
  }

  apply(msg) {
    const op = msg.headers?.operation
    if (!op) return
    this.messages++
    const has = this.rows.has(msg.key)
    if (op === 'insert') {
      assert.ok(!has, `insert of present key ${msg.key} (${JSON.stringify(msg.headers)})`)
      this.rows.set(msg.key, { ...msg.value })
    } else if (op === 'update') {
      assert.ok(has, `update of absent key ${msg.key} (${JSON.stringify(msg.headers)})`)
      Object.assign(this.rows.get(msg.key), msg.value)
    } else if (op === 'delete') {
      assert.ok(has, `delete of absent key ${msg.key} (${JSON.stringify(msg.headers)})`)
      this.rows.delete(msg.key)
    }
  }

  // One catch-up request; a proxy may answer it instead (ProxiedClient).
  fetch(offset, handle) {
    return fetchShape({ ...this.params, offset, handle })
  }

  // Catch-up requests until up-to-date; returns the handles it was served.
  async catchUp() {
    const handles = new Set()
    for (let i = 0; i < 10000; i++) {
      const res = await this.fetch(this.offset, this.handle)
      assert.equal(res.status, 200, `catch-up from ${this.offset}: ${res.status} ${res.text}`)
      this.handle = res.headers.get('electric-handle')
      handles.add(this.handle)
      this.offset = res.headers.get('electric-offset')
      for (const m of res.body) this.apply(m)
      if (res.headers.get('electric-up-to-date') !== null) return handles
    }
    throw new Error('no up-to-date after 10000 requests')
  }

  snapshot() {
    return { handle: this.handle, offset: this.offset, rows: this.rows }
  }
}

// A client behind a caching proxy: catch-up responses are kept by URL (offset and handle
// here), and a request whose URL is kept gets the kept response, however old. Responses at the
// log's end (up-to-date) are not kept: a client that gets one goes live, with another URL.
class ProxiedClient extends StrictClient {
  constructor(params, cache, keep = () => true) {
    super(params)
    this.cache = cache
    this.keep = keep
    this.fromCache = 0
  }

  async fetch(offset, handle) {
    const url = `${offset}|${handle}`
    if (this.cache.has(url)) {
      this.fromCache++
      return this.cache.get(url)
    }
    const res = await super.fetch(offset, handle)
    if (res.status === 200 && res.headers.get('electric-up-to-date') === null && this.keep(url))
      this.cache.set(url, res)
    return res
  }
}

async function tableRows(table) {
  const { rows } = await query(`SELECT id::text AS id, v::text AS v, pad FROM ${table} ORDER BY ${table}.id`)
  return rows
}

function asSorted(map) {
  // the official client parses integers; the raw clients keep Electric's text
  return [...map.values()]
    .map((r) => ({ id: String(r.id), v: String(r.v), pad: r.pad }))
    .sort((a, b) => Number(a.id) - Number(b.id))
}

async function shapeStats(handle) {
  const { rows } = await query('SELECT log_bytes, compactions FROM shape_sync.shapes WHERE handle = $1', [handle])
  return rows[0] ? { bytes: Number(rows[0].log_bytes), compactions: Number(rows[0].compactions) } : null
}

describe('log compaction', () => {
  const table = uniqueTable('compact')
  const params = { table }

  before(async () => {
    await query('CREATE EXTENSION IF NOT EXISTS shape_sync')
    await setGuc('shape_sync.compaction_factor', '1.5')
    await setGuc('shape_sync.chunk_bytes_threshold', '8kB')
    await createTable(`CREATE TABLE ${table} (id int PRIMARY KEY, v int NOT NULL, pad text NOT NULL)`)
    await query(`ALTER TABLE ${table} REPLICA IDENTITY FULL`)
    await query(`INSERT INTO ${table} SELECT g, 0, repeat('p', 100) FROM generate_series(1, ${ROWS}) g`)
    await sleep(300) // the reload reaches the worker
  })

  after(async () => {
    await resetGuc('shape_sync.compaction_factor')
    await resetGuc('shape_sync.chunk_bytes_threshold')
    await dropTable(table)
    await closePool()
  })

  it('keeps a hot shape bounded and every client equal to SELECT, from any offset', async () => {
    const first = new StrictClient(params)
    await first.catchUp()
    const handle = first.handle
    const beforeAll = first.snapshot()
    const start = await shapeStats(handle)
    assert.ok(start, 'the shape is listed')

    // the official client, live from the start
    const controller = new AbortController()
    const errors = []
    const stream = new ShapeStream({
      url: SHAPE_URL,
      params,
      signal: controller.signal,
      onError: (err) => {
        errors.push(err)
      },
    })
    const shape = new Shape(stream)
    await shape.rows

    // the proxied clients read the shape with replica=default: updates carry changed columns only
    const proxiedParams = { ...params, replica: 'default' }
    const proxies = Array.from({ length: 6 }, () => new Map())
    const hash = (text) => [...text].reduce((h, ch) => (h * 31 + ch.charCodeAt(0)) >>> 0, 7)

    // updates (each its own transaction), some deletes and re-inserts
    let appended = 0
    let peak = 0
    let inside = null
    const round = async (n) => {
      const jobs = []
      for (let i = 0; i < n; i++) {
        const id = 1 + Math.floor(Math.random() * ROWS)
        if (i % 40 === 0) {
          jobs.push(
            query(`DELETE FROM ${table} WHERE id = $1`, [id]).then(() =>
              query(`INSERT INTO ${table} VALUES ($1, 0, repeat('q', 100)) ON CONFLICT DO NOTHING`, [id]),
            ),
          )
        } else if (i % 25 === 0) {
          // a column that changes seldom: with replica=default only it is sent, and a merged
          // update carries it past chunk ends (what a proxy's stale response would not repeat)
          jobs.push(query(`UPDATE ${table} SET pad = repeat(chr(97 + $2::int), 100) WHERE id = $1`, [id, (i / 25) % 20]))
        } else jobs.push(query(`UPDATE ${table} SET v = v + 1 WHERE id = $1`, [id]))
        if (jobs.length === 4) await Promise.all(jobs.splice(0))
      }
      await Promise.all(jobs)
      appended += n
      const st = await shapeStats(handle)
      assert.ok(st, `the shape ${handle} is still held`)
      peak = Math.max(peak, st.bytes)
    }
    const deadline = Date.now() + SOAK_S * 1000
    let rounds = 0
    do {
      await round(500)
      rounds++
      if (rounds === 3) {
        // a client in the middle, whose offset will be inside the compacted part
        const mid = new StrictClient(params, beforeAll)
        await mid.catchUp()
        inside = mid.snapshot()
      }
      // clients reading through the proxies now and then fill them; each proxy keeps about
      // two thirds of the responses, which depending on the URL
      for (const [k, proxy] of proxies.entries()) {
        const reader = new ProxiedClient(proxiedParams, proxy, (url) => hash(`${k}${url}`) % 3 !== 0)
        await reader.catchUp()
      }
    } while (rounds < 8 || Date.now() < deadline)

    const end = await shapeStats(handle)
    assert.ok(end.compactions >= 2, `the log was compacted (${end.compactions} times)`)
    // every update message is ~250 bytes: without compaction the log would hold them all
    assert.ok(peak < appended * 250 * 0.4, `the log stayed bounded: peak ${peak} bytes for ${appended} changes`)

    const truth = await tableRows(table)
    await waitFor(async () => JSON.stringify(asSorted(shape.currentValue)) === JSON.stringify(truth), {
      timeoutMs: 15000,
      what: 'the official live client equals SELECT',
    })
    assert.deepEqual(errors, [], 'the official client saw no error')
    assert.equal(stream.shapeHandle, handle, 'the official client kept the handle (no 409)')
    controller.abort()
    shape.unsubscribeAll()
    stream.unsubscribeAll()

    for (const [label, from] of [
      ['from -1', null],
      ['from the snapshot end, before the compacted changes', beforeAll],
      ['from inside the compacted part', inside],
    ]) {
      const c = new StrictClient(params, from)
      const handles = await c.catchUp()
      assert.deepEqual([...handles], [handle], `${label}: served by the same handle`)
      assert.deepEqual(asSorted(c.rows), truth, `${label}: equal to SELECT`)
      if (!from) {
        assert.ok(c.messages <= 2 * ROWS + 2 * 500, `${label}: ${c.messages} messages for ${ROWS} rows`)
      }
    }

    // through the proxies, which still hold responses from before the compactions
    for (const [k, proxy] of proxies.entries()) {
      const proxied = new ProxiedClient(proxiedParams, proxy, () => false)
      await proxied.catchUp()
      assert.ok(proxied.fromCache > 0, `proxy ${k} answered some requests`)
      assert.deepEqual(asSorted(proxied.rows), truth, `through caching proxy ${k}: equal to SELECT`)
    }
  })
})
