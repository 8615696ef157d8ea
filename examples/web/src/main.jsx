// The example: @electric-sql/react's useShape against shape_sync, no other client code.
//
//   #/       a live table of items, filtered by title as you type (a where clause with $1)
//   #/many   12 live shapes at once, one per group of items (id % 12 = $1): over HTTP/1.1 a
//            browser opens at most 6 connections to one origin, so put HTTP/2 in front
//            (examples/nginx/) for this page to stay live
//
// Settings, in the page's address:
//   server=URL   where /v1/shape is (default http://localhost:3000); an authorising proxy
//                (serve.mjs with SHAPE_SYNC_SECRET set) is the page's own origin
//   token=T      sent as "Authorization: Bearer T" (what such a proxy checks)
//   table=NAME   the table (default items, from scripts/sample-data.sql)
//   live=sse     live updates over server-sent events instead of long polls

import { useState } from 'react'
import { createRoot } from 'react-dom/client'
import { useShape } from '@electric-sql/react'

const settings = new URLSearchParams(location.search)
const server = (settings.get('server') ?? 'http://localhost:3000').replace(/\/+$/, '')
const token = settings.get('token')
const table = settings.get('table') ?? 'items'
const liveSse = settings.get('live') === 'sse'
const GROUPS = 12

function shapeOptions(params) {
  return {
    url: `${server}/v1/shape`,
    params: { table, columns: ['id', 'title', 'done'], ...params },
    liveSse,
    headers: token ? { Authorization: `Bearer ${token}` } : undefined,
  }
}

function Status({ isLoading, error, count }) {
  if (error) return <p className="status error" data-testid="error">{String(error.message ?? error)}</p>
  if (isLoading) return <p className="status">loading…</p>
  return <p className="status" data-testid="count">{count} rows, live</p>
}

function ItemsTable() {
  const [filter, setFilter] = useState('')
  const where = filter ? { where: 'title ILIKE $1', params: [`%${filter}%`] } : {}
  const { data, isLoading, error } = useShape(shapeOptions(where))
  const rows = [...data].sort((a, b) => a.id - b.id)
  return (
    <>
      <label>
        Title contains{' '}
        <input data-testid="filter" value={filter} onChange={(e) => setFilter(e.target.value)} />
      </label>
      <Status isLoading={isLoading} error={error} count={rows.length} />
      <table>
        <thead>
          <tr><th>id</th><th>title</th><th>done</th></tr>
        </thead>
        <tbody>
          {rows.map((row) => (
            <tr key={row.id} data-testid={`row-${row.id}`}>
              <td>{row.id}</td><td>{row.title}</td><td>{row.done ? 'yes' : 'no'}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </>
  )
}

function Group({ k }) {
  const { data, isLoading, error } = useShape(shapeOptions({ where: `id % ${GROUPS} = $1`, params: [String(k)] }))
  const titles = [...data].sort((a, b) => a.id - b.id).map((row) => row.title)
  return (
    <div className="card" data-testid={`group-${k}`}>
      <strong>group {k}</strong>
      <Status isLoading={isLoading} error={error} count={titles.length} />
      <div data-testid={`titles-${k}`}>{titles.join(' · ')}</div>
    </div>
  )
}

function ManyShapes() {
  return (
    <div className="grid">
      {Array.from({ length: GROUPS }, (_, k) => <Group key={k} k={k} />)}
    </div>
  )
}

function App() {
  const [route, setRoute] = useState(location.hash)
  window.onhashchange = () => setRoute(location.hash)
  const many = route === '#/many'
  return (
    <>
      <header>
        <strong>shape_sync example</strong>
        <a href={`${location.search}#/`}>live table</a>
        <a href={`${location.search}#/many`}>{GROUPS} live shapes</a>
        <span>{liveSse ? 'SSE' : 'long polling'} · {table}</span>
      </header>
      <main>{many ? <ManyShapes /> : <ItemsTable />}</main>
    </>
  )
}

createRoot(document.getElementById('root')).render(<App />)
