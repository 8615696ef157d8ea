/*-------------------------------------------------------------------------
 *
 * admission.h
 *		Admission slots: concurrent requests per kind, in shared memory.
 *
 * Refusals are counted in shape_sync_admission_rejected_total
 * (server_metrics.c).
 *
 * IDENTIFICATION
 *	  src/contract/admission.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef ADMISSION_H
#define ADMISSION_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

typedef enum AdmissionKind
{
	ADMISSION_NONE = -1,
	ADMISSION_INITIAL = 0,		/* waiting for its shape's snapshot */
	ADMISSION_EXISTING = 1,		/* served from a log the server holds */
	ADMISSION_KINDS = 2
} AdmissionKind;

typedef struct Admission
{
	_Atomic uint32_t in_use[ADMISSION_KINDS];
	_Atomic uint32_t limit[ADMISSION_KINDS];
} Admission;

extern void admission_init(Admission *a, uint32_t initial, uint32_t existing);
extern void admission_set_limits(Admission *a, uint32_t initial, uint32_t existing);
extern bool admission_acquire(Admission *a, AdmissionKind kind);
extern void admission_release(Admission *a, AdmissionKind kind);
extern void admission_promote(Admission *a);
extern bool admission_demote(Admission *a);
extern bool admission_has_room(Admission *a, AdmissionKind kind);
extern bool admission_would_admit(Admission *a, AdmissionKind kind);

extern const char *admission_kind_name(AdmissionKind kind);

#endif							/* ADMISSION_H */
