/*
 * unit_metrics.h: the server's metrics (src/contract/server_metrics.c) in a
 * test process, in plain memory, and what tests read of them.
 *
 * unit_metrics_fresh() sets them up once per process and resets them each
 * call, so a test reads counts of its own doing only.
 */
#ifndef UNIT_METRICS_H
#define UNIT_METRICS_H

#include <stdlib.h>

#include "server_metrics.h"

#define UNIT_METRIC_STRIPES 16

static inline void
unit_metrics_fresh(void)
{
	static void *mem;

	if (mem == NULL)
	{
		mem = calloc(1, server_metrics_size(UNIT_METRIC_STRIPES));
		if (mem == NULL ||
			server_metrics_attach(mem, true, UNIT_METRIC_STRIPES, NULL, NULL, NULL, NULL) != 0)
			abort();
	}
	server_metrics_reset();
}

#define UNIT_REJECTED(k)		server_metric_counter(SM_ADMISSION_REJECTED, (uint32_t) (k))
#define UNIT_REAPED()			server_metric_counter(SM_REAPED, SM_REAP_STALLED_WRITE)
#define UNIT_REQUEST_TIMEOUTS() server_metric_counter(SM_REAPED, SM_REAP_REQUEST_TIMEOUT)

#endif							/* UNIT_METRICS_H */
