// test/integrity/subquery_durable.mjs: shapes with subqueries across restarts (issue 27, with
// durable logs). Run by test/integration/subquery_durable.sh, which starts the cluster and is
// called back to restart it (`--restart MODE`) and to list the manifest's handles (`--listed`).
//
// Tables: sd_projects(id, archived, name: texts with quotes, a backslash, non-ASCII),
// sd_members(id, user_id, project_id), sd_issues(id, project_id, prio, title), all REPLICA
// IDENTITY FULL. Shapes on sd_issues, each followed by a raw client (test/lib/subquery_client.mjs's
// Follower) that keeps its (handle, offset) across restarts and applies move events as
// @tanstack/electric-db-collection does:
//   member1   project_id IN (members of user 1)
//   notin1    project_id NOT IN (the same select: the two share one value set)
//   nested    project_id IN (unarchived, named projects IN (members of user 2)): its set's kept
//             rows (with their names) on disk, and a NULL in its inner set now and then
//   orprio    prio > 8 OR project_id IN (members of user 3)
//   plain     prio <= 2
//   member4   a set with no value (user 4 has none), made just after a WAL switch
// Each cycle: the clients stop reading; transactions move rows in and out at every level; the
// instance stops (fast, immediate, SIGKILL of the worker, immediate with random bytes appended
// to the value sets file past the length the manifest names) at once after them, so that some
// commits come after the last round and are decoded again after the start, against sets
// restored as of that round; then more moves, among them ones that undo those of before the
// stop (a value counted twice would not leave). Every client must go on with 200 (no 409) and
// end equal to the SELECT of its where clause, after the stop and again after the moves that
// follow it, and the sets, values and kept rows the metrics count must be as many as before
// the stop. Then a move-in held in flight by a lock at the stop (its shape leaves the
// manifest: its client alone gets 409), a missing value sets file (the shapes with
// subqueries get 409, the plain one goes on), and an owner's domain CHECK added to a nested
// select's table while its shape is kept (not restored; the owner's code never runs).
//
// Prints `ok - ...` / `not ok - ...` per check; exits non-zero when one failed.

import assert from 'node:assert/strict'
import { execFileSync } from 'node:child_process'

import pg from 'pg'

import { closePool, fetchShape } from '../lib/helpers.mjs'
import { Follower, byIdNum, clientRows } from '../lib/subquery_client.mjs'
import { parseMetrics } from '../lib/metrics.mjs'

const callback = process.env.SUBQUERY_DURABLE_CALLBACK
let failures = 0

function ok(what) {
  console.log(`ok - ${what}`)
}
function notOk(what, detail) {
  failures++
  console.log(`not ok - ${what}`)
  if (detail) for (const line of String(detail).split('\n').slice(0, 30)) console.log(`#   ${line}`)
}

const SHAPES = {
  member1: 'project_id IN (SELECT project_id FROM sd_members WHERE user_id = 1)',
  notin1: 'project_id NOT IN (SELECT project_id FROM sd_members WHERE user_id = 1)',
  nested:
    "project_id IN (SELECT id FROM sd_projects WHERE NOT archived AND name <> 'none' AND id IN (SELECT project_id FROM sd_members WHERE user_id = 2))",
  orprio: 'prio > 8 OR project_id IN (SELECT project_id FROM sd_members WHERE user_id = 3)',
  plain: 'prio <= 2',
  // a set with no value, read just after a WAL switch (at a position past the new segment's
  // page header)
  member4: 'project_id IN (SELECT project_id FROM sd_members WHERE user_id = 4)',
}

// A statement on a connection of its own: the pool's die with the server.
async function sql(text, values) {
  for (let attempt = 0; ; attempt++) {
    const client = new pg.Client()
    try {
      await client.connect()
      return await client.query(text, values)
    } catch (err) {
      if (attempt >= 30 || !/terminat|ECONNREFUSED|starting up|shutting down|ENOENT|Connection/i.test(err.message))
        throw err
      await new Promise((resolve) => setTimeout(resolve, 500))
    } finally {
      await client.end().catch(() => {})
    }
  }
}

function parseLsn(text) {
  const [hi, lo] = text.split('/')
  return (BigInt(`0x${hi}`) << 32n) + BigInt(`0x${lo}`)
}

async function currentLsn() {
  return parseLsn((await sql('SELECT pg_current_wal_lsn()::text AS l')).rows[0].l)
}

