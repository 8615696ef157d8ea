// Live long-poll mode with raw requests: headers of live responses, message headers,
// offsets, and the change semantics of replica=default / replica=full, where clauses,
// column projections, primary-key changes and rollbacks (protocol §2, §3, §4.2, §5.1).

import { after, before, describe, it } from 'node:test'
import assert from 'node:assert/strict'

import { closePool, createTable, dropTable, electricKey, query, queryAsServerText, sleep, uniqueTable } from '../lib/helpers.mjs'
import {
  assertLiveResponse,
  assertTxStructure,
  compareOffsets,
  msgOffset,
  RawShape,
  resetLongPollTimeout,
  runRolledBack,
  runTx,
  setLongPollTimeout,
} from '../lib/live_helpers.mjs'

const LONG_POLL_MS = 2000

const table = uniqueTable('live_sem')
const other = uniqueTable('live_other')
const key = (id) => electricKey('public', table, [String(id)])
const UNICODE = 'héllo ✓ 😀 "q" \\ / ñ 中文'

// Shapes over the same table. W*: where b > 10. P*: columns id,a,b (c is not selected).
const shapes = {
  D: new RawShape({ table, replica: 'default' }),
  F: new RawShape({ table, replica: 'full' }),
  WD: new RawShape({ table, where: 'b > $1', params: ['10'], replica: 'default' }),
  WF: new RawShape({ table, where: 'b > $1', params: ['10'], replica: 'full' }),
  PD: new RawShape({ table, columns: ['id', 'a', 'b'], replica: 'default' }),
  PF: new RawShape({ table, columns: ['id', 'a', 'b'], replica: 'full' }),
}
// Every change each shape has received, in order (checked for increasing offsets at the end).
const received = Object.fromEntries(Object.keys(shapes).map((k) => [k, []]))

let markerId = 1000
// Commits a marker row (inside every shape: b = 100) and collects, for every shape, the
// changes up to that marker. Returns {shapeName: [changes before the marker]}.
async function collectThroughMarker(label) {
  const id = ++markerId
  await runTx([`INSERT INTO ${table} VALUES (${id}, 'marker', 100, NULL)`])
  const out = {}
  for (const [name, shape] of Object.entries(shapes)) {
    const changes = await shape.collectUntil((m) => m.key === key(id), { label: `${label}/${name}` })
    received[name].push(...changes)
    const i = changes.findIndex((m) => m.key === key(id))
    assert.equal(i, changes.length - 1, `${label}/${name}: the marker is the last change received`)
    out[name] = changes.slice(0, -1)
  }
  return out
}

// Strips lsn/txids/op_position/last from changes so they can be compared by content;
// checks those fields against the transaction first.
function content(changes, tx, label) {
  for (const m of changes) {
    assert.deepEqual(m.headers.txids, [tx.xid], `${label}: txids is [xid of the transaction]: ${JSON.stringify(m)}`)
    const lsn = BigInt(m.headers.lsn)
    assert.ok(tx.before < lsn && lsn <= tx.after, `${label}: lsn ${lsn} within the transaction's WAL (${tx.before}, ${tx.after}]`)
    assert.equal(m.headers.lsn, changes[0].headers.lsn, `${label}: one lsn for the whole transaction`)
  }
  assertTxStructure(changes, label)
  return changes.map((m) => {
    const { lsn, txids, op_position, last, ...headers } = m.headers
    return { ...m, headers }
  })
}

const ops = (changes) => changes.map((m) => m.headers.op_position)
const rel = () => ['public', table]
const ins = (id, value) => ({ key: key(id), value, headers: { operation: 'insert', relation: rel() } })
const upd = (id, value, old_value) => ({
  key: key(id),
  value,
  ...(old_value ? { old_value } : {}),
  headers: { operation: 'update', relation: rel() },
})
const del = (id, value) => ({ key: key(id), value, headers: { operation: 'delete', relation: rel() } })

// Compares messages ignoring the key order inside objects, with a readable message.
function same(actual, expected, label) {
  assert.deepEqual(actual, expected, `${label}\nactual:   ${JSON.stringify(actual)}\nexpected: ${JSON.stringify(expected)}`)
}

