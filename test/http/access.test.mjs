// Access control against the real server: shapes are read as shape_sync.role, with
// PostgreSQL's own table and column privileges and row-level security deciding; a REVOKE
// or a lost membership ends a live shape (409, then 403); the secret works with the
// official client; a page of another origin or a rebinding Host is refused.

import { after, before, describe, it } from 'node:test'
import assert from 'node:assert/strict'
import http from 'node:http'

import { BASE_URL, closePool, fetchShape, query, syncShape, uniqueSuffix } from '../lib/helpers.mjs'
import { holdLive, RawShape, resetGuc, setGuc, startClientShape, waitDecoded, waitFor } from '../lib/live_helpers.mjs'

const sfx = uniqueSuffix()
const ROLE = `acc_reader_${sfx}`
const GROUP = `acc_group_${sfx}`
const T = {
  open: `acc_open_${sfx}`,
  cols: `acc_cols_${sfx}`,
  none: `acc_none_${sfx}`,
  rls: `acc_rls_${sfx}`,
  group: `acc_grp_${sfx}`,
  revoke: `acc_rev_${sfx}`,
  revokeCol: `acc_revcol_${sfx}`,
}

async function status(params) {
  return (await fetchShape({ offset: '-1', ...params })).status
}

// A live request held on the shape, and what it ends with.
// The live requests of these tests may wait for a while: snapshots and checks come first.
const LIVE = { timeoutMs: 15000 }

// A table of one key column for the describe block that calls this, dropped after it.
function blockTable(prefix) {
  const table = `${prefix}_${sfx}`
  before(async () => {
    await query(`CREATE TABLE public.${table} (id int PRIMARY KEY)`)
    await query(`ALTER TABLE public.${table} REPLICA IDENTITY FULL`)
  })
  after(async () => {
    await query(`DROP TABLE IF EXISTS public.${table}`)
  })
  return table
}

after(closePool)

