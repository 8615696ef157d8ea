// bench/subset.mjs: one run of bench/subset.sh.  Against a running cluster (libpq env and
// SHAPE_SYNC_URL), times each case against its baseline, the equivalent SELECT through a
// connection of node-postgres that stays open (what an application server in front of
// PostgreSQL would run), both sequential over keep-alive connections:
//   point     N subset requests `id = $1` (a new id each) on a changes_only shape of a
//             1M-row table, against `SELECT row_to_json(t) ... WHERE id = $1`;
//   page      N subset requests of a page of 100 rows (`a = $1 ORDER BY id LIMIT 100`),
//             against the same SELECT;
//   bulk      one subset of 100,000 rows (`id <= 100000 ORDER BY id`), against the SELECT.
// Neither side parses the JSON it receives (rows are counted in shape_sync's body, json
// values stay text in node-postgres): what is timed is the servers and the transfer.
// Prints one line per case: name, the median seconds per request of shape_sync, of the
// baseline, and the rows per request.
import http from 'node:http'
import pg from '../test/node_modules/pg/lib/index.js'

const N = Number(process.env.N ?? 200)
const base = new URL(process.env.SHAPE_SYNC_URL)
const agent = new http.Agent({ keepAlive: true, maxSockets: 1 })
pg.types.setTypeParser(114, (text) => text) // json as text: no JSON.parse per row
const client = new pg.Client()
await client.connect()

function get(params) {
  const q = new URLSearchParams({ table: 'bench_subset', offset: '-1', log: 'changes_only', ...params })
  return new Promise((resolve, reject) => {
    const req = http.get({ host: base.hostname, port: base.port, path: `/v1/shape?${q}`, agent }, (res) => {
      const chunks = []
      res.on('data', (c) => chunks.push(c))
      res.on('end', () => {
        const body = Buffer.concat(chunks)
        if (res.statusCode !== 200) return reject(new Error(`${res.statusCode}: ${body.toString().slice(0, 200)}`))
        // rows counted, not parsed: neither side pays for JSON.parse (see the json type parser)
        let rows = 0
        for (let at = body.indexOf('{"key":'); at >= 0; at = body.indexOf('{"key":', at + 7)) rows++
        resolve(rows)
      })
    })
    req.on('error', reject)
  })
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]
async function timeEach(n, fn) {
  const times = []
  let rows = 0
  for (let i = 0; i < n; i++) {
    const t0 = process.hrtime.bigint()
    rows = await fn(i)
    times.push(Number(process.hrtime.bigint() - t0) / 1e9)
  }
  return { s: median(times), rows }
}

const cases = {
  point: {
    n: N,
    subset: (i) => get({ subset__where: 'id = $1', subset__params: JSON.stringify({ 1: String(1 + ((i * 7919) % 1000000)) }) }),
    sql: async (i) => (await client.query('SELECT row_to_json(t) FROM bench_subset t WHERE id = $1', [1 + ((i * 7919) % 1000000)])).rowCount,
  },
  page: {
    n: N,
    subset: (i) => get({ subset__where: 'a = $1', subset__params: JSON.stringify({ 1: String(i % 1000) }), subset__order_by: 'id', subset__limit: '100' }),
    sql: async (i) => (await client.query('SELECT row_to_json(t) FROM bench_subset t WHERE a = $1 ORDER BY id LIMIT 100', [i % 1000])).rowCount,
  },
  bulk: {
    n: 5,
    subset: () => get({ subset__where: 'id <= 100000', subset__order_by: 'id' }),
    sql: async () => (await client.query('SELECT row_to_json(t) FROM bench_subset t WHERE id <= 100000 ORDER BY id')).rowCount,
  },
}

// warm both paths (the shape, plans, caches)
await cases.point.subset(0)
await cases.point.sql(0)
for (const [name, c] of Object.entries(cases)) {
  const order = Math.random() < 0.5 ? ['subset', 'sql'] : ['sql', 'subset']
  const r = {}
  for (const k of order) r[k] = await timeEach(c.n, c[k])
  if (r.subset.rows !== r.sql.rows) throw new Error(`${name}: ${r.subset.rows} rows against ${r.sql.rows}`)
  console.log(`${name} ${r.subset.s.toFixed(6)} ${r.sql.s.toFixed(6)} ${r.subset.rows}`)
}
await client.end()
agent.destroy()
