// The official client in long-poll live mode: two shapes (a where clause with params; replica
// full with a column subset) follow 50 random transactions; a client started mid-stream
// catches up; a DELETE of a shape (rotation) makes the client re-sync.

import { after, before, describe, it } from 'node:test'
import assert from 'node:assert/strict'

import { closePool, createTable, dropTable, fetchRaw, query, SHAPE_URL, uniqueTable } from '../lib/helpers.mjs'
import {
  enableShapeDeletion,
  prng,
  RawShape,
  randomTxStatements,
  resetShapeDeletion,
  runTx,
  startClientShape,
  waitRowsEqual,
} from '../lib/live_helpers.mjs'

const table = uniqueTable('live_client')
const seed = Number(process.env.LIVE_SEED ?? Date.now() % 1000000)
const rand = prng(seed)

// Shape W: a where clause with params. Shape P: replica full, columns id, a, b.
const W_PARAMS = { table, where: 'b > $1 AND a <> $2', params: ['20', 'skip'] }
const W_SQL = `SELECT id, a, b, c FROM ${table} WHERE b > 20 AND a <> 'skip'`
const P_PARAMS = { table, columns: ['id', 'a', 'b'], replica: 'full' }
const P_SQL = `SELECT id, a, b FROM ${table}`

const clients = []
const ids = new Set()
let nextId = 1000
let txCount = 0

async function randomBatch(n) {
  for (let i = 0; i < n; i++) {
    await runTx(randomTxStatements(rand, table, ids, () => nextId++))
    txCount++
  }
}

after(async () => {
  for (const c of clients) c.close()
  await resetShapeDeletion().catch(() => {})
  await dropTable(table)
  await closePool()
})

describe(`official client, long-poll live mode (seed ${seed})`, () => {
  let W
  let P

  before(async () => {
    await enableShapeDeletion()
    await createTable([
      `CREATE TABLE ${table} (id int PRIMARY KEY, a text, b int, c text)`,
      `INSERT INTO ${table} SELECT g, 'row ' || g, g * 3, CASE WHEN g % 2 = 0 THEN NULL ELSE 'c' END FROM generate_series(1, 20) g`,
    ])
    for (const { id } of (await query(`SELECT id FROM ${table}`)).rows) ids.add(id)
    W = startClientShape(W_PARAMS)
    P = startClientShape(P_PARAMS)
    clients.push(W, P)
    await waitRowsEqual(W, W_SQL, 'W initial sync')
    await waitRowsEqual(P, P_SQL, 'P initial sync')
  })

  it('two shapes stay in sync across 50 random transactions; a client started mid-stream catches up', async () => {
    let late
    for (let batch = 0; batch < 10; batch++) {
      await randomBatch(5)
      await waitRowsEqual(W, W_SQL, `seed ${seed}: W after ${txCount} transactions`)
      await waitRowsEqual(P, P_SQL, `seed ${seed}: P after ${txCount} transactions`)
      if (batch === 4) {
        late = startClientShape(W_PARAMS)
        clients.push(late)
        await waitRowsEqual(late, W_SQL, `seed ${seed}: late client after ${txCount} transactions`)
        assert.equal(late.stream.shapeHandle, W.stream.shapeHandle, 'the late client uses the same shape')
      }
      if (late) await waitRowsEqual(late, W_SQL, `seed ${seed}: late client after ${txCount} transactions`)
    }
    assert.equal(txCount, 50)
    for (const c of [W, P, late]) {
      const live = c.requests.filter((u) => u.searchParams.get('live') === 'true')
      assert.ok(live.length > 0, 'the client went live')
      assert.ok(live.every((u) => u.searchParams.get('live_sse') === null), 'long-poll requests, not SSE')
      assert.ok(live.some((u) => /^\d+_\d+$/.test(u.searchParams.get('offset')) && !u.searchParams.get('offset').startsWith('0_')),
        'live requests resume from real log offsets')
    }
  })

  it('after a DELETE of the shape the client re-syncs on a new handle and still equals the SELECT', async () => {
    const oldHandle = P.stream.shapeHandle
    assert.ok(oldHandle)
    // The client warns when a 409 names no new handle ("a proxy or CDN stripping required
    // headers"): every 409 must name one, for a live request parked at the rotation too.
    const warnings = []
    const before = P.requests.length
    const warn = console.warn
    console.warn = (...args) => warnings.push(args.map(String).join(' '))
    try {
      const del = await fetchRaw(`${SHAPE_URL}?handle=${encodeURIComponent(oldHandle)}`, { method: 'DELETE' })
      assert.equal(del.status, 202, del.text)
      await randomBatch(5)
      await waitRowsEqual(P, P_SQL, `seed ${seed}: P after DELETE + 5 transactions`)
    } finally {
      console.warn = warn
    }
    assert.deepEqual(warnings, [], 'the official client warned of nothing')
    assert.notEqual(P.stream.shapeHandle, oldHandle, 'the client moved to a new handle')
    const resync = P.requests.slice(before).filter((u) => u.searchParams.get('offset') === '-1')
    assert.ok(resync.length >= 1, 'the client re-fetched from offset -1 after the rotation')
    assert.ok(resync.every((u) => u.searchParams.get('handle') === P.stream.shapeHandle),
      `the client went straight to the handle the 409 named: ${resync.map((u) => u.searchParams.get('handle'))}`)
    await randomBatch(5)
    await waitRowsEqual(P, P_SQL, `seed ${seed}: P after rotation + 10 transactions`)
    await waitRowsEqual(W, W_SQL, `seed ${seed}: W unaffected by the other shape's DELETE`)
  })
})

