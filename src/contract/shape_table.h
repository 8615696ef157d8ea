/*-------------------------------------------------------------------------
 *
 * shape_table.h
 *		The table of shapes in shared memory: slots, pins and handles.
 *
 * See shape_table.c for the slot life cycle and the notes on
 * synchronization.
 *
 * IDENTIFICATION
 *	  src/contract/shape_table.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef SHAPE_TABLE_H
#define SHAPE_TABLE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "shape_log.h"

#define SHAPE_HANDLE_LEN		48
#define SHAPE_RELATION_LEN		272		/* "schema"."table", quoted */
#define SHAPE_WHERE_PREVIEW_LEN 512
#define SHAPE_ERROR_LEN			512
#define SHAPE_COLUMNS_PREVIEW_LEN	512
#define SHAPE_NO_SLOT			UINT32_MAX

typedef enum ShapeState
{
	SHAPE_FREE = 0,				/* unused; may be claimed by the main thread */
	SHAPE_SNAPSHOTTING,			/* the snapshot worker writes the log */
	SHAPE_READY,				/* snapshot done; the log is complete */
	SHAPE_FAILED,				/* failed; `error_reason` and `error` say why */
	SHAPE_RETIRED				/* dropped; blocks go back at the last unpin */
} ShapeState;

typedef struct ShapeSlot
{
	_Atomic uint32_t state;		/* ShapeState; release-stored */
	_Atomic uint32_t generation;	/* bumped each time the slot is claimed */
	_Atomic uint64_t pins;		/* readers holding the log | SHAPE_PIN_RETIRED */

	/* Set by the main thread before the state leaves SHAPE_FREE. */
	char		handle[SHAPE_HANDLE_LEN];
	char		relation[SHAPE_RELATION_LEN];
	char		where_preview[SHAPE_WHERE_PREVIEW_LEN];
	uint32_t	relid;
	uint32_t	flags;			/* SHAPE_FLAG_* */
	char		columns[SHAPE_COLUMNS_PREVIEW_LEN];	/* the selected columns, "a,b" */
	int64_t		created_at_us;	/* Unix epoch, microseconds */
	_Atomic int64_t last_read_us;	/* the last request for it, same clock */

	/* Written by the main thread (the log's writer), for metrics and views. */
	_Atomic int64_t published_us;	/* its last change reached the log, monotonic */
	_Atomic uint64_t changes;	/* changes appended to its log */
	_Atomic int32_t route_attnum;	/* the column whose constants route
									 * changes to it; 0: every change
									 * evaluates its where clause */

	/* Parked requests (waiters.c, under the shape's wait-list lock). */
	_Atomic uint32_t waiters;

	/* Set by the snapshot worker. */
	_Atomic uint64_t compactions;	/* by the main thread, its log's writer */
	_Atomic uint64_t snapshot_rows;
	_Atomic int64_t snapshot_ms;
	uint64_t	snapshot_lsn;	/* WAL insert position once the snapshot was
								 * taken; stored before the state is READY */
	uint64_t	snapshot_file_bytes;	/* its log's first bytes that the
										 * worker wrote to the data file;
										 * stored before the state is READY */
	uint32_t	error_reason;	/* RefusalReason, once state is FAILED: a
								 * REFUSAL_SNAPSHOT_* (REFUSAL_MUST_REFETCH:
								 * rotate it) */
	int64_t		error_number;	/* ... its Refusal.number */
	char		error[SHAPE_ERROR_LEN];	/* ... and its Refusal.text, plain */

	/*
	 * Two versions of the log: `log_current` names the one served; the
	 * other is free, or is being built by compaction, or (retired) is still
	 * read by responses that located their range in it.
	 */
	_Atomic uint32_t log_current;
	_Atomic uint64_t log_pins[2];	/* readers | SHAPE_PIN_RETIRED */
	_Atomic uint32_t log_free[2];	/* 1: released, may be built again */
	ShapeLog	logs[2];
} ShapeSlot;

#define SHAPE_FLAG_REPLICA_FULL		0x1
#define SHAPE_FLAG_CHANGES_ONLY		0x2

#define SHAPE_PIN_RETIRED		((uint64_t) 1 << 63)