describe('access: shapes are read as shape_sync.role', () => {
  before(async () => {
    await query(`CREATE ROLE ${ROLE} NOLOGIN`)
    await query(`CREATE ROLE ${GROUP} NOLOGIN`)
    for (const t of Object.values(T)) {
      await query(`CREATE TABLE public.${t} (id int PRIMARY KEY, title text, secret text)`)
      await query(`ALTER TABLE public.${t} REPLICA IDENTITY FULL`)
      await query(`INSERT INTO public.${t} SELECT g, 't' || g, 's' || g FROM generate_series(1, 5) g`)
    }
    await query(`GRANT SELECT ON public.${T.open}, public.${T.revoke}, public.${T.rls} TO ${ROLE}`)
    await query(`GRANT SELECT (id, title) ON public.${T.cols}, public.${T.revokeCol} TO ${ROLE}`)
    await query(`GRANT SELECT ON public.${T.group} TO ${GROUP}`)
    await query(`GRANT ${GROUP} TO ${ROLE}`)
    await query(`ALTER TABLE public.${T.rls} ENABLE ROW LEVEL SECURITY`)
    await query(`CREATE POLICY own ON public.${T.rls} USING (title = current_user)`)
    await setGuc('shape_sync.role', ROLE)
    // applied once the worker refuses what only pg_read_all_data could read
    await waitFor(async () => (await status({ table: T.none })) === 403, {
      timeoutMs: 30000,
      what: `shape_sync.role = ${ROLE} to apply`,
    })
  })

  after(async () => {
    await resetGuc('shape_sync.role')
    await waitFor(async () => (await status({ table: T.none })) === 200, {
      timeoutMs: 30000,
      what: 'shape_sync.role to be reset',
    })
    for (const t of Object.values(T)) await query(`DROP TABLE IF EXISTS public.${t}`)
    await query(`DROP ROLE IF EXISTS ${ROLE}`)
    await query(`DROP ROLE IF EXISTS ${GROUP}`)
  })

  it('serves a table the role may SELECT', async () => {
    const res = await fetchShape({ table: T.open, offset: '-1' })
    assert.equal(res.status, 200)
    assert.equal(res.body.filter((m) => m.key).length, 5)
  })

  it('answers 403 naming the table the role may not SELECT', async () => {
    const res = await fetchShape({ table: T.none, offset: '-1' })
    assert.equal(res.status, 403)
    assert.deepEqual(Object.keys(res.body.errors), ['table'])
    assert.equal(res.body.message, 'Forbidden')
    assert.match(res.body.errors.table[0], new RegExp(`Role "${ROLE}" may not SELECT from table "public"."${T.none}"`))
    assert.equal(res.headers.get('cache-control'), 'no-store')
  })

  it('answers 403 naming the columns it may not SELECT: selected, or read by the where clause', async () => {
    let res = await fetchShape({ table: T.cols, offset: '-1' })
    assert.equal(res.status, 403)
    assert.match(res.body.errors.columns[0], /which the shape reads: secret$/)
    res = await fetchShape({ table: T.cols, offset: '-1', columns: ['id', 'title'] })
    assert.equal(res.status, 200)
    assert.deepEqual(Object.keys(res.body[0].value).sort(), ['id', 'title'])
    res = await fetchShape({ table: T.cols, offset: '-1', columns: ['id', 'title'], where: `secret = 's1'` })
    assert.equal(res.status, 403)
    assert.match(res.body.errors.columns[0], /secret/)
  })

  it('tells a role that may read nothing of a table only that: no column, type or key in any answer', async () => {
    const plain = await fetchShape({ table: T.none, offset: '-1' })
    assert.equal(plain.status, 403)
    const asks = [
      { columns: ['id', 'nosuch'] },
      { columns: ['title'] },
      { where: 'nosuch = 1' },
      { where: 'title = 1' },
      { where: `title ~ '('` },
    ]
    for (const ask of asks) {
      const res = await fetchShape({ table: T.none, offset: '-1', ...ask })
      assert.equal(res.status, 403, `${JSON.stringify(ask)}: ${res.text}`)
      assert.deepEqual(res.body, plain.body, `${JSON.stringify(ask)}: the same answer as without it`)
    }
    // a column it may not SELECT is refused before the where clause's analysis tells its type
    const res = await fetchShape({ table: T.cols, offset: '-1', columns: ['id', 'title'], where: 'secret = 1' })
    assert.equal(res.status, 403, res.text)
    assert.match(res.body.errors.columns[0], /which the shape reads: secret$/)
  })

  it('refuses a table whose row-level security applies to the role, rather than filter it', async () => {
    for (const log of ['full', 'changes_only']) {
      const res = await fetchShape({ table: T.rls, offset: '-1', log })
      assert.equal(res.status, 403, `log=${log}: ${res.text}`)
      assert.match(res.body.errors.table[0], /row-level security that applies to role/)
    }
  })

  it('reaches the official client as a 403 FetchError', async () => {
    await assert.rejects(syncShape({ table: T.none }), (err) => err.status === 403 && /Forbidden/.test(JSON.stringify(err.json)))
  })

  it('ends a live shape when SELECT is revoked: 409, then 403', async () => {
    const shape = await new RawShape({ table: T.revoke }).sync()
    const { response: live } = await holdLive(shape, 300, LIVE)
    // a change committed with the REVOKE must not reach the client either
    await query(`BEGIN; INSERT INTO public.${T.revoke} VALUES (100, 'after', 'x'); REVOKE SELECT ON public.${T.revoke} FROM ${ROLE}; COMMIT`)
    const res = await live
    assert.equal(res.status, 409, `the held request ends with 409 (got ${res.status} ${res.text.slice(0, 300)})`)
    assert.equal(await status({ table: T.revoke }), 403)
    await query(`GRANT SELECT ON public.${T.revoke} TO ${ROLE}`)
    assert.equal(await status({ table: T.revoke }), 200)
  })

  it('ends a live shape when a column it reads is revoked', async () => {
    const shape = await new RawShape({ table: T.revokeCol, columns: ['id', 'title'] }).sync()
    const { response: live } = await holdLive(shape, 300, LIVE)
    await query(`REVOKE SELECT (title) ON public.${T.revokeCol} FROM ${ROLE}`)
    const res = await live
    assert.equal(res.status, 409)
    assert.equal(await status({ table: T.revokeCol, columns: ['id', 'title'] }), 403)
    // a shape that reads only what is left is fine
    assert.equal(await status({ table: T.revokeCol, columns: ['id'] }), 200)
  })

  it('ends a live shape when the role loses the membership its privilege came from', async () => {
    const shape = await new RawShape({ table: T.group }).sync()
    const { response: live } = await holdLive(shape, 300, LIVE)
    await query(`REVOKE ${GROUP} FROM ${ROLE}`)
    const res = await live
    assert.equal(res.status, 409)
    assert.equal(await status({ table: T.group }), 403)
  })

  it('ends live shapes when row-level security is turned on under them', async () => {
    const shape = await new RawShape({ table: T.open }).sync()
    const { response: live } = await holdLive(shape, 300, LIVE)
    await query(`ALTER TABLE public.${T.open} ENABLE ROW LEVEL SECURITY`)
    const res = await live
    assert.equal(res.status, 409)
    assert.equal(await status({ table: T.open }), 403)
    await query(`ALTER TABLE public.${T.open} DISABLE ROW LEVEL SECURITY`)
    assert.equal(await status({ table: T.open }), 200)
  })

  it('refuses functions from outside pg_catalog, even ones created after the shape', async () => {
    await query(`CREATE FUNCTION public.acc_fn_${sfx}(int) RETURNS bool IMMUTABLE LANGUAGE sql AS 'SELECT true'`)
    try {
      let res = await fetchShape({ table: T.open, offset: '-1', where: `public.acc_fn_${sfx}(id)` })
      assert.equal(res.status, 400)
      assert.match(res.body.errors.where[0], /Only functions and operators of pg_catalog/)
      // unqualified, names resolve in pg_catalog only
      res = await fetchShape({ table: T.open, offset: '-1', where: `acc_fn_${sfx}(id)` })
      assert.equal(res.status, 400)
      assert.match(res.body.errors.where[0], /function acc_fn_\w+\(integer\) does not exist/)
    } finally {
      await query(`DROP FUNCTION public.acc_fn_${sfx}(int)`)
    }
  })
})