// Strictly applies change messages to a Map key -> value: an insert of a present key, or an
// update/delete of an absent key, is a protocol error (a change lost or sent twice).
function applyStrict(rows, messages, label) {
  for (const m of messages) {
    if (!('key' in m)) continue
    const op = m.headers.operation
    if (op === 'insert') {
      assert.ok(!rows.has(m.key), `${label}: insert of a key already present (duplicate change?): ${JSON.stringify(m)}`)
      rows.set(m.key, { ...m.value })
    } else if (op === 'update') {
      assert.ok(rows.has(m.key), `${label}: update of an absent key (lost insert?): ${JSON.stringify(m)}`)
      rows.set(m.key, { ...rows.get(m.key), ...m.value })
    } else if (op === 'delete') {
      assert.ok(rows.has(m.key), `${label}: delete of an absent key: ${JSON.stringify(m)}`)
      rows.delete(m.key)
    }
  }
}

describe(`snapshot / replication stitching under concurrent writes (seed ${seed})`, () => {
  const t = uniqueTable('live_stitch')

  before(async () => {
    await createTable([
      `CREATE TABLE ${t} (id int PRIMARY KEY, a text, b int)`,
      // Set here: the writers below hold the table's lock almost all the time, so
      // shape_sync.manage_replica_identity would answer the first shape 503.
      `ALTER TABLE ${t} REPLICA IDENTITY FULL`,
      `INSERT INTO ${t} SELECT g, 'r' || g, g % 100 FROM generate_series(1, 20000) g`,
    ])
  })
  after(async () => {
    await dropTable(t)
  })

  it('shapes created while transactions commit get every change exactly once', async () => {
    const r = prng(seed + 1)
    let stop = false
    let next = 100000
    let writes = 0
    // Three writers, so that snapshots see transactions in progress (xip_list).
    const writer = Promise.all(
      [0, 1, 2].map(async (w) => {
        while (!stop) {
          const id = 1 + Math.floor(r() * 20000)
          await runTx([
            `UPDATE ${t} SET a = a || 'x', b = (b + 7) % 100 WHERE id = ${id}`,
            `INSERT INTO ${t} VALUES (${next++}, 'new${w}', ${Math.floor(r() * 100)})`,
            // Writer 0 keeps its transactions open while the others commit, so that
            // snapshots have transactions in progress below their xmax (xip_list).
            `SELECT pg_sleep(${w === 0 ? 0.1 : 0})`,
            `DELETE FROM ${t} WHERE id = ${1 + Math.floor(r() * 20000)}`,
          ])
          writes++
        }
      }),
    )

    // Six new shapes (six snapshots), started while the writer runs.
    const defs = [1, 2, 3, 4, 5, 6].map((k) => ({ table: t, where: `id % 7 <> ${k}` }))
    const sessions = []
    try {
      for (const def of defs) {
        const s = new RawShape(def)
        await s.sync()
        sessions.push(s)
        await new Promise((res) => setTimeout(res, 30))
      }
    } finally {
      stop = true
      await writer
    }
    assert.ok(writes > 10, `the writers committed transactions during the snapshots (${writes})`)
    if (process.env.LIVE_DEBUG) {
      console.log(`writes: ${writes}; snapshot-ends: ${sessions.map((s) => JSON.stringify(s.snapshot.find((m) => m.headers?.control === "snapshot-end")?.headers)).join(' ')}`)
    }
    const marker = 999999 // 999999 % 7 = 0: inside every shape
    await runTx([`INSERT INTO ${t} VALUES (${marker}, 'marker', 0)`])

    for (const [i, s] of sessions.entries()) {
      const label = `shape ${i} (${s.params.where})`
      const rows = new Map()
      applyStrict(rows, s.snapshot, `${label} snapshot`)
      const changes = await s.collectUntil((m) => m.value?.id === String(marker), { label, timeoutMs: 10000 })
      applyStrict(rows, changes, `${label} live`)
      const expected = (await query(`SELECT id::text, a, b::text FROM ${t} WHERE ${s.params.where}`)).rows
      assert.equal(rows.size, expected.length, `${label}: row count`)
      for (const row of expected) {
        const got = rows.get(`"public"."${t}"/"${row.id}"`)
        assert.deepEqual(got, row, `${label}: row ${row.id}`)
      }
    }
  })
})
