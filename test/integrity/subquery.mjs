// test/integrity/subquery.mjs: seeded randomized integrity test of shapes with subqueries in
// their where clauses (issue 27).
//
// Run through test/integration/integrity_subquery.sh, which starts a throwaway cluster (a short
// long-poll timeout, small chunks) and exports PGHOST/PGPORT/PGUSER/PGDATABASE and SHAPE_SYNC_URL.
// By hand, against a running cluster: `cd test && SEED=1 node integrity/subquery.mjs`.
//
// Schema (dropped and made again at the start):
//   projects(id PK, name, archived bool)
//   memberships(id PK, user_id, project_id REFERENCES projects ON DELETE CASCADE, level int)
//   issues(id PK, project_id REFERENCES projects ON DELETE CASCADE, title, prio int)
//   all REPLICA IDENTITY FULL; sq_marker (no shape reads it) for the commits that mark the end of
//   a write burst.
//
// Shapes on issues (one raw long-poll client each, see SHAPES below): `project_id IN (SELECT
// project_id FROM memberships WHERE user_id = $1)` for users 1, 2 and 3; the same OR `prio > 8`
// (user 4); `project_id NOT IN (...)` (user 1: the same inner select as an IN shape's);
// `prio < 5 AND project_id IN (...)` (user 2); the row form `(project_id, prio) IN (SELECT
// project_id, level FROM memberships)`; and two subqueries OR-ed, `project_id IN (... user 3)
// OR project_id IN (SELECT id FROM projects WHERE archived)`; and nested subqueries: through
// projects to memberships (user 2), three levels (the issues of unarchived projects that share a
// member with project 1), and `id NOT IN (memberships of user 3)` one level down.
//
// Writers: WRITERS concurrent pg connections, each with a PRNG of its own drawn from SEED, run
// random transactions of 1-4 operations on all three tables: inserts, updates (prio, title,
// moves between projects, primary-key changes, several rows at once, no-op updates) and
// deletes of issues; memberships added, removed, moved to another project, given to another
// user, duplicated (one value held by two rows), added and removed in one transaction, removed
// and added again in one transaction, set to NULL (rarely: a NOT IN subquery with a NULL);
// projects added (with members and issues), deleted (ON DELETE CASCADE), archived and back;
// multi-statement transactions that touch the inner and outer tables together (join a project
// and file an issue in it; leave a project and edit its issues; move a membership and the
// issues along; edit an issue, then leave its project), savepoints rolled back, transactions
// rolled back.
//
// Rounds: a write burst of 2-5 s (drawn from SEED), then the writers pause, a commit on
// sq_marker marks the end, and every client must reach an up-to-date whose
// global_last_seen_lsn is at or past pg_current_wal_lsn() of before that commit; its rows must
// then equal PostgreSQL's SELECT of the same where clause (values as text). A client that is
// caught up with rows that differ, and has received no data for 3 s, is a DIVERGENCE: the seed,
// the shape, the differing keys, the last messages that touched each and the writers'
// transactions that touched them are printed, and that client starts over from offset -1 (so
// that later rounds judge it afresh). A client not caught up within CONVERGE_TIMEOUT is a
// SERVER failure. Clients that are equal also have their rows' active_conditions compared
// with PostgreSQL's own evaluation of each DNF position (COALESCE(literal, false), the literal
// negated for NOT IN: what the client's move events act upon).
//
// The clients apply messages as @tanstack/electric-db-collection does (docs/subqueries.md):
// inserts/updates/deletes by key (an update's value merged into the row; an insert of a present
// key is an update), per row a set of tags, a tag index by position and hash, and
// active_conditions (replaced by each insert/update); `removed_tags` leave the set; a move-out
// sets active_conditions[pos] = false on the rows whose tag holds the hash at slot pos, and
// deletes a row that no disjunct keeps (DNF mode); a move-in sets it to true on such rows (the
// rows that entered come as the inserts that follow). A 409 makes the client start over from
// offset -1 without a handle. Protocol anomalies are counted by kind and are a SERVER failure
// of their own check: a row message without tags/active_conditions, tags that do not have the
// shape's DNF layout ("" for positions of other disjuncts, "1" for plain conditions, an md5 hex
// for subqueries), one value with two hashes (or one hash for two values) within a handle, an
// update without removed_tags, tags that stay on a row after an update that changed them, a
// row sent with active_conditions that keep no disjunct, an update or delete of a key the
// client does not have, an insert of a present key that is not a move-in.
//
// A value that enters a subquery's result may rotate the shape (409 must-refetch: a move-in
// while an earlier one is read, or a NOT IN subquery that gains or loses a NULL or becomes
// empty): such shapes must still converge. INTEGRITY_SUBQUERY_NO_REFETCH=1 makes any 409 a failure (for when every move is
// sent as events). Move-outs, move-ins and 409s are counted and printed per client.
//
// After each round the shape_sync worker's PID is compared with the one before: another PID
// (a crash: PostgreSQL restarts the instance) is a SERVER failure; the rounds go on (the
// clients get 409s and must converge again), and the writers' lost connections count as its
// consequence. integrity_subquery.sh also checks the server log for crashes.
//
// Output: `ok - ...` / `not ok - ...` lines (integrity_subquery.sh numbers them) and `# `
// lines; the exit status is 1 when any check failed.
//
// Steps: after the bursts, STEPS transactions of the same kinds, one at a time (the writers
// in turn), each followed by a quiescent point as above: every shape equals its SELECT after
// each transaction, and a divergence names the one transaction that made it.
//
// Knobs: SEED (default random, printed), DURATION (s of write bursts, default 45; 12 in
// integrity_subquery.sh), STEPS (default 100; 30 in integrity_subquery.sh), WRITERS
// (default 3), CONVERGE_TIMEOUT (s, default 60), VERBOSE=1, INTEGRITY_SUBQUERY_NO_REFETCH=1,
// INTEGRITY_SUBQUERY_SHAPES=in_u1,notin_u1 (only the shapes named), INTEGRITY_SUBQUERY_SIMPLE=1 (one
// operation on one table per transaction: no statement pairs across tables, no savepoints).

import { setTimeout as sleep } from 'node:timers/promises'
import { createRequire } from 'node:module'
import { prng } from '../lib/live_helpers.mjs'
import { SHAPE_URL, pool, closePool } from '../lib/helpers.mjs'

const pg = createRequire(new URL('../package.json', import.meta.url))('pg')
// an idle connection lost while PostgreSQL restarts: a comment line (a crash is judged by itself)
pool.removeAllListeners('error')
pool.on('error', (e) => console.log(`# pg pool: an idle connection failed: ${e.message}`))

// ---------------------------------------------------------------------------------------------
// configuration

const env = process.env
const SEED = env.SEED !== undefined && env.SEED !== '' ? Number(env.SEED) >>> 0 : (Math.random() * 2 ** 32) >>> 0
const DURATION_S = Number(env.DURATION ?? 45)
// then STEPS transactions one at a time, every shape checked against its SELECT after each
const STEPS = Number(env.STEPS ?? 100)
const WRITERS = Number(env.WRITERS ?? 3)
const CONVERGE_TIMEOUT_MS = Number(env.CONVERGE_TIMEOUT ?? 60) * 1000
const VERBOSE = env.VERBOSE === '1'
const NO_REFETCH = env.INTEGRITY_SUBQUERY_NO_REFETCH === '1'
// one statement (or one operation on one table) per transaction: tells a failure of transactions
// that touch the inner and outer tables together from others
const SIMPLE = env.INTEGRITY_SUBQUERY_SIMPLE === '1'
const STABLE_MS = 3000 // a caught-up client that differs and got no data for this long diverged
const USERS = 6

