-- test/tap/05_value_text.sql: the row encoder writes every value as its type's output function
-- does, also where it skips that function (src/pg/shape/row_encoder.c, renc_output_kind): int2, int4
-- and int8 at their limits, char(n) with its padding, varchar, text inline, compressed and
-- stored out of line, a domain over text, and types that still go through their output
-- function; values and keys, NULLs included, byte for byte as to_json writes the text.
-- Run by scripts/test.sh with pg_prove.
BEGIN;
CREATE EXTENSION IF NOT EXISTS shape_sync;

SELECT plan(9);

CREATE DOMAIN short_note AS text CHECK (length(VALUE) < 100);
CREATE TABLE value_text (
    id int8 PRIMARY KEY,
    i2 int2,
    i4 int4,
    c char(6),
    vc varchar(12),
    t text,
    compressed text,
    outside text,
    note short_note,
    n numeric,
    ts timestamptz,
    arr text[]);
ALTER TABLE value_text ALTER COLUMN outside SET STORAGE EXTERNAL;
INSERT INTO value_text VALUES
    (-9223372036854775808, -32768, -2147483648, 'a', 'a/b"c', E'tab\there', NULL, NULL, 'n/"', -1.50,
     '2026-01-02 03:04:05+00', ARRAY['x', 'y"z']),
    (9223372036854775807, 32767, 2147483647, 'abcdef', '', '', NULL, NULL, '', 0, NULL, '{}'),
    (0, 0, 0, ' ', NULL, NULL, repeat(E'ab"\\/\n', 4000), NULL, NULL, NULL, NULL, NULL),
    (-1, -1, -1, NULL, 'żółć', 'end\', NULL,
     (SELECT string_agg(md5(g::text) || E'"\x01', '') FROM generate_series(1, 400) g),
     NULL, 1e30, NULL, NULL);

SELECT ok(pg_column_compression(compressed) IS NOT NULL, 'a value is stored compressed')
  FROM value_text WHERE id = 0;
SELECT ok(pg_column_size(outside) > 10000, 'a value is stored out of line, uncompressed')
  FROM value_text WHERE id = -1;

CREATE TEMP TABLE cells AS
SELECT (m::json -> 'value' ->> 'id')::int8 AS id, m, col, v
  FROM shape_sync.encode_rows('value_text') m,
       LATERAL (SELECT key AS col, value AS v FROM json_each_text(m::json -> 'value')) kv;

-- the expected text of every cell, as its output function writes it
CREATE TEMP TABLE expected AS
SELECT id, col, val
  FROM value_text r,
       LATERAL (VALUES ('id', r.id::text), ('i2', r.i2::text), ('i4', r.i4::text), ('c', r.c::text),
                       ('vc', r.vc::text), ('t', r.t), ('compressed', r.compressed),
                       ('outside', r.outside), ('note', r.note::text), ('n', r.n::text),
                       ('ts', r.ts::text), ('arr', r.arr::text)) x(col, val);
-- char(n) keeps its padding in its output, which the ::text cast above drops
UPDATE expected e SET val = textin(bpcharout(r.c)) FROM value_text r WHERE e.id = r.id AND e.col = 'c';

SELECT is((SELECT count(*) FROM cells)::int, 48, 'every cell of every row is sent');
SELECT is((SELECT count(*) FROM cells c JOIN expected e USING (id, col)
            WHERE c.v IS NOT DISTINCT FROM e.val)::int,
          48, 'every value reads back as its output function writes it');
SELECT is((SELECT count(*) FROM cells c JOIN expected e USING (id, col)
            WHERE position(format('"%s":%s', col, coalesce(to_json(e.val)::text, 'null')) IN c.m) > 0)::int,
          48, 'every value is escaped byte for byte as to_json escapes it');
SELECT is((SELECT array_agg(m::json ->> 'key' ORDER BY (m::json -> 'value' ->> 'id')::int8)
             FROM shape_sync.encode_rows('value_text') m),
          ARRAY['"public"."value_text"/"-9223372036854775808"', '"public"."value_text"/"-1"',
                '"public"."value_text"/"0"', '"public"."value_text"/"9223372036854775807"'],
          'integer keys are written as int8out writes them');

CREATE TABLE text_key (a varchar(20), b char(4), v int, PRIMARY KEY (a, b));
INSERT INTO text_key VALUES ('x/"y\', 'z/', 1);
SELECT is((SELECT m::json ->> 'key' FROM shape_sync.encode_rows('text_key') m),
          '"public"."text_key"/"x//"y\"/"z//  "', 'varchar and char keys double each "/" and keep padding');

-- random strings of every ASCII byte, escapes at every position of the 8-byte words the
-- encoder tests at once, as values and as keys
SELECT setseed(0.5);
CREATE TABLE random_text (k text PRIMARY KEY, v text);
INSERT INTO random_text
SELECT DISTINCT ON (k) k, v
  FROM (SELECT (SELECT string_agg(chr(CASE WHEN random() < 0.8 THEN 97 + (random() * 25)::int
                                           ELSE 1 + (random() * 126)::int END), '')
                  FROM generate_series(1, (random() * 40)::int + g - g)) AS k,
               (SELECT string_agg(chr(CASE WHEN random() < 0.9 THEN 65 + (random() * 25)::int
                                           ELSE 1 + (random() * 126)::int END), '')
                  FROM generate_series(1, (random() * 70)::int + g - g)) AS v
          FROM generate_series(1, 600) g) x
 WHERE k IS NOT NULL;
SELECT is((SELECT count(*) FROM shape_sync.encode_rows('random_text') m
            JOIN random_text r ON (m::json -> 'value' ->> 'k') = r.k
           WHERE position(format('"v":%s', coalesce(to_json(r.v)::text, 'null')) IN m) > 0)::int,
          (SELECT count(*) FROM random_text)::int, 'random values are escaped as to_json escapes them');
SELECT is((SELECT count(*) FROM shape_sync.encode_rows('random_text') m
            JOIN random_text r ON (m::json -> 'value' ->> 'k') = r.k
           WHERE position(to_json(format('"public"."random_text"/"%s"', replace(r.k, '/', '//')))::text
                          IN m) > 0)::int,
          (SELECT count(*) FROM random_text)::int, 'random keys are escaped as to_json escapes them');

SELECT * FROM finish();
ROLLBACK;
