# shape_sync: PGXS build.
#
# src/pg/   PostgreSQL side (compiled with the server headers)
# src/net/  HTTP threads    (compiled WITHOUT the server headers)
# src/shm/  shared contract (compiled WITHOUT the server headers)
#
# The thread-side directories get their own compile rule below that drops
# PostgreSQL's include path, so an accidental #include "postgres.h" there
# fails the build instead of compiling into a thread.

EXTENSION    = shape_sync
EXTVERSION   = 0.1.0
MODULE_big   = shape_sync
PGFILEDESC   = "shape_sync - ElectricSQL-compatible shape sync over HTTP"

PG_SRCS      = $(sort $(wildcard src/pg/*.c))
NET_SRCS     = $(sort $(wildcard src/net/*.c))
SHM_SRCS     = $(sort $(wildcard src/shm/*.c))
OBJS         = $(PG_SRCS:.c=.o) $(NET_SRCS:.c=.o) $(SHM_SRCS:.c=.o)

DATA         = $(wildcard shape_sync--*.sql)

MHD_CFLAGS  := $(shell pkg-config --cflags libmicrohttpd)
MHD_LIBS    := $(shell pkg-config --libs libmicrohttpd)

WARN_FLAGS   = -Wall -Wextra -Werror -Wno-unused-parameter -Wno-missing-field-initializers
PG_CFLAGS    = $(WARN_FLAGS)
PG_CPPFLAGS  = -I$(srcdir)/src/shm -I$(srcdir)/src/net -I$(srcdir)/src/pg $(MHD_CFLAGS)
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

# Thread-side objects: plain C11, pthreads and libmicrohttpd only.
THREAD_CFLAGS = -std=gnu11 -O2 -g -fPIC -fvisibility=hidden $(WARN_FLAGS) \
				-I$(srcdir)/src/shm -I$(srcdir)/src/net $(MHD_CFLAGS)

src/net/%.o: src/net/%.c
	$(CC) $(THREAD_CFLAGS) -c -o $@ $<

src/shm/%.o: src/shm/%.c
	$(CC) $(THREAD_CFLAGS) -c -o $@ $<

$(OBJS): $(wildcard src/*/*.h)

.PHONY: unit-test
unit-test:
	$(MAKE) -C test/unit check
