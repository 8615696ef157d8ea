/*-------------------------------------------------------------------------
 *
 * guc.h
 *		The shape_sync.* configuration parameters.
 *
 * IDENTIFICATION
 *	  src/pg/guc.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef SHAPE_SYNC_GUC_H
#define SHAPE_SYNC_GUC_H

extern int	shape_sync_port;
extern char *shape_sync_listen_addresses;
extern char *shape_sync_database;
extern int	shape_sync_http_threads;
extern int	shape_sync_max_connections;
extern int	shape_sync_chunk_bytes_threshold;	/* bytes */
extern int	shape_sync_log_memory;	/* MB */
extern int	shape_sync_max_shapes;
extern int	shape_sync_max_snapshot_workers;
extern int	shape_sync_shape_eviction;	/* SHAPE_EVICTION_* */
extern bool shape_sync_durable_logs;
extern int	shape_sync_log_fsync;	/* LogFsyncPolicy (log_manifest.h) */
extern int	shape_sync_log_disk_budget;	/* MB; 0: no limit */
extern double shape_sync_compaction_factor;	/* 0: never */
extern int	shape_sync_shape_idle_timeout;	/* s; 0: never */
extern int	shape_sync_max_new_shapes_per_client;	/* per minute; 0: no limit */
extern int	shape_sync_write_piece_size;	/* kB */
extern int	shape_sync_connection_memory;	/* kB */
extern int	shape_sync_cache_max_age;	/* s */
extern int	shape_sync_cache_stale_age; /* s */
extern int	shape_sync_long_poll_timeout;	/* ms */
extern bool shape_sync_allow_shape_deletion;
extern bool shape_sync_prefault_log_memory;
extern int	shape_sync_max_concurrent_initial;
extern int	shape_sync_max_concurrent_existing;
extern int	shape_sync_stalled_serve_timeout;	/* ms */
extern int	shape_sync_request_header_timeout;	/* ms; 0: none */
extern int	shape_sync_snapshot_wait_timeout;	/* ms; 0: none */
extern int	shape_sync_socket_send_buffer;	/* kB */
extern bool shape_sync_insecure;
extern char *shape_sync_cors_allowed_origins;
extern char *shape_sync_trusted_proxies;
extern char *shape_sync_role;
extern bool shape_sync_manage_replica_identity;
extern int	shape_sync_max_where_length;	/* bytes */
extern int	shape_sync_max_where_constant_size; /* bytes */
extern int	shape_sync_snapshot_statement_timeout;	/* ms; 0: none */
extern int	shape_sync_where_evaluation_timeout;	/* ms; 0: none */
extern int	shape_sync_subquery_max_values; /* rows of a subquery read at once */
extern int	shape_sync_decoder_lag_warning; /* ms; 0: never warn */
extern char *shape_sync_trusted_owners;
extern int	shape_sync_subset_columns;	/* SUBSET_COLUMNS_* */
extern int	shape_sync_subset_statement_timeout;	/* ms; 0: none */
extern int	shape_sync_debug_snapshot_gate;	/* an advisory lock key; 0: none */

typedef enum SubsetColumns
{
	SUBSET_COLUMNS_SHAPE,		/* a subset's clauses read the shape's columns */
	SUBSET_COLUMNS_TABLE		/* ... any the role may read */
} SubsetColumns;

typedef enum ShapeEviction
{
	SHAPE_EVICTION_LRU,
	SHAPE_EVICTION_NONE
} ShapeEviction;

/* shape_sync.secret, which PostgreSQL itself only ever sees as "". */
extern const char *shape_sync_secret(void);

extern void shape_sync_define_gucs(void);

#endif							/* SHAPE_SYNC_GUC_H */
