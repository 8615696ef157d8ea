// bench/create.mjs URL TABLE N: N concurrent requests, each for a shape of its own
// (`id = k`, k = 1..N) from offset -1, all sent at once; a 503 is retried after its
// retry-after. Prints {"ms": <until the last 200>, "statuses": {...}, "retried": <requests>}.
const [url, table, n] = [process.argv[2], process.argv[3], Number(process.argv[4])]
const statuses = {}
let retried = 0
const sleep = (ms) => new Promise((r) => setTimeout(r, ms))
async function one(k) {
  const q = new URLSearchParams({ table, offset: '-1', where: `id = ${k}` })
  for (;;) {
    const res = await fetch(`${url}/v1/shape?${q}`)
    await res.arrayBuffer()
    statuses[res.status] = (statuses[res.status] ?? 0) + 1
    if (res.status === 200) return
    if (res.status !== 503) throw new Error(`id = ${k}: ${res.status}`)
    retried++
    await sleep(1000 * Number(res.headers.get('retry-after') ?? 1))
  }
}
const t0 = performance.now()
await Promise.all(Array.from({ length: n }, (_, i) => one(i + 1)))
console.log(JSON.stringify({ ms: performance.now() - t0, statuses, retried }))
