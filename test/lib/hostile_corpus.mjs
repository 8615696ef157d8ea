// The corpus of hostile requests of hostile.test.mjs, as raw request bytes (latin1 strings):
// [name, raw request, expected status (null: any clean answer, or a close), a pattern the body
// must match (optional)]. test/fuzz/http_fuzz.mjs sends them too, and mutates them.

// hostileCorpus({ table, port, suffix }): the corpus for a table with columns (id int primary
// key, title text), a server on `port`; `suffix` names a table that does not exist.
export function hostileCorpus({ table: T, port, suffix: sfx }) {
  const get = (target, headers = '') =>
    `GET ${target} HTTP/1.1\r\nHost: localhost:${port}\r\nConnection: close\r\n${headers}\r\n`
  const shape = (query) => get(`/v1/shape?table=${T}&offset=-1&${query}`)
  const many = (n, f) => Array.from({ length: n }, (_, i) => f(i)).join('&')

  // [name, raw request, expected status, a pattern the body must match (optional)]
  return [
    ['NUL in table', get(`/v1/shape?table=${T}%00x&offset=-1`), 400, /"table":\["must not contain a NUL byte"\]/],
    ['NUL in where', shape('where=true%00'), 400, /"where":\["must not contain a NUL byte"\]/],
    ['NUL in a param', shape('where=id>$1&params[1]=1%00'), 400, /"params":\["must not contain a NUL byte"\]/],
    ['NUL in columns', shape('columns=id%00'), 400, /"columns"/],
    ['NUL in handle', get(`/v1/shape?table=${T}&offset=0_0&handle=a%00b`), 400, /"handle"/],
    ['NUL in the path', get(`/v1/shape%00?table=${T}&offset=-1`), 404],
    ['NUL in a key', get(`/v1/shape?table%00=x&table=${T}&offset=-1`), 200],
    ['invalid UTF-8 in where', shape('where=title%3D%27%FF%27'), 400, /"where":\["must be valid UTF-8"\]/],
    ['overlong NUL in columns', shape('columns=id,%C0%80'), 400, /must be valid UTF-8/],
    ['a surrogate in a param', shape('where=title%3D$1&params[1]=%ED%A0%80'), 400, /"params":\["must be valid UTF-8"\]/],
    ['invalid UTF-8 in table', get('/v1/shape?table=%FE%FF&offset=-1'), 400, /must be valid UTF-8/],
    // (shape_sync.connection_memory, 10 kB by default, bounds a request target to 2.5 kB:
    // longer ones get 414, from the server or, past the connection's memory, libmicrohttpd)
    ['100 arguments', shape(many(100, (i) => `x${i}=1`)), 400, /too many query parameters/],
    ['1,500 arguments', shape(many(1500, (i) => `x${i}=1`)), 414],
    ['5,000 params[n]', shape(many(5000, (i) => `params[${i + 1}]=${i}`)), 414],
    ['300 params past the limit', shape(many(300, (i) => `params[${i + 300}]=1`)), 414],
    ['a where of 9,000 bytes', shape(`where=${'x'.repeat(9000)}`), 414],
    ['a constant of 500 MB', shape(`where=${encodeURIComponent("title <> repeat('x', 500000000)")}`), 400, /repeat\(\) is not allowed/],
    ['lpad to a gigabyte', shape(`where=${encodeURIComponent("lpad(title, 1000000000) <> ''")}`), 400, /lpad\(\) is not allowed/],
    ['constants folded past the limit', shape(`where=${encodeURIComponent(`title <> ${Array(40).fill('$1').join(' || ')}`)}&params[1]=${'x'.repeat(1700)}`), 400, /shape_sync\.max_where_constant_size/],
    ['a qualified function of another schema', shape(`where=${encodeURIComponent('public.f(id)')}`), 400, /Only functions and operators of pg_catalog/],
    ['a padding cast to a gigabyte', shape(`where=${encodeURIComponent(`'{${Array(100).fill('a').join(',')}}'::char(10485760)[] IS NOT NULL`)}`), 400, /pads every value to more than 1024/],
    ['a padding cast of a column', shape(`where=${encodeURIComponent("(CASE WHEN id IS NULL THEN title ELSE title END)::char(10485760) <> ''")}`), 400, /pads every value/],
    ['a clause that holds too many values', shape(`where=${encodeURIComponent(`length(${Array(30).fill('title').join(' || ')}) > 0`)}`), 400, /at most 256 are allowed/],
    ['jsonb_pretty', shape(`where=${encodeURIComponent("jsonb_pretty(to_jsonb(title)) <> ''")}`), 400, /jsonb_pretty\(\) is not allowed/],
    ['a jsonpath that doubles at each step', shape(`where=${encodeURIComponent("to_jsonb(id) @@ '$[0,0][0,0][0,0] == 1'")}`), 400, /is not allowed/],
    ['a jsonpath of @? that doubles at each step', shape(`where=${encodeURIComponent("to_jsonb(id) @? '$[0,0][0,0][0,0]'")}`), 400, /"where":\["The operator @\? is not allowed in where clauses/],
    ['jsonb_path_exists', shape(`where=${encodeURIComponent("jsonb_path_exists(to_jsonb(title), '$.a')")}`), 400, /"where":\["jsonb_path_exists\(\) is not allowed in where clauses/],
    // a $n past the params given is refused before the parser sizes an array by n (a gigabyte)
    ['a parameter number of 2^28 - 1', shape('where=id%20%3D%20$268435455'), 400, /^\{"message":"Invalid request","errors":\{"params":\["Parameter \$268435455 was not provided"\]\}\}$/],
    ['a parameter number of 2^28', shape('where=id%20%3D%20$268435456'), 400, /^\{"message":"Invalid request","errors":\{"params":\["Parameter \$268435456 was not provided"\]\}\}$/],
    ['a parameter past those given', shape('where=id%20%3D%20$3&params[1]=1&params[2]=2'), 400, /"params":\["Parameter \$3 was not provided"\]/],
    // nothing is looked up outside pg_catalog: object identifier types, qualified collations,
    // the functions that take or return such types (a text search configuration, any schema's)
    ['a regclass literal', shape(`where=${encodeURIComponent(`'public.${T}'::regclass IS NOT NULL`)}`), 400, /"where":\["A cast has type regclass, which where clauses cannot use/],
    ['a regclass of a missing table', shape(`where=${encodeURIComponent("'nosuchschema.nosuch'::regclass IS NOT NULL")}`), 400, /"where":\["A cast has type regclass/],
    ['a regrole literal', shape(`where=${encodeURIComponent("'postgres'::regrole IS NOT NULL")}`), 400, /has type regrole/],
    ['a regconfig literal', shape(`where=${encodeURIComponent("'english'::regconfig IS NOT NULL")}`), 400, /has type regconfig/],
    ['a regtype array', shape(`where=${encodeURIComponent("'{int4}'::regtype[] IS NOT NULL")}`), 400, /has type regtype\[\]/],
    ['to_tsvector with a configuration name', shape(`where=${encodeURIComponent("to_tsvector('public.cfg', title) @@ 'a'::tsquery")}`), 400, /"where":\["to_tsvector\(\) is not allowed in where clauses/],
    ['to_tsvector with a configuration OID', shape(`where=${encodeURIComponent("to_tsvector(3748, title) @@ 'a'::tsquery")}`), 400, /to_tsvector\(\) is not allowed/],
    ['websearch_to_tsquery', shape(`where=${encodeURIComponent("websearch_to_tsquery('simple', title) IS NOT NULL")}`), 400, /websearch_to_tsquery\(\) is not allowed/],
    ['pg_partition_root', shape(`where=${encodeURIComponent('pg_partition_root(id) IS NOT NULL')}`), 400, /pg_partition_root\(\) is not allowed/],
    ['a qualified type of another schema', shape(`where=${encodeURIComponent("title::public.nosuch IS NOT NULL")}`), 400, /"where":\["Only types of pg_catalog are allowed in where clauses"\]/],
    ['a qualified type of another schema in an array cast', shape(`where=${encodeURIComponent("'{}'::information_schema.sql_identifier[] IS NOT NULL")}`), 400, /Only types of pg_catalog/],
    ['a qualified collation of another schema', shape(`where=${encodeURIComponent("title COLLATE public.nosuch < 'b'")}`), 400, /"where":\["Only collations of pg_catalog are allowed in where clauses"\]/],
    // a constant pattern is compiled at validation: 400 now, not a 500 and a WARNING per snapshot
    ['an invalid regular expression', shape(`where=${encodeURIComponent("title ~ '('")}`), 400, /"where":\["invalid regular expression: parentheses \(\) not balanced"\]/],
    ['an invalid SIMILAR TO pattern', shape(`where=${encodeURIComponent("title SIMILAR TO '['")}`), 400, /"where":\["invalid regular expression/],
    ['an invalid regular expression flag', shape(`where=${encodeURIComponent("regexp_like(title, 'a', 'z')")}`), 400, /"where":\["invalid regular expression option: \\"z\\""\]/],
    ['a LIKE pattern ending in its escape', shape(`where=${encodeURIComponent("title LIKE 'a\\'")}`), 400, /"where":\["LIKE pattern must not end with escape character"\]/],
    ['an invalid pattern as a parameter', shape(`where=${encodeURIComponent('title ~* $1')}&params[1]=${encodeURIComponent('a{2,1}')}`), 400, /"where":\["invalid regular expression/],
    ['a cast to xml', shape(`where=${encodeURIComponent("'<a/>'::xml IS DOCUMENT")}`), 400, /could run code of a database user or an extension/],
    ['a no-cors request of another site', get(`/v1/shape?table=${T}&offset=-1`, 'Sec-Fetch-Site: cross-site\r\n'), 403],
    ['a subquery', shape(`where=${encodeURIComponent('id IN (SELECT 1)')}`), 400, /Subqueries are not allowed/],
    ['a subquery on a catalog', shape(`where=${encodeURIComponent("EXISTS (SELECT FROM pg_authid)")}`), 400, /Subqueries are not allowed/],
    ['a volatile function', shape(`where=${encodeURIComponent('random() > 0.5')}`), 400, /immutable/],
    ['pg_sleep', shape(`where=${encodeURIComponent('pg_sleep(30) IS NULL')}`), 400, /immutable/],
    ['pg_read_file', shape(`where=${encodeURIComponent("pg_read_file('/etc/passwd') IS NOT NULL")}`), 400, /immutable/],
    ['current_user', shape(`where=${encodeURIComponent("current_user = 'postgres'")}`), 400, /immutable/],
    ['a second statement', shape(`where=${encodeURIComponent('true; DROP TABLE x')}`), 400, /"where"/],
    ['breaking out of parentheses', shape(`where=${encodeURIComponent('true) OR (1=1')}`), 400, /syntax error/],
    ['a comment to the end', shape(`where=${encodeURIComponent('true --')}`), 200],
    ['a system column', shape(`where=${encodeURIComponent("xmin = '1'")}`), 400, /System columns/],
    ['a whole-row reference', shape(`where=${encodeURIComponent(`${T} IS NOT NULL`)}`), 400, /"where"/],
    ['division by zero in a constant', shape(`where=${encodeURIComponent('id > 1 / 0')}`), 400, /division by zero/],
    ['an aggregate', shape(`where=${encodeURIComponent('count(*) > 0')}`), 400, /aggregate/],
    ['a set-returning function', shape(`where=${encodeURIComponent('id IN (generate_series(1, 3))')}`), 400, /"where"/],
    ['deep nesting', shape(`where=${'('.repeat(1000)}true${')'.repeat(1000)}`), 200],
    ['an unterminated string', shape(`where=${encodeURIComponent("title = 'x")}`), 400, /"where"/],
    ['a catalog table', get('/v1/shape?table=pg_catalog.pg_authid&offset=-1'), 400, /"table"/],
    ['a view of the catalog', get('/v1/shape?table=information_schema.tables&offset=-1'), 400, /"table"/],
    ['a TOAST table', get('/v1/shape?table=pg_toast.pg_toast_1255&offset=-1'), 400, /"table"/],
    ['a table name of 200 bytes', get(`/v1/shape?table=${'t'.repeat(200)}&offset=-1`), 400, /too long/],
    ['300 column names', shape(`columns=${many(300, (i) => `c${i}`).replace(/&/g, ',')}`), 400, /"columns"/],
    ['2,000 column names', shape(`columns=${many(2000, (i) => `c${i}`).replace(/&/g, ',')}`), 414],
    ['a malformed escape', get('/v1/shape?table=%G1&offset=-1'), 400, /"table"/],
    ['a trailing percent', get(`/v1/shape?table=${T}%&offset=-1`), 400, /"table"/],
    ['an offset of three parts', get(`/v1/shape?table=${T}&offset=1_2_3`), 400, /"offset":\["has invalid format"\]/],
    ['an offset that overflows', get(`/v1/shape?table=${T}&offset=99999999999999999999999_0&handle=h`), 400, /"offset"/],
    ['a negative offset part', get(`/v1/shape?table=${T}&offset=0_-1&handle=h`), 400, /"offset"/],
    ['live with offset -1', shape('live=true'), 400, /"live"/],
    ['live_sse without live', get(`/v1/shape?table=${T}&offset=0_0&handle=h&live_sse=true`), 400, /"live_sse"/],
    ['an unknown replica', shape('replica=evil'), 400, /"replica"/],
    ['a handle of 2 kB for a missing table', get(`/v1/shape?table=nosuch_${sfx}&offset=0_0&handle=${'h'.repeat(2000)}`), 400, /"table"/],
    // a request line longer than the connection's memory: libmicrohttpd answers 414 when it can
    // afford to, and closes at once when not even that fits
    ['a handle of 10 kB for a missing table', get(`/v1/shape?table=nosuch_${sfx}&offset=0_0&handle=${'h'.repeat(10000)}`), null],
    ['PUT', `PUT /v1/shape?table=${T}&offset=-1 HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\nConnection: close\r\n\r\n`, 405],
    ['TRACE', `TRACE /v1/shape HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n`, 405],
    ['POST with a body', `POST /v1/shape?table=${T}&offset=-1 HTTP/1.1\r\nHost: localhost\r\nContent-Length: 5\r\nConnection: close\r\n\r\n{"a":`, 400],
    ['DELETE while deletion is off', `DELETE /v1/shape?table=${T} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n`, 405],
    ['an absolute-form target', get(`http://attacker.example/v1/shape?table=${T}&offset=-1`), 404],
    ['a rebinding Host', `GET /v1/shape?table=${T}&offset=-1 HTTP/1.1\r\nHost: attacker.example\r\nConnection: close\r\n\r\n`, 403],
    ['a foreign Origin', get(`/v1/shape?table=${T}&offset=-1`, 'Origin: https://attacker.example\r\n'), 403],
    ['the null Origin', get(`/v1/shape?table=${T}&offset=-1`, 'Origin: null\r\n'), 403],
    ['500 headers', get('/v1/health', Array.from({ length: 500 }, (_, i) => `X-H${i}: ${'v'.repeat(50)}\r\n`).join('')), null],
    ['one header of 400 kB', get('/v1/health', `X-Big: ${'v'.repeat(400000)}\r\n`), null],
    ['no HTTP version', `GET /v1/shape?table=${T}&offset=-1\r\n\r\n`, null],
    ['garbage', '\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03garbage\r\n\r\n', null],
    ['a NUL in the request line hiding 5,000 arguments', `GET /v1/shape\x00?table=${T}&${many(5000, (i) => `a=${i}`)} HTTP/1.1\r\nHost: localhost\r\n\r\n`, null],
    ['a space in the target', `GET /v1/shape?table=a b&offset=-1 HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n`, null],
  ]
}