describe('access: the secret', () => {
  const table = `acc_secret_${sfx}`
  const SECRET = `s3cret-${sfx}`

  before(async () => {
    await query(`CREATE TABLE public.${table} (id int PRIMARY KEY, title text)`)
    await query(`ALTER TABLE public.${table} REPLICA IDENTITY FULL`)
    await query(`INSERT INTO public.${table} VALUES (1, 'a'), (2, 'b')`)
    await setGuc('shape_sync.secret', SECRET)
    await waitFor(async () => (await status({ table })) === 401, { timeoutMs: 30000, what: 'the secret to apply' })
  })

  after(async () => {
    await resetGuc('shape_sync.secret')
    await waitFor(async () => (await status({ table })) === 200, { timeoutMs: 30000, what: 'the secret to go' })
    await query(`DROP TABLE IF EXISTS public.${table}`)
  })

  it('answers 401 with Electric body without it', async () => {
    const res = await fetchShape({ table, offset: '-1' })
    assert.equal(res.status, 401)
    assert.deepEqual(res.body, { message: 'Unauthorized - Invalid API secret' })
  })

  it('lets the official client sync and follow live changes with params.secret', async () => {
    const c = startClientShape({ table, secret: SECRET })
    try {
      const rows = await c.shape.rows
      assert.equal(rows.length, 2)
      for (const url of c.requests) assert.equal(url.searchParams.get('secret'), SECRET)
      await query(`INSERT INTO public.${table} VALUES (3, 'c')`)
      await waitFor(() => c.shape.currentRows.length === 3, { timeoutMs: 30000, what: 'the live insert' })
      assert.equal(c.errors.length, 0)
    } finally {
      c.close()
    }
  })

  it('gives the official client a 401 it does not retry', async () => {
    await assert.rejects(syncShape({ table, secret: 'wrong' }), (err) => err.status === 401)
  })
})

// Raw request with a Host header of our choice (fetch does not allow setting it).
function requestWithHost(path, host, headers = {}) {
  const url = new URL(path, BASE_URL)
  return new Promise((resolve, reject) => {
    const req = http.request(
      { host: url.hostname, port: url.port, path: url.pathname + url.search, headers: { Host: host, ...headers } },
      (res) => {
        let text = ''
        res.setEncoding('utf8')
        res.on('data', (d) => (text += d))
        res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, text }))
      },
    )
    req.on('error', reject)
    req.end()
  })
}

