--
-- 02_gucs: the shape_sync.* configuration parameters.
--
-- The test cluster sets shape_sync.port and shape_sync.log_memory; their
-- settings are not shown (boot_val is), so the output does not depend on the
-- harness.
SELECT name,
       CASE WHEN name IN ('shape_sync.port', 'shape_sync.log_memory')
            THEN '(set by harness)' ELSE setting END AS setting,
       unit, context, vartype, min_val, max_val, boot_val
FROM pg_settings
WHERE name LIKE 'shape_sync.%'
ORDER BY name;

-- Descriptions.
SELECT name, short_desc, extra_desc
FROM pg_settings
WHERE name LIKE 'shape_sync.%'
ORDER BY name;

-- Units are applied by SHOW.
SHOW shape_sync.chunk_bytes_threshold;
SHOW shape_sync.write_piece_size;
SHOW shape_sync.cache_max_age;
SHOW shape_sync.cache_stale_age;
SHOW shape_sync.database;
SHOW shape_sync.listen_addresses;

-- The prefix is reserved: no placeholder variables.
SET shape_sync.bogus = 1;
SELECT current_setting('shape_sync.bogus', true) AS bogus;

-- Restart-only parameters cannot be set in a session.
SET shape_sync.port = 3001;
SET shape_sync.log_memory = '64MB';
SET shape_sync.database = 'contrib_regression';
-- Reload-only ones cannot either.
SET shape_sync.chunk_bytes_threshold = '1MB';
SET shape_sync.cache_max_age = 0;
-- Nor with set_config().
SELECT set_config('shape_sync.max_shapes', '10', false);
-- The settings are unchanged.
SHOW shape_sync.chunk_bytes_threshold;
SHOW shape_sync.max_shapes;

-- shape_sync.trusted_proxies takes addresses and CIDR ranges, not names.
ALTER SYSTEM SET shape_sync.trusted_proxies = '127.0.0.1, proxy.example';
ALTER SYSTEM SET shape_sync.trusted_proxies = '10.0.0.1/8';
ALTER SYSTEM SET shape_sync.trusted_proxies = '10.0.0.0/8', '2001:db8::/32';
SELECT setting FROM pg_settings WHERE name = 'shape_sync.trusted_proxies';
ALTER SYSTEM RESET shape_sync.trusted_proxies;
