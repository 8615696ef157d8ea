// The official client syncs tables of many column types, with odd names, and
// gets exactly what PostgreSQL has, parsed the way the client parses each type.

import { after, before, describe, it } from 'node:test'
import assert from 'node:assert/strict'

import {
  closePool,
  createTable,
  dropTable,
  dropType,
  electricKey,
  fetchShape,
  parseLikeClient,
  queryAsServerText,
  quoteIdent,
  syncShape,
  uniqueSuffix,
  uniqueTable,
} from '../lib/helpers.mjs'

after(closePool)

// Column spec: name, sql (type in DDL), type (typname, element type for arrays),
// dims, notNull, pk (0-based pk index). Modifiers the schema may carry are in `mods`.
function ddl(tableSql, columns, pkNames) {
  const cols = columns.map((c) => `${quoteIdent(c.name)} ${c.sql}${c.notNull && c.pk === undefined ? ' NOT NULL' : ''}`)
  cols.push(`PRIMARY KEY (${pkNames.map(quoteIdent).join(', ')})`)
  return `CREATE TABLE ${tableSql} (\n  ${cols.join(',\n  ')}\n)`
}

// Expected rows from PostgreSQL: text output of every column under the server's
// session settings, keyed by the Electric key of the row.
async function expectedRows(table, columns, pkNames, whereSql = '', values = []) {
  const sel = []
  columns.forEach((c, i) => {
    sel.push(`${quoteIdent(c.name)}::text AS "c${i}"`)
    // bpchar::text drops the padding, the type's output function keeps it.
    if (c.type === 'bpchar') sel.push(`${quoteIdent(c.name)} AS "r${i}"`)
  })
  const rows = await queryAsServerText(
    `SELECT ${sel.join(', ')} FROM public.${quoteIdent(table)} ${whereSql}`,
    values,
  )
  const out = new Map()
  for (const r of rows) {
    const text = {}
    const raw = {}
    columns.forEach((c, i) => {
      text[c.name] = r[`c${i}`]
      if (c.type === 'bpchar') raw[c.name] = r[`r${i}`]
    })
    const key = electricKey('public', table, pkNames.map((n) => text[n]))
    out.set(key, { text, raw })
  }
  return out
}

function assertRowsMatch(actual, expected, columns, label) {
  assert.equal(
    actual.size,
    expected.size,
    `${label}: client has ${actual.size} rows, PostgreSQL has ${expected.size}`,
  )
  assert.deepEqual(
    [...actual.keys()].sort(),
    [...expected.keys()].sort(),
    `${label}: row keys differ from the expected "schema"."table"/"pk" keys`,
  )
  const names = columns.map((c) => c.name).sort()
  for (const [key, row] of actual) {
    const exp = expected.get(key)
    assert.deepEqual(Object.keys(row).sort(), names, `${label}: columns of row ${key}`)
    for (const c of columns) {
      const got = row[c.name]
      const text = exp.text[c.name]
      if (c.type === 'bpchar' && text !== null) {
        // Accept PostgreSQL's output with padding (pgoutput, type output function)
        // or the ::text cast without it (Electric's snapshot query).
        const padded = exp.raw[c.name]
        assert.ok(
          got === padded || got === text,
          `${label}: row ${key} column ${c.name} (bpchar): got ${JSON.stringify(got)}, want ${JSON.stringify(padded)} or ${JSON.stringify(text)}`,
        )
        continue
      }
      const want = parseLikeClient(text, c.type, c.dims ?? 0)
      assert.deepStrictEqual(
        got,
        want,
        `${label}: row ${key} column ${JSON.stringify(c.name)} (${c.sql}): PostgreSQL text ${JSON.stringify(text)}`,
      )
    }
  }
}

function schemaOf(res) {
  const h = res.headers.get('electric-schema')
  assert.ok(h, `electric-schema header present (status ${res.status})`)
  return JSON.parse(h)
}

