// Row-level security that does not apply to shape_sync.role: a table whose row-level
// security is enabled is served, whole, to a role with BYPASSRLS or to the table's owner
// (unless the table FORCEs row-level security), as docs/security.md documents (Row-level
// security): its snapshot, a log=changes_only shape, its subsets and its changes. Both got 500
// "rewritten unexpectedly" before: the rewriter marks such a query as one that row-level
// security could concern. A
// FORCE ROW LEVEL SECURITY, or the role losing BYPASSRLS, ends the live shape (409) and
// refuses it from then on (403).

import { after, before, describe, it } from 'node:test'
import assert from 'node:assert/strict'

import { closePool, fetchShape, query, uniqueSuffix } from '../lib/helpers.mjs'
import { holdLive, RawShape, resetGuc, setGuc, waitFor } from '../lib/live_helpers.mjs'

const sfx = uniqueSuffix()
const OWNER = `rls_owner_${sfx}`
const BYPASS = `rls_bypass_${sfx}`
// owned by OWNER; the other by the superuser, readable by BYPASS; both hide every row
const OWNED = `rls_owned_${sfx}`
const OTHER = `rls_other_${sfx}`
// no row-level security, readable by neither role: tells which role the worker uses
const PLAIN = `rls_plain_${sfx}`
const LIVE = { timeoutMs: 15000 }

async function status(params) {
  return (await fetchShape({ offset: '-1', ...params })).status
}

// The table is served whole: the snapshot, log=changes_only, a subset, then a change live.
async function assertServedWhole(table, label) {
  let res = await fetchShape({ table, offset: '-1' })
  assert.equal(res.status, 200, `${label}: snapshot (${res.text.slice(0, 300)})`)
  assert.deepEqual(res.body.filter((m) => m.key).map((m) => m.value.id).sort(), ['1', '2', '3', '4', '5'], `${label}: every row`)
  res = await fetchShape({ table, offset: '-1', log: 'changes_only' })
  assert.equal(res.status, 200, `${label}: log=changes_only (${res.text.slice(0, 300)})`)
  res = await fetchShape({ table, offset: '-1', subset__where: 'id > 3' })
  assert.equal(res.status, 200, `${label}: subset (${res.text.slice(0, 300)})`)
  assert.deepEqual(res.body.data.map((r) => r.value.id).sort(), ['4', '5'], `${label}: the subset's rows`)

  const shape = await new RawShape({ table }).sync()
  const id = String(100 + Math.floor(Math.random() * 1000))
  await query(`INSERT INTO public.${table} VALUES ($1, 'live')`, [id])
  const changes = await shape.collectUntil((m) => m.value?.id === id, { label: `${label}: live` })
  assert.ok(changes.some((m) => m.headers.operation === 'insert' && m.value.title === 'live'), `${label}: the insert arrives`)
  await query(`DELETE FROM public.${table} WHERE id = $1`, [id])
}

// `change` makes row-level security apply to the role: the live shape ends, then 403.
async function assertEndedBy(table, change, undo, label) {
  const shape = await new RawShape({ table }).sync()
  const { response: live } = await holdLive(shape, 300, LIVE)
  await query(change)
  const res = await live
  assert.equal(res.status, 409, `${label}: the held request ends with 409 (got ${res.status} ${res.text.slice(0, 300)})`)
  for (const params of [{}, { log: 'changes_only' }, { subset__where: 'id > 3' }]) {
    const refused = await fetchShape({ table, offset: '-1', ...params })
    assert.equal(refused.status, 403, `${label}: ${JSON.stringify(params)} is refused (${refused.text.slice(0, 300)})`)
    assert.match(refused.body.errors.table[0], /row-level security that applies to role/)
  }
  await query(undo)
  assert.equal(await status({ table }), 200, `${label}: served again once undone`)
}

after(closePool)

