-- test/tap/01_schema.sql: what CREATE EXTENSION shape_sync makes, and the GUCs _PG_init defines.
-- Run by scripts/test.sh with pg_prove, in a database where pgtap is installed.
BEGIN;
CREATE EXTENSION IF NOT EXISTS shape_sync;

SELECT plan(64);

-- The extension and its schema --------------------------------------------------------------

SELECT has_schema('shape_sync');
SELECT has_extension('shape_sync', 'shape_sync', 'extension shape_sync is installed in schema shape_sync');
SELECT is(
    (SELECT extrelocatable FROM pg_extension WHERE extname = 'shape_sync'),
    false,
    'extension shape_sync is not relocatable');
SELECT is(
    (SELECT extnamespace::regnamespace::text FROM pg_extension WHERE extname = 'shape_sync'),
    'shape_sync',
    'extension shape_sync lives in schema shape_sync');

-- Functions: argument and return types --------------------------------------------------------

SELECT has_function('shape_sync', 'validate_shape', ARRAY['text', 'text', 'text[]', 'text', 'text']);
SELECT function_returns('shape_sync', 'validate_shape', ARRAY['text', 'text', 'text[]', 'text', 'text'], 'jsonb');
SELECT function_lang_is('shape_sync', 'validate_shape', ARRAY['text', 'text', 'text[]', 'text', 'text'], 'c');

SELECT has_function('shape_sync', 'encode_rows', ARRAY['text', 'text', 'text[]', 'text']);
SELECT function_returns('shape_sync', 'encode_rows', ARRAY['text', 'text', 'text[]', 'text'], 'setof text');
SELECT function_lang_is('shape_sync', 'encode_rows', ARRAY['text', 'text', 'text[]', 'text'], 'c');

SELECT has_function('shape_sync', 'list_shapes', ARRAY[]::name[]);
SELECT function_returns('shape_sync', 'list_shapes', ARRAY[]::name[], 'setof record');

SELECT has_function('shape_sync', 'log_memory_usage', ARRAY[]::name[]);
SELECT function_returns('shape_sync', 'log_memory_usage', ARRAY[]::name[], 'record');

-- The shapes view ---------------------------------------------------------------------------

SELECT has_view('shape_sync', 'shapes', 'view shape_sync.shapes exists');
SELECT is(
    ARRAY(SELECT attname::text
            FROM pg_attribute
           WHERE attrelid = 'shape_sync.shapes'::regclass AND attnum > 0 AND NOT attisdropped
           ORDER BY attnum),
    ARRAY['handle', 'relation', 'where', 'columns', 'replica', 'state', 'snapshot_rows',
          'snapshot_ms', 'log_bytes', 'last_offset', 'chunks', 'changes', 'routed_by', 'compactions',
          'readers',
          'waiters', 'created_at', 'last_read_at', 'error'],
    'view shape_sync.shapes has the expected columns, in order');
SELECT col_type_is('shape_sync', 'shapes', 'handle', 'text',
                   'shape_sync.shapes.handle is text');
SELECT col_type_is('shape_sync', 'shapes', 'snapshot_rows', 'bigint',
                   'shape_sync.shapes.snapshot_rows is bigint');
SELECT col_type_is('shape_sync', 'shapes', 'log_bytes', 'bigint',
                   'shape_sync.shapes.log_bytes is bigint');
SELECT col_type_is('shape_sync', 'shapes', 'chunks', 'integer',
                   'shape_sync.shapes.chunks is integer');
SELECT col_type_is('shape_sync', 'shapes', 'created_at', 'timestamp with time zone',
                   'shape_sync.shapes.created_at is timestamp with time zone');
SELECT col_type_is('shape_sync', 'shapes', 'last_read_at', 'timestamp with time zone',
                   'shape_sync.shapes.last_read_at is timestamp with time zone');

-- Monitoring: connections, metrics, reset ------------------------------------------------------

SELECT has_view('shape_sync', 'connections', 'view shape_sync.connections exists');
SELECT is(
    ARRAY(SELECT attname::text
            FROM pg_attribute
           WHERE attrelid = 'shape_sync.connections'::regclass AND attnum > 0 AND NOT attisdropped
           ORDER BY attnum),
    ARRAY['peer', 'handle', 'state', 'bytes_sent', 'connected_at', 'state_since', 'write_age'],
    'view shape_sync.connections has the expected columns, in order');
SELECT col_type_is('shape_sync', 'connections', 'write_age', 'interval',
                   'shape_sync.connections.write_age is interval');
SELECT has_view('shape_sync', 'metrics', 'view shape_sync.metrics exists');
SELECT is(
    ARRAY(SELECT format('%s %s', attname, format_type(atttypid, atttypmod))
            FROM pg_attribute
           WHERE attrelid = 'shape_sync.metrics'::regclass AND attnum > 0 AND NOT attisdropped
           ORDER BY attnum),
    ARRAY['name text', 'labels jsonb', 'value double precision'],
    'view shape_sync.metrics is (name text, labels jsonb, value double precision)');
SELECT has_function('shape_sync', 'reset_metrics', ARRAY[]::name[]);
SELECT function_returns('shape_sync', 'reset_metrics', ARRAY[]::name[], 'void');
SELECT ok(has_table_privilege('pg_monitor', 'shape_sync.metrics', 'SELECT') AND
          has_table_privilege('pg_monitor', 'shape_sync.connections', 'SELECT') AND
          NOT has_table_privilege('pg_monitor', 'shape_sync.shapes', 'SELECT') AND
          NOT has_function_privilege('pg_monitor', 'shape_sync.reset_metrics()', 'EXECUTE'),
          'pg_monitor reads metrics and connections, not shapes, and cannot reset');
