--
-- 08_access: what validation refuses so that no shape reads more than its
-- role could with SELECT, and no where clause can bind or fold into
-- something else than what was validated.  validate_shape() and
-- encode_rows() run as the caller, so SET ROLE shows what a role may serve.
--
CREATE TABLE acc (id int PRIMARY KEY, title text, v varchar(10), secret text);
ALTER TABLE acc REPLICA IDENTITY FULL;
INSERT INTO acc VALUES (1, 'a', 'X', 's1'), (2, 'b', 'Y', 's2');
CREATE TABLE acc_rls (id int PRIMARY KEY, owner text);
ALTER TABLE acc_rls REPLICA IDENTITY FULL;
ALTER TABLE acc_rls ENABLE ROW LEVEL SECURITY;
CREATE POLICY acc_rls_own ON acc_rls USING (owner = current_user);
CREATE ROLE acc_reader NOLOGIN;
CREATE ROLE acc_none NOLOGIN;
CREATE ROLE acc_bypass NOLOGIN BYPASSRLS;
GRANT USAGE ON SCHEMA shape_sync TO acc_reader, acc_none, acc_bypass;
GRANT EXECUTE ON FUNCTION shape_sync.validate_shape(text, text, text[], text, text),
    shape_sync.encode_rows(text, text, text[], text) TO acc_reader, acc_none, acc_bypass;
GRANT SELECT (id, title, v) ON acc TO acc_reader;
GRANT SELECT ON acc_rls TO acc_reader, acc_bypass;

-- Column privileges: the shape's columns, its key and its where clause.
SET ROLE acc_reader;
SELECT shape_sync.validate_shape('acc', columns => 'id,title') ->> 'columns' AS columns;
SELECT shape_sync.validate_shape('acc');
SELECT shape_sync.validate_shape('acc', 'secret = ''s1''', columns => 'id,title');
SELECT count(*) FROM shape_sync.encode_rows('acc', columns => 'id,title');
SELECT count(*) FROM shape_sync.encode_rows('acc');
RESET ROLE;

-- No privilege at all on the table.
SET ROLE acc_none;
SELECT shape_sync.validate_shape('acc', columns => 'id');
-- Such a role learns that the table exists, and nothing more: the same
-- answer whatever it asks, before anything about the table's columns, their
-- types or its key is told.
SELECT shape_sync.validate_shape('acc', columns => 'id,nosuch');
SELECT shape_sync.validate_shape('acc', columns => 'title');
SELECT shape_sync.validate_shape('acc', 'nosuch = 1');
SELECT shape_sync.validate_shape('acc', 'title = 1');
SELECT shape_sync.validate_shape('acc', 'id = $1', '{x}');
RESET ROLE;
-- Nor does a role learn the type of a column it may not SELECT from a where
-- clause that reads it.
SET ROLE acc_reader;
SELECT shape_sync.validate_shape('acc', 'secret = 1', columns => 'id,title');
SELECT shape_sync.validate_shape('acc', 'secret ~ ''(''', columns => 'id,title');
SELECT shape_sync.validate_shape('acc', 'nosuch = 1', columns => 'id,title');
RESET ROLE;

-- Row-level security that applies to the role: refused, not filtered.
SET ROLE acc_reader;
SELECT shape_sync.validate_shape('acc_rls');
SELECT count(*) FROM shape_sync.encode_rows('acc_rls');
RESET ROLE;
-- A role with BYPASSRLS is how an operator serves such a table on purpose.
SET ROLE acc_bypass;
SELECT shape_sync.validate_shape('acc_rls') ->> 'relation' AS relation;
RESET ROLE;

-- Functions and operators come from pg_catalog only, whatever else is on the path.
SELECT shape_sync.validate_shape('acc', 'information_schema._pg_char_max_length(25, 14) = 10');
-- A function of the same name in the table's schema does not bind instead.
CREATE FUNCTION public.lower(text) RETURNS text IMMUTABLE LANGUAGE sql AS 'SELECT ''hijacked''';
SELECT shape_sync.validate_shape('acc', 'lower(title) = ''a''') ->> 'where' AS deparsed;
DROP FUNCTION public.lower(text);

