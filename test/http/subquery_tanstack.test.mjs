// Subquery shapes (a where clause with `x IN (SELECT ...)`) followed by TanStack DB's Electric
// collection (@tanstack/db + @tanstack/electric-db-collection, syncMode eager), the consumer
// that reads the tags, active_conditions, removed_tags and move-out / move-in events. Two
// schemas, after the scenarios of TanStack's own acceptance suite (db-collection-e2e
// moves.suite.ts):
//   - users / posts: posts WHERE "userId" IN (SELECT id FROM users WHERE "isActive" = true);
//   - projects / memberships / issues: issues WHERE project_id IN (SELECT project_id FROM
//     memberships WHERE user_id = $1), with $1 passed as a shape param.
// After every step the collection's rows must equal PostgreSQL's own SELECT of the shape, and
// the SELECT itself must hold the ids the step was written for (so that a step that changed
// nothing cannot pass by accident). awaitTxId(xid) must resolve for a transaction that wrote to
// the outer table and for one whose inner change moved rows out (the move-out event's txids).
//
// The other steps pass whether a value entering a subquery is sent as Electric's move-in or
// rotates the shape (409 must-refetch, after which the collection re-syncs), as the first step
// of subqueries did. The `move-in without a refetch` tests ask for the move-in: no 409 or
// must-refetch while the rows move in, a `move-in` event whose txids hold the transaction's
// xid, the rows that entered as inserts with is_move_in, then snapshot-end, and awaitTxId(xid)
// resolving. SUBQUERY_TS_WAIT_MS (default 60000) bounds each wait.
//
// Then: a collection in on-demand mode, whose live query loads its rows as subset snapshots
// tagged as the log tags them (a move-out then removes them); and a shape with nested
// subqueries (issues of the projects of my teams) followed through moves at both levels.

import { after, before, describe, it } from 'node:test'
import assert from 'node:assert/strict'

import { createCollection, createLiveQueryCollection, gt } from '@tanstack/db'
import { electricCollectionOptions } from '@tanstack/electric-db-collection'

import { closePool, createTable, dropTable, query, SHAPE_URL, uniqueTable } from '../lib/helpers.mjs'
import { runTx, waitFor } from '../lib/live_helpers.mjs'

const WAIT_MS = Number(process.env.SUBQUERY_TS_WAIT_MS ?? 60000)
const TXID_WAIT_MS = WAIT_MS

const byId = (a, b) => a.id - b.id

// A collection on one shape, with a fetch wrapper that records every response the
// ShapeStream gets: its URL, status and (from a clone of the body) its messages.
function startCollection(name, params, syncMode = 'eager') {
  const log = []
  const errors = []
  const fetchClient = async (input, init) => {
    const res = await fetch(input, init)
    const entry = {
      url: new URL(typeof input === 'string' || input instanceof URL ? String(input) : input.url),
      status: res.status,
      messages: undefined,
    }
    log.push(entry)
    res
      .clone()
      .text()
      .then((text) => {
        try {
          entry.messages = JSON.parse(text)
        } catch {
          entry.messages = text
        }
      })
      .catch(() => {
        entry.messages = null // aborted (the collection was cleaned up)
      })
    return res
  }
  const collection = createCollection(
    electricCollectionOptions({
      id: `${name}-${process.pid}-${Date.now()}`,
      syncMode,
      startSync: true,
      gcTime: 0, // never garbage-collected while the test holds it without a subscriber
      getKey: (row) => row.id,
      shapeOptions: {
        url: SHAPE_URL,
        params,
        fetchClient,
        backoffOptions: { initialDelay: 100, maxDelay: 1000, multiplier: 2, maxRetries: 8 },
        onError: (err) => {
          errors.push(err)
        },
      },
    }),
  )
  return { collection, log, errors }
}

// The collection's rows, without the virtual properties TanStack DB adds ($key, $synced,
// $origin, $collectionId); each entry's key must be its row's id.
function collectionRows(c) {
  return Array.from(c.collection.entries(), ([k, row]) => {
    assert.equal(k, row.id, `the collection's key of ${JSON.stringify(row)} is its id`)
    return Object.fromEntries(Object.entries(row).filter(([name]) => !name.startsWith('$')))
  }).sort(byId)
}

