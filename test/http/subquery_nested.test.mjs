// Nested subqueries (issue 27): a subquery whose where clause has a subquery, to 3 levels
// below the shape's table:
//
//   issues:   project_id IN (SELECT id FROM projects
//               WHERE team_id IN (SELECT id FROM teams
//                 WHERE org_id IN (SELECT org_id FROM org_members WHERE user_id = $1)))
//
// Against a real cluster, with the raw client of test/lib/subquery_client.mjs (it applies
// moves as @tanstack/electric-db-collection does): the snapshot equals the SELECT; a change
// at any level moves rows in or out of the shape, without a 409, and the client ends equal to
// the SELECT after each transaction; changes at several levels in one transaction are judged
// together (a value that enters and leaves within it moves nothing); NOT IN at a nested
// level; a column type change at the deepest level rotates the shape.

import { after, describe, it } from 'node:test'
import assert from 'node:assert/strict'

import { closePool, createTable, fetchShape, query } from '../lib/helpers.mjs'
import { waitDecoded } from '../lib/live_helpers.mjs'
import { clientRows, Follower, projectsOf, runTxid, selectRows, tableTracker } from '../lib/subquery_client.mjs'

const USER = 10

const { newTable, dropAll } = tableTracker()

after(async () => {
  await dropAll()
  await closePool()
})

// Orgs 1..3; user 10 is a member of org 1, user 11 of org 2. Teams 1..6, team t in org
// ((t - 1) % 3) + 1. Projects 1..12, project p of team ((p - 1) % 6) + 1. Issues 1..36, issue
// i of project ((i - 1) % 12) + 1. So user 10 sees the issues of the projects of teams 1 and 4.
async function makeSchema(prefix) {
  const OM = newTable(`${prefix}_om`)
  const T = newTable(`${prefix}_t`)
  const P = newTable(`${prefix}_p`)
  const I = newTable(`${prefix}_i`)
  await createTable([
    `CREATE TABLE ${OM} (id int PRIMARY KEY, user_id int, org_id int)`,
    `CREATE TABLE ${T} (id int PRIMARY KEY, org_id int, name text)`,
    `CREATE TABLE ${P} (id int PRIMARY KEY, team_id int, name text)`,
    `CREATE TABLE ${I} (id int PRIMARY KEY, project_id int, title text)`,
    `ALTER TABLE ${OM} REPLICA IDENTITY FULL`,
    `ALTER TABLE ${T} REPLICA IDENTITY FULL`,
    `ALTER TABLE ${P} REPLICA IDENTITY FULL`,
    `INSERT INTO ${OM} VALUES (1, ${USER}, 1), (2, 11, 2)`,
    `INSERT INTO ${T} SELECT g, ((g - 1) % 3) + 1, 'team ' || g FROM generate_series(1, 6) g`,
    `INSERT INTO ${P} SELECT g, ((g - 1) % 6) + 1, 'project ' || g FROM generate_series(1, 12) g`,
    `INSERT INTO ${I} SELECT g, ((g - 1) % 12) + 1, 'issue ' || g FROM generate_series(1, 36) g`,
  ])
  await waitDecoded()
  const where = `project_id IN (SELECT id FROM ${P} WHERE team_id IN (SELECT id FROM ${T} WHERE org_id IN (SELECT org_id FROM ${OM} WHERE user_id = $1)))`
  return {
    OM,
    T,
    P,
    I,
    where,
    params: { table: I, where, params: [String(USER)] },
    sql: `SELECT * FROM ${I} WHERE ${where}`,
    values: [USER],
  }
}

// The client, after the transactions committed so far, equals the SELECT, with no 409 and
// no update of a key it does not hold. `marker` is an issue the shape holds.
async function assertEqualsSelect(f, s, marker, label) {
  await f.barrier(s.I, marker)
  assert.deepEqual(f.refetches, [], `${label}: no 409`)
  assert.deepEqual(f.state.problems, [], `${label}: every update is of a key held`)
  assert.deepEqual(clientRows(f.state), await selectRows(s.sql, s.values), `${label}: the client equals the SELECT`)
}


