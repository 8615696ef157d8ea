/*-------------------------------------------------------------------------
 *
 * status_page.c
 *		GET /: the operator's page, built into the server.
 *
 * This file runs on libmicrohttpd threads and must not call into
 * PostgreSQL.
 *
 * One HTML page with its style and script inline: no build step, nothing
 * fetched from elsewhere.  The page reads /metrics (the same text
 * Prometheus scrapes) every few seconds and shows shapes, connections,
 * admission, the decoder's lag, request rates and log memory; rates are
 * the counters' differences over the last interval, computed in the
 * browser, so the server keeps nothing for the page.  It is protected as
 * /metrics is (http_request.c checks the secret before it gets here): the
 * page passes its own secret= or api_secret= on to its /metrics requests,
 * and `refresh=` sets the interval (2 s; 1 to 60).  Values are written as
 * text, never as markup; the content security policy allows the inline
 * style and script and requests to this origin only, and no framing; no
 * referrer leaves the page (its address may hold the secret).
 *
 * The page is a constant: serving it copies nothing.
 *
 * IDENTIFICATION
 *	  src/net/status_page.c
 *
 *-------------------------------------------------------------------------
 */
#include "status_page.h"

#include "http_respond.h"

#ifdef POSTGRES_H
#error "status_page.c runs on HTTP threads and must not include postgres.h"
#endif