const T0 = Date.now()
const ts = () => ((Date.now() - T0) / 1000).toFixed(1)
const log = (s) => console.log(`# ${s}`)
const vlog = (s) => VERBOSE && console.log(`#   [${ts()}s] ${s}`)
let failures = 0
function ok(cond, what, detail = '', cls = '') {
  if (cond) console.log(`ok - ${what}`)
  else {
    failures++
    console.log(`not ok - ${cls ? `[${cls}] ` : ''}${what} (seed ${SEED})`)
    if (detail) for (const l of String(detail).split('\n')) console.log(`#   ${l}`)
  }
}
const short = (v, n = 240) => {
  const s = typeof v === 'string' ? v : JSON.stringify(v)
  return s.length > n ? `${s.slice(0, n)}...(${s.length} chars)` : s
}
// pool.query, tried again while PostgreSQL restarts (after a crash of the worker) for 60 s
async function q(text, values) {
  for (let i = 0; ; i++) {
    try {
      return await pool.query(text, values)
    } catch (e) {
      if ((e.severity && !/^(08|57)/.test(e.code ?? '')) || i >= 120) throw e
      await sleep(500)
    }
  }
}
const lit = (v) => (v === null ? 'NULL' : typeof v === 'number' ? String(v) : `'${String(v).replace(/'/g, "''")}'`)

// ---------------------------------------------------------------------------------------------
// shapes

const IN_USER = 'project_id IN (SELECT project_id FROM memberships WHERE user_id = $1)'
const ARCHIVED = 'project_id IN (SELECT id FROM projects WHERE archived)'
const ROW_LEVEL = '(project_id, prio) IN (SELECT project_id, level FROM memberships)'
// nested subqueries: two levels (the same rows as IN_USER, through projects), three levels (the
// issues of unarchived projects that share a member with project $1), NOT IN one level down
const NESTED = 'project_id IN (SELECT id FROM projects WHERE id IN (SELECT project_id FROM memberships WHERE user_id = $1))'
const CO_MEMBERS = 'project_id IN (SELECT id FROM projects WHERE NOT archived AND id IN (SELECT project_id FROM memberships WHERE user_id IN (SELECT user_id FROM memberships WHERE project_id = $1)))'
const NOT_MEMBER = 'project_id IN (SELECT id FROM projects WHERE id NOT IN (SELECT project_id FROM memberships WHERE user_id = $1))'
// positions: the DNF literals in order, each with its SQL without negation and, for subqueries,
// the outer columns its tag slot hashes; dnf: the positions of each disjunct
const sub = (sql, cols = ['project_id'], negated = false) => ({ sql, sub: cols, negated })
const plain = (sql) => ({ sql, sub: null, negated: false })
const SHAPES = [
  { name: 'in_u1', where: IN_USER, params: ['1'], positions: [sub(IN_USER)], dnf: [[0]] },
  { name: 'in_u2', where: IN_USER, params: ['2'], positions: [sub(IN_USER)], dnf: [[0]] },
  { name: 'in_u3', where: IN_USER, params: ['3'], positions: [sub(IN_USER)], dnf: [[0]] },
  { name: 'or_prio_u4', where: `${IN_USER} OR prio > 8`, params: ['4'], positions: [sub(IN_USER), plain('prio > 8')], dnf: [[0], [1]] },
  { name: 'notin_u1', where: IN_USER.replace(' IN ', ' NOT IN '), params: ['1'], positions: [sub(IN_USER, ['project_id'], true)], dnf: [[0]] },
  { name: 'and_prio_u2', where: `prio < 5 AND ${IN_USER}`, params: ['2'], positions: [plain('prio < 5'), sub(IN_USER)], dnf: [[0, 1]] },
  { name: 'row_level', where: ROW_LEVEL, params: [], positions: [sub(ROW_LEVEL, ['project_id', 'prio'])], dnf: [[0]] },
  { name: 'or_archived_u3', where: `${IN_USER} OR ${ARCHIVED}`, params: ['3'], positions: [sub(IN_USER), sub(ARCHIVED)], dnf: [[0], [1]] },
  { name: 'nested_u2', where: NESTED, params: ['2'], positions: [sub(NESTED)], dnf: [[0]] },
  { name: 'co_members_p1', where: CO_MEMBERS, params: ['1'], positions: [sub(CO_MEMBERS)], dnf: [[0]] },
  { name: 'nested_notin_u3', where: NOT_MEMBER, params: ['3'], positions: [sub(NOT_MEMBER)], dnf: [[0]] },
]
// INTEGRITY_SUBQUERY_SHAPES=name,name: only these shapes (to narrow a failure down)
if (env.INTEGRITY_SUBQUERY_SHAPES) {
  const want = env.INTEGRITY_SUBQUERY_SHAPES.split(',')
  for (let i = SHAPES.length - 1; i >= 0; i--) if (!want.includes(SHAPES[i].name)) SHAPES.splice(i, 1)
}
const shapeDesc = (s) => `${s.name} (where ${s.where}${s.params.length ? `, params ${JSON.stringify(s.params)}` : ''})`
const issueKey = (id) => `"public"."issues"/"${id}"`

// PostgreSQL's rows of a shape, values as text, with the active_conditions it should hold
async function expectedRows(shape) {
  // a position is active when its literal, with its polarity, is true (NULL is not active)
  const ac = shape.positions.map((p) => (p.negated ? `COALESCE(NOT (${p.sql}), false)` : `COALESCE((${p.sql}), false)`))
  const res = await q(
    `SELECT id::text AS id, project_id::text AS project_id, title, prio::text AS prio, ARRAY[${ac.join(', ')}]::bool[] AS ac
       FROM issues WHERE ${shape.where}`, shape.params)
  const rows = new Map()
  const acs = new Map()
  for (const r of res.rows) {
    const k = issueKey(r.id)
    rows.set(k, { id: r.id, project_id: r.project_id, title: r.title, prio: r.prio })
    acs.set(k, r.ac)
  }
  return { rows, acs }
}

const rowText = (r) => (r ? JSON.stringify(Object.fromEntries(Object.keys(r).sort().map((k) => [k, r[k]]))) : 'absent')

// ---------------------------------------------------------------------------------------------
// the raw client