after(async () => {
  await resetLongPollTimeout().catch(() => {})
  await dropTable(table)
  await dropTable(other)
  await closePool()
})

describe('live long-poll semantics', () => {
  before(async () => {
    await setLongPollTimeout(LONG_POLL_MS)
    await createTable([
      `CREATE TABLE public.${table} (id int PRIMARY KEY, a text, b int, c text)`,
      `INSERT INTO public.${table} VALUES (1, 'one', 1, 'c1'), (2, 'two', 20, 'c2'), (3, 'three', 30, NULL)`,
      `CREATE TABLE public.${other} (id int PRIMARY KEY, b int)`,
    ])
    for (const shape of Object.values(shapes)) await shape.sync()
  })

  it('a live request holds until a change, then answers 200 with the change and up-to-date', async () => {
    const D = shapes.D
    assert.ok(D.offset === '0_inf' || D.offset === '0_0' || D.offset.startsWith('0_'), `offset after the snapshot: ${D.offset}`)
    let settled = false
    const sentAt = Date.now()
    const pending = D.request().finally(() => {
      settled = true
    })
    await sleep(500)
    assert.equal(settled, false, 'the live request is still held 500 ms after it was sent, with no change')
    const tx = await runTx([
      `INSERT INTO ${table} VALUES (10, '${UNICODE.replace(/'/g, "''")}', 50, NULL), (11, 'x', 5, 'y')`,
      `UPDATE ${table} SET a = 'two2' WHERE id = 2`,
      `DELETE FROM ${table} WHERE id = 1`,
    ])
    // woken by the change, not by long_poll_timeout: the body (checked below) holds the
    // transaction, where a timeout answers only up-to-date
    const res = await pending

    // Headers, checked one by one for exact values.
    assert.equal(res.status, 200)
    assert.equal(res.headers.get('cache-control'), 'public, max-age=5, stale-while-revalidate=5')
    assert.match(res.headers.get('electric-cursor'), /^\d+$/)
    // cursor = ceil((now_s - 1728432000) / T) * T, T = long_poll_timeout in seconds, now_s in
    // whole seconds as Electric takes it (DateTime.diff truncates); cursor= was empty
    const T = LONG_POLL_MS / 1000
    // (between the windows of the request's start and its end, however long it took)
    const windows = [sentAt, Date.now()].map((ms) => Math.ceil((Math.floor(ms / 1000) - 1728432000) / T) * T)
    const cursor = Number(res.headers.get('electric-cursor'))
    assert.ok(
      cursor % T === 0 && cursor >= windows[0] && cursor <= windows[1],
      `electric-cursor ${cursor} is the current ${T} s window (${windows})`,
    )
    assert.ok(res.headers.has('electric-up-to-date'))
    assert.equal(res.headers.get('electric-schema'), null)
    const offset = res.headers.get('electric-offset')
    assert.match(offset, /^\d+_\d+$/)
    assert.ok(!offset.startsWith('0_'), `electric-offset ${offset} is a real offset`)
    const changes = D.accept(res, 'first live response')

    // The whole transaction, in WAL order, with op positions 0, 2, 4, 6.
    assert.equal(changes.length, 4, `four changes: ${res.text}`)
    const lsn = changes[0].headers.lsn
    assert.deepEqual(ops(changes), [0, 2, 4, 6], 'op positions step by 2 from 0')
    assert.equal(offset, `${lsn}_6`, 'electric-offset is the last op of the transaction')
    assert.deepEqual(res.body[res.body.length - 1], { headers: { control: 'up-to-date', global_last_seen_lsn: lsn } })
    assert.deepEqual(changes.map((m) => 'last' in m.headers), [false, false, false, true], 'last only on the final op')
    received.D.push(...changes)
    same(content(changes, tx, 'first tx/D'), [
      ins(10, { id: '10', a: UNICODE, b: '50', c: null }),
      ins(11, { id: '11', a: 'x', b: '5', c: 'y' }),
      upd(2, { id: '2', a: 'two2' }),
      del(1, { id: '1' }),
    ], 'first tx/D')

    // The other shapes see the same transaction (already in their logs: answered at once).
    const got = await collectThroughMarker('first tx')
    assert.deepEqual(got.D, [], 'D had everything in the first response')
    same(content(got.F, tx, 'first tx/F'), [
      ins(10, { id: '10', a: UNICODE, b: '50', c: null }),
      ins(11, { id: '11', a: 'x', b: '5', c: 'y' }),
      upd(2, { id: '2', a: 'two2', b: '20', c: 'c2' }, { a: 'two' }),
      del(1, { id: '1', a: 'one', b: '1', c: 'c1' }),
    ], 'first tx/F')
    assert.deepEqual(ops(got.F), [0, 2, 4, 6], 'F: op positions')
    same(content(got.WD, tx, 'first tx/WD'), [ins(10, { id: '10', a: UNICODE, b: '50', c: null }), upd(2, { id: '2', a: 'two2' })], 'first tx/WD')
    same(content(got.WF, tx, 'first tx/WF'), [
      ins(10, { id: '10', a: UNICODE, b: '50', c: null }),
      upd(2, { id: '2', a: 'two2', b: '20', c: 'c2' }, { a: 'two' }),
    ], 'first tx/WF')
    for (const n of ['WD', 'WF']) {
      assert.deepEqual(ops(got[n]), [0, 4], `${n}: op positions of the transaction (changes to rows outside the shape leave gaps)`)
    }
    same(content(got.PD, tx, 'first tx/PD'), [
      ins(10, { id: '10', a: UNICODE, b: '50' }),
      ins(11, { id: '11', a: 'x', b: '5' }),
      upd(2, { id: '2', a: 'two2' }),
      del(1, { id: '1' }),
    ], 'first tx/PD')
    same(content(got.PF, tx, 'first tx/PF'), [
      ins(10, { id: '10', a: UNICODE, b: '50' }),
      ins(11, { id: '11', a: 'x', b: '5' }),
      upd(2, { id: '2', a: 'two2', b: '20' }, { a: 'two' }),
      del(1, { id: '1', a: 'one', b: '1' }),
    ], 'first tx/PF')
  })

  it('an update that changes no selected column sends nothing; NULLs travel as null', async () => {
    const tx = await runTx([
      `UPDATE ${table} SET a = a WHERE id = 2`, // changes nothing
      `UPDATE ${table} SET c = 'c3new' WHERE id = 3`, // changes c only (not selected by P*), from NULL
      `UPDATE ${table} SET c = NULL WHERE id = 11`, // to NULL; row 11 is outside W*
    ])
    const got = await collectThroughMarker('no-op updates')
    same(content(got.D, tx, 'D'), [upd(3, { id: '3', c: 'c3new' }), upd(11, { id: '11', c: null })], 'D')
    assert.deepEqual(ops(got.D), [2, 4], 'D: op positions of the 2nd and 3rd change of the transaction')
    same(content(got.F, tx, 'F'), [
      upd(3, { id: '3', a: 'three', b: '30', c: 'c3new' }, { c: null }),
      upd(11, { id: '11', a: 'x', b: '5', c: null }, { c: 'y' }),
    ], 'F')
    same(content(got.WD, tx, 'WD'), [upd(3, { id: '3', c: 'c3new' })], 'WD')
    same(content(got.WF, tx, 'WF'), [upd(3, { id: '3', a: 'three', b: '30', c: 'c3new' }, { c: null })], 'WF')
    assert.deepEqual(got.PD, [], 'PD: changes to unselected columns only send nothing')
    assert.deepEqual(got.PF, [], 'PF: changes to unselected columns only send nothing')
  })

  it('updates moving rows into / out of a where clause become insert / delete', async () => {
    const tx = await runTx([
      `UPDATE ${table} SET b = 15 WHERE id = 11`, // 5 -> 15: moves into W*
      `UPDATE ${table} SET b = 5 WHERE id = 2`, // 20 -> 5: moves out of W*
      `UPDATE ${table} SET a = 'tri', b = 31 WHERE id = 3`, // stays in W*
      `UPDATE ${table} SET a = 'elsewhere' WHERE id = 2`, // stays out of W*
    ])
    const got = await collectThroughMarker('where moves')
    same(content(got.D, tx, 'D'), [
      upd(11, { id: '11', b: '15' }),
      upd(2, { id: '2', b: '5' }),
      upd(3, { id: '3', a: 'tri', b: '31' }),
      upd(2, { id: '2', a: 'elsewhere' }),
    ], 'D')
    same(content(got.F, tx, 'F'), [
      upd(11, { id: '11', a: 'x', b: '15', c: null }, { b: '5' }),
      upd(2, { id: '2', a: 'two2', b: '5', c: 'c2' }, { b: '20' }),
      upd(3, { id: '3', a: 'tri', b: '31', c: 'c3new' }, { a: 'three', b: '30' }),
      upd(2, { id: '2', a: 'elsewhere', b: '5', c: 'c2' }, { a: 'two2' }),
    ], 'F')
    same(content(got.WD, tx, 'WD'), [
      ins(11, { id: '11', a: 'x', b: '15', c: null }),
      del(2, { id: '2' }),
      upd(3, { id: '3', a: 'tri', b: '31' }),
    ], 'WD')
    assert.deepEqual(ops(got.WD), [0, 2, 4], 'WD: op positions')
    same(content(got.WF, tx, 'WF'), [
      ins(11, { id: '11', a: 'x', b: '15', c: null }),
      del(2, { id: '2', a: 'two2', b: '20', c: 'c2' }),
      upd(3, { id: '3', a: 'tri', b: '31', c: 'c3new' }, { a: 'three', b: '30' }),
    ], 'WF')
    same(content(got.PF, tx, 'PF'), [
      upd(11, { id: '11', a: 'x', b: '15' }, { b: '5' }),
      upd(2, { id: '2', a: 'two2', b: '5' }, { b: '20' }),
      upd(3, { id: '3', a: 'tri', b: '31' }, { a: 'three', b: '30' }),
      upd(2, { id: '2', a: 'elsewhere', b: '5' }, { a: 'two2' }),
    ], 'PF')
  })

  it('a primary-key change is a delete (key_change_to) at op n and an insert (key_change_from) at op n+1', async () => {
    const tx = await runTx([
      `UPDATE ${table} SET a = 'pre' WHERE id = 3`,
      `UPDATE ${table} SET id = 110, c = 'moved' WHERE id = 10`,
    ])
    const got = await collectThroughMarker('pk change')
    const kc = (m, headers) => ({ ...m, headers: { ...m.headers, ...headers } })
    const oldRow = { id: '10', a: UNICODE, b: '50', c: null }
    const newRow = { id: '110', a: UNICODE, b: '50', c: 'moved' }
    for (const n of ['D', 'F', 'WD', 'WF', 'PD', 'PF']) {
      assert.deepEqual(ops(got[n]), [0, 2, 3], `${n}: op positions: update at 0, delete at 2, insert at 3`)
      assert.equal(got[n][2].headers.last, true, `${n}: the insert half is the last op`)
    }
    const proj = (row) => ({ id: row.id, a: row.a, b: row.b })
    same(content(got.D, tx, 'D'), [
      upd(3, { id: '3', a: 'pre' }),
      kc(del(10, { id: '10' }), { key_change_to: key(110) }),
      kc(ins(110, newRow), { key_change_from: key(10) }),
    ], 'D')
    same(content(got.F, tx, 'F'), [
      upd(3, { id: '3', a: 'pre', b: '31', c: 'c3new' }, { a: 'tri' }),
      kc(del(10, oldRow), { key_change_to: key(110) }),
      kc(ins(110, newRow), { key_change_from: key(10) }),
    ], 'F')
    same(content(got.WD, tx, 'WD'), content(got.D, tx, 'WD=D'), 'WD sees the same as D (all rows in W*)')
    same(content(got.WF, tx, 'WF'), content(got.F, tx, 'WF=F'), 'WF sees the same as F (all rows in W*)')
    same(content(got.PD, tx, 'PD'), [
      upd(3, { id: '3', a: 'pre' }),
      kc(del(10, { id: '10' }), { key_change_to: key(110) }),
      kc(ins(110, proj(newRow)), { key_change_from: key(10) }),
    ], 'PD')
    same(content(got.PF, tx, 'PF'), [
      upd(3, proj({ id: '3', a: 'pre', b: '31' }), { a: 'tri' }),
      kc(del(10, proj(oldRow)), { key_change_to: key(110) }),
      kc(ins(110, proj(newRow)), { key_change_from: key(10) }),
    ], 'PF')
  })

  it('a transaction that rolls back sends nothing; deletes carry the PK (default) or the full old row (full)', async () => {
    await runRolledBack([
      `INSERT INTO ${table} VALUES (99, 'rolled back', 99, 'x')`,
      `UPDATE ${table} SET a = 'rolled back' WHERE id = 3`,
      `DELETE FROM ${table} WHERE id = 11`,
    ])
    const tx = await runTx([`DELETE FROM ${table} WHERE id = 3`])
    const got = await collectThroughMarker('rollback + delete')
    same(content(got.D, tx, 'D'), [del(3, { id: '3' })], 'D: only the committed delete, PK only')
    same(content(got.F, tx, 'F'), [del(3, { id: '3', a: 'pre', b: '31', c: 'c3new' })], 'F: full old row')
    same(content(got.WD, tx, 'WD'), [del(3, { id: '3' })], 'WD')
    same(content(got.PD, tx, 'PD'), [del(3, { id: '3' })], 'PD')
    same(content(got.PF, tx, 'PF'), [del(3, { id: '3', a: 'pre', b: '31' })], 'PF: projected old row')
    assert.deepEqual(got.D[0].headers.op_position, 0, 'op position 0')
  })

  it('offsets strictly increase across all transactions received by every shape', () => {
    for (const [name, changes] of Object.entries(received)) {
      assert.ok(changes.length > 0, `${name} received changes`)
      for (let i = 1; i < changes.length; i++) {
        assert.ok(
          compareOffsets(msgOffset(changes[i - 1]), msgOffset(changes[i])) < 0,
          `${name}: ${msgOffset(changes[i - 1])} < ${msgOffset(changes[i])}`,
        )
      }
      const lsns = [...new Set(changes.map((m) => m.headers.lsn))]
      assert.ok(lsns.length >= 5, `${name}: several transactions (${lsns.length})`)
    }
  })

  it('changes filtered out by where, or on other tables, do not wake a live request; it times out', async () => {
    const WD = shapes.WD
    const offset0 = WD.offset
    const t0 = Date.now()
    const pending = WD.request({ timeoutMs: LONG_POLL_MS * 5 + 20000 })
    await sleep(200)
    await runTx([`UPDATE ${table} SET a = 'not in W' WHERE id = 2`]) // b = 5: outside the where clause
    await runTx([`INSERT INTO ${table} VALUES (200, 'low', 1, NULL)`]) // outside the where clause
    await runTx([`INSERT INTO ${other} VALUES (1, 100)`]) // another table
    const first = await pending
    const elapsed = Date.now() - t0
    assert.ok(elapsed >= LONG_POLL_MS - 300, `held for about long_poll_timeout (${elapsed} ms)`)
    // the timeout fires: within a slack a busy machine does not reach (timeout x 5 + 10 s)
    assert.ok(elapsed < LONG_POLL_MS * 5 + 10000, `answered after about long_poll_timeout (${elapsed} ms)`)
    assertLiveResponse(first, { handle: WD.handle, label: 'timeout 1' })
    assert.equal(first.body.length, 1, `only up-to-date: ${first.text}`)
    assert.equal(first.headers.get('electric-has-data'), 'false')
    assert.equal(first.headers.get('electric-offset'), offset0, 'electric-offset unchanged')
    const cursor1 = first.headers.get('electric-cursor')
    WD.accept(first, 'timeout 1')

    const second = await WD.request({ timeoutMs: LONG_POLL_MS * 5 + 20000 })
    assertLiveResponse(second, { handle: WD.handle, label: 'timeout 2' })
    assert.equal(second.body.length, 1, `only up-to-date: ${second.text}`)
    assert.equal(second.headers.get('electric-has-data'), 'false')
    assert.equal(second.headers.get('electric-offset'), offset0)
    assert.ok(first.headers.get('etag'), 'a timeout response has an etag')
    assert.notEqual(second.headers.get('etag'), first.headers.get('etag'), 'each timeout gets a unique etag')
    const cursor2 = second.headers.get('electric-cursor')
    assert.ok(BigInt(cursor2) > BigInt(cursor1), `the cursor moves past the one sent (${cursor1} -> ${cursor2})`)
    assert.ok(BigInt(cursor2) <= BigInt(cursor1) + 3600n, `by at most 3600 (${cursor1} -> ${cursor2})`)

    // The unfiltered shape did get the changes on its own table (and not the other table's).
    const got = await shapes.D.collectUntil((m) => m.key === key(200), { label: 'D after filtered' })
    same(got.map((m) => m.key), [key(2), key(200)], 'D got both changes to its table')
  })

  it('several live requests held on one shape are all woken by one change', async () => {
    const D = shapes.D
    const pending = Array.from({ length: 5 }, () => D.request())
    await sleep(300)
    const tx = await runTx([`INSERT INTO ${table} VALUES (300, 'fan-out', 300, NULL)`])
    const results = await Promise.all(pending)
    for (const [i, res] of results.entries()) {
      const changes = assertLiveResponse(res, { handle: D.handle, label: `request ${i}` })
      same(content(changes, tx, `request ${i}`), [ins(300, { id: '300', a: 'fan-out', b: '300', c: null })], `request ${i}`)
      assert.equal(res.text, results[0].text, `request ${i}: the same body as request 0`)
      assert.equal(res.headers.get('electric-offset'), results[0].headers.get('electric-offset'))
    }
  })
})

