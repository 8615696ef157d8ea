/*
 * test_resolved_shapes.c
 *		The last resolution of each definition, for every connection
 *		(ResolvedShared in src/net/resolved_shapes.c): what a put keeps,
 *		what a find matches, what a forget drops.
 */
#include "unit.h"

#include "resolved_shapes.h"

static ShapeResolution
resolution(uint32_t slot, uint32_t generation, const char *handle, uint64_t epoch)
{
	ShapeResolution res;

	memset(&res, 0, sizeof(res));
	res.status = SHAPE_RESOLVE_OK;
	res.slot = slot;
	res.generation = generation;
	res.catalog_epoch = epoch;
	snprintf(res.handle, sizeof(res.handle), "%s", handle);
	return res;
}

TEST(finds_what_was_put_with_its_handle_and_epoch)
{
	ResolvedShared shared;
	ResolvedShape found;
	ShapeResolution res = resolution(3, 7, "11-22", 5);
	const char *key = "table t";

	REQUIRE(resolved_shared_init(&shared, 8) == 0);
	CHECK(!resolved_shared_find(&shared, key, strlen(key), "11-22", 5, &found));
	resolved_shared_put(&shared, key, strlen(key), &res, 5);
	REQUIRE(resolved_shared_find(&shared, key, strlen(key), "11-22", 5, &found));
	CHECK_EQ(found.slot, 3);
	CHECK_EQ(found.generation, 7);
	CHECK_STR_EQ(found.handle, "11-22");
	CHECK(found.key == NULL);
	/* another handle, epoch or definition: no */
	CHECK(!resolved_shared_find(&shared, key, strlen(key), "11-23", 5, &found));
	CHECK(!resolved_shared_find(&shared, key, strlen(key), "11-22", 6, &found));
	CHECK(!resolved_shared_find(&shared, "table u", 7, "11-22", 5, &found));
	CHECK(!resolved_shared_find(&shared, key, strlen(key) - 1, "11-22", 5, &found));
	/* no handle: whatever its handle (what a 409 names), of that epoch and definition */
	memset(&found, 0, sizeof(found));
	REQUIRE(resolved_shared_find(&shared, key, strlen(key), NULL, 5, &found));
	CHECK_STR_EQ(found.handle, "11-22");
	CHECK_EQ(found.slot, 3);
	CHECK(found.key == NULL);
	CHECK(!resolved_shared_find(&shared, key, strlen(key), NULL, 6, &found));
	CHECK(!resolved_shared_find(&shared, "table u", 7, NULL, 5, &found));
	CHECK(!resolved_shared_find(&shared, NULL, 0, NULL, 5, &found));
	resolved_shared_destroy(&shared);
}

TEST(put_keeps_no_stale_resolution)
{
	ResolvedShared shared;
	ResolvedShape found;
	ShapeResolution newer = resolution(3, 7, "11-22", 6);
	ShapeResolution older = resolution(4, 1, "33-44", 5);
	const char *key = "table t";

	REQUIRE(resolved_shared_init(&shared, 8) == 0);
	/* made under epoch 5, put when the epoch is 6 already: not kept */
	resolved_shared_put(&shared, key, strlen(key), &older, 6);
	CHECK(!resolved_shared_find(&shared, key, strlen(key), "33-44", 5, &found));
	resolved_shared_put(&shared, key, strlen(key), &newer, 6);
	/* one of an older epoch does not replace it */
	resolved_shared_put(&shared, key, strlen(key), &older, 5);
	REQUIRE(resolved_shared_find(&shared, key, strlen(key), "11-22", 6, &found));
	CHECK_EQ(found.slot, 3);
	resolved_shared_destroy(&shared);
}

TEST(forget_drops_only_the_entry_that_failed)
{
	ResolvedShared shared;
	ResolvedShape found,
				stale;
	ShapeResolution first = resolution(3, 7, "11-22", 5);
	ShapeResolution second = resolution(9, 7, "55-66", 5);
	const char *key = "table t";

	REQUIRE(resolved_shared_init(&shared, 8) == 0);
	resolved_shared_put(&shared, key, strlen(key), &first, 5);
	REQUIRE(resolved_shared_find(&shared, key, strlen(key), "11-22", 5, &stale));
	/* the definition was resolved again meanwhile: another slot, the same generation */
	resolved_shared_put(&shared, key, strlen(key), &second, 5);
	resolved_shared_forget(&shared, key, strlen(key), &stale);
	CHECK(resolved_shared_find(&shared, key, strlen(key), "55-66", 5, &found));
	/* the entry that failed goes */
	resolved_shared_forget(&shared, key, strlen(key), &found);
	CHECK(!resolved_shared_find(&shared, key, strlen(key), "55-66", 5, &found));
	resolved_shared_destroy(&shared);
}

TEST(definitions_in_one_bucket_take_turns)
{
	ResolvedShared shared;
	ResolvedShape found;
	ShapeResolution a = resolution(1, 1, "1-1", 5);
	ShapeResolution b = resolution(2, 1, "2-2", 5);

	REQUIRE(resolved_shared_init(&shared, 1) == 0);	/* one bucket for all */
	resolved_shared_put(&shared, "a", 1, &a, 5);
	resolved_shared_put(&shared, "b", 1, &b, 5);
	CHECK(!resolved_shared_find(&shared, "a", 1, "1-1", 5, &found));
	CHECK(resolved_shared_find(&shared, "b", 1, "2-2", 5, &found));
	/* a forget of another definition leaves it */
	resolved_shared_forget(&shared, "a", 1, &found);
	CHECK(resolved_shared_find(&shared, "b", 1, "2-2", 5, &found));
	resolved_shared_destroy(&shared);
}

UNIT_MAIN()
