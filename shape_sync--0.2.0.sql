/* shape_sync--0.2.0.sql */

-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "CREATE EXTENSION shape_sync" to load this file. \quit

-- Validates a shape definition exactly as GET /v1/shape does, without
-- creating the shape.  Returns the resolved relation, the selected columns,
-- the where clause as PostgreSQL deparses it (parameters bound), and the
-- electric-schema header the shape would carry.
CREATE FUNCTION validate_shape(
    "table" text,
    "where" text DEFAULT NULL,
    params text[] DEFAULT NULL,
    columns text DEFAULT NULL,
    replica text DEFAULT 'default')
RETURNS jsonb
LANGUAGE C VOLATILE
AS 'MODULE_PATHNAME', 'shape_sync_validate_shape';

-- The snapshot messages of a shape, one JSON text per row, encoded by the
-- same code the snapshot worker runs.  For inspection and tests.
CREATE FUNCTION encode_rows(
    "table" text,
    "where" text DEFAULT NULL,
    params text[] DEFAULT NULL,
    columns text DEFAULT NULL)
RETURNS SETOF text
LANGUAGE C VOLATILE
AS 'MODULE_PATHNAME', 'shape_sync_encode_rows';

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

-- The shapes the server holds: what they are, their snapshot, their log
-- (bytes, the offset it ends at, changes appended, compactions), the
-- column whose value routes changes to them (NULL: every change of the
-- table evaluates their where clause), and who reads them (requests
-- holding them, requests parked for changes).
CREATE VIEW shapes AS SELECT * FROM list_shapes();

CREATE FUNCTION log_memory_usage(
    OUT total_bytes bigint,
    OUT free_bytes bigint,
    OUT block_size integer)
RETURNS record
LANGUAGE C VOLATILE
AS 'MODULE_PATHNAME', 'shape_sync_log_memory_usage';

CREATE FUNCTION admission_slots(
    OUT kind text,
    OUT in_use integer,
    OUT max integer,
    OUT rejected bigint)
RETURNS SETOF record
LANGUAGE C VOLATILE
AS 'MODULE_PATHNAME', 'shape_sync_admission_slots';

-- Concurrent requests per admission kind (initial, existing), live.
CREATE VIEW admission AS SELECT * FROM admission_slots();

-- Connections closed because a write made no progress for
-- shape_sync.stalled_serve_timeout, since the server started (or since
-- reset_metrics()); the same count as
-- shape_sync_reaped_connections_total{reason="stalled_write"}.
CREATE FUNCTION stalled_serves_reaped()
RETURNS bigint
LANGUAGE C VOLATILE
AS 'MODULE_PATHNAME', 'shape_sync_stalled_serves_reaped';

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

-- The HTTP connections open now: the peer, the shape it was last served,
-- what it does (idle, resolving, snapshot, waiting, streaming, sse) and
-- since when, the response bytes sent, and how long the write in flight
-- has waited for the client (NULL when none).
CREATE VIEW connections AS SELECT * FROM list_connections();

CREATE FUNCTION metric_values(
    OUT name text,
    OUT labels jsonb,
    OUT value double precision)
RETURNS SETOF record
LANGUAGE C VOLATILE
AS 'MODULE_PATHNAME', 'shape_sync_metric_values';

-- Every series that GET /metrics shows, one row each (a histogram's
-- buckets, sum and count under their own names).
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

-- Where decoding is: the end of the WAL it last saw, the end of the last
-- transaction it decoded, the position its slot confirmed, the WAL bytes
-- between the first two, and that transaction's commit time and how long
-- after it its changes reached the shape logs.
CREATE VIEW decoder AS SELECT * FROM decoder_status();

-- Counters and histograms start again from zero; levels (gauges) stay.
CREATE FUNCTION reset_metrics()
RETURNS void
LANGUAGE C VOLATILE
AS 'MODULE_PATHNAME', 'shape_sync_reset_metrics';

-- Nothing here is for PUBLIC: shapes expose table contents.  The
-- monitoring views (metrics, connections, decoder, admission) and the
-- read-only functions behind them and beside them (log memory, stalled
-- serves) say nothing of table contents: pg_monitor may read them, as it
-- reads pg_stat_activity, which takes USAGE on the schema too.  Not
-- shapes, whose where clauses hold client parameters, nor what changes
-- state (reset_metrics) or reads tables (validate_shape, encode_rows).
REVOKE ALL ON FUNCTION validate_shape(text, text, text[], text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION encode_rows(text, text, text[], text) FROM PUBLIC;
REVOKE ALL ON FUNCTION list_shapes() FROM PUBLIC;
REVOKE ALL ON FUNCTION log_memory_usage() FROM PUBLIC;
REVOKE ALL ON shapes FROM PUBLIC;
REVOKE ALL ON FUNCTION admission_slots() FROM PUBLIC;
REVOKE ALL ON FUNCTION stalled_serves_reaped() FROM PUBLIC;
REVOKE ALL ON admission FROM PUBLIC;
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
