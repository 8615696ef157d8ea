// A table owner's code never runs as shape_sync.role (issue 24, item 2).
//
// A role that may create tables attaches an "IMMUTABLE" function to its table in every
// place that planning or reading the table evaluates: an index expression, a partial index
// predicate, an extended statistics expression, a partition key, a partition's CHECK
// constraint, a column's domain.  The function answers 1 to its owner and, to anyone else,
// raises an error that carries pg_authid's password hashes: a 500 body holding them is the
// attack working.  Each table is refused with 403 naming the object (shapes and subsets
// alike, also when the object comes after the shape), and once the operator lists the
// owner in shape_sync.trusted_owners the table is served with the planner running the
// function as its owner.

import { after, before, describe, it } from 'node:test'
import assert from 'node:assert/strict'

import { closePool, fetchRaw, fetchShape, query, uniqueSuffix } from '../lib/helpers.mjs'
import { resetGuc, setGuc, waitFor } from '../lib/live_helpers.mjs'

const sfx = uniqueSuffix()
const OWNER = `tc_owner_${sfx}`
const FN = `tc_evil_${sfx}`

// What each attack table is, made by OWNER; every one holds the row (1, 1).
const TABLES = {
  index: {
    name: `tc_index_${sfx}`,
    make: (t) => [`CREATE TABLE ${t} (id int PRIMARY KEY, v int)`, `CREATE INDEX ON ${t} ((v + ${FN}()))`],
    object: /index .* calls function/,
  },
  predicate: {
    name: `tc_pred_${sfx}`,
    make: (t) => [`CREATE TABLE ${t} (id int PRIMARY KEY, v int)`, `CREATE INDEX ON ${t} (id) WHERE ${FN}() > 0`],
    object: /index .* calls function/,
  },
  statistics: {
    name: `tc_stats_${sfx}`,
    make: (t) => [
      `CREATE TABLE ${t} (id int PRIMARY KEY, v int)`,
      `CREATE STATISTICS ${t}_s ON (v + ${FN}()) FROM ${t}`,
    ],
    analyze: true,
    object: /statistics object .* calls function/,
  },
  partitionKey: {
    name: `tc_pkey_${sfx}`,
    make: (t) => [
      `CREATE TABLE ${t} (id int, v int) PARTITION BY RANGE ((v + ${FN}()))`,
      `CREATE TABLE ${t}_p PARTITION OF ${t} FOR VALUES FROM (MINVALUE) TO (MAXVALUE)`,
    ],
    object: /partition key .* calls function/,
  },
  partitionCheck: {
    name: `tc_pcheck_${sfx}`,
    make: (t) => [
      `CREATE TABLE ${t} (id int PRIMARY KEY, v int) PARTITION BY RANGE (id)`,
      `CREATE TABLE ${t}_p PARTITION OF ${t} (CHECK (v + ${FN}() > 0)) FOR VALUES FROM (MINVALUE) TO (MAXVALUE)`,
    ],
    object: /constraint .* calls function/,
  },
  domain: {
    name: `tc_domain_${sfx}`,
    make: (t) => [
      `CREATE DOMAIN ${t}_d AS int CHECK (VALUE + ${FN}() > 0)`,
      `CREATE TABLE ${t} (id int PRIMARY KEY, v ${t}_d)`,
    ],
    object: /domain .* calls function/,
  },
}

const extraTables = [] // dropped at the end, not served by the last test

const asOwner = (sql) => query(`SET ROLE ${OWNER}; ${sql}; RESET ROLE`)

function assertNoLeak(res) {
  const text = JSON.stringify(res.body)
  assert.doesNotMatch(text, /leak|SCRAM-SHA-256\$/, `the answer leaks what only the serving role reads: ${text}`)
}

async function handleOf(table) {
  const res = await fetchShape({ table, offset: '-1' })
  assert.equal(res.status, 200, JSON.stringify(res.body))
  return res.headers.get('electric-handle')
}

after(closePool)

