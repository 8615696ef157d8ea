--
-- 05_shapes_view: the shapes view and list_shapes().
--
-- The view's columns and their types.
SELECT ordinal_position, column_name, data_type
FROM information_schema.columns
WHERE table_schema = 'shape_sync' AND table_name = 'shapes'
ORDER BY ordinal_position;

-- The same columns as list_shapes() returns.
SELECT a.attnum, a.attname, format_type(a.atttypid, a.atttypmod) AS type
FROM pg_attribute a
WHERE a.attrelid = 'shape_sync.shapes'::regclass AND a.attnum > 0
ORDER BY a.attnum;
SELECT pg_get_function_result('shape_sync.list_shapes()'::regprocedure) AS result;

-- The view is read-only.
SELECT is_insertable_into, is_updatable
FROM information_schema.views
WHERE table_schema = 'shape_sync' AND table_name = 'shapes';

-- No HTTP request has been made: there are no shapes.
SELECT count(*) AS shapes FROM shape_sync.shapes;
SELECT count(*) AS shapes FROM shape_sync.list_shapes();
-- validate_shape() and encode_rows() create none.
CREATE TABLE t (id integer PRIMARY KEY, v text);
INSERT INTO t VALUES (1, 'a');
SELECT shape_sync.validate_shape('t') ->> 'relation' AS relation;
SELECT count(*) AS rows FROM shape_sync.encode_rows('t');
SELECT count(*) AS shapes FROM shape_sync.shapes;
-- Every state listed is a known one.
SELECT count(*) AS unknown_states
FROM shape_sync.shapes
WHERE state NOT IN ('free', 'snapshotting', 'ready', 'failed', 'retired');
-- Failed shapes, and only they, carry an error.
SELECT count(*) AS inconsistent
FROM shape_sync.shapes
WHERE (state = 'failed') <> (error IS NOT NULL);
-- The log memory is all free.
SELECT free_bytes = total_bytes AS all_free FROM shape_sync.log_memory_usage();
DROP TABLE t;