// projects, memberships (project_id, user_id) and issues (project_id), with the foreign keys
function membershipTables(projects, memberships, issues) {
  return [
    `CREATE TABLE ${projects} (id int PRIMARY KEY, name text NOT NULL)`,
    `CREATE TABLE ${memberships} (project_id int NOT NULL REFERENCES ${projects}(id) ON DELETE CASCADE,
                                  user_id int NOT NULL, PRIMARY KEY (project_id, user_id))`,
    `ALTER TABLE ${memberships} REPLICA IDENTITY FULL`,
    `CREATE TABLE ${issues} (id int PRIMARY KEY, project_id int NOT NULL REFERENCES ${projects}(id) ON DELETE CASCADE,
                             title text)`,
  ]
}

async function waitReady(c) {
  await waitFor(async () => {
    failIfBroken(c, 'initial sync')
    return c.collection.status === 'ready'
  }, { timeoutMs: WAIT_MS, what: 'the collection to be ready' })
}

function failIfBroken(c, label) {
  if (c.errors.length > 0) {
    throw new Error(`${label}: collection errors: ${c.errors.map((e) => `${e.name}: ${e.message}`).join('; ')}`)
  }
  if (c.collection.status === 'error') throw new Error(`${label}: collection status is error`)
}

// Waits until the collection's rows equal the rows of `sql` (both sorted by id), then checks
// that those rows have exactly the ids `expectIds` (the scenario's own expectation).
async function waitEqualsSelect(c, sql, expectIds, label) {
  const deadline = Date.now() + WAIT_MS
  let expected
  let actual
  for (;;) {
    failIfBroken(c, label)
    expected = (await query(sql)).rows.sort(byId)
    actual = collectionRows(c)
    try {
      assert.deepEqual(actual, expected)
      break
    } catch {
      if (Date.now() > deadline) break
      await new Promise((resolve) => setTimeout(resolve, 50))
    }
  }
  assert.deepEqual(actual, expected, `${label}: the collection's rows equal PostgreSQL's SELECT of the shape`)
  assert.deepEqual(
    expected.map((r) => r.id),
    [...expectIds].sort((a, b) => a - b),
    `${label}: the SELECT holds the rows the scenario expects`,
  )
}

async function awaitTxId(c, xid, label) {
  let resolved
  try {
    resolved = await c.collection.utils.awaitTxId(xid, TXID_WAIT_MS)
  } catch (err) {
    const events = messagesSince(c, 0).filter((m) => !('key' in m))
    assert.fail(`${label}: awaitTxId(${xid}) did not resolve: ${err.name}: ${err.message}; ` +
      `control messages and events seen: ${JSON.stringify(events).slice(0, 3000)}`)
  }
  assert.equal(resolved, true, `${label}: awaitTxId(${xid}) resolves true`)
}

// The messages of the responses recorded from index `mark` on (bodies already read).
function messagesSince(c, mark) {
  return c.log.slice(mark).flatMap((e) => (Array.isArray(e.messages) ? e.messages : []))
}

function refetchesSince(c, mark) {
  const entries = c.log.slice(mark)
  return {
    conflicts: entries.filter((e) => e.status === 409).map((e) => `${e.url.search}`),
    mustRefetch: messagesSince(c, mark).filter((m) => m.headers?.control === 'must-refetch').length,
  }
}