class Client {
  constructor(shape) {
    this.shape = shape
    this.label = shape.name
    this.stats = { requests: 0, status: {}, netErrors: 0, changes: 0, moveOuts: 0, moveIns: 0, rowsMovedOut: 0,
      moveInFlips: 0, moveInRows: 0, snapshotEnds: 0, upToDates: 0, r409: 0, harnessRestarts: 0, eventsIgnored: 0 }
    this.anomalies = new Map() // kind -> { n, first: [] }
    this.history = new Map() // key -> last messages that touched it
    this.recent = [] // the last messages of any kind
    this.conflicts = [] // [t, handle] of each 409
    this.stopped = false
    this.restartWanted = false
    this.reqAc = null
    this.lastDataAt = Date.now()
    this.reset()
  }
  reset() {
    this.rows = new Map()
    this.tagsOf = new Map() // key -> Set of tags
    this.acOf = new Map() // key -> active_conditions
    this.index = [] // pos -> Map hash -> Set of keys
    this.tagLength = undefined
    this.dp = undefined // each disjunct's positions, from the first tags
    this.hashes = new Map() // pos -> { v2h, h2v }
    this.handle = null
    this.offset = '-1'
    this.cursor = ''
    this.live = false
    this.upToDate = false
    this.utdLsn = 0n
  }
  anomaly(kind, msg) {
    let a = this.anomalies.get(kind)
    if (!a) this.anomalies.set(kind, (a = { n: 0, first: [] }))
    a.n++
    if (a.first.length < 3) a.first.push(`[${ts()}s] ${msg}`)
    vlog(`${this.label} ANOMALY ${kind}: ${msg}`)
  }
  note(keys, text) {
    const line = `[${ts()}s] ${this.handle ?? '-'}@${this.reqOffset ?? '?'}: ${text}`
    for (const k of keys) {
      let h = this.history.get(k)
      if (!h) this.history.set(k, (h = []))
      h.push(line)
      if (h.length > 8) h.shift()
    }
    this.recent.push(line)
    if (this.recent.length > 30) this.recent.shift()
  }
  start() {
    this.done = this.#loop()
    return this
  }
  restart() {
    this.restartWanted = true
    this.reqAc?.abort()
  }
  async stop() {
    this.stopped = true
    this.reqAc?.abort()
    await this.done.catch(() => {})
  }
  caughtUp(lsn) {
    return this.upToDate && this.utdLsn >= lsn
  }
  async #loop() {
    while (!this.stopped) {
      if (this.restartWanted) {
        this.restartWanted = false
        this.stats.harnessRestarts++
        this.reset()
      }
      const q = new URLSearchParams({ table: 'issues', where: this.shape.where })
      this.shape.params.forEach((p, i) => q.set(`params[${i + 1}]`, p))
      q.set('offset', this.offset)
      if (this.handle) q.set('handle', this.handle)
      if (this.live) {
        q.set('live', 'true')
        q.set('cursor', this.cursor)
      }
      const url = `${SHAPE_URL}?${q}`
      this.reqAc = new AbortController()
      let res
      let text
      this.stats.requests++
      try {
        res = await fetch(url, { signal: AbortSignal.any([this.reqAc.signal, AbortSignal.timeout(30000)]) })
        text = await res.text()
      } catch (e) {
        if (this.stopped) return
        if (this.restartWanted) continue
        this.stats.netErrors++
        if (e?.name === 'TimeoutError') this.anomaly('slow request', `request took over 30 s: ${url}`)
        await sleep(200)
        continue
      }
      if (this.restartWanted) continue
      this.stats.status[res.status] = (this.stats.status[res.status] ?? 0) + 1
      if (res.status === 409) {
        let body
        try {
          body = JSON.parse(text)
        } catch {}
        if (!Array.isArray(body) || body[0]?.headers?.control !== 'must-refetch') this.anomaly('409 body', `409 body is not [must-refetch]: ${short(text)}`)
        this.stats.r409++
        this.conflicts.push([ts(), this.handle])
        this.reqOffset = this.offset
        this.note([], `409 must-refetch (new handle ${res.headers.get('electric-handle')})`)
        this.lastDataAt = Date.now()
        this.reset()
        continue
      }
      if (res.status >= 500 || res.status === 429) {
        await sleep(200)
        continue
      }
      if (res.status !== 200) {
        this.anomaly(`HTTP ${res.status}`, `${url}: ${short(text, 400)}`)
        await sleep(1000)
        continue
      }
      this.#handle200(url, res, text)
    }
  }
  #handle200(url, res, text) {
    const h = res.headers
    const handle = h.get('electric-handle')
    const offset = h.get('electric-offset')
    if (!handle || !offset) this.anomaly('headers', `200 without electric-handle/electric-offset: ${url}`)
    if (this.handle && handle && handle !== this.handle && this.offset !== '-1')
      this.anomaly('handle', `200 for handle ${this.handle} carries electric-handle ${handle} (no 409)`)
    if (handle) this.handle = handle
    this.reqOffset = this.offset
    let body
    try {
      body = text === '' ? [] : JSON.parse(text)
    } catch (e) {
      this.anomaly('body', `body is not JSON (${e.message}): ${short(text)}`)
      return
    }
    if (!Array.isArray(body)) {
      this.anomaly('body', `body is not an array: ${short(text)}`)
      return
    }
    let utd = null
    for (const msg of body) {
      const hd = msg?.headers ?? {}
      if (msg && typeof msg === 'object' && 'key' in msg) {
        this.stats.changes++
        this.lastDataAt = Date.now()
        this.#applyChange(msg)
      } else if (hd.event === 'move-out' || hd.event === 'move-in') {
        this.lastDataAt = Date.now()
        this.#applyEvent(msg)
      } else if (hd.control === 'up-to-date') {
        this.stats.upToDates++
        const g = hd.global_last_seen_lsn
        if (typeof g !== 'string' || !/^\d+$/.test(g)) this.anomaly('up-to-date', `global_last_seen_lsn is not a decimal string: ${short(msg)}`)
        else utd = BigInt(g)
      } else if (hd.control === 'snapshot-end') {
        this.stats.snapshotEnds++
      } else {
        this.anomaly('unexpected message', short(msg))
      }
    }
    if (offset) this.offset = offset
    if (h.get('electric-cursor')) this.cursor = h.get('electric-cursor')
    if (utd !== null) {
      this.live = true
      this.upToDate = true
      this.utdLsn = utd
    }
  }
  // the tag layout this shape's DNF plan gives; and the hash of each value, one per handle
  #checkTags(tags, ac, row, what) {
    const { positions, dnf } = this.shape
    if (!Array.isArray(tags) || !Array.isArray(ac)) {
      this.anomaly('no tags', `row message without tags/active_conditions: ${what}`)
      return
    }
    if (tags.length !== dnf.length) this.anomaly('tag layout', `${tags.length} tags, the DNF has ${dnf.length} disjuncts: ${what}`)
    if (ac.length !== positions.length || ac.some((b) => typeof b !== 'boolean'))
      this.anomaly('tag layout', `active_conditions ${JSON.stringify(ac)} for ${positions.length} positions: ${what}`)
    tags.forEach((tag, d) => {
      const slots = String(tag).split('/')
      if (slots.length !== positions.length) {
        this.anomaly('tag layout', `tag ${JSON.stringify(tag)} has ${slots.length} slots, not ${positions.length}: ${what}`)
        return
      }
      slots.forEach((slot, p) => {
        if (!dnf[d]?.includes(p)) {
          if (slot !== '') this.anomaly('tag layout', `tag ${d} slot ${p} (not in the disjunct) is ${JSON.stringify(slot)}: ${what}`)
        } else if (!positions[p].sub) {
          if (slot !== '1') this.anomaly('tag layout', `tag ${d} slot ${p} (a plain condition) is ${JSON.stringify(slot)}: ${what}`)
        } else if (!/^[0-9a-f]{32}$/.test(slot)) {
          this.anomaly('tag layout', `tag ${d} slot ${p} (a subquery) is ${JSON.stringify(slot)}: ${what}`)
        } else if (row) {
          const nv = JSON.stringify(positions[p].sub.map((c) => row[c] ?? null))
          let m = this.hashes.get(p)
          if (!m) this.hashes.set(p, (m = { v2h: new Map(), h2v: new Map() }))
          const h = m.v2h.get(nv)
          const v = m.h2v.get(slot)
          if (h !== undefined && h !== slot) this.anomaly('hash', `value ${nv} at position ${p} hashes to ${slot}, earlier ${h} (handle ${this.handle}): ${what}`)
          if (v !== undefined && v !== nv) this.anomaly('hash', `hash ${slot} at position ${p} for value ${nv}, earlier for ${v} (handle ${this.handle}): ${what}`)
          m.v2h.set(nv, slot)
          m.h2v.set(slot, nv)
        }
      })
    })
  }
  #indexTag(tag, key, add) {
    String(tag).split('/').forEach((slot, p) => {
      if (slot === '') return
      let m = this.index[p]
      if (!m) this.index[p] = m = new Map()
      let s = m.get(slot)
      if (add) {
        if (!s) m.set(slot, (s = new Set()))
        s.add(key)
      } else if (s) {
        s.delete(key)
        if (!s.size) m.delete(slot)
      }
    })
  }
  #clearTags(key) {
    for (const t of this.tagsOf.get(key) ?? []) this.#indexTag(t, key, false)
    this.tagsOf.delete(key)
    this.acOf.delete(key)
  }
  #visible(ac) {
    return this.dp.some((ps) => ps.every((p) => ac[p] === true))
  }
  #applyChange(msg) {
    const hd = msg.headers ?? {}
    const op = hd.operation
    const key = msg.key
    const value = msg.value ?? {}
    const what = `${op} ${key} ${short(msg, 400)}`
    this.note([key], short(msg, 600))
    if (op === 'delete') {
      if (!this.rows.has(key)) this.anomaly('delete of absent key', what)
      this.#clearTags(key)
      this.rows.delete(key)
      return
    }
    if (op !== 'insert' && op !== 'update') {
      this.anomaly('operation', what)
      return
    }
    const prev = this.rows.get(key)
    const row = { ...(prev ?? {}), ...value }
    const tags = hd.tags
    const removed = hd.removed_tags
    const ac = hd.active_conditions
    this.#checkTags(tags, ac, row, what)
    if (op === 'update' && !Array.isArray(removed)) this.anomaly('no removed_tags', what)
    if (hd.is_move_in === true) this.stats.moveInRows++
    // as electric-db-collection: the disjuncts' positions from the first tags, then add the
    // tags, drop removed_tags, replace active_conditions
    if (Array.isArray(tags) && tags.length) {
      if (this.tagLength === undefined) {
        this.tagLength = String(tags[0]).split('/').length
        this.dp = tags.map((t) => String(t).split('/').flatMap((s, i) => (s === '' ? [] : [i])))
      }
      let set = this.tagsOf.get(key)
      if (!set) this.tagsOf.set(key, (set = new Set()))
      for (const t of tags) {
        if (String(t).split('/').length !== this.tagLength) continue
        set.add(t)
        this.#indexTag(t, key, true)
      }
    }
    if (Array.isArray(removed))
      for (const t of removed) {
        this.tagsOf.get(key)?.delete(t)
        this.#indexTag(t, key, false)
      }
    if (Array.isArray(ac) && ac.length) this.acOf.set(key, [...ac])
    if (Array.isArray(tags) && op === 'update') {
      const have = [...(this.tagsOf.get(key) ?? [])].sort().join(' ')
      if (have !== [...new Set(tags)].sort().join(' '))
        this.anomaly('stale tags', `after the update the row holds tags [${have}], the update's tags are ${JSON.stringify(tags)} (removed_tags ${JSON.stringify(removed)}): ${what}`)
    }
    if (Array.isArray(ac) && this.dp && !this.#visible(ac)) this.anomaly('invisible row', `active_conditions keep no disjunct: ${what}`)
    if (op === 'insert') {
      if (prev && hd.is_move_in !== true) this.anomaly('insert of present key', what)
    } else if (!prev) {
      this.anomaly('update of absent key', what)
    }
    this.rows.set(key, row)
  }
  #applyEvent(msg) {
    const hd = msg.headers
    const out = hd.event === 'move-out'
    if (out) this.stats.moveOuts++
    else this.stats.moveIns++
    if (!Array.isArray(hd.patterns) || hd.patterns.some((p) => typeof p?.pos !== 'number' || typeof p?.value !== 'string'))
      this.anomaly('event', `patterns: ${short(msg)}`)
    if (!Array.isArray(hd.txids)) this.anomaly('event', `no txids: ${short(msg)}`)
    this.note([], short(msg, 600))
    if (this.tagLength === undefined) {
      this.stats.eventsIgnored++
      return
    }
    for (const { pos, value } of hd.patterns ?? []) {
      const keys = [...(this.index[pos]?.get(value) ?? [])]
      for (const key of keys) {
        const ac = this.acOf.get(key)
        if (ac && this.dp) {
          ac[pos] = !out
          if (out && !this.#visible(ac)) {
            this.#clearTags(key)
            this.rows.delete(key)
            this.stats.rowsMovedOut++
            this.note([key], `${hd.event} pos ${pos} ${value} (txids ${JSON.stringify(hd.txids)}): row deleted`)
          } else {
            if (!out) this.stats.moveInFlips++
            this.note([key], `${hd.event} pos ${pos} ${value} (txids ${JSON.stringify(hd.txids)}): active_conditions now ${JSON.stringify(ac)}`)
          }
        } else if (out) {
          // legacy mode: drop the tags that hold the value at pos
          const set = this.tagsOf.get(key)
          for (const t of [...(set ?? [])])
            if (String(t).split('/')[pos] === value) {
              set.delete(t)
              this.#indexTag(t, key, false)
            }
          if (!set?.size) {
            this.#clearTags(key)
            this.rows.delete(key)
            this.stats.rowsMovedOut++
            this.note([key], `${hd.event} pos ${pos} ${value} (legacy mode): row deleted`)
          }
        }
      }
    }
  }
  counts() {
    const s = this.stats
    return `move-outs ${s.moveOuts} (rows deleted by them ${s.rowsMovedOut}), move-ins ${s.moveIns} (rows flipped ${s.moveInFlips}, is_move_in rows ${s.moveInRows}), 409s ${s.r409}, ` +
      `requests ${s.requests} ${JSON.stringify(s.status)}, changes ${s.changes}, snapshot-ends ${s.snapshotEnds}, net errors ${s.netErrors}` +
      (s.eventsIgnored ? `, events before any tagged row ${s.eventsIgnored}` : '') + (s.harnessRestarts ? `, restarts after a divergence ${s.harnessRestarts}` : '')
  }
}