-- Nor one that matches better than pg_catalog's: lower(v) on a varchar column
-- would bind to public.lower(varchar) on the session's path; here it is
-- pg_catalog.lower(text), and public.lower(varchar) never runs.
SELECT shape_sync.validate_shape('acc', 'lower(v) = ''x''') ->> 'where' AS deparsed;
CREATE FUNCTION public.lower(varchar) RETURNS text IMMUTABLE LANGUAGE plpgsql
    AS $$BEGIN RAISE EXCEPTION 'public.lower(varchar) ran'; END$$;
SELECT * FROM shape_sync.encode_rows('acc', 'lower(v) = ''x''', columns => 'id,v');
SELECT shape_sync.validate_shape('acc', 'lower(v::text) = ''x''') ->> 'where' AS deparsed;
DROP FUNCTION public.lower(varchar);

-- Constants are folded once, at validation, and bounded.
SELECT shape_sync.validate_shape('acc', 'title <> $1 || $1 || $1',
    ARRAY[(SELECT string_agg('x', '') FROM generate_series(1, 30000))]);
SELECT shape_sync.validate_shape('acc', 'title <> $1 || $1', '{abc}') ->> 'where' AS deparsed;
-- every constant folding makes counts, the intermediate ones too: the
-- limit is met long before the gigabytes these would build
SELECT shape_sync.validate_shape('acc', 'length(' || repeat('$1 || ', 199) || '$1) > 0',
    ARRAY[(SELECT string_agg('x', '') FROM generate_series(1, 1000))]);