describe('access: browsers, while loopback clients only are served', () => {
  const table = blockTable('acc_browser')

  it('refuses a Host that is not a loopback name (DNS rebinding)', async () => {
    const port = new URL(BASE_URL).port
    const res = await requestWithHost(`/v1/shape?table=${table}&offset=-1`, `rebound.attacker.example:${port}`)
    assert.equal(res.status, 403)
    assert.match(res.text, /Host header must name a loopback address/)
    const ok = await requestWithHost(`/v1/shape?table=${table}&offset=-1`, `localhost:${port}`)
    assert.equal(ok.status, 200)
  })

  it('refuses a page of another origin, and gives it no CORS headers', async () => {
    const res = await fetchShape({ table, offset: '-1' }, { headers: { Origin: 'https://attacker.example' } })
    assert.equal(res.status, 403)
    assert.equal(res.headers.get('access-control-allow-origin'), null)
    const local = await fetchShape({ table, offset: '-1' }, { headers: { Origin: 'http://localhost:5173' } })
    assert.equal(local.status, 200)
    assert.equal(local.headers.get('access-control-allow-origin'), 'http://localhost:5173')
  })

  it('follows shape_sync.cors_allowed_origins', async () => {
    await setGuc('shape_sync.cors_allowed_origins', 'https://app.example.com')
    try {
      await waitFor(
        async () =>
          (await fetchShape({ table, offset: '-1' }, { headers: { Origin: 'https://app.example.com' } })).status === 200,
        { timeoutMs: 30000, what: 'the origin list to apply' },
      )
      const other = await fetchShape({ table, offset: '-1' }, { headers: { Origin: 'http://localhost:5173' } })
      assert.equal(other.status, 403, 'an origin the list does not name, loopback or not')
    } finally {
      await resetGuc('shape_sync.cors_allowed_origins')
    }
  })
})

describe('access: a snapshot that takes too long', () => {
  const table = `acc_slow_${sfx}`

  before(async () => {
    await query(`CREATE TABLE public.${table} (id int PRIMARY KEY, pad text)`)
    await query(`ALTER TABLE public.${table} REPLICA IDENTITY FULL`)
    await query(`INSERT INTO public.${table} SELECT g, repeat('p', 200) FROM generate_series(1, 200000) g`)
    await setGuc('shape_sync.snapshot_statement_timeout', '20ms')
  })

  after(async () => {
    await resetGuc('shape_sync.snapshot_statement_timeout')
    await query(`DROP TABLE IF EXISTS public.${table}`)
  })

  it('fails with a 400 that names shape_sync.snapshot_statement_timeout', async () => {
    // the setting reaches the snapshot workers started after the reload
    const res = await waitFor(
      async () => {
        const r = await fetchShape({ table, offset: '-1', where: `id > ${Math.floor(Math.random() * 1000)}` })
        return r.status === 400 ? r : null
      },
      { timeoutMs: 30000, what: 'a snapshot to time out' },
    )
    assert.match(res.body.message, /shape_sync\.snapshot_statement_timeout/)
  })
})