// ---------------------------------------------------------------------------------------------
// the data and the writers

const TITLES = ['alpha', 'beta', 'γάμμα', '😀 emoji', "it's", 'back\\slash', 'a/b', '"quoted"', '', 'x'.repeat(300)]

// What the writers believe exists (refreshed from the database before each burst; their own
// writes update it as they go; other writers' cascades make it stale, which costs no-ops and
// foreign-key errors only).
const world = { projects: [], memberships: new Map(), issues: [] }
async function refreshWorld() {
  world.projects = (await q('SELECT id FROM projects ORDER BY id')).rows.map((r) => r.id)
  world.memberships = new Map((await q('SELECT id, user_id, project_id FROM memberships ORDER BY id')).rows.map((r) => [r.id, { u: r.user_id, p: r.project_id }]))
  world.issues = (await q('SELECT id FROM issues ORDER BY id')).rows.map((r) => r.id)
}
const removeFrom = (arr, v) => {
  const i = arr.indexOf(v)
  if (i >= 0) arr.splice(i, 1)
}

const EXPECTED_CODES = {
  '23503': 'foreign key (a project deleted meanwhile)',
  '40P01': 'deadlock',
  '55P03': 'lock timeout',
  '23505': 'duplicate key',
}

const txlog = [] // { round, w, xid, t, status, sql: [], issues: Set, projects: Set }