-- what one row's evaluation holds is bounded: a column reference counts
-- one, a function or operator that returns no boolean as many as the
-- references beneath it, at most 256 in all
SELECT shape_sync.validate_shape('acc', 'length(' || repeat('title || ', 16) || 'title) > 0') ->> 'where' IS NOT NULL AS accepted;
SELECT shape_sync.validate_shape('acc', 'length(' || repeat('title || ', 24) || 'title) > 0');
SELECT shape_sync.validate_shape('acc', repeat('lower(', 300) || 'title' || repeat(')', 300) || ' = ''''');
SELECT shape_sync.validate_shape('acc', repeat('title = ''a'' OR ', 40) || 'id = 1') ->> 'where' IS NOT NULL AS accepted;
SELECT shape_sync.validate_shape('acc', repeat('title = ''a'' OR ', 300) || 'id = 1');
SELECT shape_sync.validate_shape('acc', 'title IN (' || (SELECT string_agg(quote_literal(g), ',') FROM generate_series(1, 300) g) || ')') ->> 'where' IS NOT NULL AS accepted;
-- character(n) and bit(n) pad every value to n: n is at most 1024, however
-- the type is reached, and before a literal is read as it
SELECT shape_sync.validate_shape('acc', '''a''::char(10485760) IS NOT NULL');
SELECT shape_sync.validate_shape('acc', '''{a,a}''::character(2000)[] IS NOT NULL');
SELECT shape_sync.validate_shape('acc', 'title::char(5000) <> ''''');
SELECT shape_sync.validate_shape('acc', 'bpchar(title, 99999, true) <> ''''');
SELECT shape_sync.validate_shape('acc', 'bpchar(title, id, true) <> ''''');
SELECT shape_sync.validate_shape('acc', '"bit"(id, 100000) IS NOT NULL');
SELECT shape_sync.validate_shape('acc', 'B''1''::bit(83886080) IS NOT NULL');
CREATE DOMAIN public.acc_wide AS char(100000);
CREATE TYPE public.acc_wide_row AS (c char(100000));
SELECT shape_sync.validate_shape('acc', '''a''::public.acc_wide IS NOT NULL');
SELECT shape_sync.validate_shape('acc', '''{"(a)"}''::public.acc_wide_row[] IS NOT NULL');
DROP TYPE public.acc_wide_row;
DROP DOMAIN public.acc_wide;
SELECT shape_sync.validate_shape('acc', 'title::char(10) = ''a''');
SELECT shape_sync.validate_shape('acc', 'string_to_array(title, '''')::char(1024)[] <> ''{}''');
SELECT shape_sync.validate_shape('acc', '''abc''::char(10) = ''abc''') ->> 'where' AS deparsed;
-- numeric constants have at most 1000 digits before or after the point,
-- however they are held: c + 1e131000 is eight bytes of constant
SELECT shape_sync.validate_shape('acc', 'id + 1e131000 > 0');
SELECT shape_sync.validate_shape('acc', 'id + 1e-2000 > 0');
SELECT shape_sync.validate_shape('acc', 'id = ANY(''{1,1e5000}''::numeric[])');
SELECT shape_sync.validate_shape('acc', '''[1e5000]''::jsonb ? title');
SELECT shape_sync.validate_shape('acc', 'id::numeric <@ ''[0,1e5000)''::numrange');
SELECT shape_sync.validate_shape('acc', 'id::numeric <@ $1::nummultirange', '{"{[0,1e5000)}"}');
CREATE TYPE public.acc_num AS (n numeric);
SELECT shape_sync.validate_shape('acc', 'ROW(id::numeric)::public.acc_num = ANY(''{"(1e5000)"}''::public.acc_num[])');
SELECT shape_sync.validate_shape('acc', '''(1e999)''::public.acc_num IS NOT NULL') ->> 'where' IS NOT NULL AS accepted;
DROP TYPE public.acc_num;
-- also made by folding
SELECT shape_sync.validate_shape('acc', 'id = $1::numeric * 1e999', '{1e999}');
-- and refused before folding, which would multiply them first
SELECT shape_sync.validate_shape('acc', 'id = (1e65000 + 1) * (1e65000 + 1)');
SELECT shape_sync.validate_shape('acc', 'id + 1e999 > 0 AND id <> ''NaN''::numeric') ->> 'where' IS NOT NULL AS accepted;
SELECT shape_sync.validate_shape('acc', 'exp(id::numeric) > 1');
SELECT shape_sync.validate_shape('acc', 'exp(id::float8) > 1') ->> 'where' IS NOT NULL AS accepted;
-- no values of type xml, however made (libxml2 allocates outside PostgreSQL)
SELECT shape_sync.validate_shape('acc', 'xpath(''/a'', xmlelement(name a, title)) IS NOT NULL');
SELECT shape_sync.validate_shape('acc', 'id > 1 / 0');
SELECT count(*) FROM shape_sync.encode_rows('acc', 'id > 1 + $1', '{0}');

-- Subqueries other than IN (SELECT ...) are refused before they could name anything.
SELECT shape_sync.validate_shape('acc', 'EXISTS (SELECT FROM acc_rls)');

-- Functions and operators of other schemas are refused by name, before analysis.
CREATE FUNCTION public.acc_plus(int) RETURNS int IMMUTABLE LANGUAGE sql AS 'SELECT $1 + 1';
SELECT shape_sync.validate_shape('acc', 'acc_plus(id) = 2');
SELECT shape_sync.validate_shape('acc', 'public.acc_plus(id) = 2');
SELECT shape_sync.validate_shape('acc', 'id OPERATOR(public.+) 1 = 2');
SELECT shape_sync.validate_shape('acc', 'id OPERATOR(pg_catalog.+) 1 = 2') ->> 'where' AS deparsed;
DROP FUNCTION public.acc_plus(int);

-- No code of a database user runs while a literal or a parameter is read:
-- a domain with a CHECK, directly or as the field of a composite or the
-- element of an array, is refused before its input runs.
CREATE FUNCTION public.acc_leak(text) RETURNS bool IMMUTABLE LANGUAGE plpgsql
    AS $$BEGIN RAISE EXCEPTION 'acc_leak ran as %', current_user; END$$;
CREATE DOMAIN public.acc_leaky AS text CHECK (public.acc_leak(VALUE));
CREATE TYPE public.acc_wrap AS (v public.acc_leaky);
CREATE DOMAIN public.acc_email AS text CHECK (VALUE ~ '@');
CREATE DOMAIN public.acc_plain AS text;
CREATE TABLE acc_types (id int PRIMARY KEY, w public.acc_wrap, e public.acc_email, x xml,
    p public.acc_plain);
ALTER TABLE acc_types REPLICA IDENTITY FULL;
SELECT shape_sync.validate_shape('acc_types', '$1::public.acc_leaky IS NOT NULL', '{x}');
SELECT shape_sync.validate_shape('acc_types', '''(x)''::public.acc_wrap IS NOT NULL');
SELECT shape_sync.validate_shape('acc_types', '''{x}''::public.acc_leaky[] IS NOT NULL');
SELECT shape_sync.validate_shape('acc_types', 'w = ''(x)''');
SELECT shape_sync.validate_shape('acc_types', 'x IS DOCUMENT');
SELECT shape_sync.validate_shape('acc_types', '''<a/>''::xml IS DOCUMENT');
-- even a CHECK of pg_catalog functions only (they may run SQL: query_to_xml)
SELECT shape_sync.validate_shape('acc_types', 'e = ''a@b''', columns => 'id,e');
-- a domain without a CHECK is fine, and so are the system's own domains
SELECT shape_sync.validate_shape('acc_types', 'p = ''a''', columns => 'id,p') ->> 'where' AS deparsed;
SELECT shape_sync.validate_shape('acc_types', 'p = ''a''::information_schema.sql_identifier',
    columns => 'id,p') ->> 'where' AS deparsed;
-- a qualified name that is no column would be functional notation, acc_leak(acc_types)
SELECT shape_sync.validate_shape('acc_types', 'acc_types.acc_leak');
DROP TABLE acc_types;
DROP TYPE public.acc_wrap;
DROP DOMAIN public.acc_leaky, public.acc_email, public.acc_plain;
DROP FUNCTION public.acc_leak(text);

-- Functions whose output or time can grow far beyond their input.
SELECT shape_sync.validate_shape('acc', 'title <> repeat(''x'', 10)');
SELECT shape_sync.validate_shape('acc', 'lpad(title, 1000000000) <> ''''');
SELECT shape_sync.validate_shape('acc', 'replace(title, ''a'', $1) <> ''''', '{xxxx}');
SELECT shape_sync.validate_shape('acc', 'format(''%1000000s'', title) <> ''''');
SELECT shape_sync.validate_shape('acc', 'factorial(id) > 0');
SELECT shape_sync.validate_shape('acc', 'jsonb_pretty(to_jsonb(title)) <> ''''');
SELECT shape_sync.validate_shape('acc', 'jsonb_path_query_array(to_jsonb(id), ''$[0,0][0,0]'') IS NOT NULL');
SELECT shape_sync.validate_shape('acc', 'to_jsonb(id) @@ ''$[0,0] == 1''');
SELECT shape_sync.validate_shape('acc', 'ts_rewrite(''a''::tsquery, ''a''::tsquery, ''b''::tsquery) IS NOT NULL');
SELECT shape_sync.validate_shape('acc', 'ts_headline(''simple'', title, ''a:*''::tsquery, ''HighlightAll=true'') IS NOT NULL');

SELECT shape_sync.validate_shape('acc', 'id::numeric ^ 100000 > 0');
SELECT shape_sync.validate_shape('acc', 'power(id::float8, 2) > 4') ->> 'where' AS deparsed;

DROP TABLE acc, acc_rls;
REVOKE ALL ON FUNCTION shape_sync.validate_shape(text, text, text[], text, text),
    shape_sync.encode_rows(text, text, text[], text) FROM acc_reader, acc_none, acc_bypass;
REVOKE ALL ON SCHEMA shape_sync FROM acc_reader, acc_none, acc_bypass;
DROP ROLE acc_reader, acc_none, acc_bypass;
