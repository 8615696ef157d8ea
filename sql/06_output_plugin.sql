-- The shape_sync output plugin, through a second slot: each change as the
-- Electric message a shape over the whole table would carry.

-- PostgreSQL 15.20 lets only the plugins listed in output_plugin_libraries
-- serve slots.  The worker trusts its own library for itself; any other
-- session needs the operator to list shape_sync, and until then gets an
-- error that says so.
SHOW output_plugin_libraries;
SELECT 'init' FROM pg_create_logical_replication_slot('regress_shape_sync', 'shape_sync');
ALTER SYSTEM SET output_plugin_libraries = pgoutput, test_decoding, shape_sync;
SELECT pg_reload_conf();
SELECT pg_sleep(0.3);
SHOW output_plugin_libraries;
SELECT 'init' FROM pg_create_logical_replication_slot('regress_shape_sync', 'shape_sync');

CREATE TABLE op (id int PRIMARY KEY, t text, n numeric, b bool, "odd ""name""" text);
ALTER TABLE op REPLICA IDENTITY FULL;
CREATE TABLE nopk (a int, b text);
ALTER TABLE nopk REPLICA IDENTITY FULL;

BEGIN;
INSERT INTO op VALUES (1, 'one', 1.5, true, 'x/y'), (2, NULL, NULL, NULL, NULL);
COMMIT;
UPDATE op SET t = 'uno' WHERE id = 1;
UPDATE op SET n = n WHERE id = 1;			-- changes nothing: no message
UPDATE op SET id = 3 WHERE id = 2;			-- key change: delete + insert
DELETE FROM op WHERE id = 1;
BEGIN;
INSERT INTO op VALUES (9, 'rolled back', 0, false, '');
ROLLBACK;
INSERT INTO nopk VALUES (1, 'a'), (NULL, 'b');
DELETE FROM nopk WHERE a IS NULL;
TRUNCATE nopk;

SELECT data FROM pg_logical_slot_get_changes('regress_shape_sync', NULL, NULL,
	'include-lsn', 'false', 'include-xids', 'false');

-- replica 'default': updates carry the key and the changed columns, deletes
-- the key only
UPDATE op SET b = false, t = 'tres' WHERE id = 3;
DELETE FROM op WHERE id = 3;
SELECT data FROM pg_logical_slot_get_changes('regress_shape_sync', NULL, NULL,
	'include-lsn', 'false', 'include-xids', 'false', 'replica', 'default');

-- options are checked
SELECT data FROM pg_logical_slot_peek_changes('regress_shape_sync', NULL, NULL, 'bogus', '1');

-- with the LSN and xid: the same transaction shares them, last marks its end
BEGIN;
INSERT INTO op VALUES (10, 'a', 1, true, 'q'), (11, 'b', 2, false, 'r');
COMMIT;
SELECT count(DISTINCT d->'headers'->>'lsn') AS lsns,
       count(DISTINCT d->'headers'->'txids'->>0) AS xids,
       array_agg(d->'headers'->>'op_position' ORDER BY d->'headers'->>'op_position') AS ops,
       array_agg(coalesce(d->'headers'->>'last', '-') ORDER BY d->'headers'->>'op_position') AS last,
       bool_and((d->'headers'->>'lsn')::numeric > 0) AS lsn_positive
FROM (SELECT data::jsonb AS d FROM pg_logical_slot_get_changes('regress_shape_sync', NULL, NULL)) s;

SELECT pg_drop_replication_slot('regress_shape_sync');
DROP TABLE op, nopk;
ALTER SYSTEM RESET output_plugin_libraries;
SELECT pg_reload_conf();
