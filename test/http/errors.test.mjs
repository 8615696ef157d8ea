// Validation errors, 409 must-refetch, and the not-yet-available live mode.

import { after, before, describe, it } from 'node:test'
import assert from 'node:assert/strict'

import { closePool, createTable, dropTable, fetchShape, query, uniqueTable } from '../lib/helpers.mjs'

after(closePool)

// Checks a 400 "Invalid request" response and returns its errors object.
function assertInvalid(res, label) {
  assert.equal(res.status, 400, `${label}: status (body ${res.text})`)
  assert.match(res.headers.get('content-type') ?? '', /^application\/json/, `${label}: content-type`)
  assert.equal(res.headers.get('cache-control'), 'no-store', `${label}: cache-control`)
  assert.equal(res.headers.get('access-control-allow-origin'), '*', `${label}: CORS on errors`)
  assert.equal(typeof res.body, 'object', `${label}: JSON body (got ${res.text})`)
  assert.deepEqual(Object.keys(res.body).sort(), ['errors', 'message'], `${label}: body keys (${res.text})`)
  assert.equal(res.body.message, 'Invalid request', `${label}: message`)
  return res.body.errors
}

function assertExactErrors(res, errors, label) {
  const got = assertInvalid(res, label)
  assert.deepEqual(got, errors, `${label}: errors`)
}

// One error on `field`: an array of one non-empty string (wording is ours).
function assertFieldError(res, field, label) {
  const errors = assertInvalid(res, label)
  assert.deepEqual(Object.keys(errors), [field], `${label}: only errors.${field} (${res.text})`)
  assert.ok(Array.isArray(errors[field]) && errors[field].length === 1, `${label}: errors.${field} has one message`)
  assert.equal(typeof errors[field][0], 'string', `${label}: message is a string`)
  assert.ok(errors[field][0].length > 0, `${label}: message is not empty`)
  return errors[field][0]
}

