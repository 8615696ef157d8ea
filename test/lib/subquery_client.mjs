// A client of shapes with subqueries, for the tests (subquery*.test.mjs): it applies Electric's
// messages as @tanstack/electric-db-collection does: rows by key, tags accumulate (removed_tags
// drop), active_conditions replace; a move-out sets active_conditions[pos] = false on the rows
// whose tag has the value at slot pos and deletes those no disjunct keeps; a move-in sets it
// true on the rows it names and adds none. The wire format is Electric's (sync-service 1.7.x),
// as docs/subqueries.md ("What clients receive") describes it.
//
// Follower follows one shape with raw requests (a 409 resyncs from -1 and is counted), and
// records every message it received.

import assert from 'node:assert/strict'

import { dropTable, fetchShape, pool, query, queryAsServerText, uniqueSuffix, uniqueTable } from './helpers.mjs'

// Tables a test file makes, dropped in reverse order by dropAll (its `after` hook).
export function tableTracker() {
  const tables = []
  return {
    newTable(prefix) {
      const t = uniqueTable(prefix)
      tables.push(t)
      return t
    },
    // tables made under other names (partitions), dropped too
    track(...names) {
      tables.push(...names)
    },
    async dropAll() {
      for (const t of tables.reverse()) await dropTable(t)
    },
  }
}

// The applier

export function newClientState() {
  // rows: key -> {value, tags: Set<string>, ac: boolean[] | null}
  // positions: per disjunct, the slot indices it uses (from the first tagged message)
  return { rows: new Map(), positions: null, problems: [] }
}

const slots = (tag) => tag.split('/')

function rowVisible(ac, positions) {
  return positions.some((ps) => ps.every((p) => ac[p] === true))
}

export function applyMessages(state, messages) {
  for (const m of messages) {
    const h = m.headers ?? {}
    if ('key' in m) {
      if (h.operation === 'delete') {
        state.rows.delete(m.key)
        continue
      }
      let row = state.rows.get(m.key)
      if (!row) {
        if (h.operation === 'update') state.problems.push(`update of absent key ${m.key}: ${JSON.stringify(m)}`)
        row = { value: {}, tags: new Set(), ac: null }
        state.rows.set(m.key, row)
      }
      // an insert of a key already held is an update (TanStack's isDuplicateInsert)
      row.value = { ...row.value, ...m.value }
      for (const t of h.tags ?? []) row.tags.add(t)
      for (const t of h.removed_tags ?? []) row.tags.delete(t)
      if (Array.isArray(h.active_conditions) && h.active_conditions.length > 0) row.ac = [...h.active_conditions]
      if (!state.positions && Array.isArray(h.tags) && h.tags.length > 0) {
        state.positions = h.tags.map((t) => slots(t).flatMap((s, i) => (s === '' ? [] : [i])))
      }
    } else if (h.event === 'move-out' || h.event === 'move-in') {
      if (!state.positions) continue // no tagged row seen yet: ignored, as TanStack does
      for (const { pos, value } of h.patterns) {
        for (const [key, row] of [...state.rows]) {
          if (![...row.tags].some((t) => slots(t)[pos] === value)) continue
          if (h.event === 'move-in') {
            if (row.ac) row.ac[pos] = true
          } else if (row.ac) {
            // DNF mode
            row.ac[pos] = false
            if (!rowVisible(row.ac, state.positions)) state.rows.delete(key)
          } else {
            // legacy mode
            for (const t of [...row.tags]) if (slots(t)[pos] === value) row.tags.delete(t)
            if (row.tags.size === 0) state.rows.delete(key)
          }
        }
      }
    } else if (h.control === 'must-refetch') {
      state.rows.clear()
      state.positions = null
    }
  }
}

export const byIdNum = (a, b) => Number(a.id) - Number(b.id)

// The project_id values of the rows a client holds, as numbers.
export const projectsOf = (f) => new Set([...f.state.rows.values()].map((r) => Number(r.value.project_id)))

export function clientRows(state) {
  return [...state.rows.values()].map((r) => r.value).sort(byIdNum)
}

export async function selectRows(sql, values) {
  return (await queryAsServerText(sql, values)).sort(byIdNum)
}

// ---------------------------------------------------------------------------------------
// A raw client of one shape: snapshot, then live long-polls; a 409 resyncs from -1 with the
// new handle (counted in refetches). Every message received goes to `log` and the applier.

export class Follower {
  constructor(params) {
    this.params = params
    this.state = newClientState()
    this.log = []
    this.refetches = []
    this.handle = undefined
    this.offset = '-1'
    this.cursor = ''
  }

