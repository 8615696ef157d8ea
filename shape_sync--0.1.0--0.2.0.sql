/* shape_sync--0.1.0--0.2.0.sql: from 0.1.0's objects to 0.2.0's */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION shape_sync UPDATE TO '0.2.0'" to load this file. \quit

-- list_shapes() gained columns: its view goes with it and comes back with them.
DROP VIEW shapes;
DROP FUNCTION list_shapes();

CREATE FUNCTION list_shapes(
    OUT handle text,
    OUT relation text,
    OUT "where" text,
    OUT columns text,
    OUT replica text,
    OUT state text,
    OUT snapshot_rows bigint,
    OUT snapshot_ms bigint,
    OUT log_bytes bigint,
    OUT last_offset text,
    OUT chunks integer,
    OUT changes bigint,
    OUT routed_by text,
    OUT compactions bigint,
    OUT readers integer,
    OUT waiters integer,
    OUT created_at timestamptz,
    OUT last_read_at timestamptz,
    OUT error text)
RETURNS SETOF record
LANGUAGE C VOLATILE
AS 'MODULE_PATHNAME', 'shape_sync_list_shapes';

CREATE VIEW shapes AS SELECT * FROM list_shapes();

-- The monitoring views that 0.2.0 adds.
CREATE FUNCTION list_connections(
    OUT peer text,
    OUT handle text,
    OUT state text,
    OUT bytes_sent bigint,
    OUT connected_at timestamptz,
    OUT state_since timestamptz,
    OUT write_age interval)
RETURNS SETOF record
LANGUAGE C VOLATILE
AS 'MODULE_PATHNAME', 'shape_sync_list_connections';

CREATE VIEW connections AS SELECT * FROM list_connections();

CREATE FUNCTION metric_values(
    OUT name text,
    OUT labels jsonb,
    OUT value double precision)
RETURNS SETOF record
LANGUAGE C VOLATILE
AS 'MODULE_PATHNAME', 'shape_sync_metric_values';

CREATE VIEW metrics AS SELECT * FROM metric_values();

CREATE FUNCTION decoder_status(
    OUT wal_end_lsn pg_lsn,
    OUT decoded_lsn pg_lsn,
    OUT confirmed_flush_lsn pg_lsn,
    OUT lag_bytes bigint,
    OUT last_commit_at timestamptz,
    OUT commit_lag interval)
RETURNS record
LANGUAGE C VOLATILE
AS 'MODULE_PATHNAME', 'shape_sync_decoder_status';

CREATE VIEW decoder AS SELECT * FROM decoder_status();

CREATE FUNCTION reset_metrics()
RETURNS void
LANGUAGE C VOLATILE
AS 'MODULE_PATHNAME', 'shape_sync_reset_metrics';

-- The privileges of shape_sync--0.2.0.sql, which says why.
REVOKE ALL ON FUNCTION list_shapes() FROM PUBLIC;
REVOKE ALL ON shapes FROM PUBLIC;
REVOKE ALL ON FUNCTION list_connections() FROM PUBLIC;
REVOKE ALL ON connections FROM PUBLIC;
REVOKE ALL ON FUNCTION metric_values() FROM PUBLIC;
REVOKE ALL ON metrics FROM PUBLIC;
REVOKE ALL ON FUNCTION reset_metrics() FROM PUBLIC;
REVOKE ALL ON FUNCTION decoder_status() FROM PUBLIC;
REVOKE ALL ON decoder FROM PUBLIC;
GRANT USAGE ON SCHEMA @extschema@ TO pg_monitor;
GRANT EXECUTE ON FUNCTION list_connections() TO pg_monitor;
GRANT SELECT ON connections TO pg_monitor;
GRANT EXECUTE ON FUNCTION metric_values() TO pg_monitor;
GRANT SELECT ON metrics TO pg_monitor;
GRANT EXECUTE ON FUNCTION decoder_status() TO pg_monitor;
GRANT SELECT ON decoder TO pg_monitor;
GRANT EXECUTE ON FUNCTION admission_slots() TO pg_monitor;
GRANT SELECT ON admission TO pg_monitor;
GRANT EXECUTE ON FUNCTION log_memory_usage() TO pg_monitor;
GRANT EXECUTE ON FUNCTION stalled_serves_reaped() TO pg_monitor;