// The checks of a move-in done the Electric way, for the transaction `xid` that moved the rows
// with the Electric keys `movedKeys` in, from log entry `mark` on.
async function assertMoveInWithoutRefetch(c, mark, xid, movedKeys, label) {
  // The collection has applied the bodies; their clones are read a moment later. Settle until
  // the move-in event or a 409 is recorded (at most 30 s; the assertions below say which).
  await waitFor(
    () => messagesSince(c, mark).some((m) => m.headers?.event === 'move-in') || refetchesSince(c, mark).conflicts.length > 0,
    { timeoutMs: 30000, what: `${label}: a move-in event or a 409 to be recorded` },
  ).catch(() => {})
  const { conflicts, mustRefetch } = refetchesSince(c, mark)
  const msgs = messagesSince(c, mark)
  const summary = JSON.stringify(msgs.map((m) => ('key' in m ? { key: m.key, headers: m.headers } : m))).slice(0, 4000)
  assert.deepEqual(conflicts, [], `${label}: no 409 (must-refetch) answered while the rows moved in; messages: ${summary}`)
  assert.equal(mustRefetch, 0, `${label}: no must-refetch control message`)
  const moveIn = msgs.filter((m) => m.headers?.event === 'move-in')
  assert.ok(moveIn.length >= 1, `${label}: a move-in event came; messages: ${summary}`)
  assert.ok(
    moveIn.some((m) => Array.isArray(m.headers.txids) && m.headers.txids.includes(xid)),
    `${label}: a move-in event's txids include ${xid}: ${JSON.stringify(moveIn)}`,
  )
  const rows = msgs.filter((m) => 'key' in m && m.headers.is_move_in === true)
  for (const key of movedKeys) {
    assert.ok(rows.some((m) => m.key === key && m.headers.operation === 'insert'),
      `${label}: row ${key} came as an insert with is_move_in; messages: ${summary}`)
  }
  const lastMoveInRow = msgs.lastIndexOf(rows[rows.length - 1])
  const snapEnd = msgs.findIndex((m, i) => i > lastMoveInRow && m.headers?.control === 'snapshot-end')
  assert.ok(snapEnd > lastMoveInRow, `${label}: a snapshot-end follows the move-in rows; messages: ${summary}`)
  await awaitTxId(c, xid, label)
}

after(async () => {
  await closePool()
})

// ---------------------------------------------------------------------------------------
// users / posts

