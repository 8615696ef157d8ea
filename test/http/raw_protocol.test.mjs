// Raw HTTP checks of the Shape API wire format: headers, bodies, etags, CORS.

import { after, before, describe, it } from 'node:test'
import assert from 'node:assert/strict'

import {
  EXPOSED_HEADERS,
  byKey,
  closePool,
  createTable,
  dropTable,
  fetchRaw,
  fetchShape,
  headerList,
  query,
  quoteIdent,
  SHAPE_URL,
  uniqueTable,
} from '../lib/helpers.mjs'

after(closePool)

const CACHE_INITIAL = 'public, max-age=604800, s-maxage=3600, stale-while-revalidate=2629746'
const CACHE_CATCHUP = 'public, max-age=60, stale-while-revalidate=300'
const DIGITS = /^\d+$/

function assertSnapshotEnd(msg, label) {
  assert.deepEqual(Object.keys(msg), ['headers'], `${label}: snapshot-end has only headers`)
  const h = msg.headers
  assert.equal(h.control, 'snapshot-end', `${label}: control`)
  assert.deepEqual(Object.keys(h).sort(), ['control', 'xip_list', 'xmax', 'xmin'], `${label}: snapshot-end header keys`)
  assert.match(h.xmin, DIGITS, `${label}: xmin is a decimal string`)
  assert.match(h.xmax, DIGITS, `${label}: xmax is a decimal string`)
  assert.ok(Array.isArray(h.xip_list), `${label}: xip_list is an array`)
  for (const x of h.xip_list) assert.match(x, DIGITS, `${label}: xip_list values are decimal strings`)
  assert.ok(BigInt(h.xmin) <= BigInt(h.xmax), `${label}: xmin ${h.xmin} <= xmax ${h.xmax}`)
  for (const x of h.xip_list) {
    assert.ok(BigInt(h.xmin) <= BigInt(x) && BigInt(x) < BigInt(h.xmax), `${label}: xip ${x} in [xmin, xmax)`)
  }
}

// Parses electric-schema; `dims: 0` means "not an array" to the client, like no dims.
function parseSchema(headers) {
  assert.ok(headers.get('electric-schema'), 'electric-schema header present')
  const schema = JSON.parse(headers.get('electric-schema'))
  for (const col of Object.values(schema)) if (col.dims === 0) delete col.dims
  return schema
}

async function currentLsnDecimal() {
  const { rows } = await query(`SELECT (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::text AS lsn`)
  return BigInt(rows[0].lsn)
}

