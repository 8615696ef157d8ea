/*-------------------------------------------------------------------------
 *
 * snapshot_definition.c
 *		A shape's snapshot job in its DSM segment: the definition the main
 *		thread hands to a snapshot worker, and the snapshot's visibility the
 *		worker hands back.
 *
 * The main thread flattens the shape's definition (columns, the validated
 * where tree as nodeToString text, the table's fingerprint, the chunk
 * size) into a segment it creates per job (snapshot_pool.c); the worker
 * that takes the job maps it, copies the definition out, and keeps it
 * mapped until the job ends.  Once its snapshot is written, the worker
 * stores the snapshot's xmin, xmax and xip list in the segment, before it
 * moves the shape from SNAPSHOTTING to READY; the main thread reads them
 * after it sees READY, and gives them to the shape's stream, which
 * stitches the transactions it kept meanwhile onto the snapshot.  The
 * segment has room for as many xips as a snapshot can hold
 * (GetMaxSnapshotXidCount).
 *
 * Notes on synchronization: the definition is written before the job is
 * queued (snapshot_jobs.c's release/acquire hand-off), and never again.
 * The visibility is written by the worker before its CAS out of
 * SNAPSHOTTING (shape_table_transition, sequentially consistent), and read
 * by the main thread only after its load of the shape's state shows READY,
 * so the read sees what the worker wrote; nothing writes it after.
 *
 * IDENTIFICATION
 *	  src/pg/snapshot/snapshot_definition.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "storage/procarray.h"

#include "snapshot_definition.h"

/* The segment's layout. */
typedef struct SnapshotDefinition
{
	Oid			relid;
	uint32		flags;
	int32		chunk_threshold;
	int32		ncolumns;
	int32		where_len;		/* -1: no where clause */
	int32		xip_capacity;
	bool		visibility_set; /* by the worker, before READY */
	SnapshotVisibility visibility;	/* its xip[xip_capacity] follows */

	/*
	 * then AttrNumber columns[ncolumns], the where tree (nodeToString) and
	 * its NUL, then the shape's definition fingerprint and its NUL
	 */
} SnapshotDefinition;

static char *
sdef_after_visibility(SnapshotDefinition *def)
{
	return (char *) def->visibility.xip + sizeof(uint64) * def->xip_capacity;
}

dsm_segment *
snapshot_definition_create(const ShapeSpec *spec, const char *fingerprint, int chunk_threshold)
{
	SnapshotDefinition *def;
	int			where_len = spec->where_tree ? (int) strlen(spec->where_tree) : -1;
	int			xip_capacity = GetMaxSnapshotXidCount();
	Size		size;
	dsm_segment *seg;
	char	   *p;

	size = sizeof(SnapshotDefinition) + sizeof(uint64) * xip_capacity +
		sizeof(AttrNumber) * spec->ncolumns + Max(where_len, 0) + 1 + strlen(fingerprint) + 1;
	seg = dsm_create(size, 0);
	dsm_pin_mapping(seg);
	def = dsm_segment_address(seg);
	memset(def, 0, sizeof(SnapshotDefinition));
	def->relid = spec->relid;
	def->flags = spec->flags;
	def->chunk_threshold = chunk_threshold;
	def->ncolumns = spec->ncolumns;
	def->where_len = where_len;
	def->xip_capacity = xip_capacity;
	p = sdef_after_visibility(def);
	memcpy(p, spec->columns, sizeof(AttrNumber) * spec->ncolumns);
	p += sizeof(AttrNumber) * spec->ncolumns;
	if (where_len >= 0)
		memcpy(p, spec->where_tree, where_len + 1);
	else
		*p = '\0';
	p += Max(where_len, 0) + 1;
	memcpy(p, fingerprint, strlen(fingerprint) + 1);
	return seg;
}

void
snapshot_definition_read(dsm_segment *seg, ShapeSpec *spec, char **fingerprint,
						 int32 *chunk_threshold)
{
	SnapshotDefinition *def = dsm_segment_address(seg);
	const char *p = sdef_after_visibility(def);

	memset(spec, 0, sizeof(*spec));
	spec->relid = def->relid;
	spec->flags = def->flags;
	spec->ncolumns = def->ncolumns;
	spec->columns = palloc(sizeof(AttrNumber) * Max(def->ncolumns, 1));
	memcpy(spec->columns, p, sizeof(AttrNumber) * def->ncolumns);
	p += sizeof(AttrNumber) * def->ncolumns;
	spec->where_tree = def->where_len < 0 ? NULL : pstrdup(p);
	p += Max(def->where_len, 0) + 1;
	*fingerprint = pstrdup(p);
	*chunk_threshold = def->chunk_threshold;
}

/* The next unsigned number of the snapshot text at *p, and what follows it. */
static uint64
sdef_number(const char *snapshot_text, const char **p, char follows)
{
	char	   *end;
	uint64		value;

	errno = 0;
	value = strtou64(*p, &end, 10);
	if (errno != 0 || end == *p || *end != follows)
		elog(ERROR, "unexpected snapshot text \"%s\"", snapshot_text);
	*p = follows ? end + 1 : end;
	return value;
}

void
snapshot_definition_set_visibility(dsm_segment *seg, const char *snapshot_text)
{
	SnapshotDefinition *def = dsm_segment_address(seg);
	SnapshotVisibility *vis = &def->visibility;
	const char *p = snapshot_text;

	vis->xmin = sdef_number(snapshot_text, &p, ':');
	vis->xmax = sdef_number(snapshot_text, &p, ':');
	vis->nxip = 0;
	while (*p != '\0')
	{
		if (vis->nxip == def->xip_capacity)
			elog(ERROR, "snapshot \"%s\" has more than %d running transactions",
				 snapshot_text, def->xip_capacity);
		vis->xip[vis->nxip++] = sdef_number(snapshot_text, &p, strchr(p, ',') ? ',' : '\0');
	}
	def->visibility_set = true;
}

SnapshotVisibility *
snapshot_definition_visibility(dsm_segment *seg)
{
	SnapshotDefinition *def = dsm_segment_address(seg);
	Size		size;
	SnapshotVisibility *copy;

	if (!def->visibility_set)
		return NULL;
	size = offsetof(SnapshotVisibility, xip) + sizeof(uint64) * def->visibility.nxip;
	copy = palloc(size);
	memcpy(copy, &def->visibility, size);
	return copy;
}

/* pg_current_snapshot()'s text as a visibility, palloc'd (a move-in's). */
SnapshotVisibility *
snapshot_visibility_parse(const char *snapshot_text)
{
	const char *p = snapshot_text;
	int			nxip = 0;
	SnapshotVisibility *vis;

	for (const char *c = snapshot_text; *c != '\0'; c++)
		nxip += *c == ',';
	vis = palloc(offsetof(SnapshotVisibility, xip) + sizeof(uint64) * (nxip + 1));
	vis->xmin = sdef_number(snapshot_text, &p, ':');
	vis->xmax = sdef_number(snapshot_text, &p, ':');
	vis->nxip = 0;
	while (*p != '\0')
		vis->xip[vis->nxip++] = sdef_number(snapshot_text, &p, strchr(p, ',') ? ',' : '\0');
	return vis;
}
