/*-------------------------------------------------------------------------
 *
 * unit.h
 *		A tiny unit-test framework for the thread-side code (src/contract, src/net).
 *
 * Each test file defines tests with TEST(name) { ... } and ends with
 * UNIT_MAIN().  The runner executes every test in definition order and
 * prints one line per test, TAP style:
 *
 *		ok - name
 *		not ok - name
 *
 * followed by exactly one summary line that run_tests.sh sums up:
 *
 *		# unit-summary: passed=N failed=M
 *
 * CHECK* macros record a failure (with file:line and the values involved)
 * and carry on; REQUIRE* macros record it and return from the test
 * function.  Checks may be made from helper threads: the failure counter is
 * atomic and messages go to stderr unbuffered.
 *
 * TEST_KNOWN_BUG(name, "why") marks a test that documents a known defect in
 * the code under test: its failures are reported but not counted, and it
 * says so loudly once the defect is gone.
 *
 * Command line: ./test_x [substring] runs only the tests whose name contains
 * the substring.
 *
 * IDENTIFICATION
 *	  test/unit/unit.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef UNIT_H
#define UNIT_H

#include <inttypes.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef void (*unit_fn) (void);

typedef struct UnitTest
{
	const char *name;
	unit_fn		fn;
	const char *known_bug;		/* NULL for ordinary tests */
} UnitTest;

#define UNIT_MAX_TESTS 256

static UnitTest unit_tests[UNIT_MAX_TESTS];
static int	unit_ntests;
static _Atomic int unit_failures;	/* failed checks in the running test */
static const char *unit_current = "";

static inline void
unit_register(const char *name, unit_fn fn, const char *known_bug)
{
	if (unit_ntests >= UNIT_MAX_TESTS)
	{
		fprintf(stderr, "unit.h: too many tests\n");
		abort();
	}
	unit_tests[unit_ntests].name = name;
	unit_tests[unit_ntests].fn = fn;
	unit_tests[unit_ntests].known_bug = known_bug;
	unit_ntests++;
}

