/*
 * fuzz_driver.c
 *		A plain main() for the fuzz targets, so that `make check` runs each
 *		target's seed corpus (and inputs derived from it) with gcc and ASan,
 *		without clang or libFuzzer.
 *
 *		./fuzz_x CORPUS_DIR [GENERATED]
 *
 * Feeds every file of CORPUS_DIR to LLVMFuzzerTestOneInput, then GENERATED
 * (default 20000) deterministic mutations of them: byte flips, insertions
 * of interesting tokens, truncations and splices.  The mutations stop early
 * after FUZZ_DRIVER_SECONDS (default 5) so that `make check` stays quick;
 * the sequence itself is always the same.  A target reports a
 * broken oracle by aborting, as under libFuzzer.  Prints unit.h-style
 * result lines.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

int			LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct Input
{
	uint8_t    *data;
	size_t		size;
} Input;

static const char *const tokens[] = {
	"-1", "0_0", "0_inf", "_", "inf", "now", "9223372036854775807", "9223372036854775808",
	"18446744073709551615", "\"", "\"\"", ".", ",", "&", "=", "table=", "offset=",
	"handle=", "live", "live_sse=true", "params[1]=", "params[256]", "params[257]",
	"columns=", "where=", "replica=full", "log=changes_only", "subset__where=",
	"subset__params={\"1\":", "subset__limit=", "subset__offset=", "subset__order_by=",
	"queryable_columns=",
	"experimental_live_sse", "\xc3\xa9", "\xff", "\x01", " ", "$", "A", "z9",
	"\"a\"\"b\"", "public.items", "a.b.c",
};

static uint64_t rng = 0x853c49e6748fea9bull;

static uint64_t
next_rand(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

static int
cmp_names(const void *a, const void *b)
{
	return strcmp(*(char *const *) a, *(char *const *) b);
}

static int
load_corpus(const char *dir, Input **out)
{
	DIR		   *d = opendir(dir);
	struct dirent *e;
	char	  **names = NULL;
	int			n = 0;
	Input	   *inputs;

	if (d == NULL)
	{
		fprintf(stderr, "cannot open corpus %s\n", dir);
		return -1;
	}
	while ((e = readdir(d)) != NULL)
	{
		if (e->d_name[0] == '.')
			continue;
		names = realloc(names, sizeof(char *) * (size_t) (n + 1));
		names[n++] = strdup(e->d_name);
	}
	closedir(d);
	qsort(names, (size_t) n, sizeof(char *), cmp_names);
	inputs = calloc((size_t) (n ? n : 1), sizeof(Input));
	for (int i = 0; i < n; i++)
	{
		char		path[4096];
		FILE	   *f;
		struct stat st;

		snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
		if (stat(path, &st) != 0 || !S_ISREG(st.st_mode) || (f = fopen(path, "rb")) == NULL)
		{
			fprintf(stderr, "cannot read %s\n", path);
			return -1;
		}
		inputs[i].size = (size_t) st.st_size;
		inputs[i].data = malloc(inputs[i].size ? inputs[i].size : 1);
		if (fread(inputs[i].data, 1, inputs[i].size, f) != inputs[i].size)
		{
			fprintf(stderr, "short read of %s\n", path);
			return -1;
		}
		fclose(f);
		free(names[i]);
	}
	free(names);
	*out = inputs;
	return n;
}

/* One deterministic mutation of a corpus input. */
static Input
mutate(const Input *corpus, int n)
{
	const Input *base = &corpus[next_rand() % (uint64_t) n];
	size_t		cap = base->size * 2 + 64;
	Input		m;
	int			rounds = 1 + (int) (next_rand() % 4);

	m.data = malloc(cap + 256);
	memcpy(m.data, base->data, base->size);
	m.size = base->size;
	for (int r = 0; r < rounds; r++)
	{
		uint64_t	what = next_rand() % 6;
		size_t		at = m.size ? (size_t) (next_rand() % (m.size + 1)) : 0;

		if (what == 0 && m.size > 0 && at < m.size)
			m.data[at] ^= (uint8_t) (1u << (next_rand() % 8));	/* flip a bit */
		else if (what == 1 && m.size > 0 && at < m.size)
			m.data[at] = (uint8_t) next_rand();	/* any byte */
		else if (what == 2)
		{
			/* insert a token */
			const char *t = tokens[next_rand() % (sizeof(tokens) / sizeof(tokens[0]))];
			size_t		tl = strlen(t);

			if (m.size + tl > cap)
				continue;
			memmove(m.data + at + tl, m.data + at, m.size - at);
			memcpy(m.data + at, t, tl);
			m.size += tl;
		}
		else if (what == 3)
			m.size = at;		/* truncate */
		else if (what == 4 && at < m.size)
		{
			/* delete a few bytes */
			size_t		k = 1 + (size_t) (next_rand() % 4);

			if (at + k > m.size)
				k = m.size - at;
			memmove(m.data + at, m.data + at + k, m.size - at - k);
			m.size -= k;
		}
		else
		{
			/* splice in a piece of another input */
			const Input *o = &corpus[next_rand() % (uint64_t) n];
			size_t		from = o->size ? (size_t) (next_rand() % o->size) : 0;
			size_t		k = o->size - from;

			if (k > 64)
				k = 1 + (size_t) (next_rand() % 64);
			if (m.size + k > cap)
				continue;
			memmove(m.data + at + k, m.data + at, m.size - at);
			memcpy(m.data + at, o->data + from, k);
			m.size += k;
		}
	}
	return m;
}

int
main(int argc, char **argv)
{
	const char *name = strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : argv[0];
	Input	   *corpus = NULL;
	int			n;
	long		generated = argc > 2 ? atol(argv[2]) : 20000;

	setvbuf(stdout, NULL, _IONBF, 0);
	if (argc < 2)
	{
		fprintf(stderr, "usage: %s CORPUS_DIR [GENERATED]\n", argv[0]);
		return 2;
	}
	n = load_corpus(argv[1], &corpus);
	if (n <= 0)
	{
		printf("not ok - %s corpus (no inputs in %s)\n", name, argv[1]);
		printf("# unit-summary: passed=0 failed=1\n");
		return 1;
	}
	for (int i = 0; i < n; i++)
		LLVMFuzzerTestOneInput(corpus[i].data, corpus[i].size);
	printf("ok - %s corpus (%d files)\n", name, n);

	LLVMFuzzerTestOneInput((const uint8_t *) "", 0);
	{
		const char *env = getenv("FUZZ_DRIVER_SECONDS");
		double		budget = env ? atof(env) : 5.0;
		struct timespec t0;
		struct timespec t1;
		long		done = 0;

		clock_gettime(CLOCK_MONOTONIC, &t0);
		for (; done < generated; done++)
		{
			Input		m = mutate(corpus, n);

			LLVMFuzzerTestOneInput(m.data, m.size);
			free(m.data);
			if (done % 64 == 63)
			{
				clock_gettime(CLOCK_MONOTONIC, &t1);
				if ((double) (t1.tv_sec - t0.tv_sec) +
					(double) (t1.tv_nsec - t0.tv_nsec) / 1e9 > budget)
				{
					done++;
					break;
				}
			}
		}
		printf("ok - %s generated (%ld of %ld inputs)\n", name, done, generated);
	}
	printf("# unit-summary: passed=2 failed=0\n");
	for (int i = 0; i < n; i++)
		free(corpus[i].data);
	free(corpus);
	return 0;
}
