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

/* More threads of one process than can ever read a log at once. */
#define READER_EPOCH_SLOTS	1024

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
