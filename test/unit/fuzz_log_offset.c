/*
 * fuzz_log_offset.c
 *		log_offset_parse against an independent reference grammar, and
 *		parse/format round trips.
 *
 * Grammar (shared/reference/electric-http-protocol.md, section 2):
 *		"-1" | digits "_" ( digits | "inf" )
 * with tx <= INT64_MAX and op <= UINT64_MAX - 1 (UINT64_MAX means inf).
 */
#include "fuzz_common.h"

#include "log_offset.h"

/* Decimal digits [s, e) as a value; false when over `limit`. */
static bool
ref_digits(const char *s, const char *e, uint64_t limit, uint64_t *out)
{
	unsigned __int128 v = 0;

	if (s == e)
		return false;
	for (const char *p = s; p < e; p++)
	{
		if (*p < '0' || *p > '9')
			return false;
		v = v * 10 + (unsigned) (*p - '0');
		if (v > limit)
			return false;
	}
	*out = (uint64_t) v;
	return true;
}

static bool
ref_parse(const char *s, LogOffset *out)
{
	const char *us;
	uint64_t	tx;
	uint64_t	op;

	if (strcmp(s, "-1") == 0)
	{
		out->tx = -1;
		out->op = 0;
		return true;
	}
	us = strchr(s, '_');
	if (us == NULL)
		return false;
	if (!ref_digits(s, us, (uint64_t) INT64_MAX, &tx))
		return false;
	if (strcmp(us + 1, "inf") == 0)
		op = LOG_OFFSET_OP_INF;
	else if (!ref_digits(us + 1, us + 1 + strlen(us + 1), UINT64_MAX - 1, &op))
		return false;
	out->tx = (int64_t) tx;
	out->op = op;
	return true;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char	   *s = fuzz_cstring(data, size);
	LogOffset	got = {12345, 678};
	LogOffset	want = {0, 0};
	bool		ok = log_offset_parse(s, &got);
	bool		ref = ref_parse(s, &want);

	FUZZ_ASSERT(ok == ref);
	if (!ok)
		FUZZ_ASSERT(got.tx == 12345 && got.op == 678);	/* untouched on failure */
	else
	{
		char		buf[LOG_OFFSET_TEXT_LEN];
		LogOffset	back;
		size_t		n;

		FUZZ_ASSERT(got.tx == want.tx && got.op == want.op);
		n = log_offset_format(got, buf, sizeof(buf));
		FUZZ_ASSERT(n == strlen(buf) && n < sizeof(buf));
		FUZZ_ASSERT(log_offset_parse(buf, &back));
		FUZZ_ASSERT(log_offset_cmp(back, got) == 0);
		/* canonical: no leading zeros, so format(parse(x)) is a fixed point */
		FUZZ_ASSERT(buf[0] != '0' || buf[1] == '_');

		/* the order is total and consistent with max */
		{
			static const LogOffset probes[] = {
				{-1, 0}, {0, 0}, {0, 1}, {0, LOG_OFFSET_OP_INF}, {1, 0},
				{INT64_MAX, LOG_OFFSET_OP_INF - 1}, {INT64_MAX, LOG_OFFSET_OP_INF},
			};

			for (size_t i = 0; i < sizeof(probes) / sizeof(probes[0]); i++)
			{
				int			c = log_offset_cmp(got, probes[i]);
				LogOffset	m = log_offset_max(got, probes[i]);

				FUZZ_ASSERT(c == -log_offset_cmp(probes[i], got));
				FUZZ_ASSERT(log_offset_cmp(m, c >= 0 ? got : probes[i]) == 0);
				if (c == 0)
					FUZZ_ASSERT(got.tx == probes[i].tx && got.op == probes[i].op);
			}
		}
	}
	free(s);
	return 0;
}