class Writer {
  constructor(id) {
    this.id = id
    this.r = prng((SEED ^ Math.imul(id + 1, 0x9e3779b1)) >>> 0)
    this.n = 0
    this.stats = { commits: 0, rollbacks: 0, errors: {}, unexpected: [], connection: [] }
  }
  async connect() {
    const db = new pg.Client()
    db.on('error', () => {})
    await db.connect()
    await db.query("SET lock_timeout = '3s'")
    this.db = db
  }
  // after a connection error: a new connection, or none yet (the next transaction tries again)
  async reconnect() {
    const old = this.db
    this.db = null
    this.stats.reconnects = (this.stats.reconnects ?? 0) + 1
    await old?.end().catch(() => {})
    await this.connect().catch(() => sleep(500))
  }
  nid(base) {
    return base + (this.id + 1) * 1000000 + ++this.n
  }
  pick(arr) {
    return arr.length ? arr[Math.floor(this.r() * arr.length)] : 1
  }
  int(n) {
    return Math.floor(this.r() * n)
  }
  user() {
    return 1 + this.int(USERS)
  }
  project() {
    return this.r() < 0.04 ? 1 + this.int(400) : this.pick(world.projects) // sometimes one that may be gone
  }
  membership() {
    const ids = [...world.memberships.keys()]
    const id = this.pick(ids)
    return { id, ...(world.memberships.get(id) ?? { u: 1, p: 1 }) }
  }
  title() {
    return this.pick(TITLES)
  }
  // one operation: its statements, and what it touches
  op(tx) {
    const r = this.r
    const s = (sql) => tx.sql.push(sql)
    const I = (id) => tx.issues.add(String(id))
    const P = (p) => p !== null && p !== undefined && tx.projects.add(String(p))
    const kinds = [
      ['issue_insert', 10], ['issue_prio', 9], ['issue_title', 4], ['issue_move', 8], ['issue_move_prio', 3], ['issue_delete', 5],
      ['issue_pk', 1], ['issue_bulk', 2], ['issue_noop', 1],
      ['memb_insert', 6], ['memb_delete', 5], ['memb_move', 5], ['memb_user', 3], ['memb_level', 3], ['memb_flash', 3],
      ['memb_swap', 2], ['memb_dupe', 2], ['memb_null', 0.4],
      ['proj_insert', 1.5], ['proj_delete', 1], ['proj_archive', 3], ['proj_rename', 1],
      ['combo_join', 3], ['combo_leave', 3], ['combo_move_both', 2], ['combo_edit_then_leave', 2], ['combo_archive_move', 1.5],
    ]
    if (SIMPLE) for (const k of kinds) if (k[0].startsWith('combo_')) k[1] = 0
    let x = r() * kinds.reduce((a, [, w]) => a + w, 0)
    let kind = kinds[0][0]
    for (const [k, w] of kinds) {
      if ((x -= w) < 0) {
        kind = k
        break
      }
    }
    if (kind === 'proj_delete' && world.projects.length < 7) kind = 'proj_insert'
    if (kind === 'issue_delete' && world.issues.length < 60) kind = 'issue_insert'
    if (kind.startsWith('memb_') && kind !== 'memb_insert' && kind !== 'memb_flash' && world.memberships.size < 8) kind = 'memb_insert'
    tx.kinds.push(kind)
    const issue = () => this.pick(world.issues)
    switch (kind) {
      case 'issue_insert': {
        const id = this.nid(0)
        const p = r() < 0.05 ? null : this.project()
        s(`INSERT INTO issues VALUES (${id}, ${lit(p)}, ${lit(this.title())}, ${this.int(10)})`)
        world.issues.push(id), I(id), P(p)
        break
      }
      case 'issue_prio': { const i = issue(); s(`UPDATE issues SET prio = ${this.int(10)} WHERE id = ${i}`), I(i); break }
      case 'issue_title': { const i = issue(); s(`UPDATE issues SET title = ${lit(this.title())} WHERE id = ${i}`), I(i); break }
      case 'issue_noop': { const i = issue(); s(`UPDATE issues SET prio = prio WHERE id = ${i}`), I(i); break }
      case 'issue_move': {
        const i = issue()
        const p = r() < 0.04 ? null : this.project()
        s(`UPDATE issues SET project_id = ${lit(p)} WHERE id = ${i}`), I(i), P(p)
        break
      }
      case 'issue_move_prio': {
        const i = issue()
        const p = this.project()
        s(`UPDATE issues SET project_id = ${p}, prio = ${this.int(10)} WHERE id = ${i}`), I(i), P(p)
        break
      }
      case 'issue_delete': { const i = issue(); s(`DELETE FROM issues WHERE id = ${i}`), I(i), removeFrom(world.issues, i); break }
      case 'issue_pk': {
        const i = issue()
        const id = this.nid(0)
        s(`UPDATE issues SET id = ${id} WHERE id = ${i}`), I(i), I(id), removeFrom(world.issues, i), world.issues.push(id)
        break
      }
      case 'issue_bulk': { const p = this.project(); s(`UPDATE issues SET prio = (prio + ${1 + this.int(9)}) % 10 WHERE project_id = ${p}`), P(p); break }
      case 'memb_insert': case 'memb_dupe': {
        const id = this.nid(0)
        const m = kind === 'memb_dupe' ? this.membership() : { u: this.user(), p: this.project() }
        s(`INSERT INTO memberships VALUES (${id}, ${m.u}, ${lit(m.p)}, ${this.int(10)})`)
        world.memberships.set(id, { u: m.u, p: m.p }), P(m.p)
        break
      }
      case 'memb_delete': { const m = this.membership(); s(`DELETE FROM memberships WHERE id = ${m.id}`), P(m.p), world.memberships.delete(m.id); break }
      case 'memb_move': {
        const m = this.membership()
        const p = this.project()
        s(`UPDATE memberships SET project_id = ${p} WHERE id = ${m.id}`), P(m.p), P(p)
        if (world.memberships.has(m.id)) world.memberships.get(m.id).p = p
        break
      }
      case 'memb_user': {
        const m = this.membership()
        const u = this.user()
        s(`UPDATE memberships SET user_id = ${u} WHERE id = ${m.id}`), P(m.p)
        if (world.memberships.has(m.id)) world.memberships.get(m.id).u = u
        break
      }
      case 'memb_level': { const m = this.membership(); s(`UPDATE memberships SET level = ${this.int(10)} WHERE id = ${m.id}`), P(m.p); break }
      case 'memb_flash': {
        // added and removed in one transaction, maybe with an issue edit of that project between
        const id = this.nid(0)
        const p = this.project()
        s(`INSERT INTO memberships VALUES (${id}, ${this.user()}, ${p}, ${this.int(10)})`), P(p)
        if (r() < 0.5 && !SIMPLE) s(`UPDATE issues SET title = ${lit(this.title())} WHERE project_id = ${p} AND id % 3 = ${this.int(3)}`)
        s(`DELETE FROM memberships WHERE id = ${id}`)
        break
      }
      case 'memb_swap': {
        // removed and added again (another row, the same user and project) in one transaction
        const m = this.membership()
        const id = this.nid(0)
        s(`DELETE FROM memberships WHERE id = ${m.id}`)
        s(`INSERT INTO memberships VALUES (${id}, ${m.u}, ${lit(m.p)}, ${this.int(10)})`), P(m.p)
        world.memberships.delete(m.id), world.memberships.set(id, { u: m.u, p: m.p })
        break
      }
      case 'memb_null': {
        if (r() < 0.5) {
          const m = this.membership()
          s(`UPDATE memberships SET project_id = NULL WHERE id = ${m.id}`), P(m.p)
          if (world.memberships.has(m.id)) world.memberships.get(m.id).p = null
        } else {
          const id = this.nid(0)
          const u = this.user()
          s(`INSERT INTO memberships VALUES (${id}, ${u}, NULL, ${this.int(10)})`)
          world.memberships.set(id, { u, p: null })
        }
        break
      }
      case 'proj_insert': {
        const p = this.nid(0)
        s(`INSERT INTO projects VALUES (${p}, ${lit(`p${p}`)}, ${r() < 0.3})`), P(p)
        world.projects.push(p)
        if (r() < 0.5 && !SIMPLE) {
          const id = this.nid(0)
          const u = this.user()
          s(`INSERT INTO memberships VALUES (${id}, ${u}, ${p}, ${this.int(10)})`)
          world.memberships.set(id, { u, p })
        }
        for (let k = SIMPLE ? 0 : this.int(5); k > 0; k--) {
          const id = this.nid(0)
          s(`INSERT INTO issues VALUES (${id}, ${p}, ${lit(this.title())}, ${this.int(10)})`), I(id), world.issues.push(id)
        }
        break
      }
      case 'proj_delete': {
        const p = this.pick(world.projects)
        s(`DELETE FROM projects WHERE id = ${p}`), P(p), removeFrom(world.projects, p)
        break
      }
      case 'proj_archive': { const p = this.project(); s(`UPDATE projects SET archived = NOT archived WHERE id = ${p}`), P(p); break }
      case 'proj_rename': { const p = this.project(); s(`UPDATE projects SET name = ${lit(this.title())} WHERE id = ${p}`), P(p); break }
      case 'combo_join': {
        // join a project, file an issue in it, move another issue into it
        const u = this.user()
        const p = this.project()
        const mid = this.nid(0)
        const iid = this.nid(0)
        const i = issue()
        const stmts = [
          `INSERT INTO memberships VALUES (${mid}, ${u}, ${p}, ${this.int(10)})`,
          `INSERT INTO issues VALUES (${iid}, ${p}, ${lit(this.title())}, ${this.int(10)})`,
          `UPDATE issues SET project_id = ${p} WHERE id = ${i}`,
        ]
        if (r() < 0.5) stmts.reverse() // outer table first
        stmts.forEach(s)
        world.memberships.set(mid, { u, p }), world.issues.push(iid), P(p), I(iid), I(i)
        break
      }
      case 'combo_leave': {
        // leave a project, edit its issues, file one in it
        const m = this.membership()
        const iid = this.nid(0)
        s(`DELETE FROM memberships WHERE id = ${m.id}`)
        if (m.p !== null) {
          s(`UPDATE issues SET title = ${lit(this.title())}, prio = (prio + 1) % 10 WHERE project_id = ${m.p}`)
          s(`INSERT INTO issues VALUES (${iid}, ${m.p}, ${lit(this.title())}, ${this.int(10)})`), I(iid), world.issues.push(iid)
        }
        world.memberships.delete(m.id), P(m.p)
        break
      }
      case 'combo_move_both': {
        // a membership and (part of) its project's issues move to another project
        const m = this.membership()
        const p = this.project()
        s(`UPDATE memberships SET project_id = ${p} WHERE id = ${m.id}`)
        if (m.p !== null) s(`UPDATE issues SET project_id = ${p} WHERE project_id = ${m.p} AND id % 2 = ${this.int(2)}`)
        if (world.memberships.has(m.id)) world.memberships.get(m.id).p = p
        P(m.p), P(p)
        break
      }
      case 'combo_edit_then_leave': {
        // an issue edited, then every membership of some user in its project removed
        const i = issue()
        const u = this.user()
        s(`UPDATE issues SET prio = ${this.int(10)} WHERE id = ${i}`)
        s(`DELETE FROM memberships WHERE user_id = ${u} AND project_id = (SELECT project_id FROM issues WHERE id = ${i})`)
        I(i)
        break
      }
      case 'combo_archive_move': {
        const p = this.project()
        const i = issue()
        s(`UPDATE projects SET archived = NOT archived WHERE id = ${p}`)
        s(`UPDATE issues SET project_id = ${p} WHERE id = ${i}`)
        P(p), I(i)
        break
      }
    }
  }
  async txn(round) {
    const r = this.r
    const tx = { round, w: this.id, xid: null, t: ts(), status: 'open', sql: [], kinds: [], issues: new Set(), projects: new Set() }
    const nops = SIMPLE ? 1 : 1 + this.int(4)
    for (let k = 0; k < nops; k++) this.op(tx)
    const savepointAt = r() < 0.08 && !SIMPLE ? this.int(tx.sql.length + 1) : -1
    const rollback = r() < 0.04
    txlog.push(tx)
    if (!this.db) await this.reconnect()
    if (!this.db) {
      tx.status = 'not run: no connection'
      this.stats.errors.connection = (this.stats.errors.connection ?? 0) + 1
      return
    }
    try {
      await this.db.query('BEGIN')
      tx.xid = (await this.db.query('SELECT pg_current_xact_id()::text AS x')).rows[0].x
      for (let k = 0; k < tx.sql.length; k++) {
        if (k === savepointAt) {
          // a savepoint whose work is rolled back: a membership and an issue that never were
          await this.db.query('SAVEPOINT sp')
          await this.db.query(`INSERT INTO memberships VALUES (${this.nid(0)}, ${this.user()}, ${this.pick(world.projects)}, 1)`)
          await this.db.query(`UPDATE issues SET prio = 9 - prio WHERE id = ${this.pick(world.issues)}`)
          await this.db.query('ROLLBACK TO SAVEPOINT sp')
        }
        await this.db.query(tx.sql[k])
      }
      if (rollback) {
        await this.db.query('ROLLBACK')
        tx.status = 'rolled back'
        this.stats.rollbacks++
      } else {
        await this.db.query('COMMIT')
        tx.status = 'committed'
        this.stats.commits++
      }
    } catch (e) {
      tx.status = `failed ${e.code ?? ''} ${e.message}`
      await this.db.query('ROLLBACK').catch(() => {})
      const conn = !e.severity || /^(08|57)/.test(e.code ?? '') // not an error PostgreSQL sent, or the connection's end
      const code = conn ? 'connection' : e.code
      this.stats.errors[code] = (this.stats.errors[code] ?? 0) + 1
      if (conn) {
        // the server went away (a crash of the worker restarts PostgreSQL): judged with the crash
        if (this.stats.connection.length < 3) this.stats.connection.push(`[${ts()}s] ${e.code ?? ''} ${e.message}`)
        await this.reconnect()
      } else if (!EXPECTED_CODES[code] && this.stats.unexpected.length < 5) {
        this.stats.unexpected.push(`[${ts()}s] ${code} ${e.message} in ${short(tx.sql.join('; '), 400)}`)
      }
    }
    vlog(`w${this.id} xid ${tx.xid} ${tx.status}: ${short(tx.sql.join('; '), 300)}`)
  }
  async runUntil(deadline, round) {
    while (Date.now() < deadline) {
      await this.txn(round)
      await sleep(15 + this.int(60))
    }
  }
}

