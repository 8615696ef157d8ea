/*
 * http_client.h
 *		A minimal blocking HTTP/1.1 client for the unit tests: connect, send
 *		raw request text, read one response (Content-Length, chunked, or
 *		until close), several responses per connection when kept alive.
 */
#ifndef HTTP_CLIENT_H
#define HTTP_CLIENT_H

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#define HC_MAX_HEADERS 64

typedef struct HcConn
{
	int			fd;
	char	   *buf;
	size_t		len;			/* bytes in buf */
	size_t		pos;			/* bytes of buf consumed */
	size_t		cap;
} HcConn;

typedef struct HcResponse
{
	int			status;
	int			nheaders;
	char	   *names[HC_MAX_HEADERS];
	char	   *values[HC_MAX_HEADERS];
	char	   *body;			/* NUL-terminated (the body may hold NULs) */
	size_t		body_len;
	bool		chunked;
	char		error[160];		/* why reading failed, when it did */
} HcResponse;

static inline int
hc_connect(int port, int timeout_s)
{
	struct sockaddr_in sa;
	struct timeval tv = {timeout_s, 0};
	int			fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	int			one = 1;

	if (fd < 0)
		return -1;
	memset(&sa, 0, sizeof(sa));
	sa.sin_family = AF_INET;
	sa.sin_port = htons((uint16_t) port);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (connect(fd, (struct sockaddr *) &sa, sizeof(sa)) != 0)
	{
		close(fd);
		return -1;
	}
	return fd;
}

static inline bool
hc_open(HcConn *c, int port, int timeout_s)
{
	memset(c, 0, sizeof(*c));
	c->fd = hc_connect(port, timeout_s);
	return c->fd >= 0;
}

static inline void
hc_close(HcConn *c)
{
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
	free(c->buf);
	c->buf = NULL;
	c->len = c->pos = c->cap = 0;
}

static inline bool
hc_send(HcConn *c, const char *data, size_t n)
{
	while (n > 0)
	{
		ssize_t		w = send(c->fd, data, n, MSG_NOSIGNAL);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return false;
		data += w;
		n -= (size_t) w;
	}
	return true;
}

/* Reads more bytes; false at EOF, on error or on timeout. */
static inline bool
hc_fill(HcConn *c)
{
	ssize_t		n;

	if (c->cap - c->len < 65536)
	{
		size_t		cap = c->cap ? c->cap * 2 : 131072;
		char	   *grown = realloc(c->buf, cap + 1);

		if (grown == NULL)
			return false;
		c->buf = grown;
		c->cap = cap;
	}
	do
		n = recv(c->fd, c->buf + c->len, c->cap - c->len, 0);
	while (n < 0 && errno == EINTR);
	if (n <= 0)
		return false;
	c->len += (size_t) n;
	return true;
}

/* A line (without CRLF) starting at pos, malloc'd; NULL at EOF. */
static inline char *
hc_line(HcConn *c)
{
	for (;;)
	{
		if (c->buf)
		{
			for (size_t i = c->pos; i + 1 < c->len; i++)
				if (c->buf[i] == '\r' && c->buf[i + 1] == '\n')
				{
					size_t		n = i - c->pos;
					char	   *line = malloc(n + 1);

					memcpy(line, c->buf + c->pos, n);
					line[n] = '\0';
					c->pos = i + 2;
					return line;
				}
		}
		if (!hc_fill(c))
			return NULL;
	}
}

static inline bool
hc_need(HcConn *c, size_t n)
{
	while (c->len - c->pos < n)
		if (!hc_fill(c))
			return false;
	return true;
}

static inline const char *
hc_header(const HcResponse *r, const char *name)
{
	for (int i = 0; i < r->nheaders; i++)
		if (strcasecmp(r->names[i], name) == 0)
			return r->values[i];
	return NULL;
}

static inline int
hc_header_count(const HcResponse *r, const char *name)
{
	int			n = 0;

	for (int i = 0; i < r->nheaders; i++)
		if (strcasecmp(r->names[i], name) == 0)
			n++;
	return n;
}

static inline void
hc_response_free(HcResponse *r)
{
	for (int i = 0; i < r->nheaders; i++)
	{
		free(r->names[i]);
		free(r->values[i]);
	}
	free(r->body);
	memset(r, 0, sizeof(*r));
}

static inline void
hc_body_append(HcResponse *r, const char *data, size_t n, size_t *cap)
{
	if (r->body_len + n + 1 > *cap)
	{
		size_t		want = (*cap ? *cap * 2 : 4096);

		while (want < r->body_len + n + 1)
			want *= 2;
		r->body = realloc(r->body, want);
		*cap = want;
	}
	memcpy(r->body + r->body_len, data, n);
	r->body_len += n;
	r->body[r->body_len] = '\0';
}