describe('nested subqueries: three levels', () => {
  it('the snapshot equals the SELECT, each row tagged with one condition', async () => {
    const s = await makeSchema('sqn_snap')
    const f = await new Follower(s.params).sync()
    const expected = await selectRows(s.sql, s.values)
    assert.equal(expected.length, 12, 'projects 1, 4, 7 and 10 have 3 issues each')
    assert.deepEqual(clientRows(f.state), expected)
    for (const m of f.log.filter((x) => 'key' in x)) {
      assert.equal(m.headers.tags.length, 1, JSON.stringify(m))
      assert.deepEqual(m.headers.active_conditions, [true], JSON.stringify(m))
    }
  })

  it('a change at each level moves issues in and out; the client equals the SELECT after each', async () => {
    const s = await makeSchema('sqn_levels')
    const f = await new Follower(s.params).sync()
    const steps = [
      // the deepest level: user 10 joins org 2 (teams 2 and 5: projects 2, 5, 8, 11)
      ['a membership of another org', `INSERT INTO ${s.OM} VALUES (10, ${USER}, 2)`, 1, [1, 2, 4, 5, 7, 8, 10, 11]],
      // the middle level: team 3 moves to org 1 (projects 3 and 9 come in)
      ['a team moved into a member org', `UPDATE ${s.T} SET org_id = 1 WHERE id = 3`, 1, [1, 2, 3, 4, 5, 7, 8, 9, 10, 11]],
      // the first level: project 12 moves to team 1
      ['a project moved into a member team', `UPDATE ${s.P} SET team_id = 1 WHERE id = 12`, 1, [1, 2, 3, 4, 5, 7, 8, 9, 10, 11, 12]],
      // and out again at each level
      ['a project moved out', `UPDATE ${s.P} SET team_id = 6 WHERE id = 12`, 1, [1, 2, 3, 4, 5, 7, 8, 9, 10, 11]],
      ['a team moved out', `UPDATE ${s.T} SET org_id = 3 WHERE id = 3`, 1, [1, 2, 4, 5, 7, 8, 10, 11]],
      ['a membership deleted', `DELETE FROM ${s.OM} WHERE id = 1`, 2, [2, 5, 8, 11]],
      ['a team deleted', `DELETE FROM ${s.T} WHERE id = 5`, 2, [2, 8]],
      ['a team inserted in org 2, with a project moved to it', null, 2, [2, 8, 6]],
    ]
    for (const [label, sql, marker, projects] of steps) {
      if (sql) await runTxid([sql])
      else await runTxid([`INSERT INTO ${s.T} VALUES (7, 2, 'team 7')`, `UPDATE ${s.P} SET team_id = 7 WHERE id = 6`])
      await f.until(() => projectsOf(f).size === projects.length, `${label}: projects ${projects}`)
      await assertEqualsSelect(f, s, marker, label)
      assert.deepEqual([...projectsOf(f)].sort((a, b) => a - b), [...projects].sort((a, b) => a - b), label)
    }
    const events = f.events().map((m) => m.headers.event)
    assert.ok(events.includes('move-in') && events.includes('move-out'), `moves both ways: ${events}`)
  })

  it('changes at several levels in one transaction are judged together; a value entering and leaving in it moves nothing', async () => {
    const s = await makeSchema('sqn_txn')
    const f = await new Follower(s.params).sync()
    const before = f.log.length
    // org 3 enters (a membership) and leaves (deleted) again; team 3 (org 3) would have come in
    await runTxid([
      `INSERT INTO ${s.OM} VALUES (20, ${USER}, 3)`,
      `INSERT INTO ${s.I} VALUES (100, 3, 'in and out')`,
      `DELETE FROM ${s.OM} WHERE id = 20`,
    ])
    await assertEqualsSelect(f, s, 1, 'enter and leave')
    assert.deepEqual(f.log.slice(before).filter((m) => m.headers?.event !== undefined), [], 'no move event')

    // one transaction at every level: team 1 leaves org 1, team 2 joins it, project 12 moves to
    // team 2, and the membership of org 1 is replaced by one of org 1 again
    await runTxid([
      `UPDATE ${s.T} SET org_id = 3 WHERE id = 1`,
      `UPDATE ${s.T} SET org_id = 1 WHERE id = 2`,
      `UPDATE ${s.P} SET team_id = 2 WHERE id = 12`,
      `DELETE FROM ${s.OM} WHERE id = 1`,
      `INSERT INTO ${s.OM} VALUES (21, ${USER}, 1)`,
    ])
    await f.until(() => projectsOf(f).has(12) && !projectsOf(f).has(1), 'the moves')
    await assertEqualsSelect(f, s, 4, 'every level at once')
  })

  it('a parent row deleted with its members in one transaction: the client equals the SELECT', async () => {
    const s = await makeSchema('sqn_casc')
    const f = await new Follower(s.params).sync()
    await runTxid([`DELETE FROM ${s.P} WHERE team_id = 4`, `DELETE FROM ${s.T} WHERE id = 4`])
    await f.until(() => !projectsOf(f).has(4), 'the projects of team 4 to leave')
    await assertEqualsSelect(f, s, 1, 'cascade')
  })

  it('a second shape of the same select gets the same rows and follows the same moves', async () => {
    const s = await makeSchema('sqn_share')
    const a = await new Follower(s.params).sync()
    const b = await new Follower({ ...s.params, columns: 'id,project_id' }).sync()
    await runTxid([`INSERT INTO ${s.OM} VALUES (30, ${USER}, 3)`])
    await a.until(() => projectsOf(a).has(3), 'org 3\'s projects in the first shape')
    await b.until(() => projectsOf(b).has(3), 'org 3\'s projects in the second shape')
    await assertEqualsSelect(a, s, 1, 'the first shape')
    assert.deepEqual([...projectsOf(b)].sort(), [...projectsOf(a)].sort())
  })

  it('a column type change at the deepest level rotates the shape (409); the new snapshot equals the SELECT', async () => {
    const s = await makeSchema('sqn_rot')
    const f = await new Follower(s.params).sync()
    await query(`ALTER TABLE ${s.OM} ALTER COLUMN org_id TYPE bigint`)
    await f.until(() => f.refetches.length > 0, 'a 409')
    assert.deepEqual(clientRows(f.state), await selectRows(s.sql, s.values))
  })
})

