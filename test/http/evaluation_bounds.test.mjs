// Evaluations bounded wherever they run (issue 24, item 3): in the snapshot workers, one
// row's where clause may take no longer than shape_sync.where_evaluation_timeout, as on the
// main thread, for a shape's snapshot and for a subset alike; a subset query as a whole stops
// at shape_sync.subset_statement_timeout, shorter by default than a snapshot's.
//
// The slow clause is a regular expression over a 10 MB value: 55 ms per row on the fastest
// machine seen (hundreds on others), against a deadline of 10 ms, which cancels within 15 ms:
// far from both the slow rows and the quick ones (a busy machine that holds the worker off its
// CPU for 10 ms within a quick row's microseconds is the one way to flake). With 50 ms, the
// fastest machine evaluated the slow rows within the deadline.

import { after, before, describe, it } from 'node:test'
import assert from 'node:assert/strict'

import { closePool, fetchShape, query, uniqueSuffix } from '../lib/helpers.mjs'
import { resetGuc, setGuc, waitFor } from '../lib/live_helpers.mjs'

const sfx = uniqueSuffix()
const T = `evb_${sfx}`
const SLOW = "s ~ '(a|b)*c'"

async function handleOf(table) {
  const res = await fetchShape({ table, offset: '-1' })
  assert.equal(res.status, 200, JSON.stringify(res.body))
  return res.headers.get('electric-handle')
}

// Reloads a setting and waits until SHOW, in a new session, says so (the worker and the
// snapshot workers read it at their next turn: a short wait after).
async function setting(name, value) {
  if (value === undefined) await resetGuc(name)
  else await setGuc(name, value)
  await new Promise((r) => setTimeout(r, 500))
}

after(closePool)

describe('evaluation bounds in the snapshot workers', () => {
  before(async () => {
    await query(`CREATE TABLE ${T} (id int PRIMARY KEY, s text)`)
    await query(`ALTER TABLE ${T} REPLICA IDENTITY FULL`)
    await query(`INSERT INTO ${T} SELECT g, 'ab' FROM generate_series(1, 10) g`)
    await query(`UPDATE ${T} SET s = repeat('ab', 5000000) WHERE id > 4`)
  })

  after(async () => {
    await resetGuc('shape_sync.where_evaluation_timeout')
    await resetGuc('shape_sync.subset_statement_timeout')
    await query(`DROP TABLE IF EXISTS ${T}`)
  })

  it('a shape whose where clause runs past the deadline on one row fails with 400', async () => {
    await setting('shape_sync.where_evaluation_timeout', '10ms')
    const res = await waitFor(
      async () => {
        const r = await fetchShape({ table: T, offset: '-1', where: `${SLOW} AND id > 0` })
        return r.status === 400 ? r : null
      },
      { timeoutMs: 30000, what: 'the snapshot to fail' },
    )
    assert.match(res.body.message, /took longer than the 10 ms that shape_sync\.where_evaluation_timeout allows on one row/)
  })

  it('so does a subset, on its where field; a subset that skips the slow rows is answered', async () => {
    const handle = await handleOf(T)
    const slow = await fetchShape({ table: T, offset: '-1', handle, subset__where: SLOW })
    assert.equal(slow.status, 400, JSON.stringify(slow.body))
    assert.match(slow.body.errors.subset.where[0], /shape_sync\.where_evaluation_timeout allows on one row/)

    const narrow = await fetchShape({ table: T, offset: '-1', handle, subset__where: `id <= 4 AND ${SLOW}` })
    assert.equal(narrow.status, 200, JSON.stringify(narrow.body))
    assert.deepEqual(narrow.body.data, [])
  })

  it('a subset as a whole stops at shape_sync.subset_statement_timeout', async () => {
    await setting('shape_sync.where_evaluation_timeout', '60s')
    await setting('shape_sync.subset_statement_timeout', '30ms')
    const handle = await handleOf(T)
    // until the snapshot workers have both settings (a refusal by the row deadline is quick)
    const res = await waitFor(async () => {
      const r = await fetchShape({ table: T, offset: '-1', handle, subset__where: SLOW })
      return /where_evaluation_timeout/.test(r.text) ? null : r
    }, { timeoutMs: 30000, what: 'where_evaluation_timeout = 60s to apply' })
    assert.equal(res.status, 400, JSON.stringify(res.body))
    assert.match(res.body.message, /took longer than the 30 ms that shape_sync\.subset_statement_timeout allows/)
    await setting('shape_sync.subset_statement_timeout', undefined)
    const again = await waitFor(async () => {
      const r = await fetchShape({ table: T, offset: '-1', handle, subset__where: SLOW })
      return /took longer than the 30 ms/.test(r.text) ? null : r
    }, { timeoutMs: 30000, what: 'subset_statement_timeout to be reset' })
    assert.equal(again.status, 200, JSON.stringify(again.body))
  })

  it('the subset timeout defaults to 10 s, the snapshot timeout to 5 minutes', async () => {
    const { rows } = await query(
      `SELECT current_setting('shape_sync.subset_statement_timeout') AS subset,
              current_setting('shape_sync.snapshot_statement_timeout') AS snapshot`,
    )
    assert.deepEqual(rows[0], { subset: '10s', snapshot: '5min' })
  })
})