describe('row-level security that does not apply to shape_sync.role', () => {
  before(async () => {
    await query(`CREATE ROLE ${OWNER} NOLOGIN`)
    await query(`CREATE ROLE ${BYPASS} NOLOGIN BYPASSRLS`)
    for (const t of [OWNED, OTHER]) {
      await query(`CREATE TABLE public.${t} (id int PRIMARY KEY, title text)`)
      await query(`ALTER TABLE public.${t} REPLICA IDENTITY FULL`)
      await query(`INSERT INTO public.${t} SELECT g, 't' || g FROM generate_series(1, 5) g`)
      await query(`ALTER TABLE public.${t} ENABLE ROW LEVEL SECURITY`)
      await query(`CREATE POLICY none ON public.${t} USING (false)`)
    }
    await query(`CREATE TABLE public.${PLAIN} (id int PRIMARY KEY)`)
    await query(`ALTER TABLE public.${PLAIN} REPLICA IDENTITY FULL`)
    await query(`ALTER TABLE public.${OWNED} OWNER TO ${OWNER}`)
    await query(`GRANT SELECT ON public.${OTHER} TO ${BYPASS}, ${OWNER}`)
  })

  after(async () => {
    await resetGuc('shape_sync.role')
    await waitFor(async () => (await status({ table: PLAIN })) === 200, {
      timeoutMs: 30000,
      what: 'shape_sync.role to be reset',
    })
    for (const t of [OWNED, OTHER, PLAIN]) await query(`DROP TABLE IF EXISTS public.${t}`)
    await query(`DROP ROLE IF EXISTS ${OWNER}`)
    await query(`DROP ROLE IF EXISTS ${BYPASS}`)
  })

  describe('the table owner', () => {
    before(async () => {
      await setGuc('shape_sync.role', OWNER)
      await waitFor(async () => (await status({ table: PLAIN })) === 403, {
        timeoutMs: 30000,
        what: `shape_sync.role = ${OWNER} to apply`,
      })
    })

    it('is served its table whole: snapshot, changes_only, subset and changes', async () => {
      await assertServedWhole(OWNED, 'owner')
    })

    it('still gets 403 for a table whose row-level security applies to it', async () => {
      const res = await fetchShape({ table: OTHER, offset: '-1' })
      assert.equal(res.status, 403)
      assert.match(res.body.errors.table[0], new RegExp(`row-level security that applies to role "${OWNER}"`))
    })

    it('loses the table to FORCE ROW LEVEL SECURITY: 409, then 403', async () => {
      await assertEndedBy(OWNED, `ALTER TABLE public.${OWNED} FORCE ROW LEVEL SECURITY`,
        `ALTER TABLE public.${OWNED} NO FORCE ROW LEVEL SECURITY`, 'FORCE')
    })
  })

  describe('a role with BYPASSRLS', () => {
    before(async () => {
      await setGuc('shape_sync.role', BYPASS)
      // BYPASS may not SELECT from OWNED: refused once the role applies
      await waitFor(async () => (await status({ table: OWNED })) === 403, {
        timeoutMs: 30000,
        what: `shape_sync.role = ${BYPASS} to apply`,
      })
    })

    it('is served the table whole: snapshot, changes_only, subset and changes', async () => {
      await assertServedWhole(OTHER, 'BYPASSRLS')
    })

    it('is served it even when the table FORCEs row-level security', async () => {
      await query(`ALTER TABLE public.${OTHER} FORCE ROW LEVEL SECURITY`)
      try {
        await assertServedWhole(OTHER, 'BYPASSRLS, FORCE')
      } finally {
        await query(`ALTER TABLE public.${OTHER} NO FORCE ROW LEVEL SECURITY`)
      }
    })

    it('loses the table with BYPASSRLS: 409, then 403', async () => {
      await assertEndedBy(OTHER, `ALTER ROLE ${BYPASS} NOBYPASSRLS`, `ALTER ROLE ${BYPASS} BYPASSRLS`, 'NOBYPASSRLS')
    })
  })
})
