-- test/tap/03_settings.sql: the access settings' defaults, and shape_sync.secret kept from
-- every role: pg_settings hides it from roles that may not read all settings, SHOW and
-- current_setting() refuse them, and a superuser sees only whether one is set.
-- Run by scripts/test.sh with pg_prove, in a database where pgtap is installed.
BEGIN;
CREATE EXTENSION IF NOT EXISTS shape_sync;

SELECT plan(18);

SELECT is(current_setting('shape_sync.role'), 'pg_read_all_data',
          'shape_sync.role defaults to pg_read_all_data (no SUPERUSER, no BYPASSRLS)');
SELECT is((SELECT rolsuper OR rolbypassrls FROM pg_roles WHERE rolname = 'pg_read_all_data'), false,
          'the default role is neither a superuser nor exempt from row-level security');
SELECT is((SELECT boot_val FROM pg_settings WHERE name = 'shape_sync.insecure'), 'off',
          'shape_sync.insecure is off by default');
SELECT is((SELECT boot_val FROM pg_settings WHERE name = 'shape_sync.manage_replica_identity'), 'off',
          'shape_sync.manage_replica_identity is off by default: no DDL on a client''s say-so');
SELECT is((SELECT boot_val FROM pg_settings WHERE name = 'shape_sync.cors_allowed_origins'), '*',
          'shape_sync.cors_allowed_origins defaults to * as Electric');
SELECT is((SELECT context FROM pg_settings WHERE name = 'shape_sync.secret'), 'sighup',
          'shape_sync.secret is reloadable');
SELECT is((SELECT boot_val FROM pg_settings WHERE name = 'shape_sync.max_where_length'), '8192',
          'a where clause is limited to 8 kB by default');
SELECT is((SELECT boot_val FROM pg_settings WHERE name = 'shape_sync.snapshot_statement_timeout'), '300000',
          'a snapshot query may run 5 minutes by default');
SELECT is((SELECT boot_val FROM pg_settings WHERE name = 'shape_sync.request_header_timeout'), '10000',
          'a connection gets 10 s for each whole request by default');
SELECT is((SELECT boot_val FROM pg_settings WHERE name = 'shape_sync.snapshot_wait_timeout'), '45000',
          'a request waits 45 s for its shape''s snapshot by default');

-- Nothing is set here: SHOW prints nothing, not even the mask.
SELECT is(current_setting('shape_sync.secret'), '', 'no secret set: SHOW prints an empty string');

-- Another role.
CREATE ROLE shape_sync_tap_settings NOLOGIN NOSUPERUSER;
SET LOCAL ROLE shape_sync_tap_settings;
SELECT is((SELECT count(*) FROM pg_settings WHERE name = 'shape_sync.secret'), 0::bigint,
          'pg_settings has no row for shape_sync.secret for a role without pg_read_all_settings');
SELECT is((SELECT count(*) FROM pg_settings WHERE name = 'shape_sync.role'), 1::bigint,
          '... while the other settings are visible');
SELECT throws_ok('SHOW shape_sync.secret', '42501', NULL,
                 'SHOW shape_sync.secret is refused to another role');
SELECT throws_ok($$SELECT current_setting('shape_sync.secret')$$, '42501', NULL,
                 'current_setting(''shape_sync.secret'') is refused to another role');
SELECT throws_ok($$SET shape_sync.secret = 'x'$$, '55P02', NULL,
                 'no session can set it');
SELECT throws_ok($$SET shape_sync.role = 'x'$$, '55P02', NULL,
                 'nor the role');
RESET ROLE;
SELECT ok(NOT has_parameter_privilege('shape_sync_tap_settings', 'shape_sync.secret', 'ALTER SYSTEM'),
          'another role may not ALTER SYSTEM it');

SELECT * FROM finish();
ROLLBACK;