static const char status_page_html[] =
	"<!doctype html>\n"
	"<html lang='en'>\n"
	"<head>\n"
	"<meta charset='utf-8'>\n"
	"<meta name='viewport' content='width=device-width, initial-scale=1'>\n"
	"<title>shape_sync status</title>\n"
	"<style>\n"
	"body { font: 14px/1.45 system-ui, sans-serif; margin: 0; background: #f4f5f7; color: #1d2433; }\n"
	"header { display: flex; flex-wrap: wrap; gap: 6px 18px; align-items: baseline; padding: 12px 20px;\n"
	"  background: #1d2433; color: #fff; }\n"
	"header h1 { font-size: 18px; margin: 0; }\n"
	"header span { color: #c5cad3; }\n"
	"#state { margin-left: auto; font-weight: 600; }\n"
	"#state.ok { color: #7be495; }\n"
	"#state.bad { color: #ff8a80; }\n"
	"main { display: grid; grid-template-columns: repeat(auto-fill, minmax(250px, 1fr)); gap: 14px;\n"
	"  padding: 20px; }\n"
	"section { background: #fff; border-radius: 8px; padding: 12px 16px; box-shadow: 0 1px 2px #0002; }\n"
	"h2 { font-size: 12px; text-transform: uppercase; letter-spacing: .06em; color: #5b6475;\n"
	"  margin: 0 0 8px; }\n"
	"dl { display: grid; grid-template-columns: 1fr auto; gap: 3px 12px; margin: 0; }\n"
	"dt { color: #3b4252; }\n"
	"dd { margin: 0; text-align: right; font-variant-numeric: tabular-nums; font-weight: 600; }\n"
	"footer { padding: 0 20px 20px; color: #5b6475; font-size: 12px; }\n"
	"</style>\n"
	"</head>\n"
	"<body>\n"
	"<header><h1>shape_sync</h1><span id='version'></span><span id='updated'></span>\n"
	"<span id='state'>loading</span></header>\n"
	"<main>\n"
	"<section><h2>Shapes</h2><dl>\n"
	"<dt>ready</dt><dd id='shapes-ready'></dd>\n"
	"<dt>taking their snapshot</dt><dd id='shapes-snapshotting'></dd>\n"
	"<dt>failed</dt><dd id='shapes-failed'></dd>\n"
	"<dt>log held</dt><dd id='shape-log-bytes'></dd>\n"
	"<dt>changes logged / s</dt><dd id='shape-changes-rate'></dd>\n"
	"<dt>evicted, rotated (all)</dt><dd id='shapes-gone'></dd>\n"
	"</dl></section>\n"
	"<section><h2>Connections</h2><dl>\n"
	"<dt>open</dt><dd id='connections'></dd>\n"
	"<dt>live requests waiting</dt><dd id='live-waiters'></dd>\n"
	"<dt>refused / s</dt><dd id='connections-refused-rate'></dd>\n"
	"<dt>closed as stalled (all)</dt><dd id='connections-reaped'></dd>\n"
	"</dl></section>\n"
	"<section><h2>Admission</h2><dl>\n"
	"<dt>initial requests</dt><dd id='admission-initial'></dd>\n"
	"<dt>other requests</dt><dd id='admission-existing'></dd>\n"
	"<dt>turned away / s</dt><dd id='admission-rejected-rate'></dd>\n"
	"</dl></section>\n"
	"<section><h2>Decoder</h2><dl>\n"
	"<dt>WAL not yet decoded</dt><dd id='decoder-lag'></dd>\n"
	"<dt>commit to shape logs</dt><dd id='decoder-commit-lag'></dd>\n"
	"<dt>transactions / s</dt><dd id='decoder-transactions-rate'></dd>\n"
	"<dt>row changes / s</dt><dd id='decoder-changes-rate'></dd>\n"
	"<dt>slot behind decoding</dt><dd id='slot-lag'></dd>\n"
	"</dl></section>\n"
	"<section><h2>Requests</h2><dl>\n"
	"<dt>requests / s</dt><dd id='requests-rate'></dd>\n"
	"<dt>2xx, 4xx, 5xx / s</dt><dd id='requests-by-status'></dd>\n"
	"<dt>errors / s</dt><dd id='errors-rate'></dd>\n"
	"<dt>response bytes / s</dt><dd id='response-bytes-rate'></dd>\n"
	"</dl></section>\n"
	"<section><h2>Log memory</h2><dl>\n"
	"<dt>in use</dt><dd id='log-memory-used'></dd>\n"
	"<dt>of</dt><dd id='log-memory-total'></dd>\n"
	"<dt>snapshots / s</dt><dd id='snapshots-rate'></dd>\n"
	"<dt>log fsyncs / s</dt><dd id='fsyncs-rate'></dd>\n"
	"</dl></section>\n"
	"</main>\n"
	"<footer>From <a id='metrics-link' href='metrics'>/metrics</a>, every <span id='every'></span> s.\n"
	"Rates are over the last interval.</footer>\n"
	"<script>\n"
	"'use strict';\n"
	"const asked = new URLSearchParams(location.search);\n"
	"const pass = new URLSearchParams();\n"
	"for (const k of ['secret', 'api_secret'])\n"
	"  if (asked.has(k)) pass.set(k, asked.get(k));\n"
	"const every = Math.min(60, Math.max(1, Number(asked.get('refresh')) || 2));\n"
	"const source = 'metrics' + (String(pass) ? '?' + pass : '');\n"
	"let previous = null;\n"
	"\n"
	"function parse(text) {\n"
	"  const all = new Map();\n"
	"  for (const line of text.split('\\n')) {\n"
	"    const m = /^([a-z_:]+)(?:\\{(.*)\\})? (\\S+)$/.exec(line);\n"
	"    if (!m) continue;\n"
	"    const labels = {};\n"
	"    for (const l of (m[2] || '').matchAll(/([a-z_]+)=\\u0022((?:[^\\u0022\\\\]|\\\\.)*)\\u0022/g))\n"
	"      labels[l[1]] = l[2];\n"
	"    if (!all.has(m[1])) all.set(m[1], []);\n"
	"    all.get(m[1]).push({ labels, value: Number(m[3]) });\n"
	"  }\n"
	"  return all;\n"
	"}\n"
	"// the sum of a metric's series whose labels include all of `match`\n"
	"function total(all, name, match = {}) {\n"
	"  let sum = 0;\n"
	"  for (const s of all.get(name) || [])\n"
	"    if (Object.entries(match).every(([k, v]) => s.labels[k] === v)) sum += s.value;\n"
	"  return sum;\n"
	"}\n"
	"function rate(now, name, match) {\n"
	"  if (!previous) return null;\n"
	"  const d = total(now.all, name, match) - total(previous.all, name, match);\n"
	"  return d < 0 ? null : d / ((now.at - previous.at) / 1000);\n"
	"}\n"
	"const count = (n) => (n === null ? '\\u2013' : Math.round(n).toLocaleString('en-US'));\n"
	"const perSecond = (n) => (n === null ? '\\u2013' : n < 10 ? n.toFixed(1) : count(n));\n"
	"function bytes(n) {\n"
	"  if (n === null) return '\\u2013';\n"
	"  const units = ['B', 'kB', 'MB', 'GB', 'TB'];\n"
	"  let u = 0;\n"
	"  while (n >= 1024 && u < units.length - 1) { n /= 1024; u++; }\n"
	"  return (u ? n.toFixed(1) : n) + ' ' + units[u];\n"
	"}\n"
	"function show(id, text) { document.getElementById(id).textContent = text; }\n"
	"\n"
	"function render(now) {\n"
	"  const a = now.all;\n"
	"  show('shapes-ready', count(total(a, 'shape_sync_shapes', { state: 'ready' })));\n"
	"  show('shapes-snapshotting', count(total(a, 'shape_sync_shapes', { state: 'snapshotting' })));\n"
	"  show('shapes-failed', count(total(a, 'shape_sync_shapes', { state: 'failed' })));\n"
	"  show('shape-log-bytes', bytes(total(a, 'shape_sync_shape_log_bytes')));\n"
	"  show('shape-changes-rate', perSecond(rate(now, 'shape_sync_shape_changes_total')));\n"
	"  show('shapes-gone', count(total(a, 'shape_sync_shape_evictions_total')) + ', ' +\n"
	"    count(total(a, 'shape_sync_shape_rotations_total')));\n"
	"  show('connections', count(total(a, 'shape_sync_http_connections')));\n"
	"  show('live-waiters', count(total(a, 'shape_sync_live_waiters')));\n"
	"  show('connections-refused-rate', perSecond(rate(now, 'shape_sync_http_connections_refused_total')));\n"
	"  show('connections-reaped', count(total(a, 'shape_sync_reaped_connections_total')));\n"
	"  for (const kind of ['initial', 'existing'])\n"
	"    show('admission-' + kind, count(total(a, 'shape_sync_admission_in_use', { kind })) + ' of ' +\n"
	"      count(total(a, 'shape_sync_admission_limit', { kind })));\n"
	"  show('admission-rejected-rate', perSecond(rate(now, 'shape_sync_admission_rejected_total')));\n"
	"  show('decoder-lag', bytes(total(a, 'shape_sync_decoder_lag_bytes')));\n"
	"  const lagSum = rate(now, 'shape_sync_decoder_commit_lag_seconds_sum');\n"
	"  const lagCount = rate(now, 'shape_sync_decoder_commit_lag_seconds_count');\n"
	"  show('decoder-commit-lag', lagCount ? (1000 * lagSum / lagCount).toFixed(1) + ' ms' : '\\u2013');\n"
	"  show('decoder-transactions-rate', perSecond(rate(now, 'shape_sync_decoded_transactions_total')));\n"
	"  show('decoder-changes-rate', perSecond(rate(now, 'shape_sync_decoded_changes_total')));\n"
	"  show('slot-lag', bytes(total(a, 'shape_sync_slot_confirmed_flush_lag_bytes')));\n"
	"  show('requests-rate', perSecond(rate(now, 'shape_sync_http_requests_total')));\n"
	"  show('requests-by-status', ['2xx', '4xx', '5xx'].map((status) =>\n"
	"    perSecond(rate(now, 'shape_sync_http_requests_total', { status }))).join(', '));\n"
	"  show('errors-rate', perSecond(rate(now, 'shape_sync_errors_total')));\n"
	"  show('response-bytes-rate', bytes(rate(now, 'shape_sync_http_response_body_bytes_total')));\n"
	"  const memory = total(a, 'shape_sync_log_memory_bytes');\n"
	"  show('log-memory-used', bytes(memory - total(a, 'shape_sync_log_memory_free_bytes')));\n"
	"  show('log-memory-total', bytes(memory));\n"
	"  show('snapshots-rate', perSecond(rate(now, 'shape_sync_snapshots_started_total')));\n"
	"  show('fsyncs-rate', perSecond(rate(now, 'shape_sync_log_fsyncs_total')));\n"
	"}\n"
	"\n"
	"async function refresh() {\n"
	"  const state = document.getElementById('state');\n"
	"  try {\n"
	"    const res = await fetch(source, { cache: 'no-store', signal: AbortSignal.timeout(10000) });\n"
	"    if (!res.ok) throw new Error('/metrics answered ' + res.status);\n"
	"    const now = { all: parse(await res.text()), at: Date.now() };\n"
	"    render(now);\n"
	"    previous = now;\n"
	"    show('version', res.headers.get('electric-server') || '');\n"
	"    show('updated', 'updated ' + new Date(now.at).toLocaleTimeString('en-GB'));\n"
	"    state.textContent = 'serving';\n"
	"    state.className = 'ok';\n"
	"  } catch (e) {\n"
	"    state.textContent = 'unreachable: ' + e.message;\n"
	"    state.className = 'bad';\n"
	"  }\n"
	"  setTimeout(refresh, every * 1000);\n"
	"}\n"
	"show('every', every);\n"
	"document.getElementById('metrics-link').href = source;\n"
	"refresh();\n"
	"</script>\n"
	"</body>\n"
	"</html>\n";

#define STATUS_PAGE_POLICY \
	"default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; " \
	"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

/* GET or HEAD / (libmicrohttpd leaves out a HEAD's body) */
enum MHD_Result
http_respond_status_page(struct MHD_Connection *connection)
{
	struct MHD_Response *response;
	enum MHD_Result ret;
	size_t		len = sizeof(status_page_html) - 1;

	response = MHD_create_response_from_buffer(len, (void *) status_page_html,
											   MHD_RESPMEM_PERSISTENT);
	if (response == NULL)
		return MHD_NO;
	MHD_add_response_header(response, "content-type", "text/html; charset=utf-8");
	MHD_add_response_header(response, "cache-control", "no-store");
	MHD_add_response_header(response, "content-security-policy", STATUS_PAGE_POLICY);
	MHD_add_response_header(response, "referrer-policy", "no-referrer");
	MHD_add_response_header(response, "x-content-type-options", "nosniff");
	MHD_add_response_header(response, "electric-server", SERVER_NAME);
	ret = http_queue(connection, MHD_HTTP_OK, response, len);
	MHD_destroy_response(response);
	return ret;
}
