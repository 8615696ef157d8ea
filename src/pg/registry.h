/*-------------------------------------------------------------------------
 *
 * registry.h
 *		The main thread's map from shape definitions to shapes.
 *
 * IDENTIFICATION
 *	  src/pg/registry.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef REGISTRY_H
#define REGISTRY_H

#include "request_queue.h"

/* How many live requests are parked on a shape slot now. */
typedef uint32_t (*RegistryLiveClients) (uint32_t slot);

extern void registry_start(RegistryLiveClients live_clients);
extern void registry_resolve(ShapeRequest *req);
extern void registry_maintain(void);
extern void registry_rotate(uint32_t slot);
extern void registry_stop(void);

#endif							/* REGISTRY_H */
