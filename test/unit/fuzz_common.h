/*
 * fuzz_common.h
 *		Shared by the fuzz targets (fuzz_*.c): an assertion that aborts, so
 *		libFuzzer and the plain corpus driver both report it, and a small
 *		strict JSON validator used as an oracle for error bodies.
 */
#ifndef FUZZ_COMMON_H
#define FUZZ_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int			LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_ASSERT(cond) \
	do { \
		if (!(cond)) { \
			fprintf(stderr, "%s:%d: fuzz oracle failed: %s\n", __FILE__, __LINE__, #cond); \
			abort(); \
		} \
	} while (0)

/* A NUL-terminated copy of the input, cut at its first NUL. */
static inline char *
fuzz_cstring(const uint8_t *data, size_t size)
{
	char	   *s = malloc(size + 1);

	FUZZ_ASSERT(s != NULL);
	memcpy(s, data, size);
	s[size] = '\0';
	return s;
}

/* ------------------------------------------------ a strict JSON checker */

typedef struct JsonCheck
{
	const char *p;
	int			depth;
} JsonCheck;

static bool json_check_value(JsonCheck *j);

static inline void
json_check_ws(JsonCheck *j)
{
	while (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r')
		j->p++;
}

static inline bool
json_check_string(JsonCheck *j)
{
	if (*j->p != '"')
		return false;
	for (j->p++;; j->p++)
	{
		unsigned char c = (unsigned char) *j->p;

		if (c == '"')
		{
			j->p++;
			return true;
		}
		if (c < 0x20)			/* NUL (the end) and raw control characters */
			return false;
		if (c == '\\')
		{
			j->p++;
			switch (*j->p)
			{
				case '"':
				case '\\':
				case '/':
				case 'b':
				case 'f':
				case 'n':
				case 'r':
				case 't':
					break;
				case 'u':
					for (int i = 1; i <= 4; i++)
						if (!((j->p[i] >= '0' && j->p[i] <= '9') ||
							  (j->p[i] >= 'a' && j->p[i] <= 'f') ||
							  (j->p[i] >= 'A' && j->p[i] <= 'F')))
							return false;
					j->p += 4;
					break;
				default:
					return false;
			}
		}
	}
}

static inline bool
json_check_number(JsonCheck *j)
{
	const char *start = j->p;

	if (*j->p == '-')
		j->p++;
	if (*j->p == '0')
		j->p++;
	else if (*j->p >= '1' && *j->p <= '9')
		while (*j->p >= '0' && *j->p <= '9')
			j->p++;
	else
		return false;
	if (*j->p == '.')
	{
		j->p++;
		if (!(*j->p >= '0' && *j->p <= '9'))
			return false;
		while (*j->p >= '0' && *j->p <= '9')
			j->p++;
	}
	if (*j->p == 'e' || *j->p == 'E')
	{
		j->p++;
		if (*j->p == '+' || *j->p == '-')
			j->p++;
		if (!(*j->p >= '0' && *j->p <= '9'))
			return false;
		while (*j->p >= '0' && *j->p <= '9')
			j->p++;
	}
	return j->p > start;
}

static bool
json_check_value(JsonCheck *j)
{
	bool		ok = false;

	if (++j->depth > 64)
		return false;
	json_check_ws(j);
	switch (*j->p)
	{
		case '{':
			j->p++;
			json_check_ws(j);
			if (*j->p == '}')
			{
				j->p++;
				ok = true;
				break;
			}
			for (;;)
			{
				json_check_ws(j);
				if (!json_check_string(j))
					break;
				json_check_ws(j);
				if (*j->p++ != ':')
					break;
				if (!json_check_value(j))
					break;
				json_check_ws(j);
				if (*j->p == ',')
				{
					j->p++;
					continue;
				}
				if (*j->p == '}')
				{
					j->p++;
					ok = true;
				}
				break;
			}
			break;
		case '[':
			j->p++;
			json_check_ws(j);
			if (*j->p == ']')
			{
				j->p++;
				ok = true;
				break;
			}
			for (;;)
			{
				if (!json_check_value(j))
					break;
				json_check_ws(j);
				if (*j->p == ',')
				{
					j->p++;
					continue;
				}
				if (*j->p == ']')
				{
					j->p++;
					ok = true;
				}
				break;
			}
			break;
		case '"':
			ok = json_check_string(j);
			break;
		case 't':
			ok = strncmp(j->p, "true", 4) == 0;
			j->p += ok ? 4 : 0;
			break;
		case 'f':
			ok = strncmp(j->p, "false", 5) == 0;
			j->p += ok ? 5 : 0;
			break;
		case 'n':
			ok = strncmp(j->p, "null", 4) == 0;
			j->p += ok ? 4 : 0;
			break;
		default:
			ok = json_check_number(j);
	}
	j->depth--;
	return ok;
}

/* Whether `text` is exactly one JSON value (whitespace around allowed). */
static inline bool
json_is_valid(const char *text)
{
	JsonCheck	j = {text, 0};

	if (text == NULL || !json_check_value(&j))
		return false;
	json_check_ws(&j);
	return *j.p == '\0';
}

/* Appends s as a PostgreSQL quoted identifier: "..." with "" for ". */
static inline size_t
fuzz_quote_ident(char *out, const char *s)
{
	size_t		o = 0;

	out[o++] = '"';
	for (; *s; s++)
	{
		if (*s == '"')
			out[o++] = '"';
		out[o++] = *s;
	}
	out[o++] = '"';
	out[o] = '\0';
	return o;
}

#endif							/* FUZZ_COMMON_H */
