// Observability: GET /metrics (Prometheus text, checked by promtool), the SQL views
// shape_sync.metrics, shape_sync.shapes and shape_sync.connections, and reset_metrics(),
// against traffic this file generates: N requests of each kind, a live wake-up, an SSE
// stream, errors, a rotation.  Requests are counted when they end, so each check reads
// after the requests it counts have been answered.
import { after, before, describe, test } from 'node:test'
import assert from 'node:assert/strict'
import { spawnSync } from 'node:child_process'
import {
  BASE_URL, closePool, createTable, dropTable, fetchRaw, fetchShape, query, uniqueTable,
} from '../lib/helpers.mjs'
import { waitFor } from '../lib/live_helpers.mjs'
import { metricTotal, parseMetrics, seriesKey } from '../lib/metrics.mjs'

async function scrape() {
  const res = await fetchRaw('/metrics')
  assert.equal(res.status, 200)
  let values
  assert.doesNotThrow(() => { values = parseMetrics(res.text) }, 'every line is of the text format')
  return { text: res.text, values, headers: res.headers }
}

// the same series from SQL: name{labels in the text format's order} -> value
async function sqlMetrics() {
  const { rows } = await query('SELECT name, labels, value FROM shape_sync.metrics')
  return new Map(rows.map((r) => [seriesKey(r.name, r.labels), Number(r.value)]))
}

const requests = (kind, status = '2xx', route = 'shape', method = 'GET') =>
  seriesKey('shape_sync_http_requests_total', { route, method, status, kind })
const counter = (values, name) => values.get(name) ?? 0
// every series of `name` whose labels include `labels`, summed
const total = metricTotal