describe('raw protocol: snapshot and catch-up', () => {
  const table = uniqueTable('raw')
  const rel = `"public"."${table}"`
  let first // response to offset=-1
  let handle

  before(async () => {
    await createTable([
      `CREATE TABLE public.${table} (id int4 PRIMARY KEY, title text NOT NULL, n int8, tags text[], grid int4[][], note varchar(10))`,
      `INSERT INTO public.${table} VALUES
         (1, 'a', NULL, '{x,"y z"}', '{{1,2},{3,4}}', NULL),
         (2, 'b/c "q" \\ é', 5, NULL, NULL, 'v'),
         (3, '', -9223372036854775808, '{}', '{{NULL}}', '')`,
    ])
    first = await fetchShape({ table, offset: '-1' }, { headers: { Origin: 'http://app.localhost:5173' } })
    handle = first.headers.get('electric-handle')
  })

  after(async () => {
    await dropTable(table)
  })

  it('offset=-1 answers 200 with a JSON array and the Electric headers', () => {
    assert.equal(first.status, 200, first.text)
    assert.match(first.headers.get('content-type') ?? '', /^application\/json/, 'content-type')
    assert.ok(Array.isArray(first.body), 'body is a JSON array')
    assert.ok(handle && handle.length > 0, 'electric-handle is present and non-empty')
    assert.equal(first.headers.get('electric-offset'), '0_0', 'electric-offset')
    assert.equal(first.headers.get('etag'), `"${handle}:-1:0_0"`, 'etag')
    assert.equal(first.headers.get('cache-control'), CACHE_INITIAL, 'cache-control of offset=-1')
    assert.equal(first.headers.get('electric-up-to-date'), null, 'no electric-up-to-date header for offset=-1')
    assert.equal(first.headers.get('electric-cursor'), null, 'no electric-cursor on a non-live response')
  })

  it('carries CORS headers: allow-origin echoes Origin, expose-headers lists the Electric headers', async () => {
    assert.equal(first.headers.get('access-control-allow-origin'), 'http://app.localhost:5173')
    const exposed = headerList(first.headers, 'access-control-expose-headers')
    for (const h of EXPOSED_HEADERS) assert.ok(exposed.includes(h), `access-control-expose-headers has ${h}: ${exposed}`)
    const noOrigin = await fetchShape({ table, offset: '-1' })
    assert.equal(noOrigin.headers.get('access-control-allow-origin'), '*', 'allow-origin without an Origin header')
  })

  it('electric-schema gives types, dims, pk_index and not_null', () => {
    const schema = parseSchema(first.headers)
    const { note, ...rest } = schema
    assert.deepEqual(rest, {
      id: { type: 'int4', pk_index: 0, not_null: true },
      title: { type: 'text', not_null: true },
      n: { type: 'int8' },
      tags: { type: 'text', dims: 1 },
      grid: { type: 'int4', dims: 2 },
    })
    // varchar(10): max_length is optional, but right when present.
    assert.equal(note.type, 'varchar')
    assert.deepEqual(
      Object.keys(note).filter((k) => k !== 'type' && k !== 'max_length'),
      [],
      `note schema: ${JSON.stringify(note)}`,
    )
    if ('max_length' in note) assert.equal(note.max_length, 10)
  })

  it('snapshot rows are insert messages with string or null values and Electric keys', () => {
    const rows = first.body.filter((m) => 'key' in m).sort(byKey)
    assert.deepEqual(rows, [
      {
        key: `${rel}/"1"`,
        value: { id: '1', title: 'a', n: null, tags: '{x,"y z"}', grid: '{{1,2},{3,4}}', note: null },
        headers: { operation: 'insert', relation: ['public', table] },
      },
      {
        key: `${rel}/"2"`,
        value: { id: '2', title: 'b/c "q" \\ é', n: '5', tags: null, grid: null, note: 'v' },
        headers: { operation: 'insert', relation: ['public', table] },
      },
      {
        key: `${rel}/"3"`,
        value: { id: '3', title: '', n: '-9223372036854775808', tags: '{}', grid: '{{NULL}}', note: '' },
        headers: { operation: 'insert', relation: ['public', table] },
      },
    ])
    for (const m of first.body) {
      if (!('key' in m)) continue
      for (const [k, v] of Object.entries(m.value)) {
        assert.ok(v === null || typeof v === 'string', `value of ${k} is a string or null: ${JSON.stringify(v)}`)
      }
    }
  })

  it('the snapshot ends with snapshot-end and has no up-to-date', () => {
    const body = first.body
    assert.equal(body.length, 4, 'three rows and snapshot-end')
    assertSnapshotEnd(body[body.length - 1], 'offset=-1')
    for (const m of body.slice(0, -1)) assert.ok('key' in m, `only rows before snapshot-end: ${JSON.stringify(m)}`)
    assert.ok(!body.some((m) => m.headers?.control === 'up-to-date'), 'no up-to-date message for offset=-1')
  })

  it('offset=0_0 with the handle answers only up-to-date at 0_inf', async () => {
    const lsnBefore = await currentLsnDecimal()
    const res = await fetchShape({ table, offset: '0_0', handle })
    const lsnAfter = await currentLsnDecimal()
    assert.equal(res.status, 200, res.text)
    assert.ok(Array.isArray(res.body) && res.body.length === 1, `one message: ${res.text}`)
    const msg = res.body[0]
    assert.deepEqual(Object.keys(msg), ['headers'])
    assert.deepEqual(Object.keys(msg.headers).sort(), ['control', 'global_last_seen_lsn'])
    assert.equal(msg.headers.control, 'up-to-date')
    assert.match(msg.headers.global_last_seen_lsn, DIGITS, 'global_last_seen_lsn is a decimal string')
    assert.ok(
      BigInt(msg.headers.global_last_seen_lsn) <= lsnAfter,
      `global_last_seen_lsn ${msg.headers.global_last_seen_lsn} <= current WAL LSN ${lsnAfter} (before: ${lsnBefore})`,
    )
    assert.equal(res.headers.get('electric-offset'), '0_inf')
    assert.equal(res.headers.get('electric-handle'), handle)
    assert.ok(res.headers.has('electric-up-to-date'), 'electric-up-to-date header present')
    assert.equal(res.headers.get('cache-control'), CACHE_CATCHUP)
    assert.equal(res.headers.get('etag'), `"${handle}:0_0:0_inf"`)
    assert.deepEqual(
      JSON.parse(res.headers.get('electric-schema')),
      JSON.parse(first.headers.get('electric-schema')),
      'same electric-schema as the first response',
    )
  })

  it('the same definition gets the same handle and the same snapshot', async () => {
    const again = await fetchShape({ table, offset: '-1' })
    assert.equal(again.status, 200)
    assert.equal(again.headers.get('electric-handle'), handle)
    assert.equal(again.headers.get('etag'), first.headers.get('etag'))
    assert.equal(again.text, first.text, 'identical body')
  })

  it('unknown query params and a handle with offset=-1 are ignored', async () => {
    const res = await fetchShape({
      table,
      offset: '-1',
      log: 'full',
      cursor: '',
      'cache-buster': '123-abc',
      expired_handle: 'x-1',
      customParam: 'whatever',
      handle: 'not-a-real-handle',
    })
    assert.equal(res.status, 200, res.text)
    assert.equal(res.headers.get('electric-handle'), handle)
    const res2 = await fetchShape({ table, offset: '0_0', handle, foo: 'bar', log: 'full' })
    assert.equal(res2.status, 200, res2.text)
    assert.equal(res2.headers.get('electric-handle'), handle)
    assert.equal(res2.headers.get('electric-offset'), '0_inf')
  })

  it('a different definition gets a different handle', async () => {
    const res = await fetchShape({ table, offset: '-1', where: 'id > 1' })
    assert.equal(res.status, 200, res.text)
    const other = res.headers.get('electric-handle')
    assert.ok(other && other !== handle, `handle ${other} differs from ${handle}`)
    assert.deepEqual(
      res.body.filter((m) => 'key' in m).map((m) => m.key).sort(),
      [`${rel}/"2"`, `${rel}/"3"`],
    )
    const cols = await fetchShape({ table, offset: '-1', columns: 'id,title' })
    assert.equal(cols.status, 200, cols.text)
    const h3 = cols.headers.get('electric-handle')
    assert.ok(h3 !== handle && h3 !== other, 'columns give another shape')
    const replica = await fetchShape({ table, offset: '-1', replica: 'full' })
    assert.equal(replica.status, 200, replica.text)
    const h4 = replica.headers.get('electric-handle')
    assert.ok(h4 !== handle && h4 !== other && h4 !== h3, 'replica=full gives another shape')
    const replicaDefault = await fetchShape({ table, offset: '-1', replica: 'default' })
    assert.equal(replicaDefault.headers.get('electric-handle'), handle, 'replica=default is the default')
  })

  it('If-None-Match with the etag answers 304 with an empty body', async () => {
    const etag = first.headers.get('etag')
    const res = await fetchShape({ table, offset: '-1' }, { headers: { 'If-None-Match': etag } })
    assert.equal(res.status, 304)
    assert.equal(res.text, '')
    assert.equal(res.headers.get('etag'), etag)
    assert.equal(res.headers.get('electric-handle'), handle)
    assert.equal(res.headers.get('electric-offset'), '0_0')

    const listed = await fetchShape({ table, offset: '-1' }, { headers: { 'If-None-Match': `"nope", ${etag}` } })
    assert.equal(listed.status, 304, 'etag inside a comma-separated list')

    const other = await fetchShape({ table, offset: '-1' }, { headers: { 'If-None-Match': '"nope"' } })
    assert.equal(other.status, 200, 'a non-matching etag gets the body')
    assert.equal(other.text, first.text)

    const catchup = await fetchShape({ table, offset: '0_0', handle })
    const res2 = await fetchShape(
      { table, offset: '0_0', handle },
      { headers: { 'If-None-Match': catchup.headers.get('etag') } },
    )
    assert.equal(res2.status, 304, 'offset=0_0 revalidates too')
    assert.equal(res2.text, '')
  })
})

