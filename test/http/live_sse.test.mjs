// Live mode over Server-Sent Events (live=true&live_sse=true, protocol §5.3): raw event
// framing and headers, and the official client with liveSse.

import { after, before, describe, it } from 'node:test'
import assert from 'node:assert/strict'

import { closePool, createTable, dropTable, electricKey, query, uniqueTable } from '../lib/helpers.mjs'
import {
  assertChangeHeaders,
  assertTxStructure,
  CACHE_SSE,
  DIGITS,
  openSse,
  prng,
  RawShape,
  randomTxStatements,
  runTx,
  startClientShape,
  waitRowsEqual,
} from '../lib/live_helpers.mjs'

const tables = []
after(async () => {
  for (const t of tables) await dropTable(t)
  await closePool()
})

// Checks the data events of one batch: change events, then exactly one up-to-date at the end
// whose global_last_seen_lsn is one past `lsn`, the batch's commit LSN (the client resumes from
// "<global_last_seen_lsn>_0": past the whole transaction). Returns the change messages.
function checkBatch(events, lsn, label) {
  for (const ev of events) {
    assert.match(ev.raw, /^data: [^\n]+\n\n$/, `${label}: event framing is "data: <json>\\n\\n": ${JSON.stringify(ev.raw)}`)
    assert.ok(ev.data && typeof ev.data === 'object', `${label}: event data is JSON: ${ev.rawData}`)
  }
  const last = events[events.length - 1].data
  const next = String(BigInt(lsn) + 1n)
  assert.deepEqual(last, { headers: { control: 'up-to-date', global_last_seen_lsn: next } }, `${label}: final up-to-date`)
  const changes = events.slice(0, -1).map((e) => e.data)
  for (const m of changes) {
    assert.ok('key' in m, `${label}: only changes before up-to-date: ${JSON.stringify(m)}`)
    assertChangeHeaders(m, label)
  }
  return changes
}

describe('SSE: raw stream', () => {
  const table = uniqueTable('sse_raw')
  tables.push(table)
  const key = (id) => electricKey('public', table, [String(id)])
  let shape
  let startOffset
  const txs = []
  const lsns = [] // commit LSNs of tx1 and tx2, as decimal strings

  before(async () => {
    await createTable([`CREATE TABLE ${table} (id int PRIMARY KEY, a text, b int)`, `INSERT INTO ${table} VALUES (1, 'one', 1)`])
    shape = await new RawShape({ table }).sync()
    startOffset = shape.offset
  })

  it('at the end of the log: 200 text/event-stream at once, then one batch of events per transaction', async () => {
    // before any change is committed, and before long_poll_timeout (20 s, the default) could
    // have sent them: 15 s is a deadline against that, not a time target
    const t0 = Date.now()
    const sse = await openSse({ table, handle: shape.handle, offset: shape.offset, cursor: '' }, { timeoutMs: 15000 })
    try {
      assert.ok(Date.now() - t0 < 15000, `headers arrive with no change yet, before any timeout (${Date.now() - t0} ms)`)
      const { res } = sse
      assert.equal(res.status, 200)
      assert.match(res.headers.get('content-type') ?? '', /^text\/event-stream/, 'content-type')
      assert.equal(res.headers.get('cache-control'), CACHE_SSE, 'cache-control')
      assert.equal(res.headers.get('electric-handle'), shape.handle, 'electric-handle')
      assert.equal(res.headers.get('electric-offset'), shape.offset, 'electric-offset: the current end of the log')
      assert.match(res.headers.get('electric-cursor') ?? '', DIGITS, 'electric-cursor is an integer string')
      assert.equal(res.headers.get('electric-schema'), null, 'no electric-schema on a live response')

      const tx1 = await runTx([`INSERT INTO ${table} VALUES (2, 'two', 2), (3, 'three ✓', NULL)`])
      const batch1 = await sse.nextBatch()
      const c1 = checkBatch(batch1, batch1[0].data.headers.lsn, 'tx1')
      assert.equal(c1.length, 2, 'two changes in tx1')
      assertTxStructure(c1, 'tx1')
      const lsn1 = c1[0].headers.lsn
      assert.ok(tx1.before < BigInt(lsn1) && BigInt(lsn1) <= tx1.after, 'tx1 lsn within its WAL range')
      assert.deepEqual(c1.map((m) => m.headers.op_position), [0, 2])
      assert.deepEqual(c1.map((m) => m.headers.txids), [[tx1.xid], [tx1.xid]])
      assert.deepEqual(
        c1.map(({ key: k, value, headers: { operation } }) => ({ k, value, operation })),
        [
          { k: key(2), value: { id: '2', a: 'two', b: '2' }, operation: 'insert' },
          { k: key(3), value: { id: '3', a: 'three ✓', b: null }, operation: 'insert' },
        ],
      )
      txs.push(tx1)
      lsns.push(lsn1)

      const tx2 = await runTx([`UPDATE ${table} SET a = 'uno' WHERE id = 1`, `DELETE FROM ${table} WHERE id = 2`])
      const batch2 = await sse.nextBatch()
      const c2 = checkBatch(batch2, batch2[0].data.headers.lsn, 'tx2')
      const lsn2 = c2[0].headers.lsn
      assert.ok(BigInt(lsn2) > BigInt(lsn1), 'tx2 after tx1')
      assert.ok(tx2.before < BigInt(lsn2) && BigInt(lsn2) <= tx2.after, 'tx2 lsn within its WAL range')
      assertTxStructure(c2, 'tx2')
      assert.deepEqual(
        c2.map(({ key: k, value, headers: { operation, op_position } }) => ({ k, value, operation, op_position })),
        [
          { k: key(1), value: { id: '1', a: 'uno' }, operation: 'update', op_position: 0 },
          { k: key(2), value: { id: '2' }, operation: 'delete', op_position: 2 },
        ],
      )
      txs.push(tx2)
      lsns.push(lsn2)
    } finally {
      sse.close()
    }
  })

  it('with data already waiting: the events, one up-to-date, then the stream ends', async () => {
    assert.equal(txs.length, 2, 'needs the previous test')
    const sse = await openSse({ table, handle: shape.handle, offset: startOffset, cursor: '' })
    try {
      assert.equal(sse.res.status, 200)
      assert.match(sse.res.headers.get('content-type') ?? '', /^text\/event-stream/)
      assert.equal(sse.res.headers.get('cache-control'), CACHE_SSE)
      const events = await sse.nextBatch()
      const changes = checkBatch(events, lsns[1], 'catch-up over SSE')
      assert.deepEqual(changes.map((m) => `${m.headers.operation} ${m.key}`), [
        `insert ${key(2)}`,
        `insert ${key(3)}`,
        `update ${key(1)}`,
        `delete ${key(2)}`,
      ])
      assertTxStructure(changes, 'catch-up over SSE')
      assert.equal(await sse.expectEnd(), true, 'the stream ends after the up-to-date')
    } finally {
      sse.close()
    }

    // Where the client resumes after that up-to-date, "<global_last_seen_lsn>_0": nothing again.
    // (With the commit LSN itself there, as Electric sends it, every op of tx2 but its first came
    // again: a stream paused by requestSnapshot and resumed delivered them twice.)
    const resume = await openSse({ table, handle: shape.handle, offset: `${BigInt(lsns[1]) + 1n}_0`, cursor: '' })
    try {
      assert.equal(resume.res.status, 200)
      await assert.rejects(resume.next(700), /no SSE event within/, 'no event: tx2 is not sent again')
    } finally {
      resume.close()
    }

    // From the end of tx1: only tx2.
    const sse2 = await openSse({ table, handle: shape.handle, offset: `${lsns[0]}_2`, cursor: '' })
    try {
      const events = await sse2.nextBatch()
      const changes = checkBatch(events, lsns[1], 'catch-up from tx1')
      assert.deepEqual(changes.map((m) => `${m.headers.operation} ${m.key}`), [`update ${key(1)}`, `delete ${key(2)}`])
      assert.equal(await sse2.expectEnd(), true, 'the stream ends after the up-to-date')
    } finally {
      sse2.close()
    }
  })
})