typedef struct ShapeTable
{
	uint32_t	nslots;
	uint32_t	claim_next;		/* where shape_table_claim looks first (the
								 * main thread's: the only claimer) */
	_Atomic int64_t last_handle_us; /* handles never repeat */
	_Atomic uint64_t last_seen_lsn; /* newest LSN the server knows about */
	_Atomic uint64_t catalog_epoch; /* moves when what a resolution depends
									 * on may have changed (main thread) */
	_Atomic uint32_t blocks_wanted; /* a snapshot waits for this many free
									 * blocks; the main thread makes room */
	ShapeLogArena *arena;		/* valid in every process of the cluster */
	_Atomic uint64_t *dirty;	/* one bit per slot: log changed */
	_Atomic uint64_t *dirty_words;	/* one bit per word of dirty: look there */
	ShapeSlot  *slots;
} ShapeTable;

extern size_t shape_table_size(uint32_t nslots);
extern ShapeTable *shape_table_init(void *mem, uint32_t nslots,
									ShapeLogArena *arena);

/* Main thread: claim and retire slots. */
extern uint32_t shape_table_claim(ShapeTable *table);
extern void shape_table_retire(ShapeTable *table, uint32_t slot);

/* Anyone: hold a slot's log while reading it. */
extern bool shape_table_pin(ShapeTable *table, uint32_t slot, uint32_t generation);
extern void shape_table_unpin(ShapeTable *table, uint32_t slot);
/* How far apart two reads must be for shape_table_note_read to tell them apart. */
#define SHAPE_READ_NOTE_US	10000
extern void shape_table_note_read(ShapeTable *table, uint32_t slot);

/* The clock of created_at_us and last_read_us: Unix epoch, microseconds. */
extern int64_t shape_table_unix_us(void);
extern ShapeState shape_table_state(const ShapeTable *table, uint32_t slot);
extern void shape_table_set_state(ShapeTable *table, uint32_t slot, ShapeState state);
extern bool shape_table_transition(ShapeTable *table, uint32_t slot, ShapeState from,
								   ShapeState to);

/*
 * A pinned slot's log: readers pin the version being served (and keep
 * reading it even if compaction swaps in another); the writer appends to
 * the served one; compaction builds the spare one and swaps it in.
 */
extern const ShapeLog *shape_table_log_pin(ShapeTable *table, uint32_t slot, uint32_t *version);
extern void shape_table_log_unpin(ShapeTable *table, uint32_t slot, uint32_t version);
extern ShapeLog *shape_table_log(ShapeTable *table, uint32_t slot);
extern ShapeLog *shape_table_spare_log(ShapeTable *table, uint32_t slot);
extern void shape_table_swap_log(ShapeTable *table, uint32_t slot);
extern bool shape_table_previous_log_free(const ShapeTable *table, uint32_t slot);
extern void shape_table_drop_spare_log(ShapeTable *table, uint32_t slot);
extern uint32_t shape_table_log_blocks(const ShapeTable *table, uint32_t slot);

/* Writers mark a changed log; the main thread collects the marks. */
extern void shape_table_mark_dirty(ShapeTable *table, uint32_t slot);
extern uint32_t shape_table_take_dirty(ShapeTable *table, uint32_t *slots,
									   uint32_t max);

/* A fresh handle "<hash>-<unix microseconds>", never repeated. */
extern void shape_table_new_handle(ShapeTable *table, uint32_t hash,
								   int64_t now_us, char *out);

extern void shape_table_note_lsn(ShapeTable *table, uint64_t lsn);

/* last_seen_lsn, read before the reader locates its range (see shape_table.c). */
static inline uint64_t
shape_table_seen_lsn(ShapeTable *table)
{
	return atomic_load_explicit(&table->last_seen_lsn, memory_order_acquire);
}

/* Its log's writer published changes now (monotonic clock, microseconds). */
static inline void
shape_table_note_published(ShapeTable *table, uint32_t slot)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	atomic_store_explicit(&table->slots[slot].published_us,
						  (int64_t) ts.tv_sec * 1000000 + ts.tv_nsec / 1000,
						  memory_order_relaxed);
}

#endif							/* SHAPE_TABLE_H */
