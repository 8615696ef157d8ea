/*-------------------------------------------------------------------------
 *
 * row_tags.h
 *		The tags and active conditions of a row of a shape with subqueries.
 *
 * IDENTIFICATION
 *	  src/pg/shape/row_tags.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef ROW_TAGS_H
#define ROW_TAGS_H

#include "postgres.h"

#include "fmgr.h"
#include "lib/stringinfo.h"

#include "shape_subquery.h"

#define ROW_TAG_HASH_LEN	32	/* an md5 in hex */

typedef struct RowTagger
{
	const SubqueryPlan *plan;
	char	   *handle;			/* the shape's: a tag belongs to one shape */
	FmgrInfo  **outputs;		/* by sublink, by column: the outer columns' */
} RowTagger;

/* One row's: a tag per disjunct, a condition per position. */
typedef struct RowTags
{
	char	  **tags;
	bool	   *active;
} RowTags;

extern void row_tagger_init(RowTagger *tagger, const SubqueryPlan *plan, Oid outer_relid,
							const char *handle);

/*
 * The tags of a row whose values (by attnum - 1) are given, and whose
 * positions' conditions, polarity applied, are `active`.  Allocated in
 * the current memory context.
 */
extern void row_tags_make(const RowTagger *tagger, const Datum *values, const bool *nulls,
						  const bool *active, RowTags *out);

/* The hash in a tag's slot of a subquery's value, from its columns' texts. */
extern void row_tag_value_hash(const RowTagger *tagger, int sublink, char *const *texts,
							   char *hash_out);

/*
 * Appends ,"tags":[...],"active_conditions":[...] and, with `removed`
 * (an update), ,"removed_tags":[the old row's tags the new one lost].
 */
extern void row_tags_json(const RowTagger *tagger, const RowTags *tags,
						  const RowTags *removed, StringInfo out);

#endif							/* ROW_TAGS_H */
