--
-- 01_extension: the extension's objects, its schema, its shared memory and
-- its background worker.
--
-- Extension metadata: fixed schema, not relocatable.
SELECT e.extname, n.nspname AS schema, e.extversion, e.extrelocatable
FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace
WHERE e.extname = 'shape_sync';

-- Every member object of the extension.
SELECT pg_describe_object(d.classid, d.objid, d.objsubid) AS object
FROM pg_depend d
WHERE d.refclassid = 'pg_extension'::regclass
  AND d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'shape_sync')
  AND d.deptype = 'e'
ORDER BY 1;

-- The functions with their signatures, result types and properties.
SELECT p.proname,
       pg_get_function_arguments(p.oid) AS arguments,
       pg_get_function_result(p.oid) AS result,
       l.lanname AS language,
       p.provolatile, p.proretset, p.prosecdef, p.proisstrict
FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
WHERE p.pronamespace = 'shape_sync'::regnamespace
ORDER BY p.proname;

-- Every C function resolves to the module.
SELECT p.proname, p.prosrc, p.probin
FROM pg_proc p
WHERE p.pronamespace = 'shape_sync'::regnamespace
ORDER BY p.proname;

-- The view and its definition.
SELECT c.relname, c.relkind, pg_get_viewdef(c.oid) AS definition
FROM pg_class c
WHERE c.relnamespace = 'shape_sync'::regnamespace
ORDER BY c.relname;

-- Nothing is granted to PUBLIC.
SELECT p.proname, p.proacl IS NOT NULL AS has_acl,
       has_function_privilege('public', p.oid, 'EXECUTE') AS public_execute
FROM pg_proc p
WHERE p.pronamespace = 'shape_sync'::regnamespace
ORDER BY p.proname;
SELECT has_table_privilege('public', 'shape_sync.shapes', 'SELECT') AS public_select;

-- The extension cannot be moved to another schema.
CREATE SCHEMA shape_sync_other;
ALTER EXTENSION shape_sync SET SCHEMA shape_sync_other;
DROP SCHEMA shape_sync_other;

-- The view can be read.
SELECT count(*) >= 0 AS readable FROM shape_sync.shapes;

-- Shape log memory: 8 kB blocks, about shape_sync.log_memory in all (within
-- one block), and no more free than total.
SELECT block_size,
       total_bytes > 0 AS has_memory,
       total_bytes % block_size = 0 AS whole_blocks,
       free_bytes BETWEEN 0 AND total_bytes AS free_in_range,
       abs(total_bytes - pg_size_bytes(current_setting('shape_sync.log_memory')))
         <= block_size AS about_log_memory
FROM shape_sync.log_memory_usage();

-- The server worker, connected to shape_sync.database.
SELECT current_setting('shape_sync.database') AS served_database;
SELECT count(*) AS workers FROM pg_stat_activity WHERE backend_type = 'shape_sync';
SELECT backend_type, datname, application_name
FROM pg_stat_activity
WHERE backend_type = 'shape_sync';
