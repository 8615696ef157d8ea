// A subset reads only the shape's columns (issue 24, item 4): without queryable_columns, a
// subset__where or subset__order_by on a column outside the shape's `columns` was an oracle
// on it (`secret LIKE 'a%'` tells its first letter, an ordering its rank).  Now both are a
// 400 naming the column, unless the operator sets shape_sync.subset_columns = table.

import { after, before, describe, it } from 'node:test'
import assert from 'node:assert/strict'

import { closePool, fetchShape, query, uniqueSuffix } from '../lib/helpers.mjs'
import { resetGuc, setGuc, waitFor } from '../lib/live_helpers.mjs'

const sfx = uniqueSuffix()
const T = `subcol_${sfx}`

after(closePool)

describe("subsets read only the shape's columns", () => {
  let handle
  before(async () => {
    await query(`CREATE TABLE ${T} (id int PRIMARY KEY, title text, secret text)`)
    await query(`ALTER TABLE ${T} REPLICA IDENTITY FULL`)
    await query(`INSERT INTO ${T} SELECT g, 't' || g, chr(96 + g) || 'x' FROM generate_series(1, 5) g`)
    const res = await fetchShape({ table: T, offset: '-1', columns: 'id,title' })
    assert.equal(res.status, 200, JSON.stringify(res.body))
    handle = res.headers.get('electric-handle')
  })

  after(async () => {
    await resetGuc('shape_sync.subset_columns')
    await query(`DROP TABLE IF EXISTS ${T}`)
  })

  const subset = (params) => fetchShape({ table: T, offset: '-1', columns: 'id,title', handle, ...params })

  it('refuses a where clause on a column the shape hides', async () => {
    const res = await subset({ subset__where: "secret LIKE 'a%'" })
    assert.equal(res.status, 400, JSON.stringify(res.body))
    assert.deepEqual(res.body.errors.subset.where, ["The following columns are not in the shape's columns: secret"])
  })

  it('refuses an ordering by a column the shape hides', async () => {
    const res = await subset({ subset__order_by: 'secret', subset__limit: '1' })
    assert.equal(res.status, 400, JSON.stringify(res.body))
    assert.deepEqual(res.body.errors.subset.order_by, ["The following columns are not in the shape's columns: secret"])
  })

  it("answers clauses on the shape's own columns", async () => {
    const res = await subset({ subset__where: "title LIKE 't%'", subset__order_by: 'title DESC', subset__limit: '2' })
    assert.equal(res.status, 200, JSON.stringify(res.body))
    assert.deepEqual(res.body.data.map((r) => r.value.title), ['t5', 't4'])
    assert.ok(res.body.data.every((r) => !('secret' in r.value)))
  })

  it('reads any column the role may read once the operator sets shape_sync.subset_columns = table', async () => {
    await setGuc('shape_sync.subset_columns', 'table')
    const res = await waitFor(
      async () => {
        const r = await subset({ subset__where: "secret LIKE 'a%'" })
        return r.status === 200 ? r : null
      },
      { timeoutMs: 30000, what: 'shape_sync.subset_columns = table to apply' },
    )
    assert.deepEqual(res.body.data.map((r) => r.value), [{ id: '1', title: 't1' }])
  })
})
