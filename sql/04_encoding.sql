--
-- 04_encoding: shape_sync.encode_rows(), the snapshot messages of a shape:
-- every common type's text output under Electric's display settings, JSON
-- escaping, keys, column projection and where clauses.
--
-- money's output depends on lc_monetary, which encode_rows leaves alone.
SET lc_monetary = 'C';

CREATE TYPE mood AS ENUM ('sad', 'happy');
CREATE DOMAIN posint AS integer CHECK (VALUE > 0);
CREATE TYPE complex AS (r float8, i float8);

CREATE TABLE all_types (
    id      integer PRIMARY KEY,
    i2      int2,
    i4      int4,
    i8      int8,
    num     numeric(10,3),
    num_any numeric,
    f4      float4,
    f8      float8,
    b       bool,
    t       text,
    vc      varchar(5),
    ch      char(5),
    u       uuid,
    j       json,
    jb      jsonb,
    by      bytea,
    tstz    timestamptz,
    ts      timestamp(3),
    d       date,
    tm      time,
    tmtz    timetz,
    iv      interval,
    ia      int[],
    ia2     int[][],
    ta      text[],
    m       mood,
    p       posint,
    c       complex,
    ip      inet,
    net     cidr,
    mac     macaddr,
    pt      point,
    mn      money,
    na      numeric[],
    fa      float8[],
    bits    bit(3),
    r       int4range
);
INSERT INTO all_types VALUES (
    1, -32768, 2147483647, 9223372036854775807, 1234.5, 'NaN', 1.1, 1.1, true,
    E'say "hi" \\ back\nnew\ttab\r\x01 é ü 日本 😀 </script>', 'abc', 'ab',
    'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11',
    '{"b": [1,  2],   "a" : "x"}', '{"b": [1,  2],   "a" : "x"}',
    '\x0001fffe', '2020-01-02 03:04:05.678+02', '2020-01-02 03:04:05.1234',
    '2020-01-02', '13:14:15.5', '13:14:15+05:30',
    '1 year 2 months 3 days 04:05:06.7',
    '{1,2,3}', '{{1,2},{3,4}}', '{a,NULL,"q\"uote","with space","comma,",""}',
    'happy', 42, '(1.5,-2)', '192.168.0.1/24', '10.0.0.0/8', '08:00:2b:01:02:03',
    '(1.5,2)', '12.34', '{1.5,NaN,-2}', '{1.2,-3.2,Infinity,-Infinity,NaN}',
    B'101', '[1,5)');
-- Every nullable column NULL.
INSERT INTO all_types (id) VALUES (2);

-- The electric-schema of the table.
SELECT key, value
FROM jsonb_each(shape_sync.validate_shape('all_types') -> 'schema')
ORDER BY key;

-- The messages, exactly.
SELECT m FROM shape_sync.encode_rows('all_types') m ORDER BY m COLLATE "C";
-- The same, one value per line, as written (json keeps the escapes).
SELECT (m::json ->> 'key') AS key, v.ord, v.key AS column, v.value
FROM shape_sync.encode_rows('all_types') m,
     json_each(m::json -> 'value') WITH ORDINALITY AS v(key, value, ord)
ORDER BY 1 COLLATE "C", v.ord;
-- Each message is valid JSON whose values read back as the text output.
SELECT count(*) AS rows,
       bool_and(m::json -> 'headers' ->> 'operation' = 'insert') AS inserts,
       bool_and(m::jsonb -> 'headers' -> 'relation' = '["public", "all_types"]') AS relation
FROM shape_sync.encode_rows('all_types') m;
SELECT m::json -> 'value' ->> 't' = E'say "hi" \\ back\nnew\ttab\r\x01 é ü 日本 😀 </script>'
       AS text_round_trips
FROM shape_sync.encode_rows('all_types', 'id = 1') m;

-- Floating point under extra_float_digits = 1: shortest exact output.
CREATE TABLE floats (id integer PRIMARY KEY, f4 float4, f8 float8);
INSERT INTO floats VALUES
    (1, 1.1, 1.1),
    (2, 'NaN', 'NaN'),
    (3, 'Infinity', 'Infinity'),
    (4, '-Infinity', '-Infinity'),
    (5, 1e-10, 1e-10),
    (6, 0.1::float4 + 0.2::float4, 0.1::float8 + 0.2::float8),
    (7, '-0', '-0'),
    (8, 3.4028235e38, 1.7976931348623157e308),
    (9, 123456789, 1e15),
    (10, 1e16, 1e16);
SELECT m FROM shape_sync.encode_rows('floats') m ORDER BY m COLLATE "C";