describe('nested subqueries: kept rows with large values', () => {
  // A project's note, stored out of line (STORAGE EXTERNAL: never compressed), is read by the
  // nested select: the set keeps it with the row, past the change that brought it (whose
  // decoded value points into the decoder's memory) and past the first reading (whose value
  // points into the TOAST table).
  it('kept rows with out-of-line values are judged again when a membership brings them in', async () => {
    const TM = newTable('sqn_toast_tm')
    const P = newTable('sqn_toast_p')
    const I = newTable('sqn_toast_i')
    const big = (c) => c.repeat(6000)
    await createTable([
      `CREATE TABLE ${TM} (id int PRIMARY KEY, user_id int, team_id int)`,
      `CREATE TABLE ${P} (id int PRIMARY KEY, team_id int, note text)`,
      `ALTER TABLE ${P} ALTER COLUMN note SET STORAGE EXTERNAL`,
      `CREATE TABLE ${I} (id int PRIMARY KEY, project_id int, title text)`,
      `ALTER TABLE ${TM} REPLICA IDENTITY FULL`,
      `ALTER TABLE ${P} REPLICA IDENTITY FULL`,
      `INSERT INTO ${TM} VALUES (1, ${USER}, 1)`,
      // project 2: team 2 (not the user's), read at the first reading with its note out of line
      `INSERT INTO ${P} VALUES (1, 1, 'short'), (2, 2, '${big('a')}')`,
      `INSERT INTO ${I} SELECT g, ((g - 1) % 3) + 1, 'issue ' || g FROM generate_series(1, 9) g`,
    ])
    await waitDecoded()
    const where = `project_id IN (SELECT id FROM ${P} WHERE note LIKE '%a' AND team_id IN (SELECT team_id FROM ${TM} WHERE user_id = $1)) OR project_id = 1`
    const s = { I, params: { table: I, where, params: [String(USER)] }, sql: `SELECT * FROM ${I} WHERE ${where}`, values: [USER] }
    const f = await new Follower(s.params).sync()
    // project 3: team 3, inserted with its note out of line (decoded), kept
    await runTxid([`INSERT INTO ${P} VALUES (3, 3, '${big('a')}')`])
    // more out-of-line values decoded after it (which reuse the decoder's memory)
    for (let i = 0; i < 3; i++) await runTxid([`INSERT INTO ${P} VALUES (${10 + i}, 4, '${big('b')}')`])
    await assertEqualsSelect(f, s, 1, 'a kept row inserted')
    // the user joins teams 2 and 3: both kept rows are judged again, and come in
    await runTxid([`INSERT INTO ${TM} VALUES (2, ${USER}, 2), (3, ${USER}, 3)`])
    await f.until(() => projectsOf(f).has(2) && projectsOf(f).has(3), 'projects 2 and 3 to come in')
    await assertEqualsSelect(f, s, 1, 'the kept rows moved in')
  })
})