describe('SSE: rotation', () => {
  const table = uniqueTable('sse_rot')
  tables.push(table)

  it('TRUNCATE ends an open SSE stream; an SSE request with the old handle then gets 409 with a new handle', async () => {
    await createTable([`CREATE TABLE ${table} (id int PRIMARY KEY, a text)`, `INSERT INTO ${table} VALUES (1, 'one')`])
    const shape = await new RawShape({ table }).sync()
    const sse = await openSse({ table, handle: shape.handle, offset: shape.offset, cursor: '' })
    try {
      assert.equal(sse.res.status, 200)
      await runTx([`TRUNCATE ${table}`])
      assert.equal(await sse.expectEnd(), true, 'the stream ends without data events')
    } finally {
      sse.close()
    }
    const again = await openSse({ table, handle: shape.handle, offset: shape.offset, cursor: '' })
    try {
      assert.equal(again.res.status, 409)
      assert.deepEqual(JSON.parse(await again.text()), [{ headers: { control: 'must-refetch' } }])
      const h = again.res.headers.get('electric-handle')
      assert.ok(h && h !== shape.handle, `409 names a new handle (${h})`)
    } finally {
      again.close()
    }
  })
})

describe('SSE: official client with liveSse', () => {
  const table = uniqueTable('sse_client')
  tables.push(table)
  let client

  before(async () => {
    await createTable([
      `CREATE TABLE ${table} (id int PRIMARY KEY, a text, b int, c text)`,
      `INSERT INTO ${table} SELECT g, 'row ' || g, g, NULL FROM generate_series(1, 5) g`,
    ])
  })
  after(() => client?.close())

  it('a Shape stays in sync across 20 random transactions', async () => {
    const seed = Number(process.env.LIVE_SEED ?? Date.now() % 1000000)
    const rand = prng(seed)
    const label = `seed ${seed}`
    client = startClientShape({ table }, { liveSse: true })
    const sql = `SELECT id, a, b, c FROM ${table}`
    await waitRowsEqual(client, sql, `${label}: initial sync`)
    const ids = new Set((await query(`SELECT id FROM ${table}`)).rows.map((r) => r.id))
    let next = 100
    for (let i = 0; i < 20; i++) {
      await runTx(randomTxStatements(rand, table, ids, () => next++))
      await waitRowsEqual(client, sql, `${label}: after transaction ${i + 1}`)
    }
    const live = client.requests.filter((u) => u.searchParams.get('live') === 'true')
    const sse = live.filter((u) => u.searchParams.get('live_sse') === 'true')
    assert.ok(sse.length > 0, `the client made SSE requests (${client.requests.map((u) => u.search).join('\n')})`)
    assert.equal(sse.length, live.length, 'every live request was SSE: the client did not fall back to long polling')
    assert.ok(sse.length <= 10, `an SSE connection stays open across transactions (${sse.length} SSE requests for 20 transactions)`)
    for (const u of sse) assert.equal(u.searchParams.get('experimental_live_sse'), 'true')
    if (process.env.LIVE_DEBUG) console.log(client.requests.map((u) => u.search).join('\n'))
  })
})