-- Numerics keep their scale.
CREATE TABLE numerics (id integer PRIMARY KEY, n numeric, n2 numeric(5,2));
INSERT INTO numerics VALUES
    (1, 0.1, 1), (2, -123.4500, 2.5), (3, 'NaN', -999.99), (4, 1e30, 0),
    (5, 0.000000000001, NULL);
SELECT m FROM shape_sync.encode_rows('numerics') m ORDER BY m COLLATE "C";

-- Date and time types under DateStyle ISO, TimeZone UTC, IntervalStyle
-- iso_8601.
CREATE TABLE times (id integer PRIMARY KEY, tstz timestamptz, d date, iv interval);
INSERT INTO times VALUES
    (1, '2020-06-30 23:59:59.999999-07', '0001-01-01', '1 day 2 hours'),
    (2, 'infinity', 'infinity', '-1 day'),
    (3, '-infinity', '-infinity', '0'),
    (4, '1999-12-31 12:00:00+00 BC', '1999-12-31 BC', '1 mon -1 sec'),
    (5, '2020-03-08 10:00:00 America/New_York', '2020-02-29', '36 hours 0.5 seconds');
SELECT m FROM shape_sync.encode_rows('times') m ORDER BY m COLLATE "C";

-- Keys.
-- A text primary key: "/" in a value is doubled.
CREATE TABLE text_keys (k text PRIMARY KEY, v integer);
INSERT INTO text_keys VALUES
    ('a/b', 1), ('//', 2), ('q"uote', 3), ('back\slash', 4), ('', 5), ('_', 6),
    ('ü/日本', 7);
SELECT m FROM shape_sync.encode_rows('text_keys') m ORDER BY m COLLATE "C";
-- A composite primary key, in key order (b, a), not column order.
CREATE TABLE pairs (a integer, c text, b text, PRIMARY KEY (b, a));
INSERT INTO pairs VALUES (1, 'x', 'p/q'), (2, NULL, 'r');
SELECT m FROM shape_sync.encode_rows('pairs') m ORDER BY m COLLATE "C";
-- Projected to the key columns, the key is unchanged.
SELECT m FROM shape_sync.encode_rows('pairs', columns => 'a,b') m ORDER BY m COLLATE "C";
-- No primary key: every column, in column name order ("B" < "a" < "z"),
-- with NULL written /_.
CREATE TABLE no_pk (z text, a integer, "B" text);
INSERT INTO no_pk VALUES ('z1', 1, 'b1'), (NULL, 2, NULL), (NULL, NULL, NULL),
    ('x/y', 3, '_');
SELECT m FROM shape_sync.encode_rows('no_pk') m ORDER BY m COLLATE "C";
-- The key holds every column, so a column list must name them all.
SELECT m FROM shape_sync.encode_rows('no_pk', columns => 'a') m ORDER BY m COLLATE "C";
SELECT m FROM shape_sync.encode_rows('no_pk', columns => 'a,z,"B"') m ORDER BY m COLLATE "C";
-- Quoted names with capitals, spaces, commas and quotes.
CREATE SCHEMA "My Schema";
CREATE TABLE "My Schema"."my table, ""quoted""" (
    "Id"   integer PRIMARY KEY,
    "a col" text,
    "b,c"   text,
    "d""e"  text,
    "f\g"   text
);
INSERT INTO "My Schema"."my table, ""quoted""" VALUES (1, 'a', 'b', 'd', 'f');
SELECT m FROM shape_sync.encode_rows('"My Schema"."my table, ""quoted"""') m;
SELECT m FROM shape_sync.encode_rows('"My Schema"."my table, ""quoted"""',
                                     columns => '"Id","d""e"') m;
SELECT m FROM shape_sync.encode_rows('"My Schema"."my table, ""quoted"""',
                                     '"d""e" = $1 AND "b,c" IS NOT NULL', '{d}') m;
-- A dropped column leaves no trace.
CREATE TABLE dropped (id integer PRIMARY KEY, gone text, kept text);
INSERT INTO dropped VALUES (1, 'x', 'y');
ALTER TABLE dropped DROP COLUMN gone;
ALTER TABLE dropped ADD COLUMN added integer;
INSERT INTO dropped VALUES (2, 'z', 5);
SELECT m FROM shape_sync.encode_rows('dropped') m ORDER BY m COLLATE "C";

-- Column projection and where clauses.
CREATE TABLE items (id integer PRIMARY KEY, title text NOT NULL, priority integer,
                    tags text[], d date);
INSERT INTO items VALUES
    (1, 'apple', 1, '{a,b}', '2020-01-02'),
    (2, 'banana', 2, '{b}', '2020-02-01'),
    (3, 'Avocado', NULL, NULL, NULL),
    (4, 'cherry', 3, '{}', '2021-12-31');