// The position the client was last told it is up to date with.
function seenLsn(f) {
  for (let i = f.log.length - 1; i >= 0; i--) {
    const h = f.log[i].headers
    if (h?.control === 'up-to-date' && h.global_last_seen_lsn !== undefined) return BigInt(h.global_last_seen_lsn)
  }
  return -1n
}

async function catchUp(f, lsn) {
  const deadline = Date.now() + 90000
  while (seenLsn(f) < lsn) {
    if (Date.now() > deadline) throw new Error(`not caught up with ${lsn} within 90 s (at ${seenLsn(f)})`)
    await f.poll()
  }
}

async function expectedRows(where) {
  const raw = { getTypeParser: () => (value) => value }
  return (await sql({ text: `SELECT * FROM sd_issues WHERE ${where}`, types: raw })).rows.sort(byIdNum)
}

// The manifest on disk now: its durable_lsn and the handles it lists.
function manifest() {
  const [durable, ...handles] = callBack('--listed').trim().split(/\s+/).filter(Boolean)
  return { durable: BigInt(durable ?? -1), handles }
}
const listed = () => manifest().handles

// Until a round made durable every commit before `lsn` and lists every shape in `handles`
// (none holds a move-in then).
async function allDurable(handles, lsn) {
  const deadline = Date.now() + 60000
  while (Date.now() < deadline) {
    const m = manifest()
    if (m.durable >= lsn && Object.values(handles).every((h) => m.handles.includes(h))) return true
    await new Promise((resolve) => setTimeout(resolve, 200))
  }
  return false
}

