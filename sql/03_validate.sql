--
-- 03_validate: shape_sync.validate_shape(), the validation GET /v1/shape
-- runs: tables, columns, where clauses, parameters and replica modes.
--
CREATE TABLE items (
    id       integer PRIMARY KEY,
    title    text NOT NULL,
    priority integer,
    tags     text[],
    created  timestamptz,
    flag     boolean,
    u        uuid,
    d        date,
    name     varchar(20),
    code     char(3),
    amount   numeric(10,2),
    at       timestamp(3)
);
CREATE TABLE pairs (
    a integer,
    b text,
    c integer NOT NULL,
    PRIMARY KEY (b, a)
);
CREATE TABLE nopk (x integer, y text);
CREATE SCHEMA "My Schema";
CREATE TABLE "My Schema"."my table, ""quoted""" (
    "Id"   integer PRIMARY KEY,
    "a col" text,
    "b,c"   text,
    "d""e"  text
);

-- Whole table: relation, every column, no where, default replica, schema.
SELECT jsonb_pretty(shape_sync.validate_shape('items'));
-- Each part of the result, so that the jsonb formatting does not hide it.
SELECT key, value
FROM jsonb_each(shape_sync.validate_shape('items') - 'schema')
ORDER BY key;
SELECT key, value
FROM jsonb_each(shape_sync.validate_shape('items') -> 'schema')
ORDER BY key;

-- Composite primary key, in key order (b, a): pk_index follows the key.
SELECT jsonb_pretty(shape_sync.validate_shape('pairs'));
-- No primary key: no pk_index anywhere.
SELECT jsonb_pretty(shape_sync.validate_shape('nopk'));
-- Qualified names; unquoted names are folded to lower case.
SELECT shape_sync.validate_shape('public.pairs') ->> 'relation' AS relation;
SELECT shape_sync.validate_shape('PUBLIC.Pairs') ->> 'relation' AS relation;
SELECT shape_sync.validate_shape('"public"."pairs"') ->> 'relation' AS relation;
-- Quoted names with capitals, spaces, commas and quotes.
SELECT jsonb_pretty(shape_sync.validate_shape('"My Schema"."my table, ""quoted"""'));
SELECT jsonb_pretty(shape_sync.validate_shape('"My Schema"."my table, ""quoted"""',
                                 columns => '"Id","b,c","d""e"'));
-- A malformed table name.
SELECT jsonb_pretty(shape_sync.validate_shape('a.b.c'));
SELECT jsonb_pretty(shape_sync.validate_shape('"unterminated'));
SELECT jsonb_pretty(shape_sync.validate_shape(''));
SELECT jsonb_pretty(shape_sync.validate_shape(NULL));

-- The default schema is public, whatever the search_path.
CREATE SCHEMA elsewhere;
CREATE TABLE elsewhere.only_here (id integer PRIMARY KEY);
SET search_path = elsewhere, public;
SELECT jsonb_pretty(shape_sync.validate_shape('only_here'));
SELECT shape_sync.validate_shape('elsewhere.only_here') ->> 'relation' AS relation;
RESET search_path;
DROP SCHEMA elsewhere CASCADE;

-- Nonexistent tables.
SELECT jsonb_pretty(shape_sync.validate_shape('nonexistent'));
SELECT jsonb_pretty(shape_sync.validate_shape('Items_X.nonexistent'));
SELECT jsonb_pretty(shape_sync.validate_shape('"Items"'));