describe('TanStack electric collection, posts of active users ("userId" IN (SELECT id FROM users WHERE "isActive"))', () => {
  const users = uniqueTable('sq_ts_users')
  const posts = uniqueTable('sq_ts_posts')
  const where = `"userId" IN (SELECT id FROM ${users} WHERE "isActive" = true)`
  const SQL = `SELECT id, "userId", title FROM ${posts} WHERE ${where}`
  const key = (id) => `"public"."${posts}"/"${id}"`
  let c

  before(async () => {
    await createTable([
      `CREATE TABLE ${users} (id int PRIMARY KEY, name text NOT NULL, "isActive" boolean NOT NULL)`,
      `ALTER TABLE ${users} REPLICA IDENTITY FULL`,
      `CREATE TABLE ${posts} (id int PRIMARY KEY, "userId" int NOT NULL REFERENCES ${users}(id) ON DELETE CASCADE, title text)`,
      `INSERT INTO ${users} VALUES (1, 'u1', true), (2, 'u2', true), (3, 'u3', false), (4, 'u4', true),
                                   (5, 'u5', true), (6, 'u6', false), (7, 'u7', true)`,
      `INSERT INTO ${posts} VALUES (10, 1, 'p10'), (11, 1, 'p11'), (20, 2, 'p20'), (30, 3, 'p30'),
                                   (40, 4, 'p40'), (50, 5, 'p50'), (60, 6, 'p60'), (61, 6, 'p61'), (70, 7, 'p70')`,
    ])
  })

  after(async () => {
    if (c) await c.collection.cleanup()
    await dropTable(posts)
    await dropTable(users)
  })

  it('initial sync: only the posts of active users', async () => {
    c = startCollection('sq-posts', { table: posts, where })
    await waitReady(c)
    await waitEqualsSelect(c, SQL, [10, 11, 20, 40, 50, 70], 'initial sync')
    const first = messagesSince(c, 0).find((m) => 'key' in m)
    assert.ok(first && Array.isArray(first.headers.tags) && Array.isArray(first.headers.active_conditions),
      `snapshot rows carry tags and active_conditions: ${JSON.stringify(first)}`)
  })

  it('an insert into the outer table: awaitTxId(its xid) resolves with the row in the collection', async () => {
    const { xid } = await runTx([
      `INSERT INTO ${posts} VALUES (21, 2, 'p21')`, // user 2 is active: in
      `INSERT INTO ${posts} VALUES (31, 3, 'p31')`, // user 3 is not: out
    ])
    await awaitTxId(c, xid, 'outer insert')
    // awaitTxId resolves when the transaction is applied: the row is there at once.
    assert.ok(c.collection.has(21), 'post 21 is in the collection when awaitTxId resolves')
    assert.ok(!c.collection.has(31), 'post 31 (inactive user) is not')
    await waitEqualsSelect(c, SQL, [10, 11, 20, 21, 40, 50, 70], 'outer insert')
  })

  it('move-out: deactivating a user removes its posts; awaitTxId(xid) resolves', async () => {
    const { xid } = await runTx([`UPDATE ${users} SET "isActive" = false WHERE id = 1`])
    await waitEqualsSelect(c, SQL, [20, 21, 40, 50, 70], 'move-out of user 1')
    await awaitTxId(c, xid, 'move-out of user 1 (the event carries the txid)')
  })

  it('move-out then move-in again: reactivating the user brings its posts back', async () => {
    await runTx([`UPDATE ${users} SET "isActive" = true WHERE id = 1`])
    await waitEqualsSelect(c, SQL, [10, 11, 20, 21, 40, 50, 70], 'move-in of user 1')
    // and out again, with the state rebuilt by the move-in
    await runTx([`UPDATE ${users} SET "isActive" = false WHERE id = 1`])
    await waitEqualsSelect(c, SQL, [20, 21, 40, 50, 70], 'second move-out of user 1')
    await runTx([`UPDATE ${users} SET "isActive" = true WHERE id = 1`])
    await waitEqualsSelect(c, SQL, [10, 11, 20, 21, 40, 50, 70], 'second move-in of user 1')
  })

  it('an update of a plain column keeps the row and updates it', async () => {
    await runTx([`UPDATE ${posts} SET title = 'p70 edited' WHERE id = 70`])
    await waitEqualsSelect(c, SQL, [10, 11, 20, 21, 40, 50, 70], 'title update')
    assert.equal(c.collection.get(70)?.title, 'p70 edited')
  })

  it('an update of only the tagged column: the old value moving out later does not take the row', async () => {
    // post 20 goes from user 2 to user 4 (both active): it stays, with its tag replaced
    await runTx([`UPDATE ${posts} SET "userId" = 4 WHERE id = 20`])
    await waitEqualsSelect(c, SQL, [10, 11, 20, 21, 40, 50, 70], 'post 20 moved to user 4')
    assert.equal(c.collection.get(20)?.userId, 4)
    // user 2 leaves: post 21 goes, post 20 (now user 4's) stays
    await runTx([`UPDATE ${users} SET "isActive" = false WHERE id = 2`])
    await waitEqualsSelect(c, SQL, [10, 11, 20, 40, 50, 70], 'user 2 deactivated after post 20 moved away')
  })

  it('a DELETE of an outer row removes it', async () => {
    await runTx([
      `DELETE FROM ${posts} WHERE id = 50`, // in the shape
      `DELETE FROM ${posts} WHERE id = 60`, // not in the shape
    ])
    await waitEqualsSelect(c, SQL, [10, 11, 20, 40, 70], 'delete of post 50')
  })

  it('a multi-row transaction with mixed moves', async () => {
    await runTx([
      `UPDATE ${users} SET "isActive" = true WHERE id = 3`, // posts 30, 31 move in
      `UPDATE ${users} SET "isActive" = false WHERE id = 4`, // posts 20, 40 move out
      `UPDATE ${posts} SET title = 'p70 mixed' WHERE id = 70`, // stays, changed
      `INSERT INTO ${posts} VALUES (32, 3, 'p32')`, // user 3, now active: in
      `INSERT INTO ${posts} VALUES (41, 4, 'p41')`, // user 4, now inactive: out
      `UPDATE ${posts} SET "userId" = 1 WHERE id = 40`, // from inactive user 4 to active user 1: in
    ])
    await waitEqualsSelect(c, SQL, [10, 11, 30, 31, 32, 40, 70], 'mixed moves')
    assert.equal(c.collection.get(70)?.title, 'p70 mixed')
    // user 4 back: post 20 and 41 return, post 40 (now user 1's) is unaffected
    await runTx([`UPDATE ${users} SET "isActive" = true WHERE id = 4`])
    await waitEqualsSelect(c, SQL, [10, 11, 20, 30, 31, 32, 40, 41, 70], 'user 4 reactivated')
    // and user 1 out: 10, 11 and 40 go
    await runTx([`UPDATE ${users} SET "isActive" = false WHERE id = 1`])
    await waitEqualsSelect(c, SQL, [20, 30, 31, 32, 41, 70], 'user 1 deactivated after mixed moves')
  })

  it('a cascade delete: the user and its posts go in one transaction', async () => {
    const { xid } = await runTx([`DELETE FROM ${users} WHERE id = 7`])
    await waitEqualsSelect(c, SQL, [20, 30, 31, 32, 41], 'cascade delete of user 7')
    await awaitTxId(c, xid, 'cascade delete of user 7')
  })

  it('move-in without a refetch', async () => {
    await waitEqualsSelect(c, SQL, [20, 30, 31, 32, 41], 'before the move-in')
    const mark = c.log.length
    const { xid } = await runTx([`UPDATE ${users} SET "isActive" = true WHERE id = 6`]) // post 61 moves in
    await waitEqualsSelect(c, SQL, [20, 30, 31, 32, 41, 61], 'move-in of user 6')
    await assertMoveInWithoutRefetch(c, mark, xid, [key(61)], 'move-in of user 6')
    // the row that moved in is followed like any other: updated, then moved out again
    await runTx([`UPDATE ${posts} SET title = 'p61 edited' WHERE id = 61`])
    await waitEqualsSelect(c, SQL, [20, 30, 31, 32, 41, 61], 'update of the moved-in post 61')
    await runTx([`UPDATE ${users} SET "isActive" = false WHERE id = 6`])
    await waitEqualsSelect(c, SQL, [20, 30, 31, 32, 41], 'user 6 deactivated again')
  })
})