// electric-schema entry check: exact type/dims/pk_index/not_null; modifiers are
// optional but must be right when present.
function assertSchema(schema, columns) {
  assert.deepEqual(
    Object.keys(schema).sort(),
    columns.map((c) => c.name).sort(),
    'electric-schema lists exactly the selected columns',
  )
  for (const c of columns) {
    const got = schema[c.name]
    const core = { type: c.type }
    if (c.dims) core.dims = c.dims
    if (c.pk !== undefined) core.pk_index = c.pk
    if (c.notNull || c.pk !== undefined) core.not_null = true
    const gotCore = {}
    const extra = {}
    for (const [k, v] of Object.entries(got)) {
      // dims: 0 means "not an array" to the client, like no dims at all.
      if (k === 'dims' && v === 0 && !c.dims) continue
      if (['type', 'dims', 'pk_index', 'not_null'].includes(k)) gotCore[k] = v
      else extra[k] = v
    }
    assert.deepEqual(gotCore, core, `electric-schema for column ${JSON.stringify(c.name)} (${c.sql})`)
    const mods = c.mods ?? {}
    for (const [k, v] of Object.entries(extra)) {
      assert.ok(k in mods, `electric-schema for ${JSON.stringify(c.name)} has unexpected key ${k}=${JSON.stringify(v)}`)
      assert.deepEqual(v, mods[k], `electric-schema modifier ${k} of ${JSON.stringify(c.name)}`)
    }
  }
}

