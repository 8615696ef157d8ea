// Snapshot chunking (shape_sync.chunk_bytes_threshold) and multi-megabyte responses.

import { after, before, describe, it } from 'node:test'
import assert from 'node:assert/strict'

import {
  closePool,
  createTable,
  dropTable,
  electricKey,
  fetchShape,
  query,
  queryAsServerText,
  syncShape,
  uniqueTable,
  walkShape,
} from '../lib/helpers.mjs'
import { waitFor } from '../lib/live_helpers.mjs'

const GUC = 'shape_sync.chunk_bytes_threshold'

// A table of 40 kB (400 rows of about 100 bytes): a new shape of it shows the threshold the
// server applies, its first response cut short at 10 kB, or whole at the default (10 MB).
const PROBE = uniqueTable('chunk_probe')
const PROBE_ROWS = 400
let probes = 0

before(async () => {
  await createTable([
    `CREATE TABLE public.${PROBE} (id int4 PRIMARY KEY, payload text NOT NULL)`,
    `INSERT INTO public.${PROBE} SELECT g, repeat('p', 100) FROM generate_series(1, ${PROBE_ROWS}) g`,
  ])
})

// Sets the threshold and waits until new snapshots follow it: the worker takes the reload at
// its next turn, and snapshots queued after that read it too.
async function setThreshold(value) {
  if (value === null) await query(`ALTER SYSTEM RESET ${GUC}`)
  else await query(`ALTER SYSTEM SET ${GUC} = '${value}'`)
  await query('SELECT pg_reload_conf()')
  const chunked = value !== null
  await waitFor(async () => {
    // a new shape each time: its snapshot is cut under the current setting
    const res = await fetchShape({ table: PROBE, offset: '-1', where: `id > ${-1 - probes++}` })
    const rows = Array.isArray(res.body) ? res.body.filter((m) => 'key' in m).length : -1
    return res.status === 200 && (chunked ? rows > 0 && rows < PROBE_ROWS : rows === PROBE_ROWS)
  }, { timeoutMs: 30000, what: `${GUC} = ${value ?? 'its default'} to apply` })
}

after(async () => {
  // Whatever happened above, leave the server at its default threshold.
  await setThreshold(null).catch((e) => console.error(`resetting ${GUC}:`, e.message))
  await dropTable(PROBE).catch(() => {})
  await closePool()
})

function assertSameString(got, want, label) {
  if (got === want) return
  if (typeof got !== 'string') assert.fail(`${label}: expected a string of ${want.length} chars, got ${typeof got}`)
  let i = 0
  while (i < got.length && i < want.length && got[i] === want[i]) i++
  assert.fail(
    `${label}: length ${got.length}, want ${want.length}; first difference at ${i}: ` +
      `${JSON.stringify(got.slice(i, i + 40))} vs ${JSON.stringify(want.slice(i, i + 40))}`,
  )
}

const isUpToDate = (m) => m.headers?.control === 'up-to-date'
const isSnapshotEnd = (m) => m.headers?.control === 'snapshot-end'