/* Reads the status line and the headers of a response. */
static inline bool
hc_read_head(HcConn *c, HcResponse *r)
{
	char	   *line;

	memset(r, 0, sizeof(*r));
	line = hc_line(c);
	if (line == NULL)
	{
		snprintf(r->error, sizeof(r->error), "no status line (connection closed or timed out)");
		return false;
	}
	if (sscanf(line, "HTTP/1.%*d %d", &r->status) != 1)
	{
		snprintf(r->error, sizeof(r->error), "bad status line \"%.100s\"", line);
		free(line);
		return false;
	}
	free(line);
	for (;;)
	{
		char	   *colon;
		char	   *v;

		line = hc_line(c);
		if (line == NULL)
		{
			snprintf(r->error, sizeof(r->error), "headers cut short");
			return false;
		}
		if (line[0] == '\0')
		{
			free(line);
			break;
		}
		colon = strchr(line, ':');
		if (colon == NULL || r->nheaders == HC_MAX_HEADERS)
		{
			snprintf(r->error, sizeof(r->error), "bad header line \"%.100s\"", line);
			free(line);
			return false;
		}
		*colon = '\0';
		v = colon + 1;
		while (*v == ' ' || *v == '\t')
			v++;
		for (char *e = v + strlen(v); e > v && (e[-1] == ' ' || e[-1] == '\t');)
			*--e = '\0';
		r->names[r->nheaders] = strdup(line);
		r->values[r->nheaders] = strdup(v);
		r->nheaders++;
		free(line);
	}
	r->body = calloc(1, 1);
	r->chunked = hc_header(r, "transfer-encoding") &&
		strcasestr(hc_header(r, "transfer-encoding"), "chunked");
	return true;
}

/*
 * Reads one chunk of a chunked body and appends it to r->body; *ended is
 * set at the last chunk (trailers consumed).
 */
static inline bool
hc_read_chunk(HcConn *c, HcResponse *r, size_t *cap, bool *ended)
{
	char	   *line;
	char	   *end;
	unsigned long size;

	*ended = false;
	line = hc_line(c);
	if (line == NULL)
	{
		snprintf(r->error, sizeof(r->error), "chunked body cut short after %zu bytes",
				 r->body_len);
		return false;
	}
	size = strtoul(line, &end, 16);
	if (end == line)
	{
		snprintf(r->error, sizeof(r->error), "bad chunk size line \"%.60s\"", line);
		free(line);
		return false;
	}
	free(line);
	if (size == 0)
	{
		/* trailers, up to an empty line */
		for (;;)
		{
			line = hc_line(c);
			if (line == NULL)
			{
				snprintf(r->error, sizeof(r->error), "no end of chunked body");
				return false;
			}
			if (line[0] == '\0')
			{
				free(line);
				break;
			}
			free(line);
		}
		*ended = true;
		return true;
	}
	if (!hc_need(c, size + 2))
	{
		snprintf(r->error, sizeof(r->error), "chunk of %lu bytes cut short", size);
		return false;
	}
	hc_body_append(r, c->buf + c->pos, size, cap);
	if (c->buf[c->pos + size] != '\r' || c->buf[c->pos + size + 1] != '\n')
	{
		snprintf(r->error, sizeof(r->error), "chunk not followed by CRLF");
		return false;
	}
	c->pos += size + 2;
	return true;
}

/*
 * Reads one response.  `head` says the request was HEAD (no body follows).
 * Returns false with r->error set when the response is incomplete.
 */
static inline bool
hc_read_response(HcConn *c, bool head, HcResponse *r)
{
	const char *cl;
	size_t		cap = 1;

	if (!hc_read_head(c, r))
		return false;
	if (head || r->status == 204 || r->status == 304 || r->status / 100 == 1)
		goto done;
	cl = hc_header(r, "content-length");
	if (r->chunked)
	{
		bool		ended = false;

		while (!ended)
			if (!hc_read_chunk(c, r, &cap, &ended))
				return false;
	}
	else if (cl)
	{
		size_t		n = strtoul(cl, NULL, 10);

		if (!hc_need(c, n))
		{
			snprintf(r->error, sizeof(r->error), "body of %zu bytes cut short", n);
			return false;
		}
		hc_body_append(r, c->buf + c->pos, n, &cap);
		c->pos += n;
	}
	else
	{
		/* delimited by the end of the connection */
		while (hc_fill(c))
			;
		hc_body_append(r, c->buf ? c->buf + c->pos : "", c->len - c->pos, &cap);
		c->pos = c->len;
	}
done:
	/* keep what belongs to the next response at the start of the buffer */
	if (c->buf && c->pos > 0)
	{
		memmove(c->buf, c->buf + c->pos, c->len - c->pos);
		c->len -= c->pos;
		c->pos = 0;
	}
	return true;
}

/* Whether the peer sent anything (or closed) within timeout_ms. */
static inline bool
hc_readable(HcConn *c, int timeout_ms)
{
	struct pollfd p = {c->fd, POLLIN, 0};

	if (c->len > c->pos)
		return true;
	return poll(&p, 1, timeout_ms) == 1;
}

#endif							/* HTTP_CLIENT_H */
