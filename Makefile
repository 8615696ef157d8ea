# shape_sync: PGXS build.
#
# src/pg/        PostgreSQL side (compiled with the server headers)
# src/net/       HTTP threads    (libmicrohttpd, WITHOUT the server headers)
# src/contract/  plain C11 both sides use (neither the server's nor libmicrohttpd's headers)
#
# Each floor has its own compile rule with only the include paths it may
# use, so an accidental #include "postgres.h" in a thread-side file, or a
# contract file reaching for a header of net/, fails the build.
# scripts/check-layout.sh checks the rest: <microhttpd.h> (in /usr/include,
# so no include path keeps it out) only in net/, and pg/ reaching net/ only
# through net/http_server.h, the server's interface.

EXTENSION    = shape_sync
# The version is stated once, in shape_sync.control; the HTTP threads name it
# in the electric-server header.
EXTVERSION  := $(shell sed -n "s/^default_version = '\(.*\)'/\1/p" $(dir $(lastword $(MAKEFILE_LIST)))shape_sync.control)
MODULE_big   = shape_sync
PGFILEDESC   = "shape_sync - ElectricSQL-compatible shape sync over HTTP"

PG_DIRS      = src/pg $(sort $(patsubst %/,%,$(dir $(wildcard src/pg/*/*.c))))
PG_SRCS      = $(sort $(wildcard $(addsuffix /*.c,$(PG_DIRS))))
NET_SRCS     = $(sort $(wildcard src/net/*.c))
CONTRACT_SRCS = $(sort $(wildcard src/contract/*.c))
OBJS         = $(PG_SRCS:.c=.o) $(NET_SRCS:.c=.o) $(CONTRACT_SRCS:.c=.o)

DATA         = $(wildcard shape_sync--*.sql)

MHD_CFLAGS  := $(shell pkg-config --cflags libmicrohttpd)
MHD_LIBS    := $(shell pkg-config --libs libmicrohttpd)

WARN_FLAGS   = -Wall -Wextra -Werror -Wno-unused-parameter -Wno-missing-field-initializers
PG_CFLAGS    = $(WARN_FLAGS)
PG_CPPFLAGS  = -I$(srcdir)/src/contract $(addprefix -I$(srcdir)/,$(PG_DIRS)) -I$(srcdir)/src/net
SHLIB_LINK   = $(MHD_LIBS) -lpthread

REGRESS      = $(patsubst sql/%.sql,%,$(sort $(wildcard sql/*.sql)))
REGRESS_OPTS = --inputdir=$(srcdir) --load-extension=shape_sync

EXTRA_CLEAN  = test/unit/build bench/out

# No JIT bitcode: nothing here benefits from inlining into JIT-compiled
# expressions, and it would compile the thread-side files with PostgreSQL's
# flags.
override with_llvm = no

PG_CONFIG   ?= pg_config
PGXS        := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

# Thread-side objects: plain C11 and pthreads; net/ adds libmicrohttpd.
THREAD_CFLAGS = -std=gnu11 -O2 -g -fPIC -fvisibility=hidden $(WARN_FLAGS) \
                -DSHAPE_SYNC_VERSION='"$(EXTVERSION)"'

src/net/%.o: src/net/%.c
	$(CC) $(THREAD_CFLAGS) -I$(srcdir)/src/contract -I$(srcdir)/src/net $(MHD_CFLAGS) -c -o $@ $<

src/contract/%.o: src/contract/%.c
	$(CC) $(THREAD_CFLAGS) -I$(srcdir)/src/contract -c -o $@ $<

$(OBJS): $(wildcard src/*/*.h src/pg/*/*.h)

.PHONY: unit-test
unit-test:
	$(MAKE) -C test/unit check