describe('raw protocol: composite primary key schema and empty table', () => {
  const table = uniqueTable('rawpk')
  const empty = uniqueTable('rawempty')

  before(async () => {
    await createTable([
      `CREATE TABLE public.${table} (a int8, b text, c bool NOT NULL, PRIMARY KEY (b, a))`,
      `INSERT INTO public.${table} VALUES (1, 'x/y', true), (2, 'x', false)`,
      `CREATE TABLE public.${empty} (id int4 PRIMARY KEY)`,
    ])
  })

  after(async () => {
    await dropTable(table)
    await dropTable(empty)
  })

  it('pk_index follows the primary key order, keys join pk values in that order', async () => {
    const res = await fetchShape({ table, offset: '-1' })
    assert.equal(res.status, 200, res.text)
    assert.deepEqual(parseSchema(res.headers), {
      a: { type: 'int8', pk_index: 1, not_null: true },
      b: { type: 'text', pk_index: 0, not_null: true },
      c: { type: 'bool', not_null: true },
    })
    const rows = res.body.filter((m) => 'key' in m).sort(byKey)
    // A bool is "true"/"false" from ::text (Electric's snapshot) or "t"/"f" from
    // boolout (pgoutput); the client accepts both, so do we.
    const normBool = (v) => ({ t: 'true', f: 'false' })[v] ?? v
    assert.deepEqual(
      rows.map((m) => [m.key, { ...m.value, c: normBool(m.value.c) }]),
      [
        [`"public"."${table}"/"x"/"2"`, { a: '2', b: 'x', c: 'false' }],
        [`"public"."${table}"/"x//y"/"1"`, { a: '1', b: 'x/y', c: 'true' }],
      ],
      'keys and values',
    )
  })

  it('an empty table gives a snapshot of only snapshot-end, then up-to-date', async () => {
    const res = await fetchShape({ table: empty, offset: '-1' })
    assert.equal(res.status, 200, res.text)
    assert.equal(res.body.length, 1, res.text)
    assertSnapshotEnd(res.body[0], 'empty table')
    const h = res.headers.get('electric-handle')
    const next = await fetchShape({ table: empty, offset: '0_0', handle: h })
    assert.equal(next.status, 200, next.text)
    assert.equal(next.body.length, 1, next.text)
    assert.equal(next.body[0].headers.control, 'up-to-date')
    assert.equal(next.headers.get('electric-offset'), '0_inf')
  })
})