function callBack(...args) {
  return execFileSync('bash', [callback, ...args], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'] })
}

// Every client catches up with the WAL as it is now and must hold its shape's rows.
async function converge(followers, label) {
  const lsn = await currentLsn()
  for (const [name, f] of Object.entries(followers)) {
    try {
      await catchUp(f, lsn)
      assert.deepEqual(clientRows(f.state), await expectedRows(SHAPES[name]))
      assert.deepEqual(f.state.problems, [])
      ok(`${label}: client ${name} holds its shape's rows`)
    } catch (err) {
      const projects = (rows) => [...new Set(rows.map((r) => Number(r.project_id)))].sort((a, b) => a - b)
      const want = await expectedRows(SHAPES[name]).catch(() => [])
      notOk(
        `${label}: client ${name} holds its shape's rows`,
        `projects held: ${projects(clientRows(f.state))}; in the shape: ${projects(want)}\n` +
          `events since the last check: ${JSON.stringify(f.events().slice(-12))}\n${err.message}`,
      )
    }
  }
}

function expectRefetches(followers, label, expected) {
  for (const [name, f] of Object.entries(followers)) {
    const want = expected[name] ?? 0
    if (f.refetches.length === want) ok(`${label}: client ${name} got ${want} 409`)
    else notOk(`${label}: client ${name} got ${want} 409`, `it got ${f.refetches.length}: ${JSON.stringify(f.refetches).slice(0, 600)}`)
  }
}

async function restart(mode, label) {
  const out = callBack('--restart', mode)
  process.stdout.write(out)
  return out
}

// Moves at every level: user 1 gains and loses projects (member1 in and out, notin1 the
// reverse), user 2's project is archived and back (nested, through its kept rows), user 3's
// membership moves (orprio), issues move between projects and change prio.
async function moves(round) {
  // (each of these may start a move-in, whose shape leaves the manifest until it is spliced)
  const p = (n) => ((round * 3 + n) % 12) + 1
  await sql(`INSERT INTO sd_members (user_id, project_id) VALUES (1, ${p(0)}), (2, ${p(1)}), (3, ${p(2)})`)
  await sql(`DELETE FROM sd_members WHERE id = (SELECT min(id) FROM sd_members WHERE user_id = 1)`)
  await sql(`UPDATE sd_projects SET archived = NOT archived WHERE id = ${p(1)}`)
  await sql(`UPDATE sd_members SET project_id = ${p(4)} WHERE id = (SELECT max(id) FROM sd_members WHERE user_id = 3)`)
  await sql(`UPDATE sd_issues SET project_id = ${p(5)}, prio = (prio + 3) % 11 WHERE id % 7 = ${round % 7}`)
  await sql(`INSERT INTO sd_issues (project_id, prio, title) VALUES (${p(0)}, ${round % 11}, 'new ${round}')`)
  // a NULL in the nested select's inner set (its rows with a NULL are counted on disk too)
  if (round % 2 === 1) await sql(`INSERT INTO sd_members (user_id, project_id) VALUES (2, NULL)`)
  // a membership and the issues along, in one transaction
  await sql(`BEGIN; INSERT INTO sd_members (user_id, project_id) VALUES (2, ${p(6)});
             UPDATE sd_issues SET prio = 9 WHERE project_id = ${p(6)}; COMMIT`)
}

// Changes just before a stop, none of which starts a move-in (a restart then would send that
// shape's clients 409): they come after the last round, most often, and are decoded again
// after the start against the sets restored as of it.
async function tail(round) {
  const p = (n) => ((round * 3 + n) % 12) + 1
  await sql(`DELETE FROM sd_members WHERE id = (SELECT max(id) FROM sd_members WHERE user_id = 3)`)
  await sql(`UPDATE sd_projects SET archived = true WHERE id = ${p(7)}`)
  await sql(`UPDATE sd_issues SET prio = (prio + 1) % 11, title = title || '.' WHERE id % 5 = ${round % 5}`)
  await sql(`INSERT INTO sd_issues (project_id, prio, title) VALUES (${p(8)}, 3, 'tail ${round}')`)
  await sql(`DELETE FROM sd_issues WHERE id = (SELECT min(id) FROM sd_issues WHERE project_id = ${p(9)})`)
}

// The moves of before the stop undone: a value counted twice (a commit applied again after
// the start) would stay in its set, and the rows it holds would not leave.
async function undo(round) {
  const p = (n) => ((round * 3 + n) % 12) + 1
  await sql(`DELETE FROM sd_members WHERE user_id = 1 AND project_id = ${p(0)}`)
  await sql(`DELETE FROM sd_members WHERE user_id = 2 AND project_id IN (${p(1)}, ${p(6)})`)
  await sql(`UPDATE sd_projects SET archived = NOT archived WHERE id = ${p(1)}`)
  await sql(`DELETE FROM sd_members WHERE user_id = 3 AND project_id = ${p(4)}`)
  await sql(`DELETE FROM sd_members WHERE user_id = 2 AND project_id IS NULL`)
}

// The subquery gauges, once decoding has caught up with the WAL as it is now: a set counted
// twice after a start, or one left behind, shows in them.
async function gauges() {
  const lsn = await currentLsn()
  const deadline = Date.now() + 60000
  while (parseLsn((await sql('SELECT decoded_lsn::text AS l FROM shape_sync.decoder')).rows[0].l) < lsn) {
    if (Date.now() > deadline) throw new Error('decoding did not catch up within 60 s')
    await new Promise((resolve) => setTimeout(resolve, 100))
  }
  const values = parseMetrics(await (await fetch(`${process.env.SHAPE_SYNC_URL}/metrics`)).text())
  const out = {}
  for (const name of ['shape_sync_subquery_value_sets', 'shape_sync_subquery_values', 'shape_sync_subquery_kept_rows']) {
    out[name] = values.get(name)
  }
  return out
}

async function main() {
  await sql(`CREATE EXTENSION IF NOT EXISTS shape_sync`)
  await sql(`DROP TABLE IF EXISTS sd_issues, sd_members, sd_projects, sd_teams`)
  await sql(`DROP FUNCTION IF EXISTS sd_lock()`)
  await sql(`DROP DOMAIN IF EXISTS sd_name`)
  await sql(`CREATE TABLE sd_projects (id int PRIMARY KEY, archived bool NOT NULL DEFAULT false, name text)`)
  await sql(`CREATE TABLE sd_members (id serial PRIMARY KEY, user_id int NOT NULL, project_id int)`)
  await sql(`CREATE TABLE sd_issues (id serial PRIMARY KEY, project_id int, prio int, title text)`)
  for (const t of ['sd_projects', 'sd_members', 'sd_issues']) await sql(`ALTER TABLE ${t} REPLICA IDENTITY FULL`)
  // names that print with quotes, a backslash, non-ASCII: the nested set keeps them as text
  await sql(`INSERT INTO sd_projects SELECT g, g % 5 = 0, format('p%s ''q'' \\ é, "x"', g) FROM generate_series(1, 12) g`)
  await sql(`INSERT INTO sd_members (user_id, project_id) VALUES (1, 1), (1, 2), (2, 3), (2, 4), (3, 5), (2, 6)`)
  // user 1 never has no project (a NOT IN subquery that becomes empty rotates its shapes)
  await sql(`INSERT INTO sd_members (id, user_id, project_id) VALUES (100000, 1, 99)`)
  await sql(`INSERT INTO sd_issues (project_id, prio, title) SELECT g % 12 + 1, g % 11, 'issue ' || g FROM generate_series(1, 120) g`)

  const followers = {}
  for (const [name, where] of Object.entries(SHAPES))
    if (name !== 'member4') followers[name] = await new Follower({ table: 'sd_issues', where }).sync()
  await sql('SELECT pg_switch_wal()')
  followers.member4 = await new Follower({ table: 'sd_issues', where: SHAPES.member4 }).sync()
  await converge(followers, 'before any restart')
  const handles = Object.fromEntries(Object.entries(followers).map(([n, f]) => [n, f.handle]))

  // every shape is listed once its sets are on disk
  const deadline = Date.now() + 60000
  let inManifest = []
  while (Date.now() < deadline) {
    inManifest = listed()
    if (Object.values(handles).every((h) => inManifest.includes(h))) break
    await new Promise((resolve) => setTimeout(resolve, 250))
  }
  if (Object.values(handles).every((h) => inManifest.includes(h))) ok('the manifest lists every shape, those with subqueries too')
  else notOk('the manifest lists every shape, those with subqueries too', `listed: ${inManifest}; handles: ${JSON.stringify(handles)}`)

  let round = 0
  for (const mode of ['fast', 'immediate', 'sigkill', 'junk-tail']) {
    round++
    const label = `${mode} stop`
    await moves(round)
    if (await allDurable(handles, await currentLsn())) ok(`${label}: a round made the moves durable, every shape listed`)
    else notOk(`${label}: a round made the moves durable, every shape listed`, JSON.stringify(manifest(), (k, v) => (typeof v === 'bigint' ? String(v) : v)))
    await tail(round)
    const before = await gauges()
    const out = await restart(mode, label)
    if (/restored 6 of 6 shapes/.test(out)) ok(`${label}: the log says "restored 6 of 6 shapes"`)
    else notOk(`${label}: the log says "restored 6 of 6 shapes"`, out)
    await converge(followers, `${label}, the moves of before it`)
    expectRefetches(followers, label, {})
    const after = await gauges()
    try {
      assert.deepEqual(after, before)
      ok(`${label}: the sets, their values and kept rows are as many as before it (${JSON.stringify(after)})`)
    } catch (err) {
      notOk(`${label}: the sets, their values and kept rows are as many as before it`, err.message)
    }
    for (const [name, f] of Object.entries(followers)) {
      if (f.handle === handles[name]) ok(`${label}: client ${name} keeps its handle`)
      else notOk(`${label}: client ${name} keeps its handle`, `${handles[name]} -> ${f.handle}`)
    }
    await undo(round)
    await moves(round + 10)
    await converge(followers, `${label}, the moves after it`)
    expectRefetches(followers, `${label}, after more moves`, {})
  }

  // A move-in in flight at the stop: its query waits for a lock on sd_issues, so member1's
  // log lacks the rows it brings; member1 leaves the manifest until it is spliced.
  {
    const label = 'a move-in in flight at an immediate stop'
    const holder = new pg.Client()
    await holder.connect()
    holder.on('error', () => {})
    await holder.query('BEGIN')
    await holder.query('LOCK TABLE sd_issues IN ACCESS EXCLUSIVE MODE')
    await sql(`INSERT INTO sd_members (user_id, project_id) VALUES (1, 11), (1, 12)`)
    // (its query's timeout is 5 min here: the shape is not rotated meanwhile)
    const until = Date.now() + 30000
    while (Date.now() < until && listed().includes(handles.member1))
      await new Promise((resolve) => setTimeout(resolve, 250))
    const nowListed = listed()
    if (!nowListed.includes(handles.member1)) ok(`${label}: member1 leaves the manifest while its move-in waits`)
    else notOk(`${label}: member1 leaves the manifest while its move-in waits`, JSON.stringify(nowListed))
    const out = await restart('immediate', label)
    await holder.end().catch(() => {})
    if (/restored 5 of 5 shapes/.test(out)) ok(`${label}: the log says "restored 5 of 5 shapes"`)
    else notOk(`${label}: the log says "restored 5 of 5 shapes"`, out)
    await converge(followers, label)
    expectRefetches(followers, label, { member1: 1 })
    handles.member1 = followers.member1.handle
  }

  // The value sets file missing: the shapes with subqueries are not restored, the plain one is.
  {
    const label = 'the value sets file removed'
    // the new member1 is listed first
    const until = Date.now() + 60000
    while (Date.now() < until && !listed().includes(handles.member1))
      await new Promise((resolve) => setTimeout(resolve, 250))
    const out = await restart('drop-sets', label)
    if (/cannot read back the value sets of its subqueries/.test(out)) ok(`${label}: the log says the value sets cannot be read back`)
    else notOk(`${label}: the log says the value sets cannot be read back`, out)
    if (/restored 1 of 6 shapes/.test(out)) ok(`${label}: the log says "restored 1 of 6 shapes"`)
    else notOk(`${label}: the log says "restored 1 of 6 shapes"`, out)
    await moves(40)
    await converge(followers, label)
    expectRefetches(followers, label, { member1: 2, notin1: 1, nested: 1, orprio: 1, member4: 1, plain: 0 })
  }

  // A table owner's code added while the shape is kept: restoring the rows its nested select
  // keeps reads their texts in again, which for a domain column would run the domain's CHECK.
  // The restore validates the definition as a request does, the code of every table it reads
  // included (table_code.c): the shape is not restored, its client gets the refusal a new
  // request gets (403), and the owner's function never runs as the worker's role (it would
  // take a session advisory lock in the worker, which keeps it).
  {
    const label = "an owner's domain check added while a shape is kept"
    const key = 743000 + Math.floor(Math.random() * 1000)
    const asOwner = (text) => sql(`SET ROLE sd_owner; ${text}; RESET ROLE`)
    await sql(`DROP ROLE IF EXISTS sd_owner`)
    await sql(`CREATE ROLE sd_owner NOLOGIN`)
    await sql(`GRANT CREATE ON SCHEMA public TO sd_owner`)
    await asOwner(`CREATE FUNCTION sd_lock() RETURNS bool LANGUAGE plpgsql IMMUTABLE AS $$
      BEGIN
        IF current_user <> 'sd_owner' THEN PERFORM pg_advisory_lock(${key}); END IF;
        RETURN true;
      END $$`)
    await asOwner(`CREATE DOMAIN sd_name AS text`)
    await asOwner(`CREATE TABLE sd_teams (id int PRIMARY KEY, name sd_name)`)
    await asOwner(`ALTER TABLE sd_teams REPLICA IDENTITY FULL`)
    await asOwner(`INSERT INTO sd_teams SELECT g, 'team ' || g FROM generate_series(1, 12) g`)
    await asOwner(`GRANT SELECT ON sd_teams TO PUBLIC`)
    const where =
      "project_id IN (SELECT id FROM sd_teams WHERE name <> 'none' AND id IN (SELECT project_id FROM sd_members WHERE user_id = 2))"
    const teams = await new Follower({ table: 'sd_issues', where }).sync()
    const until = Date.now() + 60000
    while (Date.now() < until && !listed().includes(teams.handle)) await new Promise((resolve) => setTimeout(resolve, 250))
    if (listed().includes(teams.handle)) ok(`${label}: the shape is kept on disk`)
    else notOk(`${label}: the shape is kept on disk`, listed().join(' '))
    await asOwner(`ALTER DOMAIN sd_name ADD CONSTRAINT sd_name_check CHECK (sd_lock())`)
    const out = await restart('fast', label)
    const locks = Number((await sql(
      `SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory' AND objid = ${key}`)).rows[0].n)
    if (locks === 0) ok(`${label}: the owner's function did not run as the worker's role`)
    else notOk(`${label}: the owner's function did not run as the worker's role`, `${locks} advisory locks held`)
    if (new RegExp(`shape ${teams.handle} on .* is not restored`).test(out)) ok(`${label}: the shape is not restored`)
    else notOk(`${label}: the shape is not restored`, out)
    await converge({ nested: followers.nested }, `${label}, another nested shape`)
    const again = await fetchShape({ table: 'sd_issues', where, handle: teams.handle, offset: teams.offset })
    if (again.status === 403) ok(`${label}: its client is refused as a new request is (403)`)
    else notOk(`${label}: its client is refused as a new request is (403)`, `${again.status} ${again.text.slice(0, 300)}`)
  }
}

try {
  await main()
} catch (err) {
  notOk('the test ran to its end', err.stack)
} finally {
  await closePool()
}
process.exit(failures > 0 ? 1 : 0)