describe('errors', () => {
  const table = uniqueTable('err')
  const other = uniqueTable('errother')

  before(async () => {
    await createTable([
      `CREATE TABLE public.${table} (id int4 PRIMARY KEY, title text, n int4)`,
      `INSERT INTO public.${table} VALUES (1, 'a', 1), (2, 'b', 2)`,
      `CREATE TABLE public.${other} (id int4 PRIMARY KEY, v int4)`,
    ])
  })

  after(async () => {
    await dropTable(table)
    await dropTable(other)
  })

  it('missing table', async () => {
    const res = await fetchShape({ offset: '-1' })
    assertExactErrors(res, { table: ["can't be blank"] }, 'missing table')
  })

  it('nonexistent table', async () => {
    const res = await fetchShape({ table: 'nonexistent', offset: '-1' })
    assertExactErrors(
      res,
      {
        table: [
          'Table "public"."nonexistent" does not exist. If the table name contains capitals or special characters you must quote it.',
        ],
      },
      'nonexistent table',
    )
  })

  it('missing offset', async () => {
    const res = await fetchShape({ table })
    assertExactErrors(res, { offset: ["can't be blank"] }, 'missing offset')
  })

  it('badly formatted offsets', async () => {
    for (const offset of ['1_2_3', '10', '0_-1', '-2', 'abc', '10_32.1', '1_2 ', '_1', '1_']) {
      const res = await fetchShape({ table, offset })
      assertExactErrors(res, { offset: ['has invalid format'] }, `offset=${JSON.stringify(offset)}`)
    }
  })

  it('offset != -1 without a handle', async () => {
    const res = await fetchShape({ table, offset: '0_0' })
    assertExactErrors(res, { handle: ["can't be blank when offset != -1"] }, 'offset=0_0 without handle')
  })

  it('live with offset=-1', async () => {
    const res = await fetchShape({ table, offset: '-1', live: 'true' })
    assertExactErrors(res, { live: ["can't be true when offset == -1"] }, 'live=true&offset=-1')
  })

  it('where syntax error gives the PostgreSQL message with its location', async () => {
    const res = await fetchShape({ table, offset: '-1', where: '1 x 1' })
    assertExactErrors(res, { where: ['At location 17: syntax error at or near "x"'] }, 'where=1 x 1')
  })

  it('columns without the primary key', async () => {
    const res = await fetchShape({ table, offset: '-1', columns: 'title' })
    assertExactErrors(
      res,
      { columns: ['The list of columns must include all primary key columns, missing: id'] },
      'columns=title',
    )
  })

  it('columns of a table without a primary key: every column, since each row is keyed by all', async () => {
    const nopk = uniqueTable('errnopk')
    await createTable([`CREATE TABLE public.${nopk} (a int4, b text, c text)`])
    try {
      const res = await fetchShape({ table: nopk, offset: '-1', columns: 'a,b' })
      assertExactErrors(
        res,
        { columns: ['The table has no primary key, so its rows are keyed by all their columns: the list of columns must include every column, missing: c'] },
        'columns=a,b',
      )
      const all = await fetchShape({ table: nopk, offset: '-1', columns: 'c,a,b' })
      assert.equal(all.status, 200, all.text)
    } finally {
      await dropTable(nopk)
    }
  })

  it('columns with an unknown column', async () => {
    const res = await fetchShape({ table, offset: '-1', columns: 'id,invalid' })
    assertExactErrors(
      res,
      { columns: ['The following columns are not found on the table: invalid'] },
      'columns=id,invalid',
    )
  })

  it('where clauses a shape cannot use', async () => {
    const cases = [
      ['subquery of no table', `id IN (SELECT 1)`],
      ['aggregate', `count(*) > 0`],
      ['volatile function', `random() > 0.5`],
      ['unknown column', `nope = 1`],
      ['not boolean', `id + 1`],
    ]
    for (const [label, where] of cases) {
      const res = await fetchShape({ table, offset: '-1', where })
      assertFieldError(res, 'where', `where ${label}: ${where}`)
    }
  })

  it('replica=bogus', async () => {
    const res = await fetchShape({ table, offset: '-1', replica: 'bogus' })
    const errors = assertInvalid(res, 'replica=bogus')
    assert.ok(Array.isArray(errors.replica) && errors.replica.length > 0, `errors.replica: ${res.text}`)
    for (const m of errors.replica) assert.ok(typeof m === 'string' && m.length > 0, 'errors.replica messages')
  })

  it('log=bogus', async () => {
    const res = await fetchShape({ table, offset: '-1', log: 'bogus' })
    assertFieldError(res, 'log', 'log=bogus')
  })

  it('a handle that does not match the definition answers 409 must-refetch with the real handle', async () => {
    const init = await fetchShape({ table, offset: '-1' })
    assert.equal(init.status, 200, init.text)
    const real = init.headers.get('electric-handle')
    assert.ok(real)

    for (const bad of ['nonexistent-handle', `${real}x`]) {
      const res = await fetchShape({ table, offset: '0_0', handle: bad })
      assert.equal(res.status, 409, `handle ${bad}: status (body ${res.text})`)
      assert.deepEqual(res.body, [{ headers: { control: 'must-refetch' } }], `handle ${bad}: body`)
      assert.equal(res.headers.get('electric-handle'), real, `handle ${bad}: electric-handle is the shape's handle`)
      assert.match(res.headers.get('content-type') ?? '', /^application\/json/, 'content-type')
      assert.equal(res.headers.get('cache-control'), 'public, max-age=60, must-revalidate', '409 cache-control')
    }

    // The handle of another shape (same table, another where) is a mismatch too.
    const whereShape = await fetchShape({ table, offset: '-1', where: 'id > 1' })
    assert.equal(whereShape.status, 200, whereShape.text)
    const whereHandle = whereShape.headers.get('electric-handle')
    assert.notEqual(whereHandle, real)
    const res = await fetchShape({ table, offset: '0_0', handle: whereHandle })
    assert.equal(res.status, 409, res.text)
    assert.equal(res.headers.get('electric-handle'), real)
    const back = await fetchShape({ table, offset: '0_0', handle: real, where: 'id > 1' })
    assert.equal(back.status, 409, back.text)
    assert.equal(back.headers.get('electric-handle'), whereHandle)

    // The handle of a shape on another table.
    const otherShape = await fetchShape({ table: other, offset: '-1' })
    assert.equal(otherShape.status, 200, otherShape.text)
    const cross = await fetchShape({ table, offset: '0_0', handle: otherShape.headers.get('electric-handle') })
    assert.equal(cross.status, 409, cross.text)
    assert.equal(cross.headers.get('electric-handle'), real)
  })

  it('a 409 for a definition seen for the first time creates the shape', async () => {
    const t = uniqueTable('errnew')
    await createTable([`CREATE TABLE public.${t} (id int4 PRIMARY KEY)`, `INSERT INTO public.${t} VALUES (1)`])
    try {
      const res = await fetchShape({ table: t, offset: '0_0', handle: 'nonexistent-handle' })
      assert.equal(res.status, 409, res.text)
      const h = res.headers.get('electric-handle')
      assert.ok(h, 'the 409 names a fresh handle')
      const init = await fetchShape({ table: t, offset: '-1', handle: h })
      assert.equal(init.status, 200, init.text)
      assert.equal(init.headers.get('electric-handle'), h, 'offset=-1 finds the shape the 409 created')
    } finally {
      await dropTable(t)
    }
  })

  // 0.1.0 answers live requests with 400 (errors.live says live mode is not
  // available yet). Once live mode lands, a live request must be a proper
  // long-poll instead: a change made while it waits ends it at once.
  it('live=true with a valid handle: 400 "not available yet", or a long-poll woken by a change', async () => {
    const init = await fetchShape({ table, offset: '-1' })
    assert.equal(init.status, 200, init.text)
    const handle = init.headers.get('electric-handle')
    const catchup = await fetchShape({ table, offset: '0_0', handle })
    assert.equal(catchup.status, 200, catchup.text)
    const offset = catchup.headers.get('electric-offset')

    const pending = fetchShape({ table, offset, handle, live: 'true', cursor: '' }, { timeoutMs: 10000 })
    const insert = new Promise((resolve) => setTimeout(resolve, 300)).then(() =>
      query(`INSERT INTO public.${table} VALUES (100, 'live', 100)`),
    )
    const [res] = await Promise.all([pending, insert])
    try {
      if (res.status === 400) {
        assertFieldError(res, 'live', 'live=true (live mode not available)')
        return
      }
      assert.equal(res.status, 200, `live request: status ${res.status} (body ${res.text})`)
      assert.match(res.headers.get('electric-cursor') ?? '', /^\d+$/, 'electric-cursor on a live response')
      assert.equal(res.headers.get('cache-control'), 'public, max-age=5, stale-while-revalidate=5')
      assert.ok(Array.isArray(res.body), res.text)
      const last = res.body[res.body.length - 1]
      assert.equal(last?.headers?.control, 'up-to-date', `live response ends with up-to-date: ${res.text}`)
      const change = res.body.find((m) => m.key === `"public"."${table}"/"100"`)
      assert.ok(change, `the live response carries the inserted row: ${res.text}`)
      assert.equal(change.headers.operation, 'insert')
      assert.deepEqual(change.value, { id: '100', title: 'live', n: '100' })
    } finally {
      await query(`DELETE FROM public.${table} WHERE id = 100`)
    }
  })

  // libmicrohttpd builds response headers in each connection's fixed memory
  // (shape_sync.connection_memory, 10 kB by default) and closes the connection
  // without an answer when they do not fit; before, a wide table's
  // electric-schema header did that once the pool no longer held a body piece.
  it("a table too wide for the response headers' memory gets a 500 that says so, never a silent close", async () => {
    const narrow = uniqueTable('wide200')
    const wide = uniqueTable('wide400')
    const cols = (n) => Array.from({ length: n }, (_, i) => `, column_number_${i} int4`).join('')
    await createTable([
      `CREATE TABLE public.${narrow} (id int4 PRIMARY KEY${cols(200)})`,
      `INSERT INTO public.${narrow} (id) VALUES (1)`,
      `CREATE TABLE public.${wide} (id int4 PRIMARY KEY${cols(400)})`,
      `INSERT INTO public.${wide} (id) VALUES (1)`,
    ])
    try {
      const ok = await fetchShape({ table: narrow, offset: '-1' })
      assert.equal(ok.status, 200, ok.text)
      assert.ok(ok.headers.get('electric-schema').length > 7000, 'a schema header of 7 kB fits')
      assert.equal(ok.body.length, 2, ok.text)
      const res = await fetchShape({ table: wide, offset: '-1' })
      assert.equal(res.status, 500, res.text)
      assert.match(res.body.message, /electric-schema header of this shape takes \d+ bytes, more than shape_sync\.connection_memory \(10 kB\)/)
      // and the server still answers on a fresh connection
      assert.equal((await fetchShape({ table: narrow, offset: '-1' })).status, 200)
    } finally {
      await dropTable(narrow)
      await dropTable(wide)
    }
  })
})