-- Only user tables: ordinary and partitioned ones.
CREATE VIEW items_view AS SELECT * FROM items;
CREATE MATERIALIZED VIEW items_mv AS SELECT * FROM items;
CREATE SEQUENCE items_seq;
CREATE TABLE parted (id integer PRIMARY KEY, v text) PARTITION BY RANGE (id);
CREATE TABLE parted_1 PARTITION OF parted FOR VALUES FROM (0) TO (100);
SELECT jsonb_pretty(shape_sync.validate_shape('items_view'));
SELECT jsonb_pretty(shape_sync.validate_shape('items_mv'));
SELECT jsonb_pretty(shape_sync.validate_shape('items_seq'));
SELECT jsonb_pretty(shape_sync.validate_shape('pg_catalog.pg_class'));
-- A partitioned table is served (its partitions' rows), and so is a partition.
SELECT jsonb_pretty(shape_sync.validate_shape('parted'));
SELECT jsonb_pretty(shape_sync.validate_shape('parted_1'));

-- Columns.
SELECT jsonb_pretty(shape_sync.validate_shape('items', columns => 'id,title'));
SELECT shape_sync.validate_shape('items', columns => '"id", "title"') -> 'columns' AS columns;
-- Order of the list does not matter: columns come in table order.
SELECT shape_sync.validate_shape('items', columns => 'title,priority,id') -> 'columns' AS columns;
-- Unquoted names are folded to lower case.
SELECT shape_sync.validate_shape('items', columns => 'ID,Title') -> 'columns' AS columns;
-- Duplicates collapse.
SELECT shape_sync.validate_shape('items', columns => 'id,title,id,"title"') -> 'columns' AS columns;
-- Every primary key column is required.
SELECT jsonb_pretty(shape_sync.validate_shape('items', columns => 'title'));
SELECT jsonb_pretty(shape_sync.validate_shape('pairs', columns => 'c'));
SELECT jsonb_pretty(shape_sync.validate_shape('pairs', columns => 'a,c'));
SELECT shape_sync.validate_shape('pairs', columns => 'c,a,b') -> 'columns' AS columns;
-- Unknown columns, system columns, and a quoted name with the wrong case.
SELECT jsonb_pretty(shape_sync.validate_shape('items', columns => 'id,nope'));
SELECT jsonb_pretty(shape_sync.validate_shape('items', columns => 'id,nope,"Title"'));
SELECT jsonb_pretty(shape_sync.validate_shape('items', columns => 'id,xmin'));
SELECT jsonb_pretty(shape_sync.validate_shape('items', columns => 'id,ctid'));
-- A table without a primary key is keyed by all its columns: a column list
-- must name every one (the key would send the others anyway).
SELECT jsonb_pretty(shape_sync.validate_shape('nopk', columns => 'y'));
SELECT shape_sync.validate_shape('nopk', columns => 'y,x') -> 'columns' AS columns;
-- Malformed lists.
SELECT jsonb_pretty(shape_sync.validate_shape('items', columns => ''));
SELECT jsonb_pretty(shape_sync.validate_shape('items', columns => 'id,,title'));
SELECT jsonb_pretty(shape_sync.validate_shape('items', columns => 'id,"title'));

-- Where clauses that are accepted, deparsed by PostgreSQL.
SELECT w, shape_sync.validate_shape('items', w) ->> 'where' AS deparsed
FROM (VALUES
    ('id > 5'),
    ('title ILIKE ''a%'''),
    ('id = ANY(''{1,2}'')'),
    ('id IN (1, 2, 3)'),
    ('priority IS NULL OR priority BETWEEN 1 AND 3'),
    ('NOT flag'),
    ('items.id > 5'),
    ('lower(title) = ''x'' AND length(title) < 10'),
    ('tags @> ARRAY[''a'']'),
    ('title || ''x'' LIKE ''%x'''),
    ('amount > 1.5'),
    ('code = ''ab'''),
    ('true'),
    ('null'),
    ('  id  >  5  -- trailing comment'),
    ('id > /* inline */ 5')
) AS t(w)
ORDER BY w;
-- NULL and empty where clauses mean no where clause.
SELECT shape_sync.validate_shape('items', NULL) -> 'where' AS "where";
SELECT shape_sync.validate_shape('items', '') -> 'where' AS "where";
-- Quoted identifiers in the where clause.
SELECT shape_sync.validate_shape('"My Schema"."my table, ""quoted"""',
    '"a col" = ''x'' AND "b,c" <> "d""e" AND "Id" > 0') ->> 'where' AS deparsed;
SELECT shape_sync.validate_shape('"My Schema"."my table, ""quoted"""',
    '"my table, ""quoted"""."Id" = 1') ->> 'where' AS deparsed;

-- Parameters, bound as constants of the type the parser infers.
SELECT w, p, shape_sync.validate_shape('items', w, p) ->> 'where' AS deparsed
FROM (VALUES
    ('id = $1',                         '{7}'::text[]),
    ('id = $1 OR priority = $1',        '{7}'),
    ('id > $1 AND id < $2',             '{1,10}'),
    ('title = $1',                      '{"it''s \"x\""}'),
    ('title = $1',                      '{""}'),
    ('flag = $1',                       '{true}'),
    ('flag = $1',                       '{f}'),
    ('u = $1',                          '{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11}'),
    ('created > $1',                    '{2020-01-01 00:00:00+00}'),
    ('at < $1',                         '{2020-01-01 12:34:56.789}'),
    ('amount = $1',                     '{12.50}'),
    ('tags @> $1',                      '{"{a,b}"}'),
    ('id = ANY($1)',                    '{"{1,2,3}"}'),
    ('id = $1::int + 1',                '{41}'),
    ('$1 = ''x''',                      '{x}'),
    ('title = $2',                      '{unused,second}'),
    ('id = 1',                          '{extra}')
) AS t(w, p)
ORDER BY w, p;

-- Where clauses that are rejected.
-- A syntax error, reported at its position in the internal query.
SELECT jsonb_pretty(shape_sync.validate_shape('items', '1 x 1'));
SELECT jsonb_pretty(shape_sync.validate_shape('items', 'id >'));
SELECT jsonb_pretty(shape_sync.validate_shape('items', '   '));
SELECT jsonb_pretty(shape_sync.validate_shape('items', 'true) OR (true'));
-- An unknown column.
SELECT jsonb_pretty(shape_sync.validate_shape('items', 'nope = 1'));
SELECT jsonb_pretty(shape_sync.validate_shape('items', 'other.id = 1'));
-- Subqueries other than IN of one table (docs/subqueries.md), aggregates, window functions, set-returning functions.
SELECT jsonb_pretty(shape_sync.validate_shape('items', 'id IN (SELECT 1)'));
SELECT jsonb_pretty(shape_sync.validate_shape('items', 'EXISTS (SELECT FROM pairs)'));
SELECT jsonb_pretty(shape_sync.validate_shape('items', 'count(*) > 0'));
SELECT jsonb_pretty(shape_sync.validate_shape('items', 'row_number() OVER () > 1'));
SELECT jsonb_pretty(shape_sync.validate_shape('items', 'generate_series(1,2) > 1'));
-- Volatile and stable functions.
SELECT jsonb_pretty(shape_sync.validate_shape('items', 'random() > 0.5'));
SELECT jsonb_pretty(shape_sync.validate_shape('items', 'now() > ''2020-01-01'''));
SELECT jsonb_pretty(shape_sync.validate_shape('items', 'created > ''2020-01-01'''));
SELECT jsonb_pretty(shape_sync.validate_shape('items', 'created::text = ''x'''));
-- User-defined functions and operators, even immutable ones.
CREATE FUNCTION plus_one(integer) RETURNS integer
    LANGUAGE sql IMMUTABLE AS 'SELECT $1 + 1';
CREATE OPERATOR ### (LEFTARG = integer, RIGHTARG = integer, FUNCTION = int4eq);
CREATE FUNCTION my_eq(integer, integer) RETURNS boolean
    LANGUAGE sql IMMUTABLE AS 'SELECT $1 = $2';
CREATE OPERATOR #=# (LEFTARG = integer, RIGHTARG = integer, FUNCTION = my_eq);
SELECT jsonb_pretty(shape_sync.validate_shape('items', 'public.plus_one(id) = 2'));
SELECT jsonb_pretty(shape_sync.validate_shape('items', 'id OPERATOR(public.#=#) 2'));
-- (unqualified, names resolve in pg_catalog only)
SELECT jsonb_pretty(shape_sync.validate_shape('items', 'plus_one(id) = 2'));
-- An operator of another schema is refused by its name, even over a built-in
-- function; unqualified, names resolve in pg_catalog only.
SELECT shape_sync.validate_shape('items', 'id OPERATOR(public.###) 2') ->> 'where' AS deparsed;
SELECT shape_sync.validate_shape('items', 'id ### 2') ->> 'where' AS deparsed;
-- System columns and whole-row references.
SELECT jsonb_pretty(shape_sync.validate_shape('items', 'xmin = ''1'''));
SELECT jsonb_pretty(shape_sync.validate_shape('items', 'ctid = ''(0,1)'''));
SELECT jsonb_pretty(shape_sync.validate_shape('items', 'items IS NOT NULL'));
SELECT jsonb_pretty(shape_sync.validate_shape('items', 'items.* IS NOT NULL'));
-- More than one statement, or more than an expression.
SELECT jsonb_pretty(shape_sync.validate_shape('items', 'true; select 1'));
SELECT jsonb_pretty(shape_sync.validate_shape('items', 'true;'));
SELECT jsonb_pretty(shape_sync.validate_shape('items', 'true order by 1'));
SELECT jsonb_pretty(shape_sync.validate_shape('items', 'true limit 1'));
SELECT jsonb_pretty(shape_sync.validate_shape('items', 'true offset 1'));
SELECT jsonb_pretty(shape_sync.validate_shape('items', 'true union select 1'));
SELECT jsonb_pretty(shape_sync.validate_shape('items', 'true group by 1'));
SELECT jsonb_pretty(shape_sync.validate_shape('items', 'true having true'));
SELECT jsonb_pretty(shape_sync.validate_shape('items', 'true window w as ()'));
SELECT jsonb_pretty(shape_sync.validate_shape('items', 'true for update'));
-- Parameters: missing, NULL, or not valid for their type.
SELECT jsonb_pretty(shape_sync.validate_shape('items', 'id = $1'));
SELECT jsonb_pretty(shape_sync.validate_shape('items', 'id = $2', '{1}'));
SELECT jsonb_pretty(shape_sync.validate_shape('items', 'id = $1', '{NULL}'));
SELECT jsonb_pretty(shape_sync.validate_shape('items', 'id = $1', '{abc}'));
SELECT jsonb_pretty(shape_sync.validate_shape('items', 'u = $1', '{not-a-uuid}'));
SELECT jsonb_pretty(shape_sync.validate_shape('items', 'flag = $1', '{maybe}'));
SELECT jsonb_pretty(shape_sync.validate_shape('items', 'id = $1', '{{1},{2}}'));
-- Not a boolean.
SELECT jsonb_pretty(shape_sync.validate_shape('items', '1'));
SELECT jsonb_pretty(shape_sync.validate_shape('items', 'title'));

-- Types of our own: enums and domains, named as such in the schema.  A cast
-- to an enum is not immutable.
CREATE TYPE mood AS ENUM ('sad', 'happy');
CREATE DOMAIN posint AS integer CHECK (VALUE > 0);
CREATE TABLE moods (id posint PRIMARY KEY, m mood, t text);
SELECT jsonb_pretty(shape_sync.validate_shape('moods'));
SELECT shape_sync.validate_shape('moods', 't::public.mood = ''sad''') ->> 'where' AS deparsed;
DROP TABLE moods;
DROP DOMAIN posint;
DROP TYPE mood;
-- Collations.
SELECT shape_sync.validate_shape('items', 'title COLLATE "C" < ''b''') ->> 'where' AS deparsed;
-- A parameter of no inferable type is text.
SELECT shape_sync.validate_shape('items', '$1 IS NULL', '{x}') ->> 'where' AS deparsed;
-- A syntax error on a later line.
SELECT shape_sync.validate_shape('items', E'id > 1\nAND x x');

-- Replica modes.
SELECT shape_sync.validate_shape('items', replica => 'full') ->> 'replica' AS replica;
SELECT shape_sync.validate_shape('items', replica => 'default') ->> 'replica' AS replica;
SELECT shape_sync.validate_shape('items', replica => NULL) ->> 'replica' AS replica;
SELECT jsonb_pretty(shape_sync.validate_shape('items', replica => 'bogus'));
SELECT jsonb_pretty(shape_sync.validate_shape('items', replica => 'FULL'));

-- The SQLSTATE of each error.
CREATE FUNCTION pg_temp.sqlstate_of(t text, w text DEFAULT NULL, p text[] DEFAULT NULL,
                                    c text DEFAULT NULL, r text DEFAULT 'default')
RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    PERFORM shape_sync.validate_shape(t, w, p, c, r);
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE;
END $$;
SELECT label, sqlstate
FROM (VALUES
    ('nonexistent table',     pg_temp.sqlstate_of('nonexistent')),
    ('improper name',         pg_temp.sqlstate_of('a.b.c')),
    ('empty name',            pg_temp.sqlstate_of('')),
    ('null name',             pg_temp.sqlstate_of(NULL)),
    ('view',                  pg_temp.sqlstate_of('items_view')),
    ('partitioned table',     pg_temp.sqlstate_of('parted')),
    ('catalog',               pg_temp.sqlstate_of('pg_catalog.pg_class')),
    ('unknown column',        pg_temp.sqlstate_of('items', c => 'id,nope')),
    ('missing pk column',     pg_temp.sqlstate_of('items', c => 'title')),
    ('bad column list',       pg_temp.sqlstate_of('items', c => '')),
    ('syntax error',          pg_temp.sqlstate_of('items', '1 x 1')),
    ('unknown where column',  pg_temp.sqlstate_of('items', 'nope = 1')),
    ('subquery',              pg_temp.sqlstate_of('items', 'id IN (SELECT 1)')),
    ('aggregate',             pg_temp.sqlstate_of('items', 'count(*) > 0')),
    ('window function',       pg_temp.sqlstate_of('items', 'row_number() OVER () > 1')),
    ('set-returning',         pg_temp.sqlstate_of('items', 'generate_series(1,2) > 1')),
    ('volatile',              pg_temp.sqlstate_of('items', 'random() > 0.5')),
    ('stable',                pg_temp.sqlstate_of('items', 'now() > ''2020-01-01''')),
    ('user-defined function', pg_temp.sqlstate_of('items', 'public.plus_one(id) = 2')),
    ('system column',         pg_temp.sqlstate_of('items', 'xmin = ''1''')),
    ('whole row',             pg_temp.sqlstate_of('items', 'items IS NOT NULL')),
    ('two statements',        pg_temp.sqlstate_of('items', 'true; select 1')),
    ('order by',              pg_temp.sqlstate_of('items', 'true order by 1')),
    ('missing param',         pg_temp.sqlstate_of('items', 'id = $2', '{1}')),
    ('bad param',             pg_temp.sqlstate_of('items', 'id = $1', '{abc}')),
    ('not boolean',           pg_temp.sqlstate_of('items', '1')),
    ('bad replica',           pg_temp.sqlstate_of('items', r => 'bogus')),
    ('valid',                 pg_temp.sqlstate_of('items', 'id = $1', '{1}', 'id', 'full'))
) AS t(label, sqlstate)
ORDER BY label;

DROP OPERATOR #=# (integer, integer);
DROP FUNCTION my_eq(integer, integer);
DROP OPERATOR ### (integer, integer);
DROP FUNCTION plus_one(integer);
DROP TABLE parted;
DROP SEQUENCE items_seq;
DROP MATERIALIZED VIEW items_mv;
DROP VIEW items_view;
DROP TABLE items, pairs, nopk;
DROP SCHEMA "My Schema" CASCADE;

-- An empty quoted column name is an error, not a silent "all columns".
CREATE TABLE emptycol (id int PRIMARY KEY, v text);
SELECT shape_sync.validate_shape('emptycol', columns => 'id,""');

-- Casts to a domain whose CHECK calls user code are refused.
CREATE FUNCTION is_pos(int) RETURNS bool IMMUTABLE LANGUAGE sql AS 'SELECT $1 > 0';
CREATE DOMAIN pdom AS int CHECK (is_pos(VALUE));
SELECT shape_sync.validate_shape('emptycol', 'id::public.pdom > 0');
DROP DOMAIN pdom;
DROP FUNCTION is_pos(int);

-- Dates mean the same whatever the session's DateStyle: parameters are read
-- and constants deparsed under Electric's settings (ISO, DMY; UTC).
CREATE TABLE ds (id int PRIMARY KEY, d date);
INSERT INTO ds VALUES (1, '2020-01-02'), (2, '2020-02-01');
SET DateStyle = 'Postgres, MDY';
SELECT shape_sync.validate_shape('ds', 'd = ''2020-01-02''')->>'where' AS deparsed;
SELECT shape_sync.validate_shape('ds', 'd = $1', '{2020-01-02}')->>'where' AS deparsed;
SELECT m FROM shape_sync.encode_rows('ds', 'd = ''2020-01-02''') m;
SELECT m FROM shape_sync.encode_rows('ds', 'd = $1', '{2020-01-02}') m;
RESET DateStyle;
DROP TABLE ds, emptycol;

-- Parameters past those given are refused before analysis, which would size
-- an array by the largest $n (a gigabyte for $268435455): the error comes
-- with its position, from the check of the raw parse tree.
CREATE TABLE guard (id int PRIMARY KEY, title text, j jsonb, n name, b bytea);
SELECT shape_sync.validate_shape('guard', 'id = $268435455');
SELECT shape_sync.validate_shape('guard', 'id = $268435456');
SELECT shape_sync.validate_shape('guard', 'id = $3 OR id = $1', '{1,2}');
SELECT shape_sync.validate_shape('guard', 'id = $0', '{1}');
SELECT shape_sync.validate_shape('guard', 'id = $2', '{1,2}') ->> 'where' AS deparsed;

-- Nothing is looked up outside pg_catalog.  Object identifier types name
-- catalog objects in any schema: refused as casts, parameters and columns,
-- and so are the functions that take or return them, whatever the arguments
-- (to_tsvector(regconfig, ...) runs any configuration's parser and
-- dictionaries, an extension's too).
CREATE SCHEMA guard_s;
CREATE TABLE guard_s.hidden (x int);
CREATE COLLATION guard_s.coll (locale = 'C');
CREATE COLLATION public.guard_coll (locale = 'C');
CREATE TEXT SEARCH CONFIGURATION guard_s.cfg (COPY = pg_catalog.simple);
SELECT shape_sync.validate_shape('guard', '''guard_s.hidden''::regclass IS NOT NULL');
SELECT shape_sync.validate_shape('guard', '''guard_s.nosuch''::regclass IS NOT NULL');
SELECT shape_sync.validate_shape('guard', 'id::oid = ''guard_s.hidden''::regclass');
SELECT shape_sync.validate_shape('guard', 'regclass ''guard_s.hidden'' IS NOT NULL');
SELECT shape_sync.validate_shape('guard', '''{int4}''::regtype[] IS NOT NULL');
SELECT shape_sync.validate_shape('guard', '''x''::regproc IS NOT NULL');
SELECT shape_sync.validate_shape('guard', '''pg_catalog''::regnamespace IS NOT NULL');
SELECT shape_sync.validate_shape('guard', '''postgres''::regrole IS NOT NULL');
SELECT shape_sync.validate_shape('guard', '''english''::regconfig IS NOT NULL');
SELECT shape_sync.validate_shape('guard', '''simple''::regdictionary IS NOT NULL');
SELECT shape_sync.validate_shape('guard', '''"C"''::regcollation IS NOT NULL');
SELECT shape_sync.validate_shape('guard', '''+''::regoper IS NOT NULL');
SELECT shape_sync.validate_shape('guard', 'id::oid = $1::regclass', '{guard_s.hidden}');
SELECT shape_sync.validate_shape('guard', 'to_tsvector(''guard_s.cfg'', title) @@ ''a''::tsquery');
SELECT shape_sync.validate_shape('guard', 'to_tsvector(''english'', title) @@ ''a''::tsquery');
SELECT shape_sync.validate_shape('guard', 'to_tsvector(3748, title) @@ ''a''::tsquery');
SELECT shape_sync.validate_shape('guard', 'to_tsvector($1, title) @@ ''a''::tsquery', '{guard_s.cfg}');
SELECT shape_sync.validate_shape('guard', 'pg_catalog.plainto_tsquery(''english'', title) IS NOT NULL');
SELECT shape_sync.validate_shape('guard', 'ts_lexize(''simple'', title) IS NOT NULL');
SELECT shape_sync.validate_shape('guard', 'pg_partition_root(id) IS NOT NULL');
SELECT shape_sync.validate_shape('guard', 'regtype(''int4'') IS NOT NULL');
SELECT shape_sync.validate_shape('guard', 'to_regclass(''guard_s.hidden'') = ''guard_s.hidden''');
-- every function of pg_catalog that takes or returns such a type, by name
CREATE FUNCTION pg_temp.guard_answer(w text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    PERFORM shape_sync.validate_shape('guard', w);
    RETURN 'accepted';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLERRM;
END $$;
WITH reg(t) AS (
    SELECT oid FROM pg_type
    WHERE typnamespace = 'pg_catalog'::regnamespace AND typname ~ '^_?reg'
), named AS (
    SELECT DISTINCT p.proname
    FROM pg_proc p
    WHERE p.pronamespace = 'pg_catalog'::regnamespace
      AND (p.prorettype IN (SELECT t FROM reg) OR p.proargtypes::oid[] && ARRAY(SELECT t FROM reg))
)
SELECT count(*) > 40 AS many,
       count(*) FILTER (WHERE pg_temp.guard_answer(format('%I() IS NULL', proname))
                        <> proname || '() is not allowed in a shape''s where clause') AS not_refused
FROM named;
-- a column of such a type
CREATE TABLE guard_reg (id int PRIMARY KEY, r regclass);
SELECT shape_sync.validate_shape('guard_reg', 'r = ''guard_s.hidden''');
SELECT shape_sync.validate_shape('guard_reg', 'r IS NULL');
DROP TABLE guard_reg;
-- the row type of a catalog holds such fields
SELECT shape_sync.validate_shape('guard', 'NULL::pg_type IS NULL');
-- Collations: qualified with another schema, refused before the lookup;
-- unqualified, found in pg_catalog only.
SELECT shape_sync.validate_shape('guard', 'title COLLATE guard_s.coll < ''b''');
SELECT shape_sync.validate_shape('guard', 'title COLLATE guard_s.nosuch < ''b''');
SELECT shape_sync.validate_shape('guard', 'title COLLATE public.guard_coll < ''b''');
SELECT shape_sync.validate_shape('guard', 'title COLLATE guard_coll < ''b''');
SELECT shape_sync.validate_shape('guard', 'title COLLATE pg_catalog."C" < ''b''') ->> 'where' AS deparsed;

-- jsonpaths are not evaluated: their time can be exponential in their length.
SELECT shape_sync.validate_shape('guard', 'j @? ''$.a''');
SELECT shape_sync.validate_shape('guard', 'j @@ ''$.a == 1''');
SELECT shape_sync.validate_shape('guard', 'jsonb_path_exists(j, ''$.a'')');
SELECT shape_sync.validate_shape('guard', 'jsonb_path_match(j, ''$.a == 1'')');
SELECT shape_sync.validate_shape('guard', 'jsonb_path_query_first(j, ''$.a'') IS NOT NULL');
SELECT shape_sync.validate_shape('guard', 'j @? ANY(ARRAY[''$.a''::jsonpath])');
-- a jsonpath made text evaluates nothing
SELECT shape_sync.validate_shape('guard', '''$.a''::jsonpath::text = title') ->> 'where' AS deparsed;

-- Constant patterns are compiled at validation, with their flags: an invalid
-- one is the client's error now, not every snapshot's later.
SELECT shape_sync.validate_shape('guard', 'title ~ ''(''');
SELECT shape_sync.validate_shape('guard', 'title !~* ''[''');
SELECT shape_sync.validate_shape('guard', 'n ~ ''a{2,1}''');
SELECT shape_sync.validate_shape('guard', 'title SIMILAR TO ''(''');
SELECT shape_sync.validate_shape('guard', 'title NOT SIMILAR TO ''a'' ESCAPE ''xy''');
SELECT shape_sync.validate_shape('guard', 'title ~ ANY(ARRAY[''a'', ''(''])');
SELECT shape_sync.validate_shape('guard', 'regexp_like(title, ''a'', ''z'')');
SELECT shape_sync.validate_shape('guard', 'regexp_match(lower(title), ''(a'') IS NULL');
SELECT shape_sync.validate_shape('guard', 'regexp_count(title, ''a'', 1, ''g'') > 0');
SELECT shape_sync.validate_shape('guard', 'regexp_instr(title, ''a)'') > 0');
SELECT shape_sync.validate_shape('guard', 'regexp_substr(title, ''*'') IS NULL');
SELECT shape_sync.validate_shape('guard', 'regexp_split_to_array(title, ''('') IS NULL');
SELECT shape_sync.validate_shape('guard', 'substring(title from ''('') = ''a''');
SELECT shape_sync.validate_shape('guard', 'substring(title similar ''('' escape ''#'') = ''a''');
SELECT shape_sync.validate_shape('guard', 'title ~ $1', '{(}');
SELECT shape_sync.validate_shape('guard', 'title LIKE ''a\''');
SELECT shape_sync.validate_shape('guard', 'title ILIKE ''%a\''');
SELECT shape_sync.validate_shape('guard', 'b LIKE ''\x5c''::bytea');
-- valid ones pass; a pattern that is a column cannot be compiled beforehand
SELECT shape_sync.validate_shape('guard', 'title ~ ''^a.*b$'' AND title ~* ''x'' AND n !~ ''y''
    AND title SIMILAR TO ''%(b|c)%'' AND regexp_match(title, ''x(y)'', ''i'') IS NULL
    AND title LIKE ''a\%'' AND title NOT ILIKE ''%\\'' AND title ~ title') ->> 'where' AS deparsed;
DROP TABLE guard;
DROP COLLATION public.guard_coll;
DROP SCHEMA guard_s CASCADE;