describe("table code: a table owner's functions never run as shape_sync.role", () => {
  before(async () => {
    await query('CREATE EXTENSION IF NOT EXISTS shape_sync')
    await query(`CREATE ROLE ${OWNER} NOLOGIN`)
    await query(`GRANT CREATE ON SCHEMA public TO ${OWNER}`)
    await asOwner(`CREATE FUNCTION ${FN}() RETURNS int LANGUAGE plpgsql IMMUTABLE AS $$
      BEGIN
        IF current_user = '${OWNER}' THEN RETURN 1; END IF;
        RAISE EXCEPTION 'leak as %: %', current_user,
          (SELECT string_agg(rolname || ':' || coalesce(rolpassword, '-'), ',') FROM pg_authid);
      END $$`)
    for (const { name, make, analyze } of Object.values(TABLES)) {
      for (const sql of make(name)) await asOwner(sql)
      await asOwner(`ALTER TABLE ${name} REPLICA IDENTITY FULL`)
      await asOwner(`INSERT INTO ${name} VALUES (1, 1)`)
      if (analyze) await asOwner(`ANALYZE ${name}`)
    }
  })

  after(async () => {
    await resetGuc('shape_sync.trusted_owners')
    for (const name of [...Object.values(TABLES).map((t) => t.name), ...extraTables]) {
      await query(`DROP TABLE IF EXISTS ${name} CASCADE`)
    }
    await query(`DROP DOMAIN IF EXISTS ${TABLES.domain.name}_d`)
    await query(`DROP FUNCTION IF EXISTS ${FN}()`)
    await query(`DROP OWNED BY ${OWNER} CASCADE`) // what a failed test left
    await query(`REVOKE CREATE ON SCHEMA public FROM ${OWNER}`)
    await query(`DROP ROLE IF EXISTS ${OWNER}`)
  })

  for (const [kind, { name, object }] of Object.entries(TABLES)) {
    it(`refuses a table whose ${kind} calls an untrusted function: 403, nothing leaked`, async () => {
      const res = await fetchShape({ table: name, offset: '-1', where: 'v = 1' })
      assertNoLeak(res)
      assert.equal(res.status, 403, JSON.stringify(res.body))
      assert.match(res.body.errors.table[0], /carries code of a role that is not trusted to run while it is read/)
      // the client is not told the table's internals; the operator's validate_shape() is
      assert.doesNotMatch(JSON.stringify(res.body), new RegExp(FN))
      const err = await query(`SELECT shape_sync.validate_shape($1)`, [name]).then(
        () => null,
        (e) => e,
      )
      assert.ok(err, 'validate_shape refuses the table')
      assert.match(err.detail, object)
      assert.match(err.detail, new RegExp(`${FN}\\(\\) of role "${OWNER}"`))
    })
  }

  it('refuses subsets and new snapshots of a shape once such an index comes after it', async () => {
    const table = `tc_late_${sfx}`
    TABLES.late = { name: table }
    await asOwner(`CREATE TABLE ${table} (id int PRIMARY KEY, v int)`)
    await asOwner(`ALTER TABLE ${table} REPLICA IDENTITY FULL`)
    await asOwner(`INSERT INTO ${table} VALUES (1, 1)`)
    const handle = await handleOf(table)
    await asOwner(`CREATE INDEX ON ${table} (id) WHERE ${FN}() > 0`)

    const subset = await fetchShape({ table, offset: '-1', handle, subset__where: 'id = 1' })
    assertNoLeak(subset)
    assert.equal(subset.status, 403, JSON.stringify(subset.body))
    assert.match(JSON.stringify(subset.body), /carries code of a role that is not trusted/)

    const other = await fetchShape({ table, offset: '-1', where: 'id > 0' })
    assertNoLeak(other)
    assert.equal(other.status, 403, JSON.stringify(other.body))
  })

  // A move-in reads the shape's rows by its where clause, nested subqueries included: planning
  // it must check the code of every table it reads, at every level. The function here takes a
  // session advisory lock when it runs as anyone but its owner (a move-in happens in the
  // worker, whatever clients ask): a lock held says the attack ran.
  it("a move-in's query never plans an untrusted table read two levels down", async () => {
    const O = `tc_nest_o_${sfx}`
    const M = `tc_nest_m_${sfx}`
    const N = `tc_nest_n_${sfx}`
    const FN2 = `tc_lock_${sfx}`
    const KEY = 742000 + Math.floor(Math.random() * 1000)
    extraTables.push(O, M, N)
    await query(`CREATE TABLE ${O} (id int PRIMARY KEY, m int)`)
    await query(`CREATE TABLE ${M} (id int PRIMARY KEY, v int)`)
    await query(`ALTER TABLE ${M} REPLICA IDENTITY FULL`)
    await query(`INSERT INTO ${M} VALUES (1, 1), (2, 2)`)
    await query(`INSERT INTO ${O} VALUES (1, 1), (2, 2)`)
    await asOwner(`CREATE FUNCTION ${FN2}() RETURNS int LANGUAGE plpgsql IMMUTABLE AS $$
      BEGIN
        IF current_user <> '${OWNER}' THEN PERFORM pg_advisory_lock(${KEY}); END IF;
        RETURN 1;
      END $$`)
    await asOwner(`CREATE TABLE ${N} (id int PRIMARY KEY, v int)`)
    await asOwner(`ALTER TABLE ${N} REPLICA IDENTITY FULL`)
    await asOwner(`INSERT INTO ${N} VALUES (1, 1)`)
    const where = `m IN (SELECT id FROM ${M} WHERE v IN (SELECT v FROM ${N}))`
    const first = await fetchShape({ table: O, offset: '-1', where })
    assert.equal(first.status, 200, JSON.stringify(first.body))
    const moveInRotations = async () => {
      const text = (await fetchRaw('/metrics')).text
      return Number(/^shape_sync_shape_rotations_total\{cause="move_in"\} (\d+)/m.exec(text)?.[1] ?? 0)
    }
    const locks = async () => (await query(
      `SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory' AND objid = $1`, [KEY])).rows[0].n
    const before = await moveInRotations()
    // the owner's code comes after the shape, then a value moves rows in: the move-in's query
    // is refused (the shape is made again), or, were it planned, the function ran
    await asOwner(`CREATE INDEX ON ${N} (id) WHERE ${FN2}() > 0`)
    await asOwner(`INSERT INTO ${N} VALUES (2, 2)`)
    await waitFor(async () => (await moveInRotations()) > before || (await locks()) > 0,
      { timeoutMs: 30000, what: 'the move-in to be refused or planned' })
    assert.equal(await locks(), 0, 'the owner\'s function never ran as the serving role')
    assert.ok((await moveInRotations()) > before, 'the move-in was refused: its shape is made again')
    // and a client is told why, without the table's internals
    const again = await fetchShape({ table: O, offset: '-1', where })
    assertNoLeak(again)
    assert.equal(again.status, 403, JSON.stringify(again.body))
    await query(`DROP FUNCTION ${FN2}() CASCADE`)
  })

  it("serves them once the owner is trusted, planning as the owner, not as the serving role", async () => {
    await setGuc('shape_sync.trusted_owners', OWNER)
    await waitFor(async () => (await fetchShape({ table: TABLES.index.name, offset: '-1' })).status === 200, {
      timeoutMs: 30000,
      what: 'shape_sync.trusted_owners to apply',
    })
    for (const [kind, { name }] of Object.entries(TABLES)) {
      // the function raises for anyone but its owner: 200 says the owner ran it (a where
      // clause on the domain's column stays refused: where clauses never read such types)
      const res = await fetchShape({ table: name, offset: '-1', where: kind === 'domain' ? 'id = 1' : 'v = 1' })
      assertNoLeak(res)
      assert.equal(res.status, 200, `${kind}: ${JSON.stringify(res.body)}`)
      const rows = res.body.filter((m) => m.headers?.operation === 'insert')
      assert.equal(rows.length, 1, `${kind}: ${JSON.stringify(res.body)}`)
      const handle = res.headers.get('electric-handle')
      const subset = await fetchShape({ table: name, offset: '-1', handle, subset__where: 'id = 1' })
      assertNoLeak(subset)
      assert.equal(subset.status, 200, `${kind} subset: ${JSON.stringify(subset.body)}`)
      assert.equal(subset.body.data.length, 1)
    }
  })
})