SELECT m FROM shape_sync.encode_rows('items', columns => 'title,id') m ORDER BY m COLLATE "C";
SELECT m FROM shape_sync.encode_rows('items', 'title ILIKE ''a%''') m ORDER BY m COLLATE "C";
SELECT m FROM shape_sync.encode_rows('items', 'priority > $1 AND tags @> $2',
                                     '{1,"{b}"}', 'id,tags') m ORDER BY m COLLATE "C";
SELECT m FROM shape_sync.encode_rows('items', 'id = ANY($1)', '{"{2,4}"}', 'id') m ORDER BY m COLLATE "C";
SELECT m FROM shape_sync.encode_rows('items', 'priority IS NULL', columns => 'id,priority') m;
SELECT count(*) AS none FROM shape_sync.encode_rows('items', 'false');
-- A date filter, with the session's DateStyle ISO.
SET DateStyle = 'ISO, MDY';
SELECT m FROM shape_sync.encode_rows('items', 'd = $1', '{2020-01-02}', 'id,d') m;
SELECT m FROM shape_sync.encode_rows('items', 'd < ''2020-01-15''', columns => 'id,d') m;
RESET DateStyle;
-- Invalid definitions fail as in validate_shape().
SELECT m FROM shape_sync.encode_rows('items', 'random() > 0.5') m;
SELECT m FROM shape_sync.encode_rows('items', columns => 'title') m;
SELECT m FROM shape_sync.encode_rows('nonexistent') m;
-- An empty table gives no messages.
CREATE TABLE empty (id integer PRIMARY KEY);
SELECT count(*) AS none FROM shape_sync.encode_rows('empty');
-- A large (TOASTed) value comes through whole.
CREATE TABLE big (id integer PRIMARY KEY, t text);
INSERT INTO big VALUES (1, repeat('xy/"', 50000));
SELECT length(m) AS length,
       m::json -> 'value' ->> 't' = repeat('xy/"', 50000) AS same
FROM shape_sync.encode_rows('big') m;

-- The session's settings, all unlike Electric's, are unchanged afterwards,
-- and do not affect the messages.
SET DateStyle = 'SQL, MDY';
SET TimeZone = 'Asia/Kolkata';
SET extra_float_digits = 0;
SET bytea_output = 'escape';
SET IntervalStyle = 'postgres_verbose';
SELECT name, setting FROM pg_settings
WHERE name IN ('DateStyle', 'TimeZone', 'extra_float_digits', 'bytea_output',
               'IntervalStyle')
ORDER BY name;
SELECT v.key, v.value
FROM shape_sync.encode_rows('all_types', 'id = 1', columns => 'id,f4,f8,by,tstz,ts,d,iv') m,
     json_each(m::json -> 'value') WITH ORDINALITY AS v(key, value, ord)
ORDER BY v.ord;
SELECT m FROM shape_sync.encode_rows('floats', 'id = 6') m;
SELECT name, setting FROM pg_settings
WHERE name IN ('DateStyle', 'TimeZone', 'extra_float_digits', 'bytea_output',
               'IntervalStyle')
ORDER BY name;
-- Values outside encode_rows use the session's settings, also in the same
-- query.
SELECT tstz, iv, by, d,
       (SELECT count(*) FROM shape_sync.encode_rows('all_types')) AS n
FROM all_types WHERE id = 1;
SELECT f8, (SELECT count(*) FROM shape_sync.encode_rows('floats')) AS n
FROM floats WHERE id = 6;
-- In a transaction, SET LOCAL values survive, and end with the transaction.
BEGIN;
SET LOCAL TimeZone = 'Asia/Tokyo';
SET LOCAL IntervalStyle = 'sql_standard';
SELECT count(*) FROM shape_sync.encode_rows('all_types');
SHOW TimeZone;
SHOW IntervalStyle;
COMMIT;
SHOW TimeZone;
SHOW IntervalStyle;
-- An error during the scan restores them too.
CREATE TABLE zero (id integer PRIMARY KEY);
INSERT INTO zero VALUES (0);
SELECT m FROM shape_sync.encode_rows('zero', '1 / id = 1') m;
SELECT name, setting FROM pg_settings
WHERE name IN ('DateStyle', 'TimeZone', 'extra_float_digits', 'bytea_output',
               'IntervalStyle')
ORDER BY name;

RESET DateStyle;
RESET TimeZone;
RESET extra_float_digits;
RESET bytea_output;
RESET IntervalStyle;
DROP TABLE all_types, floats, numerics, times, text_keys, pairs, no_pk, dropped,
    items, empty, big, zero;
DROP SCHEMA "My Schema" CASCADE;
DROP TYPE complex;
DROP DOMAIN posint;
DROP TYPE mood;
RESET lc_monetary;
