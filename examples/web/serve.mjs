// Serves the built example (dist/) and, when a secret is given, an authorising proxy in front
// of shape_sync, as docs/security.md recommends: the browser never holds the secret.
//
//   node serve.mjs            (after node build.mjs)
//
//   EXAMPLE_PORT        port to listen on, on localhost (default 5173)
//   SHAPE_SYNC_URL      shape_sync's address (default http://localhost:3000)
//   SHAPE_SYNC_SECRET   when set, GET /v1/shape here is passed on to SHAPE_SYNC_URL with
//                       secret= added (any secret the browser sent is dropped)
//   EXAMPLE_TOKEN       when set, the proxy passes on only requests that carry
//                       "Authorization: Bearer EXAMPLE_TOKEN" (a stand-in for the application's
//                       own sessions); others get 401
//
// GET /authorise answers 204 for a request with that header (or any, without EXAMPLE_TOKEN)
// and 401 otherwise: what nginx's auth_request asks (examples/nginx/shape_sync.conf), when
// nginx is the proxy that adds the secret.
//
// The proxy streams the answer through, long polls and SSE alike, and drops the upstream
// request when the browser goes away.

import { createReadStream, existsSync, statSync } from 'node:fs'
import http from 'node:http'
import { pipeline } from 'node:stream'
import { dirname, extname, join, normalize } from 'node:path'
import { fileURLToPath } from 'node:url'

const here = dirname(fileURLToPath(import.meta.url))
const TYPES = { '.html': 'text/html; charset=utf-8', '.js': 'text/javascript; charset=utf-8', '.map': 'application/json' }
// hop-by-hop headers, which a proxy does not pass on
const HOP = new Set(['connection', 'keep-alive', 'transfer-encoding', 'upgrade', 'proxy-connection', 'te', 'trailer'])

function sendJson(res, status, body) {
  res.writeHead(status, { 'content-type': 'application/json; charset=utf-8', 'cache-control': 'no-store' })
  res.end(JSON.stringify(body))
}

function serveStatic(dist, req, res) {
  const path = new URL(req.url, 'http://x').pathname
  const file = normalize(join(dist, path === '/' ? 'index.html' : path))
  if (!file.startsWith(dist + '/') || !existsSync(file) || !statSync(file).isFile()) {
    return sendJson(res, 404, { message: 'not found' })
  }
  res.writeHead(200, { 'content-type': TYPES[extname(file)] ?? 'application/octet-stream', 'cache-control': 'no-cache' })
  pipeline(createReadStream(file), res, () => {})
}

function proxyShape({ upstream, secret, token }, req, res) {
  if (req.method !== 'GET' && req.method !== 'HEAD') return sendJson(res, 405, { message: 'method not allowed' })
  if (token && req.headers.authorization !== `Bearer ${token}`) {
    return sendJson(res, 401, { message: 'sign in first' })
  }
  // only ever shape_sync's /v1/shape, whatever the request's target says (an absolute or
  // //host target must not send the secret elsewhere); only its query string is passed on
  const target = new URL('/v1/shape', upstream)
  target.search = new URL(req.url, 'http://x').search
  target.searchParams.delete('secret')
  target.searchParams.delete('api_secret')
  target.searchParams.set('secret', secret)
  const headers = {}
  for (const name of ['accept', 'if-none-match', 'user-agent']) {
    if (req.headers[name]) headers[name] = req.headers[name]
  }
  const out = http.request(target, { method: req.method, headers }, (answer) => {
    const passed = {}
    for (const [name, value] of Object.entries(answer.headers)) {
      if (!HOP.has(name)) passed[name] = value
    }
    res.writeHead(answer.statusCode, passed)
    // shape_sync going away mid-answer ends the browser's answer too, so that it retries
    pipeline(answer, res, (e) => e && res.destroy())
  })
  out.on('error', () => {
    if (!res.headersSent) sendJson(res, 502, { message: 'shape_sync did not answer' })
    else res.destroy()
  })
  res.on('close', () => out.destroy())
  out.end()
}

// Starts the server; resolves to { server, url } once it listens (port 0: any free port).
export function startExample({
  port = Number(process.env.EXAMPLE_PORT ?? 5173),
  upstream = process.env.SHAPE_SYNC_URL ?? 'http://localhost:3000',
  secret = process.env.SHAPE_SYNC_SECRET || null,
  token = process.env.EXAMPLE_TOKEN || null,
  dist = join(here, 'dist'),
} = {}) {
  if (!existsSync(join(dist, 'app.js'))) throw new Error(`${dist} has no app.js: run node build.mjs first`)
  const server = http.createServer((req, res) => {
    // origin-form targets only ("/path?query"): not "http://host/..." nor "//host/..."
    if (!req.url.startsWith('/') || req.url.startsWith('//')) return sendJson(res, 400, { message: 'bad request target' })
    const path = new URL(req.url, 'http://x').pathname
    if (path === '/authorise') {
      const ok = !token || req.headers.authorization === `Bearer ${token}`
      res.writeHead(ok ? 204 : 401, { 'cache-control': 'no-store' })
      return res.end()
    }
    if (path === '/v1/shape') {
      if (!secret) return sendJson(res, 404, { message: 'no proxy here: SHAPE_SYNC_SECRET is not set' })
      return proxyShape({ upstream, secret, token }, req, res)
    }
    return serveStatic(dist, req, res)
  })
  return new Promise((resolve, reject) => {
    server.once('error', reject)
    server.listen(port, 'localhost', () => {
      resolve({ server, url: `http://localhost:${server.address().port}` })
    })
  })
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const { url } = await startExample()
  const upstream = process.env.SHAPE_SYNC_URL ?? 'http://localhost:3000'
  console.log(`the example: ${url}/?server=${encodeURIComponent(upstream)}`)
  console.log(`its 12 live shapes: ${url}/?server=${encodeURIComponent(upstream)}#/many`)
  if (process.env.SHAPE_SYNC_SECRET) {
    const token = process.env.EXAMPLE_TOKEN
    console.log(`through the proxy here: ${url}/?server=${encodeURIComponent(url)}${token ? '&token=' + token : ''}`)
  }
}
