/*-------------------------------------------------------------------------
 *
 * decoder.h
 *		In-process logical decoding of the WAL, on the worker's main thread.
 *
 * IDENTIFICATION
 *	  src/pg/worker/decoder.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef SHAPE_SYNC_DECODER_H
#define SHAPE_SYNC_DECODER_H

#include "postgres.h"

#include "access/xlogdefs.h"
#include "datatype/timestamp.h"

struct LogicalDecodingContext;

/* how often a held commit (decoder.c) is looked at again without a wake-up */
#define DECODER_HOLD_RECHECK_MS 10

/* what the main loop does that may not wait for a long replay (decoder.c) */
typedef void (*DecoderReplayHook) (void);

/*
 * Start: the slot first (made when missing or invalidated: `made_now`,
 * and its confirmed position), then decoding, which resumes at the slot's
 * position when shapes were restored and skips what concerns nobody when
 * none was.
 */
extern void decoder_open_slot(DecoderReplayHook hook, bool *made_now, XLogRecPtr *confirmed);
extern void decoder_start(XLogRecPtr restored_up_to);
extern XLogRecPtr decoder_position(void);
extern void decoder_confirm_durable(void);
extern void decoder_replay_tick(void);
extern bool decoder_step(void);
extern bool decoder_wal_pending(void);
extern bool decoder_holds_commit(void);
extern void decoder_stop(void);
extern void decoder_abandon(void);
extern bool decoder_skipping(void);
extern bool decoder_is_worker_context(struct LogicalDecodingContext *ctx);
extern void decoder_note_commit(XLogRecPtr end_lsn, TimestampTz commit_time);

#endif							/* SHAPE_SYNC_DECODER_H */
