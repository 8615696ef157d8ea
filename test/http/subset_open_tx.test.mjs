// A subset taken while a writing transaction is open, on a shape whose own snapshot is not
// taken yet: the transaction's change must still reach the client once it commits.
//
// The official client (changes_only, long-poll and SSE) is started on a table that has no
// shape yet, so its replica identity is still DEFAULT, while another session holds an
// uncommitted UPDATE of row 7; the client asks at once for row 7 (stream.requestSnapshot).
// The shape's snapshot must first set REPLICA IDENTITY FULL, which waits (up to 100 ms) for
// the open transaction's lock; the subset query takes no such lock. The transaction commits as
// soon as the subset is answered, or once the shape's snapshot is seen waiting for the lock
// and the subset query has had time to run; the shape's snapshot then gets the lock. The row
// must reach the client as committed, and the subset's row must be the one its metadata
// (xmin, xmax, xip_list against the writer's xid) says it saw.
//
// The subset's snapshot may only be taken once the shape's own snapshot is (subset_jobs.c): the
// shape's log holds exactly the transactions its snapshot does not see, so a transaction that
// the subset does not see and that commits before the shape's snapshot is taken would be in
// neither, and the client would keep the subset's old row for good. Before the fix the subset
// query ran at once: it answered the old row while the writer was open (or took its snapshot
// then), the commit followed, the shape's snapshot saw the commit and its log never carried
// it; every try lost the change, long-poll and SSE. Now the subset waits for the shape's
// snapshot and is answered after the commit, with the row as committed.

import { after, describe, it } from 'node:test'
import assert from 'node:assert/strict'

import { closePool, createTable, dropTable, pool, query, sleep, uniqueTable } from '../lib/helpers.mjs'
import { startClientShape, waitFor } from '../lib/live_helpers.mjs'

const TRIES = 10
const ROW = 7
const tables = []
const clients = []

after(async () => {
  for (const c of clients) c.close()
  for (const t of tables) await dropTable(t)
  await closePool()
})

// Waits until `promise` settles (true) or until the shape's snapshot is seen waiting for the
// table's lock, plus a little (false): the subset query, which takes no such lock, would have
// been answered by then, had it not waited for the shape's snapshot. After `capMs`, false too.
async function answeredOrLockWait(promise, table, capMs = 3000) {
  let settled = false
  promise.then(() => { settled = true }, () => { settled = true })
  const deadline = Date.now() + capMs
  while (!settled && Date.now() < deadline) {
    const { rows } = await query(
      `SELECT count(*)::int AS n FROM pg_locks WHERE relation = $1::regclass AND NOT granted`, [table])
    if (rows[0].n > 0) {
      await sleep(30)
      return settled
    }
    await sleep(2)
  }
  return settled
}

for (const liveSse of [false, true]) {
  const mode = liveSse ? 'SSE' : 'long-poll'
  describe(`official client, log=changes_only, ${mode}: a subset taken while a writer is open`, () => {
    it(`the writer's change arrives after its commit (${TRIES} tries, each on a new table)`, async () => {
      const outcomes = []
      for (let attempt = 0; attempt < TRIES; attempt++) {
        const t = uniqueTable(`subset_open_${liveSse ? 'sse' : 'lp'}`)
        tables.push(t)
        await createTable([
          `CREATE TABLE ${t} (id int PRIMARY KEY, v text)`,
          `INSERT INTO ${t} SELECT g, 'v' || g FROM generate_series(1, 10) g`,
        ])
        const label = `${mode}, try ${attempt + 1}`
        const writer = await pool.connect()
        let client
        let answeredWhileOpen = false
        let xid
        try {
          await writer.query('BEGIN')
          await writer.query(`UPDATE ${t} SET v = 'committed' WHERE id = $1`, [ROW])
          xid = BigInt((await writer.query('SELECT pg_current_xact_id()::text AS x')).rows[0].x)
          client = startClientShape({ table: t }, { log: 'changes_only', liveSse })
          clients.push(client)
          const request = client.stream.requestSnapshot({ where: 'id = $1', params: { 1: String(ROW) } })
          request.catch(() => {})
          answeredWhileOpen = await answeredOrLockWait(request, t)
          await writer.query('COMMIT')
          const { metadata, data } = await request
          // the subset has the row as its snapshot saw it, and its metadata says which
          const xmax = BigInt(metadata.xmax)
          const seen = xid < BigInt(metadata.xmin) || (xid < xmax && !metadata.xip_list.map(BigInt).includes(xid))
          assert.deepEqual(data.map((m) => m.value.v), [seen ? 'committed' : 'v7'],
            `${label}: the subset's row, by its metadata ${JSON.stringify(metadata)} and the writer's xid ${xid}`)
        } catch (err) {
          await writer.query('ROLLBACK').catch(() => {})
          throw err
        } finally {
          writer.release()
        }
        const key = `"public"."${t}"/"${ROW}"`
        const holds = () => client.shape.currentValue.get(key)?.v
        await waitFor(() => holds() === 'committed', {
          timeoutMs: 30000,
          what: `${label}: row ${ROW} as committed (the subset was ${answeredWhileOpen ? '' : 'not '}` +
            'answered while the writer was open)',
        }).catch((err) => {
          throw new Error(`${err.message}; the client holds ${JSON.stringify(holds())}`)
        })
        assert.deepEqual(client.errors, [], `${label}: no client error`)
        outcomes.push(answeredWhileOpen)
        client.close()
        await dropTable(t)
        await sleep(10)
      }
      console.log(`${mode}: subsets answered while the writer was open: ${outcomes.filter(Boolean).length} of ${TRIES}`)
    })
  })
}
