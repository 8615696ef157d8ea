// Shape rotation and lifecycle in live mode: TRUNCATE, DROP TABLE, ALTER TABLE, DELETE
// /v1/shape, offset=now, out-of-bounds offsets, and ETag/304 on a mid-log catch-up
// (protocol §1.3, §3, §4.5, §5.2, §6).

import { after, before, describe, it } from 'node:test'
import assert from 'node:assert/strict'

import { closePool, createTable, dropTable, fetchRaw, fetchShape, shapeQuery, SHAPE_URL, sleep, uniqueTable } from '../lib/helpers.mjs'
import {
  compareOffsets,
  currentLsn,
  enableShapeDeletion,
  holdLive,
  RawShape,
  resetLongPollTimeout,
  resetShapeDeletion,
  runTx,
  setLongPollTimeout,
  waitFor,
} from '../lib/live_helpers.mjs'

const LONG_POLL_MS = 2000
const MUST_REFETCH = [{ headers: { control: 'must-refetch' } }]
const CACHE_409 = 'public, max-age=60, must-revalidate'
const CACHE_409_NO_HANDLE = 'public, max-age=1, must-revalidate'
const CACHE_CATCHUP = 'public, max-age=60, stale-while-revalidate=300'
const MISMATCH =
  'The specified shape definition and handle do not match. Please ensure the shape definition is correct or omit the shape handle from the request to obtain a new one.'

const tables = []
function newTable(prefix) {
  const t = uniqueTable(prefix)
  tables.push(t)
  return t
}

// Checks a 409 must-refetch response; returns its electric-handle (or null).
// A 409 names the shape that replaces the one that went, as Electric's does (the official
// client warns of a proxy stripping headers otherwise); `needHandle: false` where no shape can
// (the table is gone).
function assert409(res, label, { oldHandle, needHandle = true } = {}) {
  assert.equal(res.status, 409, `${label}: status 409 (got ${res.status} ${res.text.slice(0, 300)})`)
  assert.deepEqual(res.body, MUST_REFETCH, `${label}: body`)
  assert.match(res.headers.get('content-type') ?? '', /^application\/json/, `${label}: content-type`)
  const h = res.headers.get('electric-handle')
  if (needHandle) assert.ok(h, `${label}: 409 carries the new electric-handle`)
  else assert.equal(h, null, `${label}: no shape replaces it, and the 409 names none`)
  if (h) {
    assert.notEqual(h, oldHandle, `${label}: the 409's handle is a new one`)
    assert.equal(res.headers.get('cache-control'), CACHE_409, `${label}: cache-control of a 409 with a handle`)
  } else {
    assert.equal(res.headers.get('cache-control'), CACHE_409_NO_HANDLE, `${label}: cache-control of a 409 without a handle`)
  }
  return h
}

// Non-live request at the shape's current offset with its (possibly old) handle.
// A new shape's first request right after a table event: a 503 (its resolution met the event)
// is retried after its retry-after, as the official client does, for 15 s at most.
async function fetchFresh(params) {
  const until = Date.now() + 15000
  for (;;) {
    const res = await fetchShape(params)
    if (res.status !== 503 || Date.now() > until) return res
    await sleep(1000 * Number(res.headers.get('retry-after') ?? 1))
  }
}

function catchUp(shape, extra = {}) {
  return fetchShape({ ...shape.params, handle: shape.handle, offset: shape.offset, ...extra })
}

after(async () => {
  await resetLongPollTimeout().catch(() => {})
  await resetShapeDeletion().catch(() => {})
  for (const t of tables) await dropTable(t)
  await closePool()
})