describe('access: where clauses cannot hurt the server', () => {
  const table = `acc_eval_${sfx}`
  const leak = `acc_leak_${sfx}`
  const secretTable = `acc_secret_data_${sfx}`

  before(async () => {
    await query(`CREATE TABLE public.${table} (id int PRIMARY KEY, body text)`)
    await query(`ALTER TABLE public.${table} REPLICA IDENTITY FULL`)
    await query(`INSERT INTO public.${table} VALUES (1, 'a few words')`)
    await query(`CREATE TABLE public.${secretTable} (v text)`)
    await query(`INSERT INTO public.${secretTable} VALUES ('TOPSECRET')`)
    // what any database user with CREATE could write: a domain whose CHECK reads what it likes
    await query(`CREATE FUNCTION public.${leak}(text) RETURNS bool LANGUAGE plpgsql AS
      $$BEGIN RAISE EXCEPTION 'leak: % as %', (SELECT string_agg(v, ',') FROM public.${secretTable}), current_user; END$$`)
    await query(`CREATE DOMAIN public.${leak}_d AS text CHECK (public.${leak}(VALUE))`)
    await query(`CREATE TYPE public.${leak}_c AS (v public.${leak}_d)`)
  })

  after(async () => {
    await query(`DROP TABLE IF EXISTS public.${table}, public.${secretTable}`)
    await query(`DROP TYPE IF EXISTS public.${leak}_c`)
    await query(`DROP DOMAIN IF EXISTS public.${leak}_d`)
    await query(`DROP FUNCTION IF EXISTS public.${leak}(text)`)
  })

  it('never runs the CHECK of a domain a parameter or a literal would be read as', async () => {
    for (const [where, params] of [
      [`$1::public.${leak}_d IS NOT NULL`, ['x']],
      [`'(x)'::public.${leak}_c IS NOT NULL`, undefined],
      [`'{x}'::public.${leak}_d[] IS NOT NULL`, undefined],
    ]) {
      const res = await fetchShape({ table, offset: '-1', where, params })
      assert.equal(res.status, 400, where)
      assert.doesNotMatch(res.text, /TOPSECRET|leak:/, `${where}: the CHECK did not run`)
      // (a type of another schema is now refused before it is looked up at all)
      assert.match(res.body.errors.where[0], /Only types of pg_catalog are allowed in where clauses/)
    }
    // and the server's own settings were not changed by anything either
    assert.equal((await fetchShape({ table, offset: '-1' })).status, 200)
  })

  it('refuses functions whose output can grow far beyond their input', async () => {
    const res = await fetchShape({ table, offset: '-1', where: `strpos(repeat('a', 10000000), 'b') = 0` })
    assert.equal(res.status, 400)
    assert.match(res.body.errors.where[0], /repeat\(\) is not allowed/)
  })

  it('fails a shape whose where clause takes longer than shape_sync.where_evaluation_timeout on a change', async () => {
    // (a regular expression over the 10 MB value below: it converts the value to wide
    // characters, 40 MB, before matching)
    const where = `body ~* 'z(e|f)bra'`
    // The shape is made, and every earlier write of the table decoded, before the 1 ms
    // limit: its snapshot (the snapshot workers apply the limit too) and those writes are
    // evaluated without it (a first evaluation, which compiles the expression, may take
    // more than 1 ms on a busy machine). Only the change below meets the limit.
    const shape = await new RawShape({ table, where }).sync()
    await waitDecoded()
    // applied by the worker in one reload with a lower max_where_length, which shows when
    await query(`ALTER SYSTEM SET shape_sync.max_where_length = 100`)
    await setGuc('shape_sync.where_evaluation_timeout', '1ms')
    try {
      await waitFor(async () => {
        const r = await fetchShape({ table, offset: '-1', where: `id > 0 AND ${'id > 0 AND '.repeat(10)}true` })
        return r.status === 400 && /max_where_length/.test(r.text)
      }, { timeoutMs: 30000, what: 'the worker to apply the reload' })
      const { response: live } = await holdLive(shape, 300, LIVE)
      await query(`INSERT INTO public.${table} VALUES (2, repeat('word ', 2000000))`)
      const res = await live
      assert.equal(res.status, 400, `the live request ends with the shape's failure (${res.status} ${res.text.slice(0, 200)})`)
      assert.match(res.body.message, /shape_sync\.where_evaluation_timeout/)
      // other shapes go on
      const other = await fetchShape({ table, offset: '-1', columns: ['id'] })
      assert.equal(other.status, 200)
    } finally {
      await query(`ALTER SYSTEM RESET shape_sync.max_where_length`)
      await resetGuc('shape_sync.where_evaluation_timeout')
      await query(`DELETE FROM public.${table} WHERE id = 2`)
    }
  })

  it('survives a table dropped in the transaction that changed it', async () => {
    const t = `acc_drop_${sfx}`
    await query(`CREATE TABLE public.${t} (id int PRIMARY KEY)`)
    await query(`ALTER TABLE public.${t} REPLICA IDENTITY FULL`)
    const pid = (await query(`SELECT pid FROM pg_stat_activity WHERE backend_type = 'shape_sync'`)).rows[0].pid
    const shape = await new RawShape({ table: t }).sync()
    const { response: live } = await holdLive(shape, 300, LIVE)
    // a REVOKE first, so the commit checks privileges against a catalog without the table
    await query(`BEGIN; INSERT INTO public.${t} VALUES (1); REVOKE SELECT ON public.${t} FROM PUBLIC; DROP TABLE public.${t}; COMMIT`)
    const res = await live
    assert.equal(res.status, 409)
    const after = (await query(`SELECT pid FROM pg_stat_activity WHERE backend_type = 'shape_sync'`)).rows[0]?.pid
    assert.equal(after, pid, 'the same worker: it did not crash')
  })
})

describe('access: a page of another site with no Origin', () => {
  const table = blockTable('acc_nocors')

  it('is refused while loopback clients only are served (Sec-Fetch-Site: cross-site)', async () => {
    const res = await fetchShape({ table, offset: '-1' }, { headers: { 'Sec-Fetch-Site': 'cross-site' } })
    assert.equal(res.status, 403)
    const same = await fetchShape({ table, offset: '-1' }, { headers: { 'Sec-Fetch-Site': 'same-site' } })
    assert.equal(same.status, 200)
  })
})