// ---------------------------------------------------------------------------------------------
// setup

async function setup() {
  const r = prng((SEED ^ 0x5eed) >>> 0)
  await q('DROP TABLE IF EXISTS issues, memberships, projects, sq_marker')
  await q(`CREATE TABLE projects (id int PRIMARY KEY, name text, archived boolean NOT NULL DEFAULT false);
    CREATE TABLE memberships (id int PRIMARY KEY, user_id int NOT NULL, project_id int REFERENCES projects ON DELETE CASCADE, level int);
    CREATE TABLE issues (id int PRIMARY KEY, project_id int REFERENCES projects ON DELETE CASCADE, title text, prio int);
    CREATE INDEX ON memberships (project_id); CREATE INDEX ON issues (project_id);
    ALTER TABLE projects REPLICA IDENTITY FULL; ALTER TABLE memberships REPLICA IDENTITY FULL; ALTER TABLE issues REPLICA IDENTITY FULL;
    CREATE TABLE sq_marker (id serial PRIMARY KEY)`)
  const stmts = []
  for (let p = 1; p <= 12; p++) stmts.push(`INSERT INTO projects VALUES (${p}, 'p${p}', ${r() < 0.25})`)
  for (let m = 1; m <= 30; m++) stmts.push(`INSERT INTO memberships VALUES (${m}, ${1 + Math.floor(r() * USERS)}, ${1 + Math.floor(r() * 12)}, ${Math.floor(r() * 10)})`)
  for (let i = 1; i <= 140; i++)
    stmts.push(`INSERT INTO issues VALUES (${i}, ${r() < 0.04 ? 'NULL' : 1 + Math.floor(r() * 12)}, ${lit(TITLES[Math.floor(r() * TITLES.length)])}, ${Math.floor(r() * 10)})`)
  await q(stmts.join(';\n'))
}