SELECT ok(NOT has_table_privilege('public', 'shape_sync.metrics', 'SELECT') AND
          NOT has_table_privilege('public', 'shape_sync.connections', 'SELECT') AND
          NOT has_function_privilege('public', 'shape_sync.reset_metrics()', 'EXECUTE'),
          'PUBLIC reads neither metrics nor connections, and cannot reset');
SELECT is(
    ARRAY(SELECT format('%s %s', attname, format_type(atttypid, atttypmod))
            FROM pg_attribute
           WHERE attrelid = 'shape_sync.decoder'::regclass AND attnum > 0 AND NOT attisdropped
           ORDER BY attnum),
    ARRAY['wal_end_lsn pg_lsn', 'decoded_lsn pg_lsn', 'confirmed_flush_lsn pg_lsn', 'lag_bytes bigint',
          'last_commit_at timestamp with time zone', 'commit_lag interval'],
    'view shape_sync.decoder has the expected columns, in order');
SELECT ok(has_table_privilege('pg_monitor', 'shape_sync.decoder', 'SELECT') AND
          NOT has_table_privilege('public', 'shape_sync.decoder', 'SELECT'),
          'pg_monitor reads shape_sync.decoder, PUBLIC does not');
SELECT ok((SELECT decoded_lsn <= wal_end_lsn AND lag_bytes >= 0 FROM shape_sync.decoder),
          'shape_sync.decoder: decoding is not past the end of the WAL it saw');
SELECT ok((SELECT count(*) > 0 FROM shape_sync.metrics
            WHERE name = 'shape_sync_log_memory_bytes' AND labels = '{}'::jsonb AND value > 0),
          'shape_sync.metrics shows the log memory');
WITH m AS MATERIALIZED (SELECT * FROM shape_sync.metrics)
SELECT is((SELECT count(*)
             FROM m b JOIN m c ON c.name = replace(b.name, '_bucket', '_count')
                              AND c.labels = b.labels - 'le'
            WHERE b.name LIKE '%\_bucket' AND b.labels ->> 'le' = '+Inf' AND b.value <> c.value),
          0::bigint,
          'every histogram''s +Inf bucket is its count');

-- Behaviour a superuser sees ------------------------------------------------------------------

SELECT throws_ok(
    $$SELECT shape_sync.validate_shape('no_such_table')$$,
    '42P01', NULL,
    'validate_shape of a table that does not exist raises undefined_table');

SELECT cmp_ok((SELECT total_bytes FROM shape_sync.log_memory_usage()), '>', 0::bigint,
              'log_memory_usage(): total_bytes > 0');
SELECT is((SELECT block_size FROM shape_sync.log_memory_usage()), 8192,
          'log_memory_usage(): block_size is 8 kB');
SELECT ok((SELECT free_bytes BETWEEN 0 AND total_bytes FROM shape_sync.log_memory_usage()),
          'log_memory_usage(): 0 <= free_bytes <= total_bytes');

-- GUCs: defined, with the right context (postmaster: needs a restart; sighup: reloadable) ------

SELECT ok(current_setting(name, true) IS NOT NULL,
          format('GUC %s is defined', name))
  FROM unnest(ARRAY['shape_sync.port', 'shape_sync.database', 'shape_sync.listen_addresses',
                    'shape_sync.http_threads', 'shape_sync.chunk_bytes_threshold',
                    'shape_sync.log_memory', 'shape_sync.max_snapshot_workers',
                    'shape_sync.write_piece_size', 'shape_sync.cache_max_age',
                    'shape_sync.cache_stale_age']) AS name
 ORDER BY name;

SELECT is(s.context, v.context, format('GUC %s has context %s', v.name, v.context))
  FROM (VALUES ('shape_sync.port', 'postmaster'),
               ('shape_sync.listen_addresses', 'postmaster'),
               ('shape_sync.database', 'postmaster'),
               ('shape_sync.http_threads', 'postmaster'),
               ('shape_sync.log_memory', 'postmaster'),
               ('shape_sync.max_snapshot_workers', 'sighup'),
               ('shape_sync.write_piece_size', 'postmaster'),
               ('shape_sync.chunk_bytes_threshold', 'sighup'),
               ('shape_sync.cache_max_age', 'sighup'),
               ('shape_sync.cache_stale_age', 'sighup')) AS v(name, context)
  LEFT JOIN pg_settings AS s USING (name)
 ORDER BY v.name;

-- Defaults and units: boot_val, the compiled-in default, whatever the test cluster sets.
SELECT is(s.boot_val || ' ' || coalesce(s.unit, '(no unit)'), v.expected,
          format('GUC %s defaults to %s', v.name, v.expected))
  FROM (VALUES ('shape_sync.write_piece_size', '64 kB'),
               ('shape_sync.cache_max_age', '60 s'),
               ('shape_sync.cache_stale_age', '300 s')) AS v(name, expected)
  LEFT JOIN pg_settings AS s USING (name)
 ORDER BY v.name;

-- The chunk threshold is a size: 10 MB whichever memory unit the GUC is declared in.
SELECT is(
    (SELECT boot_val::bigint * CASE unit WHEN 'B' THEN 1 WHEN 'kB' THEN 1024 WHEN '8kB' THEN 8192
                                         WHEN 'MB' THEN 1024 * 1024 END
       FROM pg_settings WHERE name = 'shape_sync.chunk_bytes_threshold'),
    10::bigint * 1024 * 1024,
    'GUC shape_sync.chunk_bytes_threshold defaults to 10 MB');

SELECT * FROM finish();
ROLLBACK;
