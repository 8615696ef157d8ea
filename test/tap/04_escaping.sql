-- test/tap/04_escaping.sql: the row encoder escapes strings as PostgreSQL's escape_json does,
-- byte for byte (src/pg/shape/row_encoder.c copies the runs between escapes whole): every ASCII
-- byte from 1 to 127, runs of each at the start, middle and end of a value, multibyte UTF-8,
-- and keys with "/" doubled.  Run by scripts/test.sh with pg_prove.
BEGIN;
CREATE EXTENSION IF NOT EXISTS shape_sync;

SELECT plan(4);

CREATE TABLE escaping (id text PRIMARY KEY, v text);
INSERT INTO escaping
SELECT 'byte' || b, 'a' || chr(b) || 'b' || repeat(chr(b), 3) || 'c' || chr(b)
  FROM generate_series(1, 127) b;
INSERT INTO escaping VALUES
    ('utf8', 'żółć 日本 😀 "q" \ end'),
    ('only-escapes', E'\\"\n\t\r\b\f'),
    ('a/b//c/', '/'),
    ('empty', '');

-- each message's value, as escape_json (to_json) writes it
SELECT is((SELECT count(*) FROM shape_sync.encode_rows('escaping') m
            JOIN escaping e ON (m::json -> 'value' ->> 'id') = e.id
           WHERE position(format('"v":%s', to_json(e.v)::text) IN m) > 0)::int,
          131, 'every value is escaped as escape_json escapes it');
SELECT is((SELECT count(*) FROM shape_sync.encode_rows('escaping') m
            JOIN escaping e ON (m::json -> 'value' ->> 'id') = e.id
           WHERE (m::json -> 'value' ->> 'v') = e.v)::int,
          131, 'every value reads back as the row''s value');
SELECT is((SELECT m::json ->> 'key' FROM shape_sync.encode_rows('escaping') m
            WHERE (m::json -> 'value' ->> 'id') = 'a/b//c/'),
          '"public"."escaping"/"a//b////c//"', 'a key doubles each "/" of its value');
SELECT is((SELECT count(*) FROM shape_sync.encode_rows('escaping') m
            WHERE position(to_json(m::json ->> 'key')::text IN m) > 0)::int,
          131, 'every key is escaped as escape_json escapes it');

SELECT * FROM finish();
ROLLBACK;