// Values from the WAL must have the same text as the snapshot's: PostgreSQL's output under
// Electric's display settings (DateStyle ISO, TimeZone UTC, extra_float_digits 1, hex bytea,
// ISO 8601 intervals), whatever the server's own settings are.
describe('live values use the display settings of the snapshot', () => {
  const typed = uniqueTable('live_types')
  const COLS = `id int PRIMARY KEY, iv interval, ivs interval[], ts timestamptz, tsn timestamp, d date, f float8, fs float8[], by bytea, jb jsonb, ar int[]`
  const ROW = (id) =>
    `(${id}, '-1 year -2 mons +3 days -04:05:06.5', '{"1 year 2 mons","-3 days"}', '2024-05-06 07:08:09.123456+02', ` +
    `'2024-05-06 07:08:09', '2024-02-29', 0.1::float8 + 0.2::float8, '{NaN,Infinity,0.1}', '\\x00ff10', '{"b": [1, 2], "a": null}', '{1,NULL,3}')`
  const SERVER_SETTINGS = [
    ['timezone', 'America/New_York'],
    ['datestyle', 'SQL, MDY'],
    ['intervalstyle', 'postgres_verbose'],
    ['extra_float_digits', '0'],
    ['bytea_output', 'escape'],
  ]

  before(async () => {
    await createTable([`CREATE TABLE public.${typed} (${COLS})`, `INSERT INTO public.${typed} VALUES ${ROW(1)}`])
  })
  after(async () => {
    for (const [name] of SERVER_SETTINGS) await query(`ALTER SYSTEM RESET ${name}`).catch(() => {})
    await query('SELECT pg_reload_conf()').catch(() => {})
    await dropTable(typed)
  })

  async function check(id, label) {
    const shape = await new RawShape({ table: typed, where: `id <> ${-id}` }).sync() // a new shape (snapshot) each time
    const snapValue = shape.snapshot.find((m) => m.key === electricKey('public', typed, ['1'])).value
    await runTx([`INSERT INTO ${typed} VALUES ${ROW(id)}`])
    const [change] = await shape.collectUntil(() => true, { label })
    const [expected] = await queryAsServerText(`SELECT * FROM ${typed} WHERE id = ${id}`)
    same(change.value, expected, `${label}: live values equal PostgreSQL's output under Electric's display settings`)
    same({ ...change.value, id: '1' }, snapValue, `${label}: live values equal the snapshot's values of an identical row`)
  }

  it('with the server\'s default settings', async () => {
    await check(2, 'default settings')
  })

  it('with other TimeZone, DateStyle, IntervalStyle, extra_float_digits and bytea_output in postgresql.conf', async () => {
    for (const [name, value] of SERVER_SETTINGS) await query(`ALTER SYSTEM SET ${name} = '${value}'`)
    await query('SELECT pg_reload_conf()')
    await sleep(1500) // the worker applies a reload within about a second
    await check(3, 'server settings changed')
  })
})
