/*-------------------------------------------------------------------------
 *
 * row_tags.c
 *		The tags and active conditions of a row of a shape with subqueries,
 *		as Electric's clients read them.
 *
 * A shape whose where clause has subqueries (shape_subquery.c) sends, with
 * every row it sends, "tags": one string per disjunct of its plan, the
 * slots of the plan's positions joined by "/": empty for a position of
 * another disjunct, "1" for a plain condition, and for a subquery the hash
 * of the row's value of the compared columns.  And "active_conditions":
 * per position, whether its condition holds (NULL counts as false, then
 * NOT IN's polarity applies).  A move event names a position and a hash
 * (shape_stream_subquery.c); the client flips that position of the rows
 * whose tag has that hash there, and drops those that no disjunct keeps.
 *
 * The hash is md5, in hex, of the shape's handle and the value: "v:" and
 * the text of a value, "NULL" for none; for a row of columns, each
 * column's name, ":", and that.  Only equality of hashes matters to a
 * client; the handle keeps one shape's hashes from meaning anything to
 * another.  The text is the column type's output under Electric's display
 * settings, which the snapshot workers and the decoder both use.
 *
 * IDENTIFICATION
 *	  src/pg/shape/row_tags.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "common/md5.h"
#include "utils/lsyscache.h"
#include "utils/resowner.h"

#include "row_tags.h"

static ResourceOwner row_tags_owner = NULL;

void
row_tagger_init(RowTagger *tagger, const SubqueryPlan *plan, Oid outer_relid,
				const char *handle)
{
	tagger->plan = plan;
	tagger->handle = pstrdup(handle != NULL ? handle : "");
	tagger->outputs = palloc(sizeof(FmgrInfo *) * Max(plan->nsublinks, 1));
	for (int s = 0; s < plan->nsublinks; s++)
	{
		const SubquerySublink *sl = &plan->sublinks[s];
		int			ncolumns = plan->dependencies[sl->dependency].ncolumns;

		tagger->outputs[s] = palloc(sizeof(FmgrInfo) * ncolumns);
		for (int c = 0; c < ncolumns; c++)
		{
			Oid			output;
			bool		varlena;

			getTypeOutputInfo(get_atttype(outer_relid, sl->outer_attnums[c]), &output, &varlena);
			fmgr_info(output, &tagger->outputs[s][c]);
		}
	}
}

void
row_tag_value_hash(const RowTagger *tagger, int sublink, char *const *texts, char *hash_out)
{
	const SubquerySublink *sl = &tagger->plan->sublinks[sublink];
	int			ncolumns = tagger->plan->dependencies[sl->dependency].ncolumns;
	StringInfoData buf;
	const char *errstr = NULL;

	initStringInfo(&buf);
	appendStringInfoString(&buf, tagger->handle);
	for (int c = 0; c < ncolumns; c++)
	{
		if (ncolumns > 1)
			appendStringInfo(&buf, "%s:", sl->outer_names[c]);
		if (texts[c] == NULL)
			appendStringInfoString(&buf, "NULL");
		else
		{
			appendStringInfoString(&buf, "v:");
			appendStringInfoString(&buf, texts[c]);
		}
	}
	/*
	 * The hash is a resource of the current owner while it is computed; out
	 * of a transaction (a move-in spliced between batches) it is this
	 * file's own, which it leaves empty.
	 */
	if (CurrentResourceOwner == NULL)
	{
		bool		ok;

		if (row_tags_owner == NULL)
			row_tags_owner = ResourceOwnerCreate(NULL, "shape_sync tags");
		CurrentResourceOwner = row_tags_owner;
		ok = pg_md5_hash(buf.data, buf.len, hash_out, &errstr);
		CurrentResourceOwner = NULL;
		if (!ok)
			ereport(ERROR,
					(errcode(ERRCODE_OUT_OF_MEMORY),
					 errmsg("could not compute a tag's hash: %s", errstr)));
	}
	else if (!pg_md5_hash(buf.data, buf.len, hash_out, &errstr))
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("could not compute a tag's hash: %s", errstr)));
	pfree(buf.data);
}

void
row_tags_make(const RowTagger *tagger, const Datum *values, const bool *nulls,
			  const bool *active, RowTags *out)
{
	const SubqueryPlan *plan = tagger->plan;
	char	  **slots = palloc(sizeof(char *) * plan->npositions);
	char	   *texts[INDEX_MAX_KEYS];

	/* each position's slot in its own disjunct's tag */
	for (int p = 0; p < plan->npositions; p++)
	{
		const SubqueryPosition *pos = &plan->positions[p];

		if (pos->sublink < 0)
			slots[p] = "1";
		else
		{
			const SubquerySublink *sl = &plan->sublinks[pos->sublink];
			int			ncolumns = plan->dependencies[sl->dependency].ncolumns;

			for (int c = 0; c < ncolumns; c++)
			{
				AttrNumber	attnum = sl->outer_attnums[c];

				texts[c] = nulls[attnum - 1] ? NULL :
					OutputFunctionCall(&tagger->outputs[pos->sublink][c], values[attnum - 1]);
			}
			slots[p] = palloc(ROW_TAG_HASH_LEN + 1);
			row_tag_value_hash(tagger, pos->sublink, texts, slots[p]);
		}
	}
	out->tags = palloc(sizeof(char *) * plan->ndisjuncts);
	for (int d = 0; d < plan->ndisjuncts; d++)
	{
		StringInfoData tag;

		initStringInfo(&tag);
		for (int p = 0; p < plan->npositions; p++)
		{
			if (p > 0)
				appendStringInfoChar(&tag, '/');
			if (p >= plan->disjunct_first[d] && p < plan->disjunct_first[d + 1])
				appendStringInfoString(&tag, slots[p]);
		}
		out->tags[d] = tag.data;
	}
	out->active = palloc(sizeof(bool) * plan->npositions);
	memcpy(out->active, active, sizeof(bool) * plan->npositions);
}

static void
row_tags_array(StringInfo out, const char *name, char *const *tags, int ntags,
			   const RowTags *except)
{
	bool		first = true;

	appendStringInfo(out, ",\"%s\":[", name);
	for (int t = 0; t < ntags; t++)
	{
		bool		kept = false;

		for (int e = 0; except != NULL && e < ntags && !kept; e++)
			kept = strcmp(except->tags[e], tags[t]) == 0;
		if (kept)
			continue;
		appendStringInfo(out, "%s\"%s\"", first ? "" : ",", tags[t]);
		first = false;
	}
	appendStringInfoChar(out, ']');
}

void
row_tags_json(const RowTagger *tagger, const RowTags *tags, const RowTags *removed,
			  StringInfo out)
{
	int			ndisjuncts = tagger->plan->ndisjuncts;

	row_tags_array(out, "tags", tags->tags, ndisjuncts, NULL);
	if (removed != NULL)
		row_tags_array(out, "removed_tags", removed->tags, ndisjuncts, tags);
	appendStringInfoString(out, ",\"active_conditions\":[");
	for (int p = 0; p < tagger->plan->npositions; p++)
		appendStringInfo(out, "%s%s", p > 0 ? "," : "", tags->active[p] ? "true" : "false");
	appendStringInfoChar(out, ']');
}