// ---------------------------------------------------------------------------------------------
// quiescent points

const clientFailed = new Map() // client -> failed rounds
const acFailed = new Map()

function keyHistory(c, key, expRow) {
  const id = /"(\d+)"$/.exec(key)?.[1]
  const projects = new Set([expRow?.project_id, c.rows.get(key)?.project_id].filter((x) => x !== null && x !== undefined))
  const out = [`  last messages that touched it (of ${c.label}):`]
  for (const l of c.history.get(key) ?? ['(none)']) out.push(`    ${l}`)
  const txs = txlog.filter((t) => t.issues.has(id) || [...projects].some((p) => t.projects.has(p))).slice(-6)
  out.push(`  the writers' last transactions that touched issue ${id}${projects.size ? ` or project ${[...projects].join('/')}` : ''} (${txs.length}):`)
  for (const t of txs) out.push(`    [${t.t}s] round ${t.round} w${t.w} xid ${t.xid} ${t.status}: ${short(t.sql.join('; '), 500)}`)
  return out
}

async function checkpoint(round, clients) {
  const tStart = Date.now()
  const lsn = BigInt((await q(`SELECT (pg_current_wal_lsn() - '0/0')::text AS l`)).rows[0].l)
  await q('INSERT INTO sq_marker DEFAULT VALUES')
  const expected = new Map()
  for (const s of SHAPES) expected.set(s.name, await expectedRows(s))
  const pending = new Set(clients)
  const caughtSince = new Map()
  const results = new Map()
  const equal = (c) => {
    const e = expected.get(c.shape.name).rows
    if (e.size !== c.rows.size) return false
    for (const [k, row] of e) if (rowText(row) !== rowText(c.rows.get(k))) return false
    return true
  }
  while (pending.size) {
    for (const c of [...pending]) {
      if (!c.caughtUp(lsn)) {
        caughtSince.delete(c)
        continue
      }
      if (!caughtSince.has(c)) caughtSince.set(c, Date.now())
      if (equal(c)) {
        results.set(c, 'equal')
        pending.delete(c)
      } else if (Date.now() - Math.max(caughtSince.get(c), c.lastDataAt) >= STABLE_MS) {
        results.set(c, 'diverged')
        pending.delete(c)
      }
    }
    if (!pending.size || Date.now() - tStart > CONVERGE_TIMEOUT_MS) break
    await sleep(20)
  }
  for (const c of pending) results.set(c, 'behind')
  const took = Date.now() - tStart
  for (const c of clients) {
    const res = results.get(c)
    const exp = expected.get(c.shape.name)
    if (res === 'equal') {
      // the active_conditions the client holds against PostgreSQL's evaluation of each position
      const bad = []
      for (const [k, want] of exp.acs) {
        const have = c.acOf.get(k)
        if (JSON.stringify(have) !== JSON.stringify(want)) bad.push(`${k}: client ${JSON.stringify(have)}, PostgreSQL ${JSON.stringify(want)}`)
      }
      if (bad.length) {
        acFailed.set(c, (acFailed.get(c) ?? 0) + 1)
        const detail = [`shape ${shapeDesc(c.shape)}, handle ${c.handle}`, `${bad.length} rows of ${exp.acs.size}; first ones:`]
        for (const b of bad.slice(0, 4)) {
          detail.push(`  ${b}`)
          const k = b.split(': ')[0]
          detail.push(...keyHistory(c, k, exp.rows.get(k)))
        }
        ok(false, `round ${round}: ${c.label}: active_conditions equal PostgreSQL's evaluation of the positions`, detail.join('\n'), 'SERVER')
      }
      continue
    }
    clientFailed.set(c, (clientFailed.get(c) ?? 0) + 1)
    const detail = [`shape ${shapeDesc(c.shape)}`,
      `client: handle ${c.handle} offset ${c.offset}, up-to-date ${c.upToDate} at global_last_seen_lsn ${c.utdLsn} (the burst ended at ${lsn}), ${c.rows.size} rows; SELECT: ${exp.rows.size} rows`]
    const keys = new Set([...exp.rows.keys(), ...c.rows.keys()])
    let shown = 0
    let ndiff = 0
    for (const k of [...keys].sort()) {
      const e = exp.rows.get(k)
      const a = c.rows.get(k)
      if (rowText(e) === rowText(a)) continue
      ndiff++
      if (shown++ >= 6) continue
      detail.push(`${!a ? 'missing' : !e ? 'extra' : 'differs'} ${k}: SELECT ${rowText(e)}, client ${rowText(a)}` +
        (c.acOf.has(k) ? `, client's active_conditions ${JSON.stringify(c.acOf.get(k))} tags ${JSON.stringify([...(c.tagsOf.get(k) ?? [])])}` : '') +
        (exp.acs.has(k) ? `, PostgreSQL's positions ${JSON.stringify(exp.acs.get(k))}` : ''))
      detail.push(...keyHistory(c, k, e))
    }
    detail.unshift(`${ndiff} keys differ`)
    if (res === 'behind') {
      detail.push(`the client's last messages:`, ...c.recent.slice(-8).map((l) => `  ${l}`))
      ok(false, `round ${round}: ${c.label} caught up with the log within ${CONVERGE_TIMEOUT_MS / 1000} s`, detail.join('\n'), 'SERVER')
    } else {
      ok(false, `round ${round}: ${c.label} rows equal PostgreSQL's SELECT once caught up`, detail.join('\n'), 'DIVERGENCE')
    }
    c.restart() // start over, so that later rounds judge it afresh
  }
  return took
}

// ---------------------------------------------------------------------------------------------
// main

