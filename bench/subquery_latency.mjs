// bench/subquery_latency.mjs: the time from an inner-table commit to the rows it moves into a
// membership shape reaching a client, against a plain change's time to the same client, in the
// same run. Run by bench/subquery.sh, which starts the cluster and exports PGHOST/PGPORT/...
// and SHAPE_SYNC_URL.
//
// Tables lat_members (user_id, project_id) and lat_issues (id, project_id, v); one raw long-poll
// client (fetch, live=true loop) follows
//   lat_issues WHERE project_id IN (SELECT project_id FROM lat_members WHERE user_id = 1)
// Each sample, alternating the two kinds (one commit at a time; t0 just before COMMIT, t1 when
// the client has parsed the row's message):
//   plain    INSERT INTO lat_issues a row of project 1 (user 1 is a member): an insert;
//   move-in  INSERT INTO lat_members (1, p) for a project p that already has one issue: the
//            move-in event, then that issue as an is_move_in insert, read by its own query.
// Prints one JSON line: the medians and 90th percentiles of both, in ms.
//
// Knobs: SAMPLES (40 of each), WARMUP (5 of each, not measured).

import { createRequire } from 'node:module'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { setTimeout as sleep } from 'node:timers/promises'

const here = dirname(fileURLToPath(import.meta.url))
const require = createRequire(join(here, '..', 'test', 'package.json'))
const pg = require('pg')

const SAMPLES = Number(process.env.SAMPLES ?? 40)
const WARMUP = Number(process.env.WARMUP ?? 5)
const URL_BASE = `${process.env.SHAPE_SYNC_URL}/v1/shape`
const WHERE = 'project_id IN (SELECT project_id FROM lat_members WHERE user_id = $1)'

const db = new pg.Client()
await db.connect()
await db.query(`
  DROP TABLE IF EXISTS lat_issues, lat_members;
  CREATE TABLE lat_members (id serial PRIMARY KEY, user_id int, project_id int);
  CREATE TABLE lat_issues (id int PRIMARY KEY, project_id int, v text);
  ALTER TABLE lat_members REPLICA IDENTITY FULL;
  ALTER TABLE lat_issues REPLICA IDENTITY FULL;
  CREATE INDEX ON lat_members (user_id);
  INSERT INTO lat_members (user_id, project_id) VALUES (1, 1);
  INSERT INTO lat_issues VALUES (1, 1, 'first');`)
// one issue in each project a move-in will bring
const moves = WARMUP + SAMPLES
await db.query(`INSERT INTO lat_issues SELECT 1000000 + g, 1000 + g, 'moved' FROM generate_series(1, $1) g`, [moves])

const seen = new Map()	// row id -> arrival time (ms, performance.now())
let stop = false
async function follow() {
  const q = (o) => new URLSearchParams({ table: 'lat_issues', where: WHERE, 'params[1]': '1', ...o })
  let offset = '-1'
  let handle
  for (;;) {
    if (stop) return
    const live = offset !== '-1' && seen.upToDate
    const res = await fetch(`${URL_BASE}?${q({ offset, ...(handle ? { handle } : {}), ...(live ? { live: 'true' } : {}) })}`)
    const body = await res.json()
    const now = performance.now()
    if (res.status === 409) throw new Error('the shape was rotated: ' + JSON.stringify(body))
    if (res.status !== 200) throw new Error(`status ${res.status}: ${JSON.stringify(body)}`)
    handle = res.headers.get('electric-handle')
    offset = res.headers.get('electric-offset')
    for (const m of body) {
      if (m.value?.id != null && !seen.has(m.value.id)) seen.set(m.value.id, now)
      if (m.headers?.control === 'up-to-date') seen.upToDate = true
    }
  }
}
const following = follow()
while (!seen.upToDate) await sleep(5)

async function sample(kind, i) {
  const id = kind === 'plain' ? String(10 + i) : String(1000000 + i + 1)
  await db.query('BEGIN')
  if (kind === 'plain') await db.query('INSERT INTO lat_issues VALUES ($1, 1, $2)', [id, 'plain'])
  else await db.query('INSERT INTO lat_members (user_id, project_id) VALUES (1, $1)', [1000 + i + 1])
  const t0 = performance.now()
  await db.query('COMMIT')
  while (!seen.has(id)) await sleep(0.2)
  const t1 = seen.get(id)
  await sleep(Math.random() * 20)
  return t1 - t0
}

const results = { plain: [], 'move-in': [] }
for (let i = 0; i < moves; i++) {
  const order = i % 2 === 0 ? ['plain', 'move-in'] : ['move-in', 'plain']
  for (const kind of order) {
    const ms = await sample(kind, i)
    if (i >= WARMUP) results[kind].push(ms)
  }
}
stop = true
await db.query('INSERT INTO lat_issues VALUES (999999, 1, $1)', ['end'])	// ends the last long-poll
await following.catch(() => {})
await db.end()

const pct = (xs, p) => { const s = [...xs].sort((a, b) => a - b); return s[Math.min(s.length - 1, Math.floor(p * (s.length - 1) + 0.5))] }
console.log(JSON.stringify({
  samples: SAMPLES,
  plain: { median: pct(results.plain, 0.5), p90: pct(results.plain, 0.9) },
  move_in: { median: pct(results['move-in'], 0.5), p90: pct(results['move-in'], 0.9) },
}))
