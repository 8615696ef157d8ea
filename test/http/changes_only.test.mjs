// log=changes_only: a shape with no initial rows. Its offset=-1 answers the snapshot-end
// control message alone, with the visibility of the moment its (empty) snapshot was taken, and
// its log carries every later change as a full shape's does. It is a shape of its own (another
// handle than log=full of the same definition). The official client in changes_only mode,
// long-poll and SSE, starts empty although the table has rows, and applies only changes of
// keys whose insert it has seen (updates and deletes of keys it never loaded are ignored).

import { after, before, describe, it } from 'node:test'
import assert from 'node:assert/strict'

import { closePool, createTable, dropTable, fetchShape, query, uniqueTable, walkShape } from '../lib/helpers.mjs'
import { DIGITS, RawShape, runTx, startClientShape, waitDecoded, waitRowsEqual } from '../lib/live_helpers.mjs'

const table = uniqueTable('changes_only')
const clients = []

after(async () => {
  for (const c of clients) c.close()
  await dropTable(table)
  await closePool()
})

before(async () => {
  await createTable([
    `CREATE TABLE ${table} (id int PRIMARY KEY, v text, n int)`,
    `INSERT INTO ${table} SELECT g, 'v' || g, g FROM generate_series(1, 20) g`,
  ])
})

describe('log=changes_only, raw protocol', () => {
  it('offset=-1 answers only the snapshot-end message, whatever rows the table has', async () => {
    await waitDecoded()
    const res = await fetchShape({ table, offset: '-1', log: 'changes_only' })
    assert.equal(res.status, 200, res.text)
    assert.equal(res.body.length, 1, `one message: ${res.text}`)
    const end = res.body[0].headers
    assert.equal(end.control, 'snapshot-end', res.text)
    assert.match(end.xmin, DIGITS, 'xmin')
    assert.match(end.xmax, DIGITS, 'xmax')
    assert.ok(Array.isArray(end.xip_list), 'xip_list')
    assert.ok(BigInt(end.xmin) <= BigInt(end.xmax), 'xmin <= xmax')
    assert.equal(res.headers.get('electric-offset'), '0_0')
    assert.ok(res.headers.get('electric-schema'), 'electric-schema on the first response')
    assert.equal(res.headers.get('electric-up-to-date'), null, 'offset=-1 is never up-to-date')

    const walk = await walkShape({ table, log: 'changes_only' })
    assert.deepEqual(walk.messages.filter((m) => 'key' in m), [], 'no row in the whole initial walk')
  })

  it('is another shape than log=full of the same definition, and offset=now finds it', async () => {
    const changesOnly = await fetchShape({ table, offset: '-1', log: 'changes_only', where: 'n > 5' })
    const full = await fetchShape({ table, offset: '-1', log: 'full', where: 'n > 5' })
    assert.equal(changesOnly.status, 200, changesOnly.text)
    assert.equal(full.status, 200, full.text)
    const handle = changesOnly.headers.get('electric-handle')
    assert.notEqual(handle, full.headers.get('electric-handle'), 'two handles')
    assert.ok(full.body.some((m) => 'key' in m), 'log=full still sends its rows')

    const now = await fetchShape({ table, offset: 'now', log: 'changes_only', where: 'n > 5' })
    assert.equal(now.status, 200, now.text)
    assert.equal(now.headers.get('electric-handle'), handle, 'offset=now: the same shape')
    assert.ok(now.headers.has('electric-up-to-date'), 'offset=now is up-to-date')
    assert.deepEqual(now.body.map((m) => m.headers.control), ['up-to-date'])

    const wrongMode = await fetchShape({ table, offset: '0_0', log: 'full', where: 'n > 5', handle })
    assert.equal(wrongMode.status, 409, 'the changes_only handle does not serve log=full')
  })

  it('later changes arrive as in a full shape: inserts, updates and deletes of any row, moves in and out', async () => {
    const shape = await new RawShape({ table, log: 'changes_only', where: 'n < 100' }).sync()
    assert.deepEqual(shape.snapshot.filter((m) => 'key' in m), [], 'starts empty')
    await runTx([
      `INSERT INTO ${table} VALUES (101, 'new', 50)`,
      `UPDATE ${table} SET v = 'changed' WHERE id = 3`,
      `DELETE FROM ${table} WHERE id = 4`,
      `UPDATE ${table} SET n = 500 WHERE id = 5`,
    ])
    const changes = await shape.collectUntil((m) => m.headers.last === true, { label: 'changes_only live' })
    const seen = changes.map((m) => [m.headers.operation, m.value.id])
    assert.deepEqual(seen, [['insert', '101'], ['update', '3'], ['delete', '4'], ['delete', '5']],
      `the changes, in order: ${JSON.stringify(changes)}`)
    assert.equal(changes[1].value.v, 'changed')
  })
})

for (const liveSse of [false, true]) {
  describe(`official client, log=changes_only, ${liveSse ? 'SSE' : 'long-poll'}`, () => {
    it('starts empty, then holds exactly the rows inserted since, ignoring changes of rows it never loaded', async () => {
      // each mode a shape of its own (where), rows of its own
      const where = liveSse ? 'n > -1' : 'n >= 0'
      const [first, old1, old2, old3] = liveSse ? [2100, 9, 10, 11] : [2000, 6, 7, 8]
      const client = startClientShape({ table, where }, { log: 'changes_only', liveSse })
      clients.push(client)
      await new Promise((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error('the client never got up to date')), 10000)
        const unsubscribe = client.stream.subscribe(() => {
          if (client.stream.isUpToDate) {
            clearTimeout(timer)
            unsubscribe()
            resolve()
          }
        }, reject)
      })
      assert.deepEqual(client.shape.currentRows, [], 'no row although the table has rows')
      assert.ok((await query(`SELECT count(*)::int AS c FROM ${table}`)).rows[0].c > 0)

      await runTx([
        `INSERT INTO ${table} VALUES (${first}, 'a', 1000), (${first + 1}, 'b', 1001)`,
        `UPDATE ${table} SET v = 'ignored' WHERE id IN (${old1}, ${old2})`,
      ])
      await runTx([`UPDATE ${table} SET v = 'seen' WHERE id = ${first}`, `DELETE FROM ${table} WHERE id = ${first + 1}`])
      await runTx([`DELETE FROM ${table} WHERE id = ${old3}`])
      await waitRowsEqual(client, `SELECT id, v, n FROM ${table} WHERE id = ${first}`, 'changes_only client')
      assert.equal(client.shape.currentRows[0].v, 'seen')
    })
  })
}