async function main() {
  console.log(`# seed ${SEED} (replay: SEED=${SEED} DURATION=${DURATION_S} STEPS=${STEPS} WRITERS=${WRITERS}${NO_REFETCH ? ' INTEGRITY_SUBQUERY_NO_REFETCH=1' : ''}` +
    `${SIMPLE ? ' INTEGRITY_SUBQUERY_SIMPLE=1' : ''}${env.INTEGRITY_SUBQUERY_SHAPES ? ` INTEGRITY_SUBQUERY_SHAPES=${env.INTEGRITY_SUBQUERY_SHAPES}` : ''})`)
  await q('CREATE EXTENSION IF NOT EXISTS shape_sync')
  // the shape_sync worker's PID: another one means it crashed (or was restarted)
  const workerPid = async () => {
    for (let i = 0; i < 60; i++) {
      const p = (await q("SELECT string_agg(pid::text, ',') AS p FROM pg_stat_activity WHERE backend_type = 'shape_sync'")).rows[0].p
      if (p) return p
      await sleep(500) // restarting
    }
    return 'none'
  }
  let pidNow = await workerPid()
  await setup()
  const clients = SHAPES.map((s) => new Client(s).start())
  const writers = []
  for (let w = 0; w < WRITERS; w++) {
    const wr = new Writer(w)
    await wr.connect()
    writers.push(wr)
  }
  const rr = prng((SEED ^ 0xb0b0) >>> 0)
  let round = 0
  let writeMs = 0
  let crashed = 0
  const tInitial = await checkpoint(0, clients)
  log(`round 0 (initial snapshots): ${tInitial} ms to converge; rows per shape ${clients.map((c) => `${c.label}=${c.rows.size}`).join(' ')}`)
  while (writeMs < DURATION_S * 1000) {
    round++
    const burst = Math.min(2000 + Math.floor(rr() * 3000), DURATION_S * 1000 - writeMs + 500)
    await refreshWorld()
    const commitsBefore = writers.reduce((a, w) => a + w.stats.commits, 0)
    const sum = (f) => clients.reduce((a, c) => a + f(c.stats), 0)
    const before = [sum((x) => x.moveOuts), sum((x) => x.moveIns), sum((x) => x.r409)]
    const t = Date.now()
    await Promise.all(writers.map((w) => w.runUntil(t + burst, round)))
    writeMs += Date.now() - t
    const took = await checkpoint(round, clients)
    const pid = await workerPid().catch((e) => `unreachable: ${e.message}`)
    if (pid !== pidNow) {
      // the rounds go on: clients get 409s (the shapes are gone) and must converge again
      crashed++
      ok(false, `round ${round}: the shape_sync worker kept running (PID ${pidNow})`, `its PID is now ${pid}: it crashed or was restarted during the burst (see the server log); the rounds go on`, 'SERVER')
      pidNow = pid
    }
    while (txlog.length && txlog[0].round < round - 1) txlog.shift()
    log(`round ${round}: ${burst} ms of writes, ${writers.reduce((a, w) => a + w.stats.commits, 0) - commitsBefore} commits, ` +
      `the clients saw ${sum((x) => x.moveOuts) - before[0]} move-outs, ${sum((x) => x.moveIns) - before[1]} move-ins, ${sum((x) => x.r409) - before[2]} 409s; checked after ${took} ms`)
  }
  const burstRounds = round
  const burstCommits = writers.reduce((a, w) => a + w.stats.commits, 0)
  const stepsFrom = Date.now()
  for (let step = 0; step < STEPS; step++) {
    round++
    await refreshWorld()
    await writers[step % writers.length].txn(round)
    await checkpoint(round, clients)
    const pid = await workerPid().catch((e) => `unreachable: ${e.message}`)
    if (pid !== pidNow) {
      crashed++
      ok(false, `step ${step + 1} (round ${round}): the shape_sync worker kept running (PID ${pidNow})`, `its PID is now ${pid} (see the server log)`, 'SERVER')
      pidNow = pid
    }
    while (txlog.length && txlog[0].round < round - 1) txlog.shift()
  }
  if (STEPS > 0) {
    const stepCommits = writers.reduce((a, w) => a + w.stats.commits, 0) - burstCommits
    log(`${STEPS} steps (${stepCommits} commits), each checked on every shape, in ${((Date.now() - stepsFrom) / 1000).toFixed(1)} s`)
    ok(stepCommits >= STEPS / 2, `steps: ${stepCommits} of ${STEPS} transactions committed`, '', 'HARNESS')
  }
  await Promise.all(clients.map((c) => c.stop()))
  for (const w of writers) await w.db?.end().catch(() => {})

  // the summary
  for (const c of clients) {
    log(`${c.label}: ${c.counts()}`)
    ok(!clientFailed.has(c), `${c.label}: rows equal PostgreSQL's SELECT at all ${round + 1} quiescent points` +
      (clientFailed.has(c) ? ` (failed at ${clientFailed.get(c)} of them)` : ''))
    ok(!acFailed.has(c), `${c.label}: active_conditions equal PostgreSQL's at every quiescent point where the rows were equal`)
    const an = [...c.anomalies].map(([k, a]) => `${k}: ${a.n}\n${a.first.map((l) => `  ${l}`).join('\n')}`)
    ok(!an.length, `${c.label}: no protocol anomalies`, an.join('\n'), 'SERVER')
    if (NO_REFETCH)
      ok(c.stats.r409 === 0, `${c.label}: no 409 (INTEGRITY_SUBQUERY_NO_REFETCH=1)`, `409s at ${c.conflicts.slice(0, 10).map(([t, h]) => `${t}s (handle ${h})`).join(', ')}`, 'SERVER')
  }
  const commits = writers.reduce((a, w) => a + w.stats.commits, 0)
  const errors = {}
  for (const w of writers) for (const [k, n] of Object.entries(w.stats.errors)) errors[k] = (errors[k] ?? 0) + n
  const explained = Object.keys(errors).filter((k) => EXPECTED_CODES[k]).map((k) => `${k}: ${EXPECTED_CODES[k]}`)
  log(`writers: ${commits} commits, ${writers.reduce((a, w) => a + w.stats.rollbacks, 0)} rollbacks, errors ${JSON.stringify(errors)}` +
    (explained.length ? ` (${explained.join('; ')})` : ''))
  const unexpected = writers.flatMap((w) => w.stats.unexpected)
  if (!crashed) unexpected.push(...writers.flatMap((w) => w.stats.connection)) // lost connections with no crash seen
  ok(burstCommits >= burstRounds * 5 && !unexpected.length, `writers: ${commits} transactions committed over ${burstRounds} rounds and ${STEPS} steps, no unexpected errors`, unexpected.join('\n'), 'HARNESS')
  const moveOuts = clients.reduce((a, c) => a + c.stats.moveOuts, 0)
  ok(moveOuts > 0, `the clients saw move-out events (${moveOuts})`, 'the workload removes memberships all the time: none came', 'SERVER')
  log(`totals: move-outs ${moveOuts}, move-ins ${clients.reduce((a, c) => a + c.stats.moveIns, 0)}, 409s ${clients.reduce((a, c) => a + c.stats.r409, 0)}, ` +
    `${round + 1} quiescent points in ${((Date.now() - T0) / 1000).toFixed(1)} s`)
}

// a deadline against a hang of the test itself (the .sh kills it later still)
setTimeout(() => {
  ok(false, `the test ended within ${DURATION_S + STEPS + 300} s`, '', 'HARNESS')
  process.exit(1)
}, (DURATION_S + STEPS + 300) * 1000).unref()
try {
  await main()
} catch (e) {
  ok(false, `the test ran to its end`, e?.stack ?? String(e), 'HARNESS')
}
await closePool().catch(() => {})
process.exit(failures ? 1 : 0)