// Checks the shape of a full walk from -1 to up-to-date; returns the row messages.
function checkWalk(walk, label) {
  const { responses, handle } = walk
  const n = responses.length
  const last = responses[n - 1].res
  assert.ok(last.body.some(isUpToDate), `${label}: the walk ends with an up-to-date message`)
  assert.equal(last.body.length, 1, `${label}: the final response holds only up-to-date: ${last.text.slice(0, 300)}`)
  assert.ok(isUpToDate(last.body[0]), `${label}: final message is up-to-date`)
  assert.ok(last.headers.has('electric-up-to-date'), `${label}: electric-up-to-date header on the up-to-date response`)
  assert.equal(last.headers.get('electric-offset'), '0_inf', `${label}: up-to-date at 0_inf`)
  assert.match(last.body[0].headers.global_last_seen_lsn, /^\d+$/)

  const endIdx = responses.findIndex(({ res }) => res.body.some(isSnapshotEnd))
  assert.equal(endIdx, n - 2, `${label}: snapshot-end is in the response just before the up-to-date one`)

  responses.forEach(({ offset, res }, i) => {
    const want = i < n - 1 ? `0_${i}` : '0_inf'
    const reqWant = i === 0 ? '-1' : `0_${i - 1}`
    assert.equal(offset, reqWant, `${label}: request ${i} offset`)
    assert.equal(res.headers.get('electric-offset'), want, `${label}: response ${i} (offset=${offset}) electric-offset`)
    assert.equal(res.headers.get('electric-handle'), handle, `${label}: response ${i} handle`)
    assert.equal(res.headers.get('etag'), `"${handle}:${offset}:${want}"`, `${label}: response ${i} etag`)
    if (i < n - 1) {
      assert.ok(!res.headers.has('electric-up-to-date'), `${label}: response ${i} has no electric-up-to-date`)
      assert.ok(!res.body.some(isUpToDate), `${label}: response ${i} has no up-to-date message`)
    }
    if (i < endIdx) {
      assert.ok(res.body.every((m) => 'key' in m), `${label}: response ${i} holds only rows`)
    }
  })
  const endBody = responses[endIdx].res.body
  assert.ok(isSnapshotEnd(endBody[endBody.length - 1]), `${label}: snapshot-end is the last message of its chunk`)
  assert.ok(endBody.slice(0, -1).every((m) => 'key' in m), `${label}: rows before snapshot-end`)

  const rows = responses.flatMap(({ res }) => res.body.filter((m) => 'key' in m))
  const keys = new Set(rows.map((m) => m.key))
  assert.equal(keys.size, rows.length, `${label}: no row is sent twice`)
  return { rows, endIdx }
}

describe('chunking with a 10kB threshold', () => {
  const table = uniqueTable('chunk')
  const ROWS = 2000

  before(async () => {
    await setThreshold('10kB')
    await createTable([
      `CREATE TABLE public.${table} (id int4 PRIMARY KEY, payload text NOT NULL, n int8)`,
      // ~100 bytes of payload per row
      `INSERT INTO public.${table}
         SELECT g, md5(g::text) || md5((g * 7)::text) || repeat('x', 36), CASE WHEN g % 3 = 0 THEN NULL ELSE g * 1000 END
         FROM generate_series(1, ${ROWS}) g`,
    ])
  })

  after(async () => {
    await dropTable(table)
    await setThreshold(null)
  })

  async function expected() {
    const rows = await queryAsServerText(`SELECT id::text AS id, payload, n::text AS n FROM public.${table}`)
    return new Map(rows.map((r) => [electricKey('public', table, [r.id]), r]))
  }

  it('walks the snapshot chunk by chunk: 0_0, 0_1, ... each about 10 kB', async () => {
    const walk = await walkShape({ table })
    const { rows, endIdx } = checkWalk(walk, '10kB chunks')
    assert.ok(endIdx >= 10, `expected many chunks for ~${ROWS * 200} bytes, got ${endIdx + 1}`)
    walk.responses.forEach(({ offset, res }, i) => {
      const bytes = Buffer.byteLength(res.text)
      if (i < endIdx) {
        assert.ok(bytes >= 8000 && bytes <= 12000, `chunk ${i} (offset=${offset}) is ${bytes} bytes, want 8000..12000`)
      } else if (i === endIdx) {
        assert.ok(bytes <= 12000, `last snapshot chunk is ${bytes} bytes, want <= 12000`)
      }
    })

    const exp = await expected()
    assert.equal(rows.length, ROWS, 'row count')
    for (const m of rows) {
      const e = exp.get(m.key)
      assert.ok(e, `unexpected key ${m.key}`)
      assert.deepEqual(m.value, { id: e.id, payload: e.payload, n: e.n }, `row ${m.key}`)
      assert.deepEqual(m.headers, { operation: 'insert', relation: ['public', table] })
    }
  })

  it('chunk boundaries are stable: the same offsets give the same bodies', async () => {
    const a = await walkShape({ table })
    const b = await walkShape({ table })
    assert.equal(a.responses.length, b.responses.length)
    // The final up-to-date carries global_last_seen_lsn, which may move: compare the snapshot chunks.
    a.responses.slice(0, -1).forEach(({ res }, i) => {
      assert.equal(b.responses[i].res.text, res.text, `chunk ${i} is the same on a second walk`)
      assert.equal(b.responses[i].res.headers.get('etag'), res.headers.get('etag'), `chunk ${i} etag`)
    })
  })

  it('the official client syncs the chunked table to exactly the SELECT rows', async () => {
    const { value } = await syncShape({ table })
    const exp = await expected()
    assert.equal(value.size, ROWS)
    for (const [key, row] of value) {
      const e = exp.get(key)
      assert.ok(e, `unexpected key ${key}`)
      assert.deepStrictEqual(row, { id: Number(e.id), payload: e.payload, n: e.n === null ? null : BigInt(e.n) }, key)
    }
  })
})

