// Requests that once crashed a process (issue 24, item 1).  In PostgreSQL a crashed backend
// makes the postmaster restart the whole instance, so each must get its clean answer and
// leave no "terminated by signal" in the server log.
//
// A subset whose input held deep JSON next to an invalid field crashed a snapshot worker,
// 4 times out of 4: the error's answer was written from strings of the transaction that the
// worker's recovery had just aborted (subset_failure in src/pg/snapshot/subset_query.c).  Deep JSON
// makes the aborted transaction's memory blocks large enough to go back to the system.

import { after, before, describe, it } from 'node:test'
import assert from 'node:assert/strict'
import { readFileSync } from 'node:fs'

import { SHAPE_URL, closePool, fetchRaw, fetchShape, query, uniqueSuffix } from '../lib/helpers.mjs'

const sfx = uniqueSuffix()
const T = `crash_${sfx}`
const nest = (n) => '['.repeat(n) + ']'.repeat(n)

let logStart = 0
const serverLog = () => (process.env.SHAPE_SYNC_LOG ? readFileSync(process.env.SHAPE_SYNC_LOG, 'latin1') : '')

async function post(handle, body) {
  const res = await fetch(`${SHAPE_URL}?table=${T}&offset=-1&handle=${handle}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body,
    signal: AbortSignal.timeout(15000),
  })
  const text = await res.text()
  let parsed = text
  try {
    parsed = JSON.parse(text)
  } catch {}
  return { status: res.status, body: parsed, text }
}

after(closePool)

describe('requests that once crashed a snapshot worker', () => {
  let handle
  before(async () => {
    await query(`CREATE TABLE ${T} (id int PRIMARY KEY, title text)`)
    await query(`ALTER TABLE ${T} REPLICA IDENTITY FULL`)
    await query(`INSERT INTO ${T} VALUES (1, 'one')`)
    const res = await fetchShape({ table: T, offset: '-1' })
    assert.equal(res.status, 200)
    handle = res.headers.get('electric-handle')
    logStart = serverLog().length
  })

  after(async () => {
    await query(`DROP TABLE IF EXISTS ${T}`)
  })

  const cases = [
    ['a POST body with 1,000 nested arrays and an invalid limit', () => `{"where":"id = $1","x":${nest(1000)},"limit":"zz"}`, /limit/],
    ['a POST body with 5,000 nested arrays and an invalid limit', () => `{"where":"id = $1","x":${nest(5000)},"limit":"zz"}`, /limit/],
    ['a POST body whose params hold 3,000 nested arrays under an invalid key', () => `{"where":"id = $1","params":{"x":${nest(3000)}}}`, /params/],
    ['a POST body of 1,000 unclosed brackets', () => '['.repeat(1000), /JSON/],
  ]
  for (const [what, body, field] of cases) {
    it(`answers ${what} with 400`, async () => {
      for (let i = 0; i < 4; i++) {
        const res = await post(handle, body())
        assert.equal(res.status, 400, `try ${i + 1}: ${res.text?.slice(0, 300)}`)
        assert.match(JSON.stringify(res.body), field)
      }
    })
  }

  it('answers GET subset__params of 600 nested arrays under an invalid key with 400', async () => {
    const target = `${SHAPE_URL}?table=${T}&offset=-1&handle=${handle}&subset__where=id%3D%241&subset__params={%22x%22:${nest(600)}}`
    for (let i = 0; i < 4; i++) {
      const res = await fetchRaw(target)
      assert.equal(res.status, 400, res.text?.slice(0, 300))
      assert.match(res.body.errors.subset.params[0], /parameter numbers/)
    }
  })

  it('left no process terminated by a signal, and the server answers', async () => {
    const log = serverLog().slice(logStart)
    assert.doesNotMatch(log, /terminated by signal|terminating any other active server processes/)
    const res = await fetchShape({ table: T, offset: '-1' })
    assert.equal(res.status, 200)
  })
})
