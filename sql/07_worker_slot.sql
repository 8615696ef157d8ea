-- The worker's own replication slot: one per served database, on the
-- shape_sync plugin, active, and confirming its position as it decodes.
SELECT slot_name LIKE 'shape_sync_%' AS named, plugin, slot_type, active,
       database = current_setting('shape_sync.database') AS served_database
FROM pg_replication_slots WHERE plugin = 'shape_sync';

CREATE TABLE confirm_probe (id int);
SELECT pg_current_wal_lsn() AS before \gset
INSERT INTO confirm_probe SELECT generate_series(1, 1000);
SELECT pg_current_wal_lsn() AS after_writes \gset
-- the worker confirms what it decoded within moments, idle or not
DO $$
BEGIN
  FOR i IN 1..100 LOOP
    EXIT WHEN (SELECT confirmed_flush_lsn FROM pg_replication_slots
               WHERE plugin = 'shape_sync' AND slot_name LIKE 'shape_sync_%') >= pg_current_wal_lsn();
    PERFORM pg_sleep(0.05);
  END LOOP;
END $$;
SELECT confirmed_flush_lsn >= :'after_writes'::pg_lsn AS confirmed_past_the_writes
FROM pg_replication_slots WHERE plugin = 'shape_sync' AND slot_name LIKE 'shape_sync_%';
DROP TABLE confirm_probe;
