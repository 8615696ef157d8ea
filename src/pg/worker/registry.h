/*-------------------------------------------------------------------------
 *
 * registry.h
 *		The main thread's map from shape definitions to shapes.
 *
 * IDENTIFICATION
 *	  src/pg/worker/registry.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef REGISTRY_H
#define REGISTRY_H

#include "shape_request.h"
#include "shape_def.h"
#include "log_manifest.h"
#include "server_metrics.h"

extern void registry_start(void);
extern void registry_resolve(ShapeRequest *req);
extern bool registry_resolve_during_replay(ShapeRequest *req);
extern void registry_maintain(void);
extern void registry_maintain_during_replay(void);
extern void registry_rotate(uint32_t slot, SmRotationCause cause);
extern uint32_t registry_rotate_all(SmRotationCause cause);
extern int	registry_restore_shapes(const LogStoreManifest *manifest);
extern void registry_stop(void);
extern bool registry_shape(uint32_t slot, uint32_t generation, const ShapeSpec **spec,
						   const char **fingerprint, Oid *role);

#endif							/* REGISTRY_H */