// ---------------------------------------------------------------------------------------
// projects / memberships / issues, with a param in the subquery

describe('TanStack electric collection, issues of my projects (project_id IN (SELECT project_id FROM memberships WHERE user_id = $1))', () => {
  const projects = uniqueTable('sq_ts_projects')
  const memberships = uniqueTable('sq_ts_members')
  const issues = uniqueTable('sq_ts_issues')
  const where = `project_id IN (SELECT project_id FROM ${memberships} WHERE user_id = $1)`
  const SQL = `SELECT id, project_id, title FROM ${issues}
                WHERE project_id IN (SELECT project_id FROM ${memberships} WHERE user_id = 1)`
  const key = (id) => `"public"."${issues}"/"${id}"`
  let c

  before(async () => {
    await createTable([
      ...membershipTables(projects, memberships, issues),
      `INSERT INTO ${projects} SELECT g, 'project ' || g FROM generate_series(1, 6) g`,
      `INSERT INTO ${memberships} VALUES (1, 1), (2, 1), (3, 2), (4, 1), (5, 1), (6, 2)`,
      `INSERT INTO ${issues} VALUES (100, 1, 'i100'), (101, 1, 'i101'), (200, 2, 'i200'), (300, 3, 'i300'),
                                    (400, 4, 'i400'), (500, 5, 'i500'), (600, 6, 'i600')`,
    ])
  })

  after(async () => {
    if (c) await c.collection.cleanup()
    await dropTable(issues)
    await dropTable(memberships)
    await dropTable(projects)
  })

  it('initial sync: the issues of user 1\'s projects (param $1 = 1)', async () => {
    c = startCollection('sq-issues', { table: issues, where, params: { 1: '1' } })
    await waitReady(c)
    await waitEqualsSelect(c, SQL, [100, 101, 200, 400, 500], 'initial sync')
  })

  it('an insert into the outer table: awaitTxId(its xid) resolves with the row in the collection', async () => {
    const { xid } = await runTx([
      `INSERT INTO ${issues} VALUES (102, 1, 'i102')`, // project 1: in
      `INSERT INTO ${issues} VALUES (301, 3, 'i301')`, // project 3 (user 2's): out
    ])
    await awaitTxId(c, xid, 'outer insert')
    assert.ok(c.collection.has(102), 'issue 102 is in the collection when awaitTxId resolves')
    assert.ok(!c.collection.has(301), 'issue 301 is not')
    await waitEqualsSelect(c, SQL, [100, 101, 102, 200, 400, 500], 'outer insert')
  })

  it('move-out: deleting a membership removes the project\'s issues; awaitTxId(xid) resolves', async () => {
    const { xid } = await runTx([`DELETE FROM ${memberships} WHERE project_id = 2 AND user_id = 1`])
    await waitEqualsSelect(c, SQL, [100, 101, 102, 400, 500], 'membership (2,1) deleted')
    await awaitTxId(c, xid, 'membership (2,1) deleted (the event carries the txid)')
  })

  it('move-out then move-in again: the membership back brings the issues back', async () => {
    await runTx([`INSERT INTO ${memberships} VALUES (2, 1)`])
    await waitEqualsSelect(c, SQL, [100, 101, 102, 200, 400, 500], 'membership (2,1) back')
  })

  it('an update of only the tagged column, then the old project leaves', async () => {
    await runTx([`UPDATE ${issues} SET project_id = 4 WHERE id = 101`])
    await waitEqualsSelect(c, SQL, [100, 101, 102, 200, 400, 500], 'issue 101 moved to project 4')
    assert.equal(c.collection.get(101)?.project_id, 4)
    await runTx([
      `DELETE FROM ${memberships} WHERE project_id = 1 AND user_id = 1`, // 100, 102 go; 101 stays
      `DELETE FROM ${memberships} WHERE project_id = 3 AND user_id = 2`, // another user's: nothing
    ])
    await waitEqualsSelect(c, SQL, [101, 200, 400, 500], 'membership (1,1) deleted after issue 101 moved away')
  })

  it('a DELETE of an outer row removes it', async () => {
    await runTx([`DELETE FROM ${issues} WHERE id = 500`])
    await waitEqualsSelect(c, SQL, [101, 200, 400], 'delete of issue 500')
  })

  it('a value leaving and coming back in one transaction, and one entering and leaving, change nothing', async () => {
    await runTx([
      `DELETE FROM ${memberships} WHERE project_id = 2 AND user_id = 1`,
      `INSERT INTO ${memberships} VALUES (2, 1)`,
      `INSERT INTO ${memberships} VALUES (6, 1)`,
      `DELETE FROM ${memberships} WHERE project_id = 6 AND user_id = 1`,
      `UPDATE ${issues} SET title = 'i200 marker' WHERE id = 200`, // shows the transaction arrived
    ])
    await waitEqualsSelect(c, SQL, [101, 200, 400], 'membership (2,1) out and in, (6,1) in and out')
    assert.equal(c.collection.get(200)?.title, 'i200 marker')
    // a later transaction too, so that nothing the first one sent late is missed
    await runTx([`UPDATE ${issues} SET title = 'i400 marker' WHERE id = 400`])
    await waitEqualsSelect(c, SQL, [101, 200, 400], 'after a later transaction')
  })

  it('a multi-row transaction with mixed moves', async () => {
    await runTx([
      `INSERT INTO ${memberships} VALUES (3, 1)`, // 300, 301 move in
      `DELETE FROM ${memberships} WHERE project_id = 4 AND user_id = 1`, // 101, 400 move out
      `UPDATE ${issues} SET title = 'i200 mixed' WHERE id = 200`, // stays, changed
      `INSERT INTO ${issues} VALUES (201, 2, 'i201')`, // in
      `INSERT INTO ${issues} VALUES (302, 3, 'i302')`, // project 3, now mine: in
      `INSERT INTO ${issues} VALUES (401, 4, 'i401')`, // project 4, no longer mine: out
      `INSERT INTO ${memberships} VALUES (5, 2)`, // another user's: nothing
    ])
    await waitEqualsSelect(c, SQL, [200, 201, 300, 301, 302], 'mixed moves')
    assert.equal(c.collection.get(200)?.title, 'i200 mixed')
  })

  it('a cascade delete: the project, its memberships and its issues go in one transaction', async () => {
    const { xid } = await runTx([`DELETE FROM ${projects} WHERE id = 2`])
    await waitEqualsSelect(c, SQL, [300, 301, 302], 'cascade delete of project 2')
    await awaitTxId(c, xid, 'cascade delete of project 2')
    // project 3 out by its membership: the state after the cascade is still right
    await runTx([`DELETE FROM ${memberships} WHERE project_id = 3 AND user_id = 1`])
    await waitEqualsSelect(c, SQL, [], 'membership (3,1) deleted after the cascade')
  })

  it('move-in without a refetch', async () => {
    await waitEqualsSelect(c, SQL, [], 'before the move-in')
    const mark = c.log.length
    const { xid } = await runTx([`INSERT INTO ${memberships} VALUES (6, 1)`]) // issue 600 moves in
    await waitEqualsSelect(c, SQL, [600], 'membership (6,1) inserted')
    await assertMoveInWithoutRefetch(c, mark, xid, [key(600)], 'membership (6,1) inserted')
    await runTx([`UPDATE ${issues} SET title = 'i600 edited' WHERE id = 600`])
    await waitEqualsSelect(c, SQL, [600], 'update of the moved-in issue 600')
    await runTx([`DELETE FROM ${memberships} WHERE project_id = 6 AND user_id = 1`])
    await waitEqualsSelect(c, SQL, [], 'membership (6,1) deleted again')
  })
})