describe('official client: many column types', () => {
  const table = uniqueTable('types')
  const mood = `mood_${uniqueSuffix()}`
  const columns = [
    { name: 'id', sql: 'int4', type: 'int4', pk: 0 },
    { name: 'i2', sql: 'int2', type: 'int2' },
    { name: 'i4', sql: 'int4', type: 'int4' },
    { name: 'i8', sql: 'int8', type: 'int8' },
    { name: 'num', sql: 'numeric', type: 'numeric' },
    { name: 'num_p', sql: 'numeric(10,2)', type: 'numeric', mods: { precision: 10, scale: 2 } },
    { name: 'f4', sql: 'float4', type: 'float4' },
    { name: 'f8', sql: 'float8', type: 'float8' },
    { name: 'b', sql: 'bool', type: 'bool' },
    { name: 't', sql: 'text', type: 'text' },
    { name: 'vc', sql: 'varchar(20)', type: 'varchar', mods: { max_length: 20 } },
    { name: 'ch', sql: 'char(5)', type: 'bpchar', mods: { length: 5 } },
    { name: 'u', sql: 'uuid', type: 'uuid' },
    { name: 'j', sql: 'json', type: 'json' },
    { name: 'jb', sql: 'jsonb', type: 'jsonb' },
    { name: 'by', sql: 'bytea', type: 'bytea' },
    { name: 'tstz', sql: 'timestamptz', type: 'timestamptz' },
    { name: 'ts', sql: 'timestamp', type: 'timestamp' },
    { name: 'd', sql: 'date', type: 'date' },
    { name: 'tm', sql: 'time', type: 'time' },
    { name: 'iv', sql: 'interval', type: 'interval' },
    { name: 'ia', sql: 'int4[]', type: 'int4', dims: 1 },
    { name: 'ta', sql: 'text[]', type: 'text', dims: 1 },
    { name: 'ia2', sql: 'int4[][]', type: 'int4', dims: 2 },
    { name: 'ba', sql: 'bool[]', type: 'bool', dims: 1 },
    { name: 'fa', sql: 'float8[]', type: 'float8', dims: 1 },
    { name: 'm', sql: mood, type: mood },
    { name: 'nn', sql: 'text', type: 'text', notNull: true },
    { name: 'nn_i8', sql: 'int8', type: 'int8', notNull: true },
    { name: 'title', sql: 'text', type: 'text' },
  ]
  const names = columns.map((c) => c.name)
  // Rows as SQL literals (NULL for missing). Row 8 has NULL in every nullable column.
  const rows = [
    {
      id: 1, i2: '32767', i4: '2147483647', i8: '9223372036854775807',
      num: `'12345678901234567890.123456789'`, num_p: `'3.10'`, f4: `'3.14'`, f8: `'1.1'`,
      b: 'true', t: `'hello'`, vc: `'varchar'`, ch: `'ab'`,
      u: `'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'`, j: `'{"a": 1,  "b": [1, 2]}'`,
      jb: `'{"b": [1, 2], "a": {"x": null}}'`, by: `'\\x0001fffe'`,
      tstz: `'2024-01-02 03:04:05.123456+02'`, ts: `'2024-01-02 03:04:05'`, d: `'2024-02-29'`,
      tm: `'23:59:59.999'`, iv: `'1 year 2 months 3 days 04:05:06'`,
      ia: `'{1,2,3}'`, ta: `ARRAY['a b', 'c,d', 'e"f', NULL, 'NULL', '', 'g\\h', '{x}']`,
      ia2: `'{{1,2,3},{4,5,6}}'`, ba: `'{t,f,NULL}'`, fa: `'{1.5,NaN,Infinity,-Infinity,NULL}'`,
      m: `'happy'`, nn: `'not null'`, nn_i8: '1', title: `'one'`,
    },
    {
      id: 2, i2: '-32768', i4: '-2147483648', i8: '-9223372036854775808',
      num: `'NaN'`, num_p: `'-99999999.99'`, f4: `'NaN'`, f8: `'Infinity'`,
      b: 'false', t: `E'quote " backslash \\\\ newline \\n tab \\t unicode \u00e9 \u{1F600} ctrl \\x01 slash /'`,
      vc: `''`, ch: `'abcde'`, u: `'00000000-0000-0000-0000-000000000000'`, j: `'"str"'`,
      jb: `'[1, "x", null, 2.5e10]'`, by: `'\\x'`,
      tstz: `'infinity'`, ts: `'-infinity'`, d: `'4713-01-01 BC'`, tm: `'00:00'`,
      iv: `'-1 day +02:00:00'`, ia: `'{}'`, ta: `'{}'`, ia2: `'{}'`, ba: `'{}'`, fa: `'{-0,1e300,1e-300}'`,
      m: `'sad'`, nn: `''`, nn_i8: '-1', title: `'two'`,
    },
    {
      id: 3, i2: '0', i4: '0', i8: '0', num: `'-0.000001'`, num_p: `'0'`, f4: `'-Infinity'`,
      f8: `'-Infinity'`, b: 'true', t: `'  spaces  '`, vc: `'12345678901234567890'`, ch: `' '`,
      j: `'[]'`, jb: `'{}'`, by: `'\\xdeadbeef'`, tstz: `'1999-12-31 23:59:59.999999-08'`,
      ts: `'2000-01-01 00:00:00.5'`, d: `'1970-01-01'`, tm: `'12:34:56.789012'`, iv: `'0'`,
      ia: `'{NULL}'`, ta: `'{""}'`, ia2: `'{{NULL,1}}'`, fa: `'{0.1}'`,
      m: `'ok'`, nn: `'x'`, nn_i8: '9007199254740993', title: `'three'`,
    },
    { id: 4, i4: '4', f8: `'1e-300'`, f4: `'1.17549435e-38'`, t: `'four'`, nn: `'four'`, nn_i8: '4', title: `'four'` },
    { id: 5, i4: '5', f8: `'0.1'`, f4: `'0.1'`, t: `'five'`, nn: `'five'`, nn_i8: '5', title: `'five'` },
    { id: 6, i4: '6', f8: `'123456789.123456789'`, f4: `'16777217'`, t: `'six'`, nn: `'six'`, nn_i8: '6', title: `'six'` },
    { id: 7, i4: '7', f8: `'-2.5'`, t: `'seven'`, nn: `'seven'`, nn_i8: '7', title: null, b: 'false' },
    { id: 8, nn: `'all nulls'`, nn_i8: '8' },
  ]

  before(async () => {
    await createTable([
      `CREATE TYPE public.${quoteIdent(mood)} AS ENUM ('sad', 'ok', 'happy')`,
      ddl(`public.${quoteIdent(table)}`, columns, ['id']),
      ...rows.map(
        (r) =>
          `INSERT INTO public.${quoteIdent(table)} (${names.map(quoteIdent).join(', ')}) VALUES (${names
            .map((n) => (r[n] === undefined || r[n] === null ? 'NULL' : r[n]))
            .join(', ')})`,
      ),
    ])
  })

  after(async () => {
    await dropTable(table)
    await dropType(mood)
  })

  it('syncs every row and value exactly as PostgreSQL outputs it', async () => {
    const { value, rows: list } = await syncShape({ table })
    const expected = await expectedRows(table, columns, ['id'])
    assert.equal(expected.size, rows.length, 'fixture sanity')
    assert.equal(list.length, rows.length, 'shape.rows length')
    assertRowsMatch(value, expected, columns, 'full table')
    // Spot checks that do not depend on the comparison machinery.
    const r1 = value.get(`"public".${quoteIdent(table)}/"1"`)
    assert.ok(r1, 'row 1 present under key "public"."<table>"/"1"')
    assert.equal(r1.i8, 9223372036854775807n)
    assert.equal(r1.i2, 32767)
    assert.equal(r1.b, true)
    assert.deepEqual(r1.ia2, [[1, 2, 3], [4, 5, 6]])
    assert.deepEqual(r1.ta, ['a b', 'c,d', 'e"f', null, 'NULL', '', 'g\\h', '{x}'])
    assert.deepEqual(r1.j, { a: 1, b: [1, 2] })
    assert.equal(r1.by, '\\x0001fffe')
    assert.equal(r1.tstz, '2024-01-02 01:04:05.123456+00')
    assert.equal(r1.iv, 'P1Y2M3DT4H5M6S')
    assert.equal(r1.m, 'happy')
    const r2 = value.get(`"public".${quoteIdent(table)}/"2"`)
    assert.ok(Number.isNaN(r2.f4), 'float4 NaN')
    assert.equal(r2.f8, Infinity)
    assert.equal(r2.num, 'NaN')
    assert.equal(r2.t, 'quote " backslash \\ newline \n tab \t unicode \u00e9 \u{1F600} ctrl \x01 slash /')
    const r8 = value.get(`"public".${quoteIdent(table)}/"8"`)
    for (const c of columns) {
      if (c.notNull || c.pk !== undefined) continue
      assert.equal(r8[c.name], null, `row 8 column ${c.name} is NULL`)
    }
  })

  it('sends an electric-schema with the right types, dims, pk_index and not_null', async () => {
    const res = await fetchShape({ table, offset: '-1' })
    assert.equal(res.status, 200)
    assertSchema(schemaOf(res), columns)
  })

  it('where with params gives exactly the rows of the equivalent SELECT', async () => {
    const { value } = await syncShape({ table, where: 'id > $1', params: ['5'] })
    const expected = await expectedRows(table, columns, ['id'], 'WHERE id > $1', [5])
    assert.equal(expected.size, 3, 'fixture sanity: rows 6, 7, 8')
    assertRowsMatch(value, expected, columns, `where id > $1 ($1='5')`)
  })

  it('a where clause on several types gives exactly the rows of the equivalent SELECT', async () => {
    const where = `b = false OR i8 < 0 OR 'c,d' = ANY(ta) OR jb ? 'x'`
    const { value } = await syncShape({ table, where })
    const expected = await expectedRows(table, columns, ['id'], `WHERE ${where}`)
    assert.deepEqual([...expected.keys()].length, 3, 'fixture sanity: rows 1, 2, 7')
    assertRowsMatch(value, expected, columns, `where ${where}`)
  })

  it('columns subset gives exactly those columns of every row', async () => {
    const subset = columns.filter((c) => c.name === 'id' || c.name === 'title')
    const { value } = await syncShape({ table, columns: ['id', 'title'] })
    const expected = await expectedRows(table, subset, ['id'])
    assertRowsMatch(value, expected, subset, 'columns id,title')
    const res = await fetchShape({ table, offset: '-1', columns: ['id', 'title'] })
    assert.equal(res.status, 200)
    assertSchema(schemaOf(res), subset)
  })
})

