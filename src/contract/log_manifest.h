/*-------------------------------------------------------------------------
 *
 * log_manifest.h
 *		The files that keep shape logs across restarts: what they hold and
 *		how their bytes are checked.
 *
 * See log_manifest.c for the format and why it is safe to trust.
 *
 * IDENTIFICATION
 *	  src/contract/log_manifest.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef LOG_MANIFEST_H
#define LOG_MANIFEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "log_offset.h"
#include "shape_log.h"

/* Bumped whenever a file's layout or a log record's layout changes. */
#define LOG_STORE_FORMAT_VERSION	2

#define LOG_STORE_NAME_LEN		64	/* slot names, boot ids: NAMEDATALEN */
#define LOG_STORE_HANDLE_LEN	48	/* SHAPE_HANDLE_LEN */
#define LOG_STORE_ERROR_LEN		160

/* shape_sync.log_fsync */
typedef enum LogFsyncPolicy
{
	LOG_FSYNC_OFF = 0,
	LOG_FSYNC_BATCH,
	LOG_FSYNC_COMMIT
} LogFsyncPolicy;

/*
 * Where the logs came from: a header that no longer matches the cluster
 * means that no shape of the store may be served.  It also names the
 * value sets file of the state it describes (not about the cluster:
 * log_store_header_mismatch leaves it out).
 */
typedef struct LogStoreHeader
{
	uint64_t	system_id;		/* pg_control's system identifier */
	uint32_t	timeline;
	uint32_t	database_oid;
	char		slot[LOG_STORE_NAME_LEN];
	uint32_t	fsync_policy;	/* LogFsyncPolicy the files were written under */
	char		boot_id[LOG_STORE_NAME_LEN];	/* the kernel's, when written */
	uint64_t	durable_lsn;	/* every commit before it is in the files */
	uint32_t	sets_generation;	/* of the value sets file; 0: none */
	uint64_t	sets_length;	/* its bytes that belong to this manifest (the
								 * file may hold more, written after it) */
} LogStoreHeader;

/* One shape's durable extent, in the manifest. */
typedef struct LogStoreExtent
{
	char		handle[LOG_STORE_HANDLE_LEN];
	uint32_t	generation;		/* of its data file (compaction makes a new one) */
	uint64_t	length;			/* durable bytes of the data file */
	LogOffset	last;			/* offset of the last record */
	uint32_t	nchunks;		/* closed chunks, ending within `length` */
	SlogChunk  *chunks;
} LogStoreExtent;

typedef struct LogStoreManifest
{
	LogStoreHeader header;
	uint32_t	nshapes;
	LogStoreExtent *shapes;
	/* decoding only: the deltas applied, and the bytes of a last one cut short */
	uint32_t	deltas;
	size_t		torn_bytes;
} LogStoreManifest;

/*
 * A round's changes, appended to the manifest (log_manifest.c): the header
 * now, the shapes no longer listed, and the shapes whose extent changed,
 * each with only its chunks from first_chunk[i] on (chunks[0] is chunk
 * first_chunk[i]; nchunks still counts them all).
 */
typedef struct LogStoreDelta
{
	LogStoreHeader header;
	uint32_t	nremoved;
	const char *const *removed;	/* handles */
	uint32_t	nchanged;
	const LogStoreExtent *changed;
	const uint32_t *first_chunk;
} LogStoreDelta;

/*
 * What a shape is, written once when its log is first made durable: the
 * definition to validate again at start, the texts that must come out the
 * same, and the snapshot's visibility, which keeps stitching exact when the
 * WAL is decoded again.
 */
typedef struct LogStoreShape
{
	char		handle[LOG_STORE_HANDLE_LEN];
	char	   *identity;		/* shape_identity() */
	char	   *fingerprint;	/* shape_definition_fingerprint() */
	char	   *schema_json;
	char	   *schema_name;
	char	   *table_name;
	char	   *where_sql;		/* NULL: none */
	uint32_t	ncolumns;		/* 0: every column */
	char	  **columns;
	uint32_t	flags;			/* SHAPE_FLAG_* */
	int32_t		chunk_threshold;
	uint64_t	snapshot_lsn;
	uint64_t	xmin;
	uint64_t	xmax;
	uint32_t	nxip;
	uint64_t   *xip;
	int64_t		created_at_us;
	uint64_t	snapshot_rows;
	int64_t		snapshot_ms;
} LogStoreShape;

/*
 * Encoding: a malloc'd buffer the caller frees, or NULL when out of
 * memory.  Decoding: false with a sentence in `error` when the bytes are
 * not a whole, unchanged file of this format version; what it allocates
 * is released with the matching _free.  A manifest decodes with the
 * deltas appended to it applied, up to one cut short.
 */
extern char *log_manifest_encode(const LogStoreManifest *manifest, size_t *len);
extern char *log_manifest_delta_encode(const LogStoreDelta *delta, size_t *len);
extern bool log_manifest_decode(const char *bytes, size_t len, LogStoreManifest *out,
								char *error, size_t error_len);
extern void log_manifest_free(LogStoreManifest *manifest);

extern char *log_store_shape_encode(const LogStoreShape *shape, size_t *len);
extern bool log_store_shape_decode(const char *bytes, size_t len, LogStoreShape *out,
								   char *error, size_t error_len);
extern void log_store_shape_free(LogStoreShape *shape);

/*
 * The first header field that differs, as a phrase for a log line ("the
 * system identifier"), or NULL when `stored` describes `now`.
 */
extern const char *log_store_header_mismatch(const LogStoreHeader *stored,
											 const LogStoreHeader *now);

#endif							/* LOG_MANIFEST_H */