// ---------------------------------------------------------------------------------------
// on-demand: the collection loads the rows a live query asks for as subset snapshots, which
// carry the shape's tags, so that moves reach the rows they loaded

describe('TanStack electric collection, on-demand: a live query over a membership shape loads tagged subsets', () => {
  const projects = uniqueTable('sq_tsd_projects')
  const memberships = uniqueTable('sq_tsd_memberships')
  const issues = uniqueTable('sq_tsd_issues')
  const where = `project_id IN (SELECT project_id FROM ${memberships} WHERE user_id = $1)`
  const SQL = `SELECT id, project_id, title FROM ${issues} WHERE ${where.replace('$1', '1')} AND id > 100`
  let c
  let live

  before(async () => {
    await createTable([
      ...membershipTables(projects, memberships, issues),
      `INSERT INTO ${projects} SELECT g, 'project ' || g FROM generate_series(1, 4) g`,
      `INSERT INTO ${memberships} VALUES (1, 1), (2, 1), (3, 2)`,
      `INSERT INTO ${issues} VALUES (100, 1, 'i100'), (101, 1, 'i101'), (200, 2, 'i200'), (201, 2, 'i201'),
                                    (300, 3, 'i300'), (400, 4, 'i400')`,
    ])
  })

  after(async () => {
    if (live) await live.cleanup()
    if (c) await c.collection.cleanup()
    await dropTable(issues)
    await dropTable(memberships)
    await dropTable(projects)
  })

  const liveRows = () => Array.from(live.values(), (row) =>
    Object.fromEntries(Object.entries(row).filter(([name]) => !name.startsWith('$')))).sort(byId)

  async function waitLiveEquals(expectIds, label) {
    let expected
    await waitFor(async () => {
      failIfBroken(c, label)
      expected = (await query(SQL)).rows.sort(byId)
      try {
        assert.deepEqual(liveRows(), expected)
        return true
      } catch {
        return false
      }
    }, { timeoutMs: WAIT_MS, what: `${label}: the live query to equal the SELECT` }).catch(() => {})
    assert.deepEqual(liveRows(), expected, `${label}: the live query's rows equal PostgreSQL's SELECT`)
    assert.deepEqual(expected.map((r) => r.id), expectIds, `${label}: the SELECT holds the rows the scenario expects`)
  }

  it('the live query loads its rows as a subset, tagged', async () => {
    c = startCollection('sq-ondemand', { table: issues, where, params: { 1: '1' } }, 'on-demand')
    live = createLiveQueryCollection({
      query: (q) => q.from({ i: c.collection }).where(({ i }) => gt(i.id, 100)),
      startSync: true,
    })
    await live.preload()
    await waitLiveEquals([101, 200, 201], 'loaded')
    const subsets = c.log.filter((e) => [...e.url.searchParams.keys()].some((k) => k.startsWith('subset__')))
    assert.ok(subsets.length > 0, 'the rows came by a subset request')
    assert.deepEqual(subsets.map((e) => e.status).filter((st) => st !== 200), [], 'every subset request answered 200')
    await waitFor(() => subsets.every((e) => e.messages !== undefined), { timeoutMs: 10000, what: 'the subset bodies' })
    const rows = subsets.flatMap((e) => e.messages?.data ?? [])
    assert.ok(rows.length > 0 && rows.every((m) => Array.isArray(m.headers.tags) && m.headers.tags.length === 1),
      `the subset's rows carry the shape's tags: ${JSON.stringify(rows).slice(0, 1000)}`)
  })

  it('a move-out removes the rows the subset loaded', async () => {
    await runTx([`DELETE FROM ${memberships} WHERE project_id = 2 AND user_id = 1`])
    await waitLiveEquals([101], 'membership (2,1) deleted')
  })
})

