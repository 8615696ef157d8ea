-- test/tap/06_pg_monitor.sql: a role granted pg_monitor reads every monitoring view of schema
-- shape_sync (metrics, connections, decoder, admission) and the read-only functions behind
-- them, and nothing else: not shapes (its where clauses hold client parameters), nothing that
-- changes state (reset_metrics) or reads tables (validate_shape, encode_rows).  Privileges on
-- the views were granted before, but without USAGE on the schema every read was refused.
-- Run by scripts/test.sh with pg_prove, in a database where pgtap is installed.
BEGIN;
CREATE EXTENSION IF NOT EXISTS shape_sync;

SELECT plan(22);

-- Roles are cluster-wide objects, but CREATE ROLE is transactional: ROLLBACK removes them.
CREATE ROLE shape_sync_tap_monitor NOLOGIN NOSUPERUSER IN ROLE pg_monitor;

SELECT ok(has_schema_privilege('pg_monitor', 'shape_sync', 'USAGE'),
          'pg_monitor has USAGE on schema shape_sync');
SELECT ok(NOT has_schema_privilege('pg_monitor', 'shape_sync', 'CREATE'),
          'pg_monitor has no CREATE on schema shape_sync');

-- Exactly these functions: a state-changing one granted by mistake fails here.
SELECT is(
    ARRAY(SELECT p.oid::regprocedure::text
            FROM pg_proc AS p
           WHERE p.pronamespace = 'shape_sync'::regnamespace
             AND has_function_privilege('pg_monitor', p.oid, 'EXECUTE')
           ORDER BY 1),
    ARRAY['shape_sync.admission_slots()',
          'shape_sync.decoder_status()',
          'shape_sync.list_connections()',
          'shape_sync.log_memory_usage()',
          'shape_sync.metric_values()',
          'shape_sync.stalled_serves_reaped()'],
    'pg_monitor may execute the read-only monitoring functions, and only those');
SELECT is(
    ARRAY(SELECT c.oid::regclass::text
            FROM pg_class AS c
           WHERE c.relnamespace = 'shape_sync'::regnamespace
             AND has_table_privilege('pg_monitor', c.oid, 'SELECT')
           ORDER BY 1),
    ARRAY['shape_sync.admission', 'shape_sync.connections', 'shape_sync.decoder',
          'shape_sync.metrics'],
    'pg_monitor may read the monitoring views, and only those');
SELECT is(
    ARRAY(SELECT c.oid::regclass::text || ' ' || a.privilege_type
            FROM pg_class AS c, aclexplode(c.relacl) AS a
           WHERE c.relnamespace = 'shape_sync'::regnamespace
             AND a.grantee = 'pg_monitor'::regrole
             AND a.privilege_type <> 'SELECT'
           ORDER BY 1),
    ARRAY[]::text[],
    'pg_monitor holds nothing but SELECT on relations of shape_sync');

-- What a member of pg_monitor can do, trying it ------------------------------------------------

SET LOCAL ROLE shape_sync_tap_monitor;
SELECT lives_ok(format('SELECT count(*) FROM shape_sync.%I', v),
                format('a member of pg_monitor reads shape_sync.%s', v))
  FROM unnest(ARRAY['metrics', 'connections', 'decoder', 'admission']) AS v;
SELECT lives_ok(format('SELECT * FROM shape_sync.%s', f),
                format('a member of pg_monitor calls shape_sync.%s', f))
  FROM unnest(ARRAY['log_memory_usage()', 'stalled_serves_reaped()', 'admission_slots()',
                    'list_connections()', 'metric_values()', 'decoder_status()']) AS f;
SELECT cmp_ok((SELECT count(*) FROM shape_sync.metrics), '>', 0::bigint,
              'a member of pg_monitor sees the metrics');

-- ... and what it cannot.
SELECT throws_ok('SELECT * FROM shape_sync.shapes', '42501', NULL,
                 'a member of pg_monitor cannot read shape_sync.shapes');
SELECT throws_ok('SELECT * FROM shape_sync.list_shapes()', '42501', NULL,
                 'a member of pg_monitor cannot call shape_sync.list_shapes()');
SELECT throws_ok('SELECT shape_sync.reset_metrics()', '42501', NULL,
                 'a member of pg_monitor cannot reset the metrics');
SELECT throws_ok($$SELECT shape_sync.validate_shape('pg_class')$$, '42501', NULL,
                 'a member of pg_monitor cannot call shape_sync.validate_shape()');
SELECT throws_ok($$SELECT shape_sync.encode_rows('pg_class')$$, '42501', NULL,
                 'a member of pg_monitor cannot call shape_sync.encode_rows()');
SELECT throws_ok('CREATE VIEW shape_sync.tap_monitor_view AS SELECT 1', '42501', NULL,
                 'a member of pg_monitor cannot create objects in shape_sync');
RESET ROLE;

SELECT * FROM finish();
ROLLBACK;