describe('multi-megabyte response at the default threshold', () => {
  const table = uniqueTable('big')
  // 375000 * 8 chars = 3,000,000 chars of distinct content.
  const big = Array.from({ length: 375000 }, (_, i) => `${String(i + 1).padStart(7, '0')},`).join('')
  // 300,000 chars that JSON must escape: 600,000 bytes on the wire.
  const escaped = '"\\\n'.repeat(100000)

  before(async () => {
    await createTable([
      `CREATE TABLE public.${table} (id int4 PRIMARY KEY, body text)`,
      `INSERT INTO public.${table}
         SELECT 1, string_agg(lpad(g::text, 7, '0') || ',', '' ORDER BY g) FROM generate_series(1, 375000) g`,
      `INSERT INTO public.${table} VALUES (2, repeat(E'"\\\\\\n', 100000)), (3, 'small'), (4, NULL)`,
    ])
    const { rows } = await query(`SELECT length(body) AS l FROM public.${table} ORDER BY id`)
    assert.deepEqual(
      rows.map((r) => r.l),
      [3000000, 300000, 5, null],
      'fixture sanity',
    )
  })

  after(async () => {
    await dropTable(table)
  })

  function checkRows(byKey, label) {
    assertSameString(byKey.get(electricKey('public', table, ['1'])), big, `${label}: 3 MB row`)
    assertSameString(byKey.get(electricKey('public', table, ['2'])), escaped, `${label}: escaped row`)
    assert.equal(byKey.get(electricKey('public', table, ['3'])), 'small', `${label}: row 3`)
    assert.equal(byKey.get(electricKey('public', table, ['4'])), null, `${label}: row 4`)
    assert.equal(byKey.size, 4, `${label}: row count`)
  }

  it('a response of several MB arrives intact', async () => {
    const walk = await walkShape({ table })
    const n = walk.responses.length
    const last = walk.responses[n - 1].res
    assert.ok(last.body.some(isUpToDate), 'ends with an up-to-date message')
    assert.ok(last.headers.has('electric-up-to-date'), 'electric-up-to-date header on the up-to-date response')
    assert.equal(last.headers.get('electric-offset'), '0_inf')
    const sizes = walk.responses.map(({ res }) => Buffer.byteLength(res.text))
    assert.ok(Math.max(...sizes) > 3000000, `one response holds the 3 MB row: sizes ${sizes}`)
    const rows = walk.messages.filter((m) => 'key' in m)
    assert.ok(
      walk.messages.some((m) => m.headers?.control === 'snapshot-end'),
      'the snapshot ends with snapshot-end',
    )
    checkRows(new Map(rows.map((m) => [m.key, m.value.body])), 'raw')
  })

  it('the official client receives the several-MB snapshot intact', async () => {
    const { value } = await syncShape({ table })
    checkRows(new Map([...value].map(([k, r]) => [k, r.body])), 'client')
  })
})
