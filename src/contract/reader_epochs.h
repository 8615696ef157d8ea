/*-------------------------------------------------------------------------
 *
 * reader_epochs.h
 *		When memory that lock-free readers may still be reading can be
 *		reused: epochs announced by the readers of one process.
 *
 * See reader_epochs.c for the protocol and the notes on synchronization.
 *
 * IDENTIFICATION
 *	  src/contract/reader_epochs.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef READER_EPOCHS_H
#define READER_EPOCHS_H

#include <stdbool.h>
#include <stdint.h>

#include <stdatomic.h>

/* More threads than can ever read logs at once. */
#define READER_EPOCH_SLOTS	1024

typedef struct ReaderEpochSlot
{
	_Atomic uint64_t announced; /* the epoch a section entered with; 0: none */
	_Atomic uint32_t owned;
	char		pad[64 - sizeof(uint64_t) - sizeof(uint32_t)];
} ReaderEpochSlot;

/* The epochs: process-local, or in shared memory (reader_epochs_use). */
typedef struct ReaderEpochs
{
	_Atomic uint64_t epoch;
	_Atomic uint32_t high;		/* slots ever claimed: [0, high) */
	ReaderEpochSlot slots[READER_EPOCH_SLOTS];
} ReaderEpochs;

/*
 * Lays out `epochs` with no reader.  Then reader_epochs_use makes it the
 * one this process (and every process forked from it afterwards) uses;
 * until then a process uses one of its own.
 */
extern void reader_epochs_init(ReaderEpochs *epochs);
extern void reader_epochs_use(ReaderEpochs *epochs);

/*
 * Forgets every reader of `epochs` (in use by others: their threads are
 * gone); its epoch goes on.
 */
extern void reader_epochs_reset(ReaderEpochs *epochs);

/* Readers: around every access to memory that a reclaimer may retire. */
extern void reader_epoch_enter(void);
extern void reader_epoch_exit(void);

/*
 * Reclaimer: after it made the memory unreachable for new readers, a
 * ticket; once reader_epoch_passed(ticket), no reader still holds it.
 */
extern uint64_t reader_epoch_retire(void);
extern bool reader_epoch_passed(uint64_t ticket);

/* Slots that threads of this process hold (tests). */
extern uint32_t reader_epoch_slots_claimed(void);

#endif							/* READER_EPOCHS_H */
