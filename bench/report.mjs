// bench/report.mjs LATENCY_JSON RESULTS_MD: writes the section "Commit-to-client latency" of
// RESULTS_MD from bench/latency.mjs's JSON and the BENCH_* variables set by bench/run.sh;
// other sections of the file are kept.
import { readFileSync, writeFileSync, existsSync } from 'node:fs'

const [jsonPath, mdPath] = process.argv.slice(2)
const data = JSON.parse(readFileSync(jsonPath, 'utf8'))
const env = process.env
const R = data.results
const base = R.notify?.summary.all.median
const base99 = R.notify?.summary.all.p99
const f = (x) => (Number.isFinite(x) ? x.toFixed(2) : 'n/a')
const ratio = (x, b = base) => (b && Number.isFinite(x) ? `${(x / b).toFixed(1)}x` : 'n/a')

const DESC = {
  notify: 'LISTEN/NOTIFY, 1 listener (baseline)',
  'raw-1': 'shape_sync, 1 raw long-poll client',
  'client-1': 'shape_sync, 1 `@electric-sql/client` ShapeStream',
  'raw-100': 'shape_sync, 100 raw long-poll clients: last of 100',
  'sock-1': 'shape_sync, 1 socket long-poll client (no fetch)',
  'sock-100': 'shape_sync, 100 socket long-poll clients (no fetch; diagnostic): last of 100',
  'client-100': 'shape_sync, 100 ShapeStreams: last of 100',
}
const rows = []
for (const [name, r] of Object.entries(R)) {
  const s = r.summary
  const runs = r.runs.map((x) => f(x.all.median)).join(' / ')
  rows.push(`| ${DESC[name] ?? name} | ${f(s.all.median)} | ${f(s.all.p90)} | ${f(s.all.p99)} | ${ratio(s.all.median)} | ${ratio(s.all.p99, base99)} | ${runs} | ${s.n}${s.timeouts ? `, ${s.timeouts} timeouts` : ''} |`)
  if (r.clients > 1) {
    for (const [key, label] of [['medianClient', 'median client'], ['firstClient', 'first client']]) {
      if (!s[key]) continue
      const runsM = r.runs.map((x) => f(x[key].median)).join(' / ')
      rows.push(`| ${(DESC[name] ?? name).replace('last of 100', label)} | ${f(s[key].median)} | ${f(s[key].p90)} | ${f(s[key].p99)} | ${ratio(s[key].median)} | ${ratio(s[key].p99, base99)} | ${runsM} | ${s.n} |`)
    }
  }
}
const oneClient = R['raw-1']?.summary.all.median
const target = Number.isFinite(oneClient) ? (oneClient < 5 ? `met (raw client, median ${f(oneClient)} ms)` : `NOT met (raw client, median ${f(oneClient)} ms)`) : 'not measured'

const notes = []
if (R['raw-100'] && R['sock-100'])
  notes.push(`With 100 clients, most of the spread is on the client side of this one machine: the same 100 long-polls on plain sockets (\`sock-100\`, no \`fetch\`) see the last client at ${f(R['sock-100'].summary.all.median)} ms against ${f(R['raw-100'].summary.all.median)} ms with \`fetch\`, and the first client gets the row after ${f(R['sock-100'].summary.firstClient?.median)} ms. The clients, the server and PostgreSQL share ${env.BENCH_NPROC ?? '?'} CPUs, so the 100-client numbers are an upper bound for the server's fan-out cost.`)
const section = `<!-- latency:start -->
## Commit-to-client latency

Time from just before \`COMMIT\` is sent (a one-row \`INSERT\` transaction) until a client has
parsed the message carrying that row, one commit at a time: the writer waits until every
client has the row, then sleeps a random 0-20 ms. The baseline is the LISTEN/NOTIFY round
trip on the same cluster (\`INSERT\` + \`pg_notify\` in one transaction, a second connection
LISTENs): the floor for "a commit, and another process learns of it". Each measurement was
run ${data.runs} times with ${data.commits} measured commits (after ${data.warmup} unmeasured ones); the table gives the
median over the runs of each run's median, p90 and p99, and the ratios to the same
figures of NOTIFY.

Target: median under 5 ms for one client: **${target}**.
${notes.length ? '\n' + notes.join('\n\n') + '\n' : ''}
| Scenario | median ms | p90 ms | p99 ms | median / NOTIFY median | p99 / NOTIFY p99 | run medians ms | commits |
|---|---:|---:|---:|---:|---:|---|---:|
${rows.join('\n')}

Machine: ${env.BENCH_NPROC ?? '?'} CPUs (\`nproc\`), CPU model \`${env.BENCH_CPU ?? '?'}\`; ${env.BENCH_PG ?? '?'};
measured ${env.BENCH_DATE ?? '?'}. Server, writer and all clients share this machine (the
clients run in ${data.threads} Node worker threads). Load average (1/5/15 min) before the run:
${env.BENCH_LOAD_BEFORE ?? '?'}, after: ${env.BENCH_LOAD_AFTER ?? '?'}; other work on the machine was not controlled. \`free -h\`:

\`\`\`
${env.BENCH_FREE ?? '?'}
\`\`\`

Settings: ${env.BENCH_CONF ?? '?'} (defaults of scripts/lib/cluster.sh and shape_sync).

How it is measured: \`t0\` and \`t1\` come from \`process.hrtime\` (one monotonic clock for
all threads of the Node process). Raw clients are plain \`fetch\` loops on \`live=true\`
(\`t1\` after \`JSON.parse\` of the response); socket clients send the same requests on
plain keep-alive sockets and decode HTTP themselves; official clients are \`ShapeStream\`s
(\`t1\` in the subscriber callback); the NOTIFY listener is a \`pg\` connection (\`t1\` in
its \`notification\` event). For 100 clients, "last of 100" is the time until the last
client has the row, "median client" the median over the 100 clients of each commit, "first
client" the first of them.

Reproduce: \`bash bench/run.sh\` (starts its own cluster; about 5 minutes; knobs RUNS,
COMMITS, WARMUP, THREADS, SCENARIOS). Raw numbers land in \`bench/latency.json\`.
<!-- latency:end -->
`

let md = existsSync(mdPath) ? readFileSync(mdPath, 'utf8') : '# Benchmark results\n\n'
let start = md.indexOf('<!-- latency:start -->')
let end = start >= 0 ? md.indexOf('<!-- latency:end -->', start) : -1
if (start >= 0 && end >= 0) {
  end += '<!-- latency:end -->'.length
  if (md[end] === '\n') end++
} else {
  // an older copy of the section without markers: up to the next section or marker
  start = md.indexOf('## Commit-to-client latency')
  if (start >= 0) {
    const next = [md.indexOf('\n## ', start + 3), md.indexOf('\n<!-- ', start)].filter((i) => i >= 0)
    end = next.length ? Math.min(...next) + 1 : md.length
  }
}
if (start >= 0) md = md.slice(0, start) + section + md.slice(end)
else md = md.replace(/\n*$/, '\n\n') + section
writeFileSync(mdPath, md)