describe('official client: quoted names, special columns, composite primary key', () => {
  const suffix = uniqueSuffix()
  const table = `weird, "name" here ${suffix}`
  const tableParam = quoteIdent(table)
  const columns = [
    { name: 'code', sql: 'text', type: 'text', pk: 0 },
    { name: 'id', sql: 'int8', type: 'int8', pk: 1 },
    { name: 'has space', sql: 'text', type: 'text' },
    { name: 'has,comma', sql: 'int4', type: 'int4' },
    { name: 'has"quote', sql: 'jsonb', type: 'jsonb' },
    { name: 'MixedCase', sql: 'bool', type: 'bool', notNull: true },
    { name: 'value', sql: 'text', type: 'text' },
    { name: 'key', sql: 'text[]', type: 'text', dims: 1 },
  ]
  const names = columns.map((c) => c.name)
  const rows = [
    [`'plain'`, '1', `'a'`, '1', `'{"k": "v"}'`, 'true', `'v1'`, `'{a}'`],
    [`'a/b'`, '1', `'b'`, '2', `'[1]'`, 'false', `'v2'`, `'{"x/y"}'`],
    [`'//'`, '2', `'x'`, '3', `'null'`, 'true', `'{"not": "json"}'`, 'NULL'],
    [`'plain'`, '2', 'NULL', 'NULL', 'NULL', 'false', 'NULL', `'{}'`],
    [`'with space, comma'`, '-5', `'x'`, '-1', `'"s"'`, 'true', `''`, `'{"",NULL}'`],
  ]

  before(async () => {
    await createTable([
      ddl(`public.${tableParam}`, columns, ['code', 'id']),
      ...rows.map(
        (r) => `INSERT INTO public.${tableParam} (${names.map(quoteIdent).join(', ')}) VALUES (${r.join(', ')})`,
      ),
    ])
  })

  after(async () => {
    await dropTable(table)
  })

  it('syncs a table whose name has spaces, a comma and a double quote', async () => {
    const { value } = await syncShape({ table: tableParam })
    const expected = await expectedRows(table, columns, ['code', 'id'])
    assert.equal(expected.size, rows.length, 'fixture sanity')
    assertRowsMatch(value, expected, columns, 'weird table')
    // Keys spelled out by hand: composite pk in pk order, `/` doubled inside values.
    const rel = `"public"."weird, ""name"" here ${suffix}"`
    assert.deepEqual(
      [...value.keys()].sort(),
      [
        `${rel}/"plain"/"1"`,
        `${rel}/"a//b"/"1"`,
        `${rel}/"////"/"2"`,
        `${rel}/"plain"/"2"`,
        `${rel}/"with space, comma"/"-5"`,
      ].sort(),
    )
  })

  it('sends pk_index in primary key order for a composite key', async () => {
    const res = await fetchShape({ table: tableParam, offset: '-1' })
    assert.equal(res.status, 200, res.text)
    assertSchema(schemaOf(res), columns)
  })

  it('columns with a space, a comma and a quote can be selected', async () => {
    const pick = ['code', 'id', 'has,comma', 'has"quote', 'has space']
    const subset = columns.filter((c) => pick.includes(c.name))
    const { value } = await syncShape({ table: tableParam, columns: pick })
    const expected = await expectedRows(table, subset, ['code', 'id'])
    assertRowsMatch(value, expected, subset, 'weird columns subset')
  })

  it('where on a quoted column with a param', async () => {
    const { value } = await syncShape({ table: tableParam, where: '"has space" = $1', params: ['x'] })
    const expected = await expectedRows(table, columns, ['code', 'id'], `WHERE "has space" = $1`, ['x'])
    assert.equal(expected.size, 2, 'fixture sanity')
    assertRowsMatch(value, expected, columns, 'where "has space" = $1')
  })
})