#define UNIT_DEFINE(name, bug) \
	static void unit_test_##name(void); \
	__attribute__((constructor)) static void unit_reg_##name(void) \
	{ unit_register(#name, unit_test_##name, bug); } \
	static void unit_test_##name(void)

#define TEST(name)				UNIT_DEFINE(name, NULL)
#define TEST_KNOWN_BUG(name, why) UNIT_DEFINE(name, why)

__attribute__((format(printf, 3, 4)))
static void
unit_fail(const char *file, int line, const char *fmt,...)
{
	va_list		ap;
	char		msg[2048];
	int			n;

	atomic_fetch_add(&unit_failures, 1);
	n = snprintf(msg, sizeof(msg), "  %s:%d: [%s] ", file, line, unit_current);
	va_start(ap, fmt);
	if (n > 0 && (size_t) n < sizeof(msg))
		vsnprintf(msg + n, sizeof(msg) - (size_t) n, fmt, ap);
	va_end(ap);
	fprintf(stderr, "%s\n", msg);
}

/* Renders up to 200 bytes of a buffer, escaping what is not printable. */
static inline const char *
unit_show(const void *data, size_t len, char *out, size_t outlen)
{
	const unsigned char *p = data;
	size_t		o = 0;

	if (data == NULL)
		return "(null)";
	for (size_t i = 0; i < len && o + 8 < outlen; i++)
	{
		if (i == 200)
		{
			o += (size_t) snprintf(out + o, outlen - o, "...(%zu bytes)", len);
			break;
		}
		if (p[i] >= 0x20 && p[i] < 0x7f && p[i] != '\\')
			out[o++] = (char) p[i];
		else
			o += (size_t) snprintf(out + o, outlen - o, "\\x%02x", p[i]);
	}
	out[o] = '\0';
	return out;
}

#define CHECK(cond) \
	do { if (!(cond)) unit_fail(__FILE__, __LINE__, "CHECK(%s) failed", #cond); } while (0)

#define REQUIRE(cond) \
	do { if (!(cond)) { unit_fail(__FILE__, __LINE__, "REQUIRE(%s) failed", #cond); return; } } while (0)

#define CHECK_EQ(a, b) \
	do { \
		long long unit_a_ = (long long) (a), unit_b_ = (long long) (b); \
		if (unit_a_ != unit_b_) \
			unit_fail(__FILE__, __LINE__, "CHECK_EQ(%s, %s) failed: %lld != %lld", \
					  #a, #b, unit_a_, unit_b_); \
	} while (0)

#define CHECK_UEQ(a, b) \
	do { \
		unsigned long long unit_a_ = (unsigned long long) (a), unit_b_ = (unsigned long long) (b); \
		if (unit_a_ != unit_b_) \
			unit_fail(__FILE__, __LINE__, "CHECK_UEQ(%s, %s) failed: %llu != %llu", \
					  #a, #b, unit_a_, unit_b_); \
	} while (0)

#define REQUIRE_EQ(a, b) \
	do { \
		long long unit_a_ = (long long) (a), unit_b_ = (long long) (b); \
		if (unit_a_ != unit_b_) { \
			unit_fail(__FILE__, __LINE__, "REQUIRE_EQ(%s, %s) failed: %lld != %lld", \
					  #a, #b, unit_a_, unit_b_); \
			return; \
		} \
	} while (0)

static inline bool
unit_str_eq(const char *a, const char *b)
{
	if (a == NULL || b == NULL)
		return a == b;
	return strcmp(a, b) == 0;
}

#define CHECK_STR_EQ(a, b) \
	do { \
		const char *unit_a_ = (a), *unit_b_ = (b); \
		if (!unit_str_eq(unit_a_, unit_b_)) { \
			char unit_x_[1024], unit_y_[1024]; \
			unit_fail(__FILE__, __LINE__, "CHECK_STR_EQ(%s, %s) failed:\n      got:      \"%s\"\n      expected: \"%s\"", \
					  #a, #b, \
					  unit_show(unit_a_, unit_a_ ? strlen(unit_a_) : 0, unit_x_, sizeof(unit_x_)), \
					  unit_show(unit_b_, unit_b_ ? strlen(unit_b_) : 0, unit_y_, sizeof(unit_y_))); \
		} \
	} while (0)

#define REQUIRE_STR_EQ(a, b) \
	do { \
		int unit_before_ = atomic_load(&unit_failures); \
		CHECK_STR_EQ(a, b); \
		if (atomic_load(&unit_failures) != unit_before_) return; \
	} while (0)

/* n bytes at a equal n bytes at b; reports the first difference. */
#define CHECK_MEM_EQ(a, b, n) \
	do { \
		const unsigned char *unit_a_ = (const unsigned char *) (a); \
		const unsigned char *unit_b_ = (const unsigned char *) (b); \
		size_t unit_n_ = (n); \
		for (size_t unit_i_ = 0; unit_i_ < unit_n_; unit_i_++) \
			if (unit_a_[unit_i_] != unit_b_[unit_i_]) { \
				unit_fail(__FILE__, __LINE__, "CHECK_MEM_EQ(%s, %s, %s) failed at byte %zu of %zu: 0x%02x != 0x%02x", \
						  #a, #b, #n, unit_i_, unit_n_, unit_a_[unit_i_], unit_b_[unit_i_]); \
				break; \
			} \
	} while (0)

#define FAIL(...) unit_fail(__FILE__, __LINE__, __VA_ARGS__)

/* Number of failed checks so far in the running test. */
#define UNIT_FAILURES() atomic_load(&unit_failures)

static inline double
unit_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double) ts.tv_sec + (double) ts.tv_nsec / 1e9;
}

static int
unit_main(int argc, char **argv)
{
	int			passed = 0;
	int			failed = 0;
	const char *filter = argc > 1 ? argv[1] : NULL;

	setvbuf(stdout, NULL, _IONBF, 0);
	setvbuf(stderr, NULL, _IONBF, 0);
	for (int i = 0; i < unit_ntests; i++)
	{
		UnitTest   *t = &unit_tests[i];
		double		start;
		int			nfail;

		if (filter && strstr(t->name, filter) == NULL)
			continue;
		unit_current = t->name;
		atomic_store(&unit_failures, 0);
		start = unit_now();
		t->fn();
		nfail = atomic_load(&unit_failures);
		if (t->known_bug)
		{
			if (nfail > 0)
				printf("ok - %s # KNOWN BUG (%d failed checks): %s\n", t->name, nfail,
					   t->known_bug);
			else
				printf("ok - %s # KNOWN BUG did not show this run (fixed, or a race "
					   "that did not hit): %s\n", t->name, t->known_bug);
			passed++;
		}
		else if (nfail == 0)
		{
			printf("ok - %s (%.2fs)\n", t->name, unit_now() - start);
			passed++;
		}
		else
		{
			printf("not ok - %s (%d failed checks)\n", t->name, nfail);
			failed++;
		}
	}
	printf("# unit-summary: passed=%d failed=%d\n", passed, failed);
	fflush(stdout);
	return failed > 0 ? 1 : 0;
}

#define UNIT_MAIN() \
	int main(int argc, char **argv) { return unit_main(argc, argv); }

#endif							/* UNIT_H */
