// Reading GET /metrics (the Prometheus text format) in tests.
//
//   parseMetrics(text)             series key -> value; throws on a line not in the format
//   seriesKey(name, labels)        a series' key: its name and its labels, sorted
//   metricTotal(values, name, labels = {})  the sum of the series of `name` whose labels
//                                  include `labels` (a series without labels counts too)

export function seriesKey(name, labels) {
  const list = Object.keys(labels).sort().map((k) => `${k}="${labels[k]}"`).join(',')
  return list ? `${name}{${list}}` : name
}

export function parseMetrics(text) {
  const values = new Map()
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue
    const m = /^([a-z_]+)(?:\{(.*)\})? (\S+)$/.exec(line)
    if (!m) throw new Error(`not a line of the text format: ${line}`)
    const labels = {}
    for (const [, k, v] of (m[2] ?? '').matchAll(/([a-z_]+)="([^"]*)"/g)) labels[k] = v
    values.set(seriesKey(m[1], labels), Number(m[3]))
  }
  return values
}

export function metricTotal(values, name, labels = {}) {
  let sum = 0
  for (const [key, value] of values) {
    if (key !== name && !key.startsWith(`${name}{`)) continue
    if (Object.entries(labels).every(([l, v]) => key.includes(`${l}="${v}"`))) sum += value
  }
  return sum
}