describe('metrics and monitoring views', { timeout: 120000 }, () => {
  const table = uniqueTable('metrics')
  let handle
  let offset

  before(async () => {
    await query('CREATE EXTENSION IF NOT EXISTS shape_sync')
    await createTable(`CREATE TABLE ${table} (id int PRIMARY KEY, v text)`)
    await query(`INSERT INTO ${table} SELECT g, 'row ' || g FROM generate_series(1, 3) g`)
  })
  after(async () => {
    await dropTable(table)
    await closePool()
  })

  test('GET /metrics is valid Prometheus text (promtool check metrics)', async () => {
    await fetchRaw('/v1/health')
    const { text, headers } = await scrape()
    assert.equal(headers.get('content-type'), 'text/plain; version=0.0.4; charset=utf-8')
    assert.equal(headers.get('cache-control'), 'no-store')
    const check = spawnSync('promtool', ['check', 'metrics'], { input: text, encoding: 'utf8' })
    assert.equal(check.error, undefined, `promtool could not run: ${check.error}`)
    assert.equal(check.status, 0, `promtool: ${check.stdout}${check.stderr}`)
  })

  test('counters count the requests made, by kind, in /metrics and in SQL alike', async () => {
    await query('SELECT shape_sync.reset_metrics()')
    const zero = await scrape()
    assert.equal(counter(zero.values, requests('initial')), 0, 'reset_metrics() zeroes counters')
    assert.ok(zero.values.get('shape_sync_metrics_resets_total') >= 1)

    // 3 initial requests: the first makes the shape, its snapshot
    for (let i = 0; i < 3; i++) {
      const res = await fetchShape({ table, offset: '-1' })
      assert.equal(res.status, 200)
      handle = res.headers.get('electric-handle')
      offset = res.headers.get('electric-offset')
    }
    // 2 catch-up requests from the snapshot's end
    for (let i = 0; i < 2; i++) {
      const res = await fetchShape({ table, offset, handle })
      assert.equal(res.status, 200)
      offset = res.headers.get('electric-offset')
    }
    // 2 bad requests
    for (let i = 0; i < 2; i++) {
      const res = await fetchShape({ table, offset: 'not-an-offset', handle })
      assert.equal(res.status, 400)
    }

    // a live request parks: the views show it waiting, on its shape and its connection
    const live = fetchShape({ table, offset, handle, live: 'true' }, { timeoutMs: 30000 })
    await waitFor(async () => {
      const { rows } = await query(
        "SELECT count(*)::int AS n FROM shape_sync.connections WHERE state = 'waiting' AND handle = $1",
        [handle])
      return rows[0].n === 1
    }, { what: 'the live request shown waiting in shape_sync.connections' })
    const parked = await query('SELECT waiters FROM shape_sync.shapes WHERE handle = $1', [handle])
    assert.equal(parked.rows[0].waiters, 1)
    assert.equal((await scrape()).values.get('shape_sync_live_waiters'), 1)
    await query(`INSERT INTO ${table} VALUES (4, 'four')`)
    const woken = await live
    assert.equal(woken.status, 200)
    offset = woken.headers.get('electric-offset')

    // an SSE stream that ends once it has sent what was there (the insert)
    const sse = await fetchRaw(`/v1/shape?table=${table}&handle=${handle}&offset=0_0&live=true&live_sse=true`)
    assert.equal(sse.status, 200)

    const got = await scrape()
    const sql = await sqlMetrics()
    for (const values of [got.values, sql]) {
      assert.equal(counter(values, requests('initial')), 3)
      assert.equal(counter(values, requests('existing')), 2)
      assert.equal(total(values, 'shape_sync_http_requests_total', { route: 'shape', status: '4xx' }), 2)
      assert.equal(counter(values, requests('live')), 1)
      assert.equal(counter(values, requests('sse')), 1)
      assert.equal(counter(values, 'shape_sync_errors_total{kind="bad_request"}'), 2)
      assert.equal(counter(values, 'shape_sync_snapshots_started_total'), 1)
      assert.equal(counter(values, 'shape_sync_snapshot_rows_total'), 3)
      assert.equal(counter(values, 'shape_sync_snapshot_duration_seconds_count'), 1)
      assert.ok(counter(values, 'shape_sync_decoded_transactions_total') >= 1)
      assert.ok(counter(values, 'shape_sync_decoded_changes_total{op="insert"}') >= 1)
      assert.ok(counter(values, 'shape_sync_shape_changes_total') >= 1)
      assert.ok(counter(values, 'shape_sync_decoder_commit_lag_seconds_count') >= 1)
      assert.equal(counter(values, 'shape_sync_log_to_client_seconds_count{kind="live"}'), 1)
      assert.equal(counter(values, 'shape_sync_http_serve_duration_seconds_count{kind="initial"}'), 3)
      assert.ok(counter(values, 'shape_sync_http_response_body_bytes_total{kind="initial"}') > 3 * 3 * 30)
      assert.equal(values.get('shape_sync_live_waiters'), 0)
      assert.ok(values.get(seriesKey('shape_sync_shapes', { state: 'ready' })) >= 1)
      assert.ok(values.get('shape_sync_log_memory_free_bytes') <= values.get('shape_sync_log_memory_bytes'))
      assert.equal(values.get('shape_sync_admission_limit{kind="initial"}') > 0, true)
      assert.ok(values.get('shape_sync_slot_confirmed_flush_lag_bytes') >= 0)
    }
    // histograms: +Inf is the count, buckets never decrease
    const buckets = [...got.values].filter(([k]) =>
      k.startsWith('shape_sync_http_serve_duration_seconds_bucket{') && k.includes('kind="initial"'))
    for (let i = 1; i < buckets.length; i++) assert.ok(buckets[i][1] >= buckets[i - 1][1])
    assert.equal(buckets.at(-1)[1], 3)
  })

  test('shape_sync.shapes shows the columns, the last offset, the changes and the readers', async () => {
    const { rows } = await query('SELECT * FROM shape_sync.shapes WHERE handle = $1', [handle])
    assert.equal(rows.length, 1)
    const s = rows[0]
    assert.equal(s.columns, 'id,v')
    assert.equal(s.last_offset, offset)
    assert.equal(Number(s.changes), 1)
    assert.equal(s.waiters, 0)
    assert.equal(s.readers, 0)
    assert.ok(Number(s.log_bytes) > 0)
  })

  test('a truncate rotates the shape, counted by cause', async () => {
    const before = counter((await scrape()).values, 'shape_sync_shape_rotations_total{cause="truncated"}')
    await query(`TRUNCATE ${table}`)
    await waitFor(async () => {
      const res = await fetchShape({ table, offset, handle })
      return res.status === 409
    }, { what: 'the truncated shape answered 409', timeoutMs: 30000 })
    const values = (await scrape()).values
    assert.equal(counter(values, 'shape_sync_shape_rotations_total{cause="truncated"}'), before + 1)
    assert.ok(counter(values, 'shape_sync_decoded_changes_total{op="truncate"}') >= 1)
    assert.ok(counter(values, requests('existing', '4xx')) >= 1)	// the 409
    assert.ok(counter(values, 'shape_sync_errors_total{kind="must_refetch"}') >= 1)
  })

  test('shape_sync.connections lists open connections with their bytes', async () => {
    const { rows } = await query(
      "SELECT peer, state, bytes_sent, connected_at <= now() AS past, write_age FROM shape_sync.connections")
    for (const r of rows) {
      assert.match(r.peer, /^(127\.0\.0\.1|\[::1\]):\d+$/)
      assert.ok(['idle', 'resolving', 'snapshot', 'waiting', 'streaming', 'sse'].includes(r.state))
      assert.ok(Number(r.bytes_sent) >= 0)
      assert.equal(r.past, true)
    }
  })

  test('HEAD /metrics answers the headers of GET without the body', async () => {
    const get = await fetchRaw('/metrics')
    const head = await fetchRaw('/metrics', { method: 'HEAD' })
    assert.equal(head.status, 200)
    assert.equal(head.text, '')
    assert.equal(head.headers.get('content-type'), get.headers.get('content-type'))
    assert.equal(head.headers.get('cache-control'), 'no-store')
  })

  test('/metrics asks for the secret when one is set', async () => {
    const sql = (s) => query(s)
    await sql("ALTER SYSTEM SET shape_sync.secret = 'metrics-test-secret'")
    await sql('SELECT pg_reload_conf()')
    try {
      await waitFor(async () => (await fetchRaw('/metrics')).status === 401,
        { what: '/metrics refused without the secret' })
      assert.equal((await fetchRaw('/metrics', { method: 'HEAD' })).status, 401, 'HEAD too')
      const ok = await fetchRaw('/metrics?secret=metrics-test-secret')
      assert.equal(ok.status, 200)
      assert.match(ok.text, /^# HELP shape_sync_/)
    } finally {
      await sql('ALTER SYSTEM RESET shape_sync.secret')
      await sql('SELECT pg_reload_conf()')
      await waitFor(async () => (await fetchRaw('/metrics')).status === 200, { what: 'secret reset' })
    }
  })
})