  #take(messages) {
    this.log.push(...messages)
    applyMessages(this.state, messages)
  }

  async sync() {
    for (let n = 0; n < 1000; n++) {
      const res = await fetchShape({ ...this.params, offset: this.offset, handle: this.offset === '-1' ? undefined : this.handle })
      if (res.status === 409) {
        this.#refetch(res)
        continue
      }
      if (res.status === 503) {
        await this.#retryAfter(res)
        continue
      }
      assert.equal(res.status, 200, `sync at offset ${this.offset}: ${res.text.slice(0, 500)}`)
      this.#take(res.body)
      this.handle = res.headers.get('electric-handle')
      this.offset = res.headers.get('electric-offset')
      if (res.headers.has('electric-up-to-date')) return this
    }
    throw new Error('sync: no up-to-date after 1000 requests')
  }

  #refetch(res) {
    this.refetches.push({ status: res.status, body: res.body, handle: res.headers.get('electric-handle') })
    this.#take([{ headers: { control: 'must-refetch' } }])
    this.handle = res.headers.get('electric-handle') ?? undefined
    this.offset = '-1'
    this.cursor = ''
  }

  // A 503 (a shape made again while the request was answered): retried after retry-after.
  async #retryAfter(res) {
    this.unavailable = (this.unavailable ?? 0) + 1
    assert.ok(this.unavailable <= 20, `20 answers 503: ${res.text.slice(0, 300)}`)
    await new Promise((resolve) => setTimeout(resolve, 1000 * Number(res.headers.get('retry-after') ?? 1)))
  }

  // One live request; returns the messages it brought (after a 409: the resync's).
  async poll() {
    const res = await fetchShape(
      { ...this.params, handle: this.handle, offset: this.offset, live: 'true', cursor: this.cursor },
      { timeoutMs: 40000 },
    )
    if (res.status === 409) {
      const before = this.log.length
      this.#refetch(res)
      await this.sync()
      return this.log.slice(before)
    }
    if (res.status === 503) {
      await this.#retryAfter(res)
      return []
    }
    assert.equal(res.status, 200, `live request at ${this.offset}: ${res.text.slice(0, 500)}`)
    assert.equal(res.headers.get('electric-handle'), this.handle, 'a live response keeps the handle')
    const body = res.body
    assert.ok(Array.isArray(body) && body.length > 0, `live body: ${res.text.slice(0, 300)}`)
    assert.equal(body[body.length - 1].headers?.control, 'up-to-date', `a live body ends with up-to-date: ${res.text.slice(0, 500)}`)
    this.#take(body)
    this.offset = res.headers.get('electric-offset')
    this.cursor = res.headers.get('electric-cursor') ?? ''
    return body
  }

  // Live requests until `pred()` holds (checked after each response).
  async until(pred, what, { timeoutMs = 60000 } = {}) {
    const deadline = Date.now() + timeoutMs
    while (!pred()) {
      if (Date.now() > deadline) {
        throw new Error(`timed out waiting for ${what}; log since sync: ${JSON.stringify(this.log.slice(-30))}`)
      }
      await this.poll()
    }
  }

  // Commits an update of issue `id` (held by the shape before and after) in its own
  // transaction and follows the log until the client has it: everything committed before
  // has then been received.
  async barrier(issues, id) {
    const title = `marker ${uniqueSuffix()}`
    await query(`UPDATE ${issues} SET title = $1 WHERE id = $2`, [title, id])
    const key = issueKey(issues, id)
    await this.until(() => this.state.rows.get(key)?.value.title === title, `the marker update of issue ${id}`)
  }

  events() {
    return this.log.filter((m) => m.headers?.event !== undefined)
  }
}

export function issueKey(table, id) {
  return `"public"."${table}"/"${id}"`
}

// Runs `statements` in one transaction; returns txid_current() of it, as a Number (the
// cluster's epoch is 0, so it equals the 32-bit xid Electric's txids carry).
export async function runTxid(statements) {
  const client = await pool.connect()
  try {
    await client.query('BEGIN')
    for (const s of statements) await client.query(s)
    const { rows } = await client.query('SELECT txid_current()::text AS xid')
    await client.query('COMMIT')
    return Number(rows[0].xid)
  } catch (err) {
    await client.query('ROLLBACK').catch(() => {})
    throw err
  } finally {
    client.release()
  }
}

// ---------------------------------------------------------------------------------------

// A 400 (or `status`) whose errors.where is one non-empty sentence; returns it.
export function assertWhereRefused(res, label, { status = 400, message = 'Invalid request' } = {}) {
  assert.equal(res.status, status, `${label}: status ${status} (got ${res.status} ${res.text.slice(0, 500)})`)
  assert.match(res.headers.get('content-type') ?? '', /^application\/json/, `${label}: content-type`)
  assert.equal(res.body.message, message, `${label}: message (${res.text})`)
  assert.deepEqual(Object.keys(res.body.errors ?? {}), ['where'], `${label}: only errors.where (${res.text})`)
  const msgs = res.body.errors.where
  assert.ok(Array.isArray(msgs) && msgs.length === 1, `${label}: errors.where holds one message (${res.text})`)
  assert.equal(typeof msgs[0], 'string', `${label}: a string`)
  assert.match(msgs[0], /^[A-Z].{10,}$/, `${label}: a sentence (${msgs[0]})`)
  return msgs[0]
}

// A 403 Forbidden whose errors hold one sentence; returns it. The server refuses what its
// role may not read with 403, for a subquery's table as for the shape's own (access.test.mjs).
export function assertForbidden(res, label) {
  assert.equal(res.status, 403, `${label}: status 403 (got ${res.status} ${res.text.slice(0, 500)})`)
  assert.equal(res.body.message, 'Forbidden', `${label}: message (${res.text})`)
  const msgs = Object.values(res.body.errors ?? {})
  assert.equal(msgs.length, 1, `${label}: one error field (${res.text})`)
  assert.ok(Array.isArray(msgs[0]) && msgs[0].length === 1 && typeof msgs[0][0] === 'string', `${label}: one message (${res.text})`)
  return msgs[0][0]
}
