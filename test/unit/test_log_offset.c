/*
 * test_log_offset.c
 *		Parsing, formatting and ordering of shape log offsets (src/contract/log_offset.c).
 */
#include "unit.h"

#include "log_offset.h"

static void
check_parses(const char *file, int line, const char *text, int64_t tx, uint64_t op)
{
	LogOffset	o = {12345, 6789};	/* sentinel: must be overwritten */

	if (!log_offset_parse(text, &o))
	{
		unit_fail(file, line, "log_offset_parse(\"%s\") rejected a valid offset", text);
		return;
	}
	if (o.tx != tx || o.op != op)
		unit_fail(file, line, "log_offset_parse(\"%s\") = (%lld, %llu), expected (%lld, %llu)",
				  text, (long long) o.tx, (unsigned long long) o.op,
				  (long long) tx, (unsigned long long) op);
}

static void
check_rejects(const char *file, int line, const char *text)
{
	LogOffset	o = {12345, 6789};

	if (log_offset_parse(text, &o))
		unit_fail(file, line, "log_offset_parse(\"%s\") accepted an invalid offset as (%lld, %llu)",
				  text, (long long) o.tx, (unsigned long long) o.op);
	else if (o.tx != 12345 || o.op != 6789)
		unit_fail(file, line, "log_offset_parse(\"%s\") wrote its output on failure", text);
}

#define PARSES(text, tx, op) check_parses(__FILE__, __LINE__, text, tx, op)
#define REJECTS(text) check_rejects(__FILE__, __LINE__, text)

static const char *
fmt(LogOffset o, char *buf)
{
	size_t		n = log_offset_format(o, buf, LOG_OFFSET_TEXT_LEN);

	if (n != strlen(buf))
		FAIL("log_offset_format returned %zu for \"%s\"", n, buf);
	return buf;
}

TEST(accepts_valid_offsets)
{
	PARSES("-1", -1, 0);
	PARSES("0_0", 0, 0);
	PARSES("0_02", 0, 2);
	PARSES("00_0", 0, 0);
	PARSES("0_inf", 0, LOG_OFFSET_OP_INF);
	PARSES("12_34", 12, 34);
	PARSES("9223372036854775807_0", INT64_MAX, 0);
	PARSES("1_18446744073709551614", 1, UINT64_MAX - 1);
	PARSES("26843545600_2", 26843545600LL, 2);
	PARSES("7_inf", 7, LOG_OFFSET_OP_INF);
}

TEST(rejects_invalid_offsets)
{
	REJECTS("");
	REJECTS("now");				/* callers handle "now" themselves */
	REJECTS("1_2_3");
	REJECTS("10");
	REJECTS("0_-1");
	REJECTS("1_2 ");
	REJECTS(" 1_2");
	REJECTS("10_32.1");
	REJECTS("-2");
	REJECTS("-1 ");
	REJECTS("-0");
	REJECTS("-1_0");
	REJECTS("+1_2");
	REJECTS("1_+2");
	REJECTS("9223372036854775808_0");	/* tx overflows int64 */
	REJECTS("99999999999999999999_0");
	REJECTS("1_18446744073709551615"); /* UINT64_MAX is reserved for inf */
	REJECTS("1_18446744073709551616");
	REJECTS("1_");
	REJECTS("_1");
	REJECTS("1__2");
	REJECTS("_");
	REJECTS("1_INF");
	REJECTS("1_infinity");
	REJECTS("1_in");
	REJECTS("inf_1");
	REJECTS("0x1_0");
	REJECTS("1_0\n");
	CHECK(!log_offset_parse(NULL, &(LogOffset) {0, 0}));
}

TEST(format_renders_each_kind)
{
	char		buf[LOG_OFFSET_TEXT_LEN];

	CHECK_STR_EQ(fmt(LOG_OFFSET_BEFORE_ALL, buf), "-1");
	CHECK_STR_EQ(fmt((LogOffset) {-7, 3}, buf), "-1");	/* any negative tx */
	CHECK_STR_EQ(fmt((LogOffset) {0, 0}, buf), "0_0");
	CHECK_STR_EQ(fmt(LOG_OFFSET_SNAPSHOT_END, buf), "0_inf");
	CHECK_STR_EQ(fmt((LogOffset) {12, 34}, buf), "12_34");
	CHECK_STR_EQ(fmt((LogOffset) {INT64_MAX, UINT64_MAX - 1}, buf),
				 "9223372036854775807_18446744073709551614");
	CHECK_STR_EQ(fmt((LogOffset) {INT64_MAX, LOG_OFFSET_OP_INF}, buf),
				 "9223372036854775807_inf");
	CHECK(strlen("9223372036854775807_18446744073709551614") < LOG_OFFSET_TEXT_LEN);
}

