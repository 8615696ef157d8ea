/* shape_sync--0.1.0.sql */

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
    OUT replica text,
    OUT state text,
    OUT snapshot_rows bigint,
    OUT snapshot_ms bigint,
    OUT log_bytes bigint,
    OUT chunks integer,
    OUT readers integer,
    OUT created_at timestamptz,
    OUT error text)
RETURNS SETOF record
LANGUAGE C VOLATILE
AS 'MODULE_PATHNAME', 'shape_sync_list_shapes';

-- The shapes the server holds, with their snapshot and log sizes.
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
-- shape_sync.stalled_serve_timeout, since the server started.
CREATE FUNCTION stalled_serves_reaped()
RETURNS bigint
LANGUAGE C VOLATILE
AS 'MODULE_PATHNAME', 'shape_sync_stalled_serves_reaped';

-- Nothing here is for PUBLIC: shapes expose table contents.
REVOKE ALL ON FUNCTION validate_shape(text, text, text[], text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION encode_rows(text, text, text[], text) FROM PUBLIC;
REVOKE ALL ON FUNCTION list_shapes() FROM PUBLIC;
REVOKE ALL ON FUNCTION log_memory_usage() FROM PUBLIC;
REVOKE ALL ON shapes FROM PUBLIC;
REVOKE ALL ON FUNCTION admission_slots() FROM PUBLIC;
REVOKE ALL ON FUNCTION stalled_serves_reaped() FROM PUBLIC;
REVOKE ALL ON admission FROM PUBLIC;