// ---------------------------------------------------------------------------------------
// nested: issues of the projects of the teams of user 1 (two levels of subqueries)

describe('TanStack electric collection, nested subqueries: issues of the projects of my teams', () => {
  const members = uniqueTable('sq_tsn_members')
  const projects = uniqueTable('sq_tsn_projects')
  const issues = uniqueTable('sq_tsn_issues')
  const where = `project_id IN (SELECT id FROM ${projects} WHERE team_id IN (SELECT team_id FROM ${members} WHERE user_id = $1))`
  const SQL = `SELECT id, project_id, title FROM ${issues} WHERE ${where.replace('$1', '1')}`
  let c

  before(async () => {
    await createTable([
      `CREATE TABLE ${members} (team_id int NOT NULL, user_id int NOT NULL, PRIMARY KEY (team_id, user_id))`,
      `ALTER TABLE ${members} REPLICA IDENTITY FULL`,
      `CREATE TABLE ${projects} (id int PRIMARY KEY, team_id int)`,
      `ALTER TABLE ${projects} REPLICA IDENTITY FULL`,
      `CREATE TABLE ${issues} (id int PRIMARY KEY, project_id int NOT NULL, title text)`,
      `INSERT INTO ${members} VALUES (1, 1), (2, 2)`,
      `INSERT INTO ${projects} VALUES (1, 1), (2, 1), (3, 2), (4, 3)`,
      `INSERT INTO ${issues} VALUES (100, 1, 'i100'), (200, 2, 'i200'), (300, 3, 'i300'), (400, 4, 'i400')`,
    ])
  })

  after(async () => {
    if (c) await c.collection.cleanup()
    await dropTable(issues)
    await dropTable(projects)
    await dropTable(members)
  })

  it('follows moves at both levels', async () => {
    c = startCollection('sq-nested', { table: issues, where, params: { 1: '1' } })
    await waitReady(c)
    await waitEqualsSelect(c, SQL, [100, 200], 'initial sync')
    // the inner level: user 1 joins team 2 (project 3 comes in)
    await runTx([`INSERT INTO ${members} VALUES (2, 1)`])
    await waitEqualsSelect(c, SQL, [100, 200, 300], 'user 1 joins team 2')
    // the middle level: project 2 moves to team 3 (out), project 4 to team 1 (in)
    await runTx([`UPDATE ${projects} SET team_id = 3 WHERE id = 2`, `UPDATE ${projects} SET team_id = 1 WHERE id = 4`])
    await waitEqualsSelect(c, SQL, [100, 300, 400], 'projects 2 and 4 change teams')
    // the inner level again: user 1 leaves team 1 (projects 1 and 4 go)
    const { xid } = await runTx([`DELETE FROM ${members} WHERE team_id = 1 AND user_id = 1`])
    await waitEqualsSelect(c, SQL, [300], 'user 1 leaves team 1')
    await awaitTxId(c, xid, 'the move-out names its transaction')
  })
})