describe('raw protocol: other routes', () => {
  it('GET /v1/health answers 200 {"status":"active"}', async () => {
    const res = await fetchRaw('/v1/health')
    assert.equal(res.status, 200)
    assert.deepEqual(res.body, { status: 'active' })
  })

  it('an unknown path answers 404', async () => {
    const res = await fetchRaw('/v1/nope')
    assert.equal(res.status, 404)
    const res2 = await fetchRaw('/v2/shape?table=x&offset=-1')
    assert.equal(res2.status, 404)
  })

  it('OPTIONS /v1/shape answers 204 with CORS headers', async () => {
    const res = await fetchRaw(`${SHAPE_URL}?table=whatever&offset=-1`, {
      method: 'OPTIONS',
      headers: {
        Origin: 'http://app.localhost:5173',
        'Access-Control-Request-Method': 'GET',
        'Access-Control-Request-Headers': 'if-none-match',
      },
    })
    assert.equal(res.status, 204)
    assert.equal(res.text, '')
    assert.equal(res.headers.get('access-control-allow-origin'), 'http://app.localhost:5173')
    const methods = headerList(res.headers, 'access-control-allow-methods')
    for (const m of ['get', 'head', 'options']) assert.ok(methods.includes(m), `allow-methods has ${m}: ${methods}`)
    assert.ok(
      headerList(res.headers, 'access-control-allow-headers').includes('if-none-match'),
      'allow-headers has if-none-match',
    )
    assert.equal(res.headers.get('access-control-max-age'), '86400')
  })

  it('a quoted table name in the table param resolves like the unquoted one', async () => {
    const table = uniqueTable('rawq')
    await createTable(`CREATE TABLE public.${table} (id int4 PRIMARY KEY)`)
    try {
      const a = await fetchShape({ table, offset: '-1' })
      const b = await fetchShape({ table: `public.${quoteIdent(table)}`, offset: '-1' })
      assert.equal(a.status, 200, a.text)
      assert.equal(b.status, 200, b.text)
      assert.equal(b.headers.get('electric-handle'), a.headers.get('electric-handle'))
    } finally {
      await dropTable(table)
    }
  })
})
