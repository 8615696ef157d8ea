-- test/tap/02_privileges.sql: nothing in schema shape_sync is open to PUBLIC (shapes expose
-- table contents); a role gets in only through explicit grants.
-- Run by scripts/test.sh with pg_prove, in a database where pgtap is installed.
BEGIN;
CREATE EXTENSION IF NOT EXISTS shape_sync;

SELECT plan(22);

-- Roles are cluster-wide objects, but CREATE ROLE is transactional: ROLLBACK removes them.
CREATE ROLE shape_sync_tap_nobody NOLOGIN NOSUPERUSER;
CREATE ROLE shape_sync_tap_reader NOLOGIN NOSUPERUSER;
GRANT USAGE ON SCHEMA shape_sync TO shape_sync_tap_reader;
GRANT EXECUTE ON FUNCTION
    shape_sync.validate_shape(text, text, text[], text, text),
    shape_sync.encode_rows(text, text, text[], text),
    shape_sync.list_shapes(),
    shape_sync.log_memory_usage()
  TO shape_sync_tap_reader;
GRANT SELECT ON shape_sync.shapes TO shape_sync_tap_reader;

SELECT is((SELECT rolsuper FROM pg_roles WHERE rolname = 'shape_sync_tap_nobody'), false,
          'the test role shape_sync_tap_nobody is not a superuser');

-- A fresh role: nothing -------------------------------------------------------------------

SELECT function_privs_are('shape_sync', 'validate_shape', ARRAY['text', 'text', 'text[]', 'text', 'text'],
                          'shape_sync_tap_nobody', ARRAY[]::name[]);
SELECT function_privs_are('shape_sync', 'encode_rows', ARRAY['text', 'text', 'text[]', 'text'],
                          'shape_sync_tap_nobody', ARRAY[]::name[]);
SELECT function_privs_are('shape_sync', 'list_shapes', ARRAY[]::name[],
                          'shape_sync_tap_nobody', ARRAY[]::name[]);
SELECT function_privs_are('shape_sync', 'log_memory_usage', ARRAY[]::name[],
                          'shape_sync_tap_nobody', ARRAY[]::name[]);
SELECT table_privs_are('shape_sync', 'shapes', 'shape_sync_tap_nobody', ARRAY[]::name[]);

-- Not only the functions listed above: no function or relation in the schema grants PUBLIC
-- anything (a NULL ACL means the default, which for functions is EXECUTE to PUBLIC).
SELECT is(
    ARRAY(SELECT p.oid::regprocedure::text
            FROM pg_proc AS p
           WHERE p.pronamespace = 'shape_sync'::regnamespace
             AND (p.proacl IS NULL
                  OR EXISTS (SELECT 1 FROM aclexplode(p.proacl) AS a WHERE a.grantee = 0))
           ORDER BY 1),
    ARRAY[]::text[],
    'no function in schema shape_sync is executable by PUBLIC');
SELECT is(
    ARRAY(SELECT c.oid::regclass::text
            FROM pg_class AS c
           WHERE c.relnamespace = 'shape_sync'::regnamespace
             AND EXISTS (SELECT 1 FROM aclexplode(c.relacl) AS a WHERE a.grantee = 0)
           ORDER BY 1),
    ARRAY[]::text[],
    'no relation in schema shape_sync grants anything to PUBLIC');

-- has_*_privilege agrees, for the function signatures as SQL callers spell them.
SELECT ok(NOT has_function_privilege('shape_sync_tap_nobody', f, 'EXECUTE'),
          format('shape_sync_tap_nobody cannot execute %s', f))
  FROM unnest(ARRAY['shape_sync.validate_shape(text, text, text[], text, text)',
                    'shape_sync.encode_rows(text, text, text[], text)',
                    'shape_sync.list_shapes()',
                    'shape_sync.log_memory_usage()']) AS f;
SELECT ok(NOT has_table_privilege('shape_sync_tap_nobody', 'shape_sync.shapes', 'SELECT'),
          'shape_sync_tap_nobody cannot select from shape_sync.shapes');

-- ... and so does trying it.
SET LOCAL ROLE shape_sync_tap_nobody;
SELECT throws_ok('SELECT * FROM shape_sync.shapes', '42501', NULL,
                 'shape_sync_tap_nobody: reading shape_sync.shapes is refused');
SELECT throws_ok('SELECT * FROM shape_sync.log_memory_usage()', '42501', NULL,
                 'shape_sync_tap_nobody: calling shape_sync.log_memory_usage() is refused');
RESET ROLE;

-- A role granted EXECUTE / SELECT explicitly ------------------------------------------------

SELECT function_privs_are('shape_sync', 'validate_shape', ARRAY['text', 'text', 'text[]', 'text', 'text'],
                          'shape_sync_tap_reader', ARRAY['EXECUTE']::name[]);
SELECT function_privs_are('shape_sync', 'encode_rows', ARRAY['text', 'text', 'text[]', 'text'],
                          'shape_sync_tap_reader', ARRAY['EXECUTE']::name[]);
SELECT function_privs_are('shape_sync', 'list_shapes', ARRAY[]::name[],
                          'shape_sync_tap_reader', ARRAY['EXECUTE']::name[]);
SELECT function_privs_are('shape_sync', 'log_memory_usage', ARRAY[]::name[],
                          'shape_sync_tap_reader', ARRAY['EXECUTE']::name[]);
SELECT table_privs_are('shape_sync', 'shapes', 'shape_sync_tap_reader', ARRAY['SELECT']::name[]);

SET LOCAL ROLE shape_sync_tap_reader;
SELECT lives_ok('SELECT count(*) FROM shape_sync.shapes',
                'shape_sync_tap_reader: reading shape_sync.shapes works');
SELECT lives_ok('SELECT * FROM shape_sync.log_memory_usage()',
                'shape_sync_tap_reader: calling shape_sync.log_memory_usage() works');
RESET ROLE;

SELECT * FROM finish();
ROLLBACK;