describe('nested subqueries: NOT IN below, and NULLs', () => {
  // issues of the projects whose team is not blocked for user 10
  async function makeBlocked(prefix) {
    const B = newTable(`${prefix}_b`)
    const P = newTable(`${prefix}_p`)
    const I = newTable(`${prefix}_i`)
    await createTable([
      `CREATE TABLE ${B} (id int PRIMARY KEY, user_id int, team_id int)`,
      `CREATE TABLE ${P} (id int PRIMARY KEY, team_id int)`,
      `CREATE TABLE ${I} (id int PRIMARY KEY, project_id int, title text)`,
      `ALTER TABLE ${B} REPLICA IDENTITY FULL`,
      `ALTER TABLE ${P} REPLICA IDENTITY FULL`,
      `INSERT INTO ${B} VALUES (1, ${USER}, 1)`,
      `INSERT INTO ${P} SELECT g, ((g - 1) % 3) + 1 FROM generate_series(1, 6) g`,
      `INSERT INTO ${P} VALUES (7, NULL)`,
      `INSERT INTO ${I} SELECT g, ((g - 1) % 7) + 1, 'issue ' || g FROM generate_series(1, 21) g`,
    ])
    await waitDecoded()
    const where = `project_id IN (SELECT id FROM ${P} WHERE team_id NOT IN (SELECT team_id FROM ${B} WHERE user_id = $1))`
    return { B, P, I, params: { table: I, where, params: [String(USER)] }, sql: `SELECT * FROM ${I} WHERE ${where}`, values: [USER] }
  }

  it('blocking and unblocking teams moves their projects\' issues out and in', async () => {
    const s = await makeBlocked('sqn_not')
    const f = await new Follower(s.params).sync()
    assert.deepEqual(clientRows(f.state), await selectRows(s.sql, s.values), 'the snapshot')
    assert.deepEqual([...projectsOf(f)].sort(), [2, 3, 5, 6], 'team 1 is blocked; project 7 has no team')
    await runTxid([`INSERT INTO ${s.B} VALUES (2, ${USER}, 2)`])
    await f.until(() => !projectsOf(f).has(2), 'team 2\'s projects to leave')
    await assertEqualsSelect(f, s, 3, 'blocked')
    await runTxid([`DELETE FROM ${s.B} WHERE id = 1`])
    await f.until(() => projectsOf(f).has(1), 'team 1\'s projects to come')
    await assertEqualsSelect(f, s, 3, 'unblocked')
  })

  it('a NULL entering the NOT IN subquery takes every project out; leaving, brings them back', async () => {
    const s = await makeBlocked('sqn_null')
    const f = await new Follower(s.params).sync()
    await runTxid([`INSERT INTO ${s.B} VALUES (3, ${USER}, NULL)`])
    // NOT IN of a set with a NULL is never true: the shape empties (moves, or a 409 and a resync)
    await f.until(() => f.state.rows.size === 0, 'the shape to empty')
    assert.deepEqual(clientRows(f.state), await selectRows(s.sql, s.values))
    await runTxid([`DELETE FROM ${s.B} WHERE id = 3`])
    await f.until(() => f.state.rows.size > 0, 'the rows to come back')
    await f.barrier(s.I, 2)
    assert.deepEqual(f.state.problems, [])
    assert.deepEqual(clientRows(f.state), await selectRows(s.sql, s.values))
  })
})

describe('nested subqueries: refusals', () => {
  it('refuses a nested select whose table lacks REPLICA IDENTITY FULL, naming it', async () => {
    const O = newTable('sqn_ref_o')
    const A = newTable('sqn_ref_a')
    const B = newTable('sqn_ref_b')
    await createTable([
      `CREATE TABLE ${O} (id int PRIMARY KEY, a int)`,
      `CREATE TABLE ${A} (id int PRIMARY KEY, b int)`,
      `CREATE TABLE ${B} (id int PRIMARY KEY, b int)`,
      `ALTER TABLE ${A} REPLICA IDENTITY FULL`,
    ])
    const where = `a IN (SELECT id FROM ${A} WHERE b IN (SELECT b FROM ${B}))`
    const res = await fetchShape({ table: O, offset: '-1', where })
    assert.equal(res.status, 400, res.text)
    assert.ok(res.body.errors.where[0].includes(`"public"."${B}"`), res.text)
  })
})