describe('live: rotation and shape lifecycle', () => {
  before(async () => {
    await setLongPollTimeout(LONG_POLL_MS)
    await enableShapeDeletion()
  })

  it('TRUNCATE: a waiting live request gets 409 must-refetch; the old handle then gets 409 with a new handle', async () => {
    const table = newTable('rot_trunc')
    await createTable([`CREATE TABLE ${table} (id int PRIMARY KEY, a text)`, `INSERT INTO ${table} VALUES (1, 'x'), (2, 'y')`])
    const shape = await new RawShape({ table }).sync()
    const filtered = await new RawShape({ table, where: 'id > 1', columns: ['id'] }).sync()
    const { response: pending } = await holdLive(shape)
    await runTx([`TRUNCATE ${table}`])
    const live = await pending
    const liveHandle = assert409(live, 'live request during TRUNCATE', { oldHandle: shape.handle })

    const later = await catchUp(shape)
    const newHandle = assert409(later, 'old handle after TRUNCATE', { oldHandle: shape.handle })
    assert.equal(liveHandle, newHandle, 'both 409s name the same new handle')

    const fresh = await fetchFresh({ table, offset: '-1', handle: newHandle })
    assert.equal(fresh.status, 200, fresh.text)
    assert.equal(fresh.headers.get('electric-handle'), newHandle, 'offset=-1 serves the new handle')
    assert.deepEqual(fresh.body.map((m) => m.headers.control ?? m.headers.operation), ['snapshot-end'], 'the new snapshot is empty')

    // A shape of the same table with a where clause and a column list rotates too.
    const filteredLater = await waitFor(
      async () => {
        const r = await catchUp(filtered)
        return r.status === 409 ? r : null
      },
      { timeoutMs: 30000, what: 'the where-clause shape to get 409 after TRUNCATE' },
    )
    assert409(filteredLater, 'where-clause shape after TRUNCATE', { oldHandle: filtered.handle })

    // The old handle also gets 409 on a live request.
    const liveAgain = await shape.request({ timeoutMs: 5000 })
    assert409(liveAgain, 'live request with the old handle after TRUNCATE', { oldHandle: shape.handle })
  })

  it('DROP TABLE: a waiting live request gets 409; after re-creating the table the old handle gets 409', async () => {
    const table = newTable('rot_drop')
    await createTable([`CREATE TABLE ${table} (id int PRIMARY KEY, a text)`, `INSERT INTO ${table} VALUES (1, 'x')`])
    const shape = await new RawShape({ table }).sync()
    const { response: pending } = await holdLive(shape)
    await runTx([`DROP TABLE ${table}`])
    assert409(await pending, 'live request during DROP TABLE', { oldHandle: shape.handle, needHandle: false })

    // While the table does not exist, the definition itself is invalid.
    const missing = await catchUp(shape)
    assert.equal(missing.status, 400, missing.text)
    assert.deepEqual(missing.body, {
      message: 'Invalid request',
      errors: {
        table: [
          `Table "public"."${table}" does not exist. If the table name contains capitals or special characters you must quote it.`,
        ],
      },
    })

    await createTable([`CREATE TABLE ${table} (id int PRIMARY KEY, a text)`, `INSERT INTO ${table} VALUES (2, 'y')`])
    const later = await catchUp(shape)
    const newHandle = assert409(later, 'old handle after DROP + CREATE', { oldHandle: shape.handle })
    const fresh = await fetchFresh({ table, offset: '-1', handle: newHandle })
    assert.equal(fresh.status, 200, fresh.text)
    assert.equal(fresh.headers.get('electric-handle'), newHandle)
    assert.deepEqual(fresh.body.filter((m) => 'key' in m).map((m) => m.value), [{ id: '2', a: 'y' }], 'the new table\'s rows')
  })

  // before, only the schema's oid was compared: a renamed schema kept its shapes, and their
  // clients kept the old table under a name that now means another
  it('ALTER SCHEMA RENAME: a waiting live request gets 409; the name then names the new table', async () => {
    const schema = uniqueTable('rot_nsp')
    const table = `${schema}.items`
    await createTable([
      `CREATE SCHEMA ${schema}`,
      `CREATE TABLE ${table} (id int PRIMARY KEY, a text)`,
      `ALTER TABLE ${table} REPLICA IDENTITY FULL`,
      `INSERT INTO ${table} VALUES (1, 'old')`,
    ])
    try {
      const shape = await new RawShape({ table }).sync()
      const { response: pending } = await holdLive(shape)
      await runTx([
        `ALTER SCHEMA ${schema} RENAME TO ${schema}_old`,
        `CREATE SCHEMA ${schema}`,
        `CREATE TABLE ${table} (id int PRIMARY KEY, a text)`,
        `ALTER TABLE ${table} REPLICA IDENTITY FULL`,
        `INSERT INTO ${table} VALUES (2, 'new')`,
      ])
      await runTx([`INSERT INTO ${schema}_old.items VALUES (3, 'old table, later')`])
      assert409(await pending, 'live request during ALTER SCHEMA RENAME', { oldHandle: shape.handle })
      const fresh = await fetchFresh({ table, offset: '-1' })
      assert.equal(fresh.status, 200, fresh.text)
      assert.notEqual(fresh.headers.get('electric-handle'), shape.handle)
      assert.deepEqual(fresh.body.filter((m) => 'key' in m).map((m) => m.value), [{ id: '2', a: 'new' }], 'the new table\'s rows')
    } finally {
      await createTable([`DROP SCHEMA IF EXISTS ${schema} CASCADE`, `DROP SCHEMA IF EXISTS ${schema}_old CASCADE`])
    }
  })

  it('ALTER TABLE ADD COLUMN rotates a shape without a column list, not one whose list omits the column', async () => {
    const table = newTable('rot_alter')
    await createTable([`CREATE TABLE ${table} (id int PRIMARY KEY, a text, b int)`, `INSERT INTO ${table} VALUES (1, 'x', 1)`])
    const all = await new RawShape({ table }).sync()
    const cols = await new RawShape({ table, columns: ['id', 'a'] }).sync()
    const { response: colsPending } = await holdLive(cols)
    const { response: allPending } = await holdLive(all, 0)

    await runTx([`ALTER TABLE ${table} ADD COLUMN z text`])
    const liveHandle = assert409(await allPending, 'live request of the no-column-list shape during ALTER', { oldHandle: all.handle })
    const res = await waitFor(
      async () => {
        const r = await catchUp(all)
        return r.status === 409 ? r : null
      },
      { timeoutMs: 30000, what: 'the old handle of the no-column-list shape to get 409 after ALTER TABLE ADD COLUMN' },
    )
    const newHandle = assert409(res, 'old handle after ALTER', { oldHandle: all.handle })
    assert.equal(liveHandle, newHandle, 'both 409s name the same new handle')
    const fresh = await fetchFresh({ table, offset: '-1', handle: newHandle })
    assert.equal(fresh.status, 200, fresh.text)
    assert.ok('z' in JSON.parse(fresh.headers.get('electric-schema')), 'the new shape has the new column')
    assert.deepEqual(fresh.body.filter((m) => 'key' in m).map((m) => m.value), [{ id: '1', a: 'x', b: '1', z: null }])

    // The shape with a column list is untouched: its live request, held across the ALTER,
    // answers 200 (a long-poll timeout, or the insert below), never 409.
    const tx = await runTx([`INSERT INTO ${table} VALUES (2, 'y', 2, 'zz')`])
    const changes = cols.accept(await colsPending, 'column-list shape live request held across ALTER')
    if (changes.length === 0) changes.push(...(await cols.collectUntil(() => true, { label: 'column-list shape after ALTER' })))
    assert.deepEqual(changes.map((m) => m.value), [{ id: '2', a: 'y' }], 'the insert, projected')
    assert.deepEqual(changes[0].headers.txids, [tx.xid])
    const again = await fetchShape({ table, columns: ['id', 'a'], offset: '-1' })
    assert.equal(again.headers.get('electric-handle'), cols.handle, 'the column-list shape keeps its handle')
    const catchup = await catchUp(cols)
    assert.equal(catchup.status, 200, catchup.text)
  })

  it('DELETE /v1/shape?handle=H answers 202 and ends a waiting live request with 409', async () => {
    const table = newTable('rot_delete')
    await createTable([`CREATE TABLE ${table} (id int PRIMARY KEY, a text)`, `INSERT INTO ${table} VALUES (1, 'x')`])
    const shape = await new RawShape({ table }).sync()
    const { response: pending } = await holdLive(shape)
    const del = await fetchRaw(`${SHAPE_URL}?handle=${encodeURIComponent(shape.handle)}`, { method: 'DELETE' })
    assert.equal(del.status, 202, del.text)
    assert.equal(del.text, '', 'empty body')
    assert.equal(del.headers.get('cache-control'), 'no-cache')
    const liveHandle = assert409(await pending, 'live request during DELETE', { oldHandle: shape.handle })

    const later = await catchUp(shape)
    const newHandle = assert409(later, 'old handle after DELETE', { oldHandle: shape.handle })
    assert.equal(liveHandle, newHandle, 'both 409s name the same new handle')
    const fresh = await fetchFresh({ table, offset: '-1' })
    assert.equal(fresh.headers.get('electric-handle'), newHandle, 'the definition now maps to the new handle')

    // Deleting it again by definition.
    const byDef = await fetchRaw(`${SHAPE_URL}?${shapeQuery({ table })}`, { method: 'DELETE' })
    assert.equal(byDef.status, 202, byDef.text)
    const gone = await fetchRaw(`${SHAPE_URL}?handle=${encodeURIComponent(newHandle)}`, { method: 'DELETE' })
    assert.equal(gone.status, 404, `deleted by definition: the handle is gone (${gone.text})`)
  })

  it('DELETE with an unknown handle answers 404; with a definition and a mismatched handle 400', async () => {
    const unknown = await fetchRaw(`${SHAPE_URL}?handle=123-456`, { method: 'DELETE' })
    assert.equal(unknown.status, 404, unknown.text)
    assert.deepEqual(unknown.body, { message: 'No existing shape found' })
    assert.match(unknown.headers.get('content-type') ?? '', /^application\/json/)

    const t1 = newTable('rot_mis1')
    const t2 = newTable('rot_mis2')
    await createTable([`CREATE TABLE ${t1} (id int PRIMARY KEY)`, `CREATE TABLE ${t2} (id int PRIMARY KEY)`])
    const s1 = await new RawShape({ table: t1 }).sync()
    const s2 = await new RawShape({ table: t2 }).sync()
    const mismatch = await fetchRaw(`${SHAPE_URL}?${shapeQuery({ table: t1, handle: s2.handle })}`, { method: 'DELETE' })
    assert.equal(mismatch.status, 400, mismatch.text)
    assert.deepEqual(mismatch.body, { message: MISMATCH })
    // Nothing was deleted.
    for (const s of [s1, s2]) {
      const r = await catchUp(s)
      assert.equal(r.status, 200, `shape ${s.params.table} still served: ${r.text}`)
    }
  })

  describe('with a log of several transactions', () => {
    const table = newTable('rot_log')
    let shape
    const offsets = [] // electric-offset after each transaction
    before(async () => {
      await createTable([`CREATE TABLE ${table} (id int PRIMARY KEY, a text)`, `INSERT INTO ${table} VALUES (1, 'x')`])
      shape = await new RawShape({ table }).sync()
      for (let i = 0; i < 3; i++) {
        await runTx([`INSERT INTO ${table} VALUES (${10 + i}, 'v${i}')`, `UPDATE ${table} SET a = 'u${i}' WHERE id = 1`])
        await shape.collectUntil((m) => m.headers.last === true)
        offsets.push(shape.offset)
      }
    })

    it('offset=now answers only up-to-date with the shape\'s current last offset', async () => {
      const res = await fetchShape({ table, offset: 'now' })
      assert.equal(res.status, 200, res.text)
      assert.equal(res.headers.get('electric-handle'), shape.handle)
      assert.equal(res.headers.get('electric-offset'), offsets[2], 'electric-offset = the last offset of the log')
      assert.equal(res.headers.get('electric-has-data'), 'false')
      assert.ok(res.headers.has('electric-up-to-date'))
      assert.ok(res.headers.get('electric-schema'), 'electric-schema on a non-live response')
      assert.equal(res.body.length, 1, res.text)
      assert.equal(res.body[0].headers.control, 'up-to-date')
      assert.ok(BigInt(res.body[0].headers.global_last_seen_lsn) >= BigInt(offsets[2].split('_')[0]), 'global_last_seen_lsn')
    })

    it('catch-up at a mid-log offset: ETag and 304', async () => {
      const res = await fetchShape({ table, handle: shape.handle, offset: offsets[0] })
      assert.equal(res.status, 200, res.text)
      assert.equal(res.headers.get('electric-offset'), offsets[2])
      assert.ok(res.headers.has('electric-up-to-date'))
      assert.equal(res.headers.get('cache-control'), CACHE_CATCHUP)
      assert.equal(res.headers.get('etag'), `"${shape.handle}:${offsets[0]}:${offsets[2]}"`)
      const changes = res.body.filter((m) => 'key' in m)
      assert.equal(changes.length, 4, 'two transactions of two changes')
      assert.equal(res.body[res.body.length - 1].headers.control, 'up-to-date')

      const cached = await fetchShape({ table, handle: shape.handle, offset: offsets[0] }, { headers: { 'If-None-Match': res.headers.get('etag') } })
      assert.equal(cached.status, 304)
      assert.equal(cached.text, '')
      assert.equal(cached.headers.get('etag'), res.headers.get('etag'))
      assert.equal(cached.headers.get('electric-offset'), offsets[2])

      // An offset that is not an entry boundary: (lsn - 1)_0 is before the first transaction.
      const [l0] = offsets[0].split('_')
      const mid = `${BigInt(l0) - 1n}_0`
      const res2 = await fetchShape({ table, handle: shape.handle, offset: mid })
      assert.equal(res2.status, 200, res2.text)
      assert.equal(res2.body.filter((m) => 'key' in m).length, 6, 'all three transactions')
      const cached2 = await fetchShape({ table, handle: shape.handle, offset: mid }, { headers: { 'If-None-Match': `"other", ${res2.headers.get('etag')}` } })
      assert.equal(cached2.status, 304)
    })

    it('an out-of-bounds offset waits about long_poll_timeout/2, then answers 400', async () => {
      const huge = '9000000000000000000_0'
      const t0 = Date.now()
      const [plain, live] = await Promise.all([
        fetchShape({ table, handle: shape.handle, offset: huge }, { timeoutMs: 30000 }),
        fetchShape({ table, handle: shape.handle, offset: huge, live: 'true', cursor: '' }, { timeoutMs: 30000 }),
      ])
      const elapsed = Date.now() - t0
      for (const [res, label] of [[plain, 'non-live'], [live, 'live']]) {
        assert.equal(res.status, 400, `${label}: ${res.text}`)
        assert.deepEqual(res.body, { message: 'Invalid request', errors: { offset: ['out of bounds for this shape'] } }, label)
        assert.equal(res.headers.get('cache-control'), 'no-store', label)
      }
      assert.ok(elapsed >= LONG_POLL_MS / 2 - 300, `waited about long_poll_timeout/2 (${elapsed} ms)`)
      // the wait ends: within a slack a busy machine does not reach (the wait x 5 + 10 s)
      assert.ok(elapsed < (LONG_POLL_MS / 2) * 5 + 10000, `waited about long_poll_timeout/2 (${elapsed} ms)`)
    })

    it('an offset past the end that the log reaches within long_poll_timeout/2 is served normally', async () => {
      // The current WAL insert position is past the shape's last offset; the next commit is past it.
      const ahead = `${await currentLsn()}_0`
      assert.ok(compareOffsets(ahead, offsets[2]) > 0, 'the offset is out of bounds when sent')
      const t0 = Date.now()
      const pending = fetchShape({ table, handle: shape.handle, offset: ahead })
      await sleep(300)
      const tx = await runTx([`INSERT INTO ${table} VALUES (50, 'late')`])
      const res = await pending
      // a 200, not the 400 that ends the out-of-bounds wait: answered before the wait ended
      assert.equal(res.status, 200, res.text)
      console.log(`# answered ${Date.now() - t0} ms after it was sent`)
      const changes = res.body.filter((m) => 'key' in m)
      assert.deepEqual(changes.map((m) => m.value), [{ id: '50', a: 'late' }])
      assert.deepEqual(changes[0].headers.txids, [tx.xid])
      assert.equal(res.headers.get('electric-offset'), `${changes[0].headers.lsn}_0`)
      assert.ok(res.headers.has('electric-up-to-date'))
      assert.ok(res.headers.get('electric-schema'), 'a non-live response has electric-schema')
    })
  })
})