TEST(format_truncates_safely)
{
	char		buf[6];
	size_t		n;

	memset(buf, 'x', sizeof(buf));
	n = log_offset_format((LogOffset) {123456, 7}, buf, sizeof(buf));
	CHECK_EQ(n, 8);				/* snprintf semantics: the full length */
	CHECK_STR_EQ(buf, "12345");
}

TEST(parse_format_round_trip)
{
	static const char *const texts[] = {
		"-1", "0_0", "0_1", "0_inf", "12_34", "1_0", "4294967296_10",
		"9223372036854775807_0", "9223372036854775807_inf",
		"1_18446744073709551614",
	};

	for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++)
	{
		LogOffset	o;
		LogOffset	again;
		char		buf[LOG_OFFSET_TEXT_LEN];

		if (!log_offset_parse(texts[i], &o))
		{
			FAIL("\"%s\" did not parse", texts[i]);
			continue;
		}
		CHECK_STR_EQ(fmt(o, buf), texts[i]);
		CHECK(log_offset_parse(buf, &again));
		CHECK_EQ(log_offset_cmp(o, again), 0);
	}

	/* leading zeros parse but format canonically */
	{
		LogOffset	o;
		char		buf[LOG_OFFSET_TEXT_LEN];

		CHECK(log_offset_parse("007_010", &o));
		CHECK_STR_EQ(fmt(o, buf), "7_10");
	}

	/* a pseudo-random sweep over the whole range */
	{
		uint64_t	x = 0x9e3779b97f4a7c15ull;

		for (int i = 0; i < 10000; i++)
		{
			LogOffset	o;
			LogOffset	back;
			char		buf[LOG_OFFSET_TEXT_LEN];

			x ^= x << 13;
			x ^= x >> 7;
			x ^= x << 17;
			o.tx = (int64_t) (x >> (1 + i % 63));
			o.op = x * 2654435761u >> (i % 64);
			if (o.op == LOG_OFFSET_OP_INF && i % 2)
				o.op--;
			log_offset_format(o, buf, sizeof(buf));
			if (!log_offset_parse(buf, &back) || back.tx != o.tx || back.op != o.op)
			{
				FAIL("round trip of (%lld, %llu) via \"%s\" failed",
					 (long long) o.tx, (unsigned long long) o.op, buf);
				break;
			}
		}
	}
}

TEST(ordering)
{
	LogOffset	seq[7];
	const char *texts[] = {"-1", "0_0", "0_1", "0_2", "0_inf", "1_0", "1_inf"};

	for (int i = 0; i < 7; i++)
		REQUIRE(log_offset_parse(texts[i], &seq[i]));
	for (int i = 0; i < 7; i++)
		for (int j = 0; j < 7; j++)
		{
			int			want = i < j ? -1 : i > j ? 1 : 0;

			if (log_offset_cmp(seq[i], seq[j]) != want)
				FAIL("cmp(%s, %s) = %d, expected %d", texts[i], texts[j],
					 log_offset_cmp(seq[i], seq[j]), want);
		}

	/* op compares unsigned: 2^63 is above 1 */
	CHECK_EQ(log_offset_cmp((LogOffset) {5, (uint64_t) 1 << 63}, (LogOffset) {5, 1}), 1);
	/* tx dominates op */
	CHECK_EQ(log_offset_cmp((LogOffset) {1, 0}, (LogOffset) {0, LOG_OFFSET_OP_INF}), 1);
	CHECK_EQ(log_offset_cmp((LogOffset) {2, 0}, (LogOffset) {10, 0}), -1);

	CHECK(log_offset_is_before_all(LOG_OFFSET_BEFORE_ALL));
	CHECK(!log_offset_is_before_all((LogOffset) {0, 0}));
	CHECK_EQ(LOG_OFFSET_SNAPSHOT_END.tx, 0);
	CHECK_UEQ(LOG_OFFSET_SNAPSHOT_END.op, UINT64_MAX);
}

TEST(max)
{
	LogOffset	a = {0, 1};
	LogOffset	b = {0, LOG_OFFSET_OP_INF};
	LogOffset	c = {3, 0};
	LogOffset	m;

	m = log_offset_max(a, b);
	CHECK(m.tx == 0 && m.op == LOG_OFFSET_OP_INF);
	m = log_offset_max(b, a);
	CHECK(m.tx == 0 && m.op == LOG_OFFSET_OP_INF);
	m = log_offset_max(c, b);
	CHECK(m.tx == 3 && m.op == 0);
	m = log_offset_max(LOG_OFFSET_BEFORE_ALL, a);
	CHECK(m.tx == 0 && m.op == 1);
	m = log_offset_max(a, a);
	CHECK(m.tx == 0 && m.op == 1);
}

UNIT_MAIN()
