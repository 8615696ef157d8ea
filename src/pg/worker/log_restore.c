/*-------------------------------------------------------------------------
 *
 * log_restore.c
 *		Shape logs on disk read back when the worker starts: the manifest
 *		checked, each listed shape's files loaded into the arena.
 *
 * At start (registry_restore_shapes), the manifest must match the
 * cluster's system identifier, timeline, database and slot name, the slot
 * must not be new and must not be confirmed past durable_lsn; otherwise
 * every file goes, and the shapes' clients get 409.  Each listed shape is
 * validated again against the current catalog by the registry; its data
 * file, cut to its durable length (bytes past it were never confirmed), is
 * read back into the arena record by record, with its chunks closed where
 * the manifest says.  A file shorter than its length, a record that does
 * not parse, a chunk or last offset that does not match purges that shape
 * alone.  Files no restored shape owns are removed.
 *
 * A restored shape's open data file and lengths are handed over to the
 * writing side (log_files.c), which appends to it from there on.  All of
 * this runs on the worker's main thread, before decoding starts and before
 * the HTTP server does.
 *
 * IDENTIFICATION
 *	  src/pg/worker/log_restore.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "storage/fd.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/wait_event.h"

#include "log_files_internal.h"
#include "log_journal.h"
#include "log_record.h"
#include "log_restore.h"
#include "log_trim.h"
#include "shared_state.h"

#define RESTORING_PATH				LOG_FILES_DIR "/restoring"
#define RESTORE_ATTEMPTS			2

static LogStoreManifest lr_previous;	/* the manifest found at start */
static bool lr_have_previous;
static bool lr_discard_said;	/* the manifest's problem was logged */

/* Reads a whole small file into palloc'd memory; NULL when it is absent. */
static char *
lr_read_small_file(const char *path, size_t *len)
{
	int			fd = OpenTransientFile(path, O_RDONLY | PG_BINARY);
	struct stat st;
	char	   *data;
	size_t		done = 0;

	if (fd < 0)
		return NULL;
	if (fstat(fd, &st) != 0 || st.st_size > (off_t) MaxAllocSize)
	{
		CloseTransientFile(fd);
		return NULL;
	}
	data = palloc((size_t) st.st_size + 1);
	while (done < (size_t) st.st_size)
	{
		ssize_t		n = read(fd, data + done, (size_t) st.st_size - done);

		if (n <= 0)
			break;
		done += (size_t) n;
	}
	CloseTransientFile(fd);
	if (done != (size_t) st.st_size)
	{
		ereport(LOG,
				(errcode_for_file_access(),
				 errmsg("could not read file \"%s\": read %zu of %zu bytes",
						path, done, (size_t) st.st_size)));
		pfree(data);
		return NULL;
	}
	*len = done;
	return data;
}

/* Reads the manifest the previous life left, into lr_previous. */
static void
lr_read_manifest(void)
{
	char	   *bytes;
	size_t		len;
	char		error[LOG_STORE_ERROR_LEN];

	bytes = lr_read_small_file(MANIFEST_PATH, &len);
	if (bytes == NULL)
		return;
	if (log_manifest_decode(bytes, len, &lr_previous, error, sizeof(error)))
	{
		lr_have_previous = true;
		if (lr_previous.torn_bytes > 0)
			ereport(LOG,
					(errmsg("shape_sync ignores the last %zu bytes of file \"%s\": a change to it was cut short",
							lr_previous.torn_bytes, MANIFEST_PATH),
					 errdetail("The shapes are restored as the last whole change left them.")));
	}
	else
	{
		ereport(LOG,
				(errmsg("shape_sync discards its stored shape logs: file \"%s\" cannot be used: %s",
						MANIFEST_PATH, error),
				 errdetail("Clients of those shapes get 409 and fetch them again.")));
		lr_discard_said = true;
	}
	pfree(bytes);
}

static void
lr_purge_all(const char *why)
{
	ereport(LOG,
			(errmsg("shape_sync discards its stored shape logs: %s", why),
			 errdetail("Clients of those shapes get 409 and fetch them again.")));
	lf_remove_files(NULL);
	log_manifest_free(&lr_previous);
	lr_have_previous = false;
}

/*
 * Counts this start's attempt to restore in a marker that the end of the
 * restore removes: a shape whose restore crashes the worker would
 * otherwise crash every start.  False once RESTORE_ATTEMPTS starts in a row
 * did not finish.
 */
static bool
lr_note_attempt(void)
{
	size_t		len = 0;
	char	   *before = lr_read_small_file(RESTORING_PATH, &len);
	int			attempts = 0;
	char		text[16];
	int			fd;

	if (before != NULL)
	{
		before[len] = '\0';
		attempts = atoi(before);
		pfree(before);
	}
	if (attempts >= RESTORE_ATTEMPTS)
		return false;
	snprintf(text, sizeof(text), "%d\n", attempts + 1);
	fd = OpenTransientFile(RESTORING_PATH, O_WRONLY | O_CREAT | O_TRUNC | PG_BINARY);
	if (fd >= 0)
	{
		if (write(fd, text, strlen(text)) < 0 || pg_fsync(fd) != 0)
			ereport(LOG,
					(errcode_for_file_access(),
					 errmsg("could not write file \"%s\": %m", RESTORING_PATH)));
		CloseTransientFile(fd);
	}
	return true;
}

/*
 * What the data files gained since they were last fsynced is in the
 * journal (log_journal.c): written back into them before anything reads
 * them, which matters only after a crash of the operating system (the
 * page cache had the bytes otherwise).  A replay that fails leaves files
 * that may lack what the manifest says they hold: the store is discarded.
 */
static bool
lr_replay_journal(void)
{
	LogJournalReplay replay;
	char		failed[MAXPGPATH] = "";

	if (log_journal_replay(JOURNAL_PATH, LOG_FILES_DIR, &replay, failed, sizeof(failed)) == 0)
	{
		if (replay.torn)
			ereport(LOG,
					(errmsg("shape_sync replayed %u records of its journal into %u files; its last record was cut short",
							replay.records, replay.files),
					 errdetail("A round that did not finish before the stop wrote it; nothing relies on it.")));
		else if (replay.records > 0)
			ereport(DEBUG1,
					(errmsg_internal("shape_sync replayed %u records of its journal into %u files",
									 replay.records, replay.files)));
		return true;
	}
	lr_purge_all(psprintf("its journal could not be replayed (file \"%s\": %s)",
						  failed, strerror(errno)));
	return false;
}

const LogStoreManifest *
log_restore_check_header(bool slot_made_now, XLogRecPtr slot_confirmed)
{
	LogStoreHeader now;
	const char *differs;

	if (lf_shapes == NULL)
		return NULL;			/* durable logs are off, or have no directory */
	lr_read_manifest();
	if (lr_have_previous && lr_previous.nshapes == 0)
	{
		/* nothing to restore, nothing to discard: no need to say anything */
		log_manifest_free(&lr_previous);
		lr_have_previous = false;
		lr_discard_said = true;
	}
	if (!lr_have_previous)
	{
		/* what a store without a (usable) manifest left: said once, if anything */
		if (lf_remove_files(NULL) > 0 && !lr_discard_said)
			ereport(LOG,
					(errmsg("shape_sync discards its stored shape logs: they have no usable manifest"),
					 errdetail("Clients of those shapes get 409 and fetch them again.")));
		return NULL;
	}
	lf_header_now(&now, InvalidXLogRecPtr);
	differs = log_store_header_mismatch(&lr_previous.header, &now);
	if (differs != NULL)
	{
		lr_purge_all(psprintf("%s is not the one they were written for", differs));
		return NULL;
	}
	if (slot_made_now)
	{
		lr_purge_all(psprintf("replication slot \"%s\" was made again", now.slot));
		return NULL;
	}
	if (slot_confirmed > lr_previous.header.durable_lsn)
	{
		lr_purge_all(psprintf("replication slot \"%s\" is confirmed up to %X/%X, past the %X/%X they hold",
							  now.slot, LSN_FORMAT_ARGS(slot_confirmed),
							  LSN_FORMAT_ARGS(lr_previous.header.durable_lsn)));
		return NULL;
	}
	if (!lr_note_attempt())
	{
		lr_purge_all(psprintf("the last %d starts did not finish restoring them", RESTORE_ATTEMPTS));
		return NULL;
	}
	if (!lr_replay_journal())
		return NULL;
	lf_resume_from(&lr_previous.header);
	return &lr_previous;
}

/*
 * The bytes of the value sets file that the manifest names (its first
 * sets_length), palloc'd; NULL when it names none, or (said in the log)
 * when the file lacks them.
 */
char *
log_restore_read_sets(const LogStoreHeader *header, size_t *len)
{
	char		path[MAXPGPATH];
	char	   *bytes = NULL;
	size_t		done = 0;
	int			fd;

	*len = 0;
	if (header->sets_generation == 0)
		return NULL;
	lf_sets_path(header->sets_generation, path);
	fd = OpenTransientFile(path, O_RDONLY | PG_BINARY);
	if (fd >= 0 && header->sets_length <= MaxAllocHugeSize)
	{
		/* its first sets_length bytes: what came after was never confirmed */
		bytes = MemoryContextAllocHuge(CurrentMemoryContext, Max(header->sets_length, 1));
		while (done < header->sets_length)
		{
			ssize_t		n = read(fd, bytes + done, (size_t) header->sets_length - done);

			if (n <= 0)
				break;
			done += (size_t) n;
		}
	}
	if (fd >= 0)
		CloseTransientFile(fd);
	if (bytes == NULL || done < header->sets_length)
	{
		ereport(LOG,
				(errmsg("shape_sync cannot read back the value sets of its subqueries: file \"%s\" is missing or shorter than its manifest says",
						path),
				 errdetail("Shapes with subqueries are not restored; their clients get 409.")));
		if (bytes != NULL)
			pfree(bytes);
		return NULL;
	}
	*len = done;
	return bytes;
}

LogStoreShape *
log_restore_read_shape(const char *handle)
{
	char		path[MAXPGPATH];
	char	   *bytes;
	size_t		len;
	char		error[LOG_STORE_ERROR_LEN];
	LogStoreShape *shape = palloc0(sizeof(LogStoreShape));

	lf_shape_path(handle, path);
	bytes = lr_read_small_file(path, &len);
	if (bytes == NULL)
	{
		ereport(LOG,
				(errmsg("shape %s cannot be restored: its file \"%s\" is missing", handle, path)));
		pfree(shape);
		return NULL;
	}
	if (!log_store_shape_decode(bytes, len, shape, error, sizeof(error)) ||
		strcmp(shape->handle, handle) != 0)
	{
		ereport(LOG,
				(errmsg("shape %s cannot be restored: file \"%s\" cannot be used: %s", handle,
						path, error)));
		pfree(bytes);
		pfree(shape);
		return NULL;
	}
	pfree(bytes);
	return shape;
}

/* Reads a data file forward through a buffer of its own. */
typedef struct LrReader
{
	File		file;
	char	   *buffer;			/* LOG_RESTORE_READ_BUFFER bytes */
	uint64		buffer_pos;		/* the file position of buffer[0] */
	size_t		buffer_len;
	uint64		end;			/* read nothing past it */
} LrReader;

#define LOG_RESTORE_READ_BUFFER	((size_t) 1 << 20)

/* n bytes at pos into dst; false when the file has fewer */
static bool
lr_read_at(LrReader *r, uint64 pos, char *dst, size_t n)
{
	if (pos + n > r->end)
		return false;
	if (pos < r->buffer_pos || pos + n > r->buffer_pos + r->buffer_len)
	{
		int			got;

		if (n > LOG_RESTORE_READ_BUFFER)
			return FileRead(r->file, dst, n, (off_t) pos, WAIT_EVENT_DATA_FILE_READ) == (int) n;
		got = FileRead(r->file, r->buffer, (int) Min(LOG_RESTORE_READ_BUFFER, r->end - pos),
					   (off_t) pos, WAIT_EVENT_DATA_FILE_READ);
		if (got < (int) n)
			return false;
		r->buffer_pos = pos;
		r->buffer_len = (size_t) got;
	}
	memcpy(dst, r->buffer + (pos - r->buffer_pos), n);
	return true;
}

/*
 * Reads a data file back into the slot's log: its records up to
 * `extent->length`, its chunks closed where the manifest says.
 */
bool
log_restore_load(uint32 slot, const LogStoreExtent *extent, char *why, size_t why_len)
{
	ShapeTable *table = shape_sync_shared->table;
	ShapeLog   *log = shape_table_log(table, slot);
	char		path[MAXPGPATH];
	File		file;
	off_t		size;
	uint64		pos = 0;
	uint32		chunk = 0;
	char	   *record = lf_buffer;
	size_t		record_cap = LOG_FILES_BUFFER;
	LogOffset	last = {-1, 0};
	bool		ok = false;
	LrReader	reader;

	memset(&reader, 0, sizeof(reader));
	lf_data_path(extent->handle, extent->generation, path);
	file = PathNameOpenFile(path, O_RDWR | PG_BINARY);
	if (file < 0)
	{
		snprintf(why, why_len, "could not open file \"%s\": %m", path);
		return false;
	}
	size = FileSize(file);
	if (size < 0 || (uint64) size < extent->length)
	{
		snprintf(why, why_len, "file \"%s\" has %lld bytes, fewer than the %llu it held",
				 path, (long long) size, (unsigned long long) extent->length);
		goto done;
	}
	/* what was written after the last round was never confirmed: cut */
	if ((uint64) size > extent->length &&
		FileTruncate(file, (off_t) extent->length, WAIT_EVENT_DATA_FILE_TRUNCATE) != 0)
	{
		snprintf(why, why_len, "could not truncate file \"%s\": %m", path);
		goto done;
	}
	reader.file = file;
	reader.buffer = palloc(LOG_RESTORE_READ_BUFFER);
	reader.end = extent->length;
	while (pos < extent->length)
	{
		SlogRecordHeader hdr;
		uint64		span;
		SlogResult	res;

		if (!lr_read_at(&reader, pos, (char *) &hdr, sizeof(hdr)))
		{
			snprintf(why, why_len, "file \"%s\" ends inside a record at byte %llu", path,
					 (unsigned long long) pos);
			goto done;
		}
		span = slog_record_span(hdr.len);
		if (hdr.kind < SLOG_RECORD_CHANGE || hdr.kind > SLOG_RECORD_TOMBSTONE ||
			span > extent->length - pos)
		{
			snprintf(why, why_len, "file \"%s\" has no valid record at byte %llu", path,
					 (unsigned long long) pos);
			goto done;
		}
		if (hdr.len > record_cap)
		{
			if (record != lf_buffer)
				pfree(record);
			record_cap = hdr.len;
			record = MemoryContextAllocHuge(CurrentMemoryContext, record_cap);
		}
		if (hdr.len > 0 && !lr_read_at(&reader, pos + sizeof(hdr), record, hdr.len))
		{
			snprintf(why, why_len, "could not read file \"%s\" at byte %llu", path,
					 (unsigned long long) pos);
			goto done;
		}
		last.tx = hdr.tx;
		last.op = hdr.op;
		res = slog_append(table->arena, log, last, hdr.kind, record, hdr.len);
		pos += span;
		if (res == SLOG_OK && chunk < extent->nchunks && extent->chunks[chunk].end_pos == pos)
		{
			LogOffset	end = {extent->chunks[chunk].end_tx, extent->chunks[chunk].end_op};

			res = slog_close_chunk(table->arena, log, end);
			chunk++;
		}
		/* a log larger than memory: what the file holds leaves it as it comes */
		if (res == SLOG_OK)
			log_trim_loading(log, path, pos);
		if (res != SLOG_OK)
		{
			snprintf(why, why_len, res == SLOG_FULL ?
					 "the shape log memory (\"shape_sync.log_memory\") is full" :
					 "it is larger than a shape log may be");
			goto done;
		}
		if (chunk < extent->nchunks && extent->chunks[chunk].end_pos < pos)
		{
			snprintf(why, why_len, "a chunk of file \"%s\" does not end where a record does", path);
			goto done;
		}
	}
	if (chunk != extent->nchunks || log->write_pos != extent->length)
	{
		snprintf(why, why_len, "file \"%s\" does not end as its manifest says (%u of %u chunks, %llu of %llu bytes)",
				 path, chunk, extent->nchunks, (unsigned long long) log->write_pos,
				 (unsigned long long) extent->length);
		goto done;
	}
	/* the published last offset: a snapshot's is its end, past its last row */
	slog_publish(log, extent->last, SLOG_SNAPSHOT_DONE);
	lf_restored(slot, extent, file);
	ok = true;
done:
	if (reader.buffer != NULL)
		pfree(reader.buffer);
	if (record != lf_buffer)
		pfree(record);
	if (!ok)
		FileClose(file);
	return ok;
}

/* The file names of the restored shapes, while log_restore_done runs. */
static HTAB *lr_keep;

typedef struct LrKeptName
{
	char		name[LOG_STORE_HANDLE_LEN + 32];	/* the hash key */
} LrKeptName;

/* Whether a file name belongs to a shape that is restored. */
static bool
lr_restored_file(const char *name)
{
	char		key[LOG_STORE_HANDLE_LEN + 32];

	if (strcmp(name, "manifest") == 0)
		return true;
	if (lr_have_previous && lr_previous.header.sets_generation != 0)
	{
		char		sets[MAXPGPATH];

		/* named by the manifest until the first round writes the next one */
		lf_sets_path(lr_previous.header.sets_generation, sets);
		if (strcmp(name, sets + strlen(LOG_FILES_DIR) + 1) == 0)
			return true;
	}
	if (strlen(name) >= sizeof(key))
		return false;
	memset(key, 0, sizeof(key));
	strcpy(key, name);
	return hash_search(lr_keep, key, HASH_FIND, NULL) != NULL;
}

void
log_restore_done(void)
{
	if (lf_shapes == NULL)
		return;					/* shape_sync.durable_logs is off */
	/* the files of shapes that could not be restored, strays, the marker */
	{
		HASHCTL		ctl;
		char		path[MAXPGPATH];
		LrKeptName	key;

		ctl.keysize = sizeof(key.name);
		ctl.entrysize = sizeof(LrKeptName);
		ctl.hcxt = CurrentMemoryContext;
		lr_keep = hash_create("shape_sync restored files", 256, &ctl,
							  HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
		for (uint32 i = 0; i < lf_nslots; i++)
		{
			if (!lf_shapes[i].in_use)
				continue;
			lf_data_path(lf_shapes[i].handle, lf_shapes[i].generation, path);
			memset(&key, 0, sizeof(key));
			strlcpy(key.name, path + strlen(LOG_FILES_DIR) + 1, sizeof(key.name));
			hash_search(lr_keep, &key, HASH_ENTER, NULL);
			lf_shape_path(lf_shapes[i].handle, path);
			memset(&key, 0, sizeof(key));
			strlcpy(key.name, path + strlen(LOG_FILES_DIR) + 1, sizeof(key.name));
			hash_search(lr_keep, &key, HASH_ENTER, NULL);
		}
		lf_remove_files(lr_restored_file);
		hash_destroy(lr_keep);
		lr_keep = NULL;
	}
	/* the manifest still names the shapes that were not restored */
	if (lr_have_previous)
		lf_manifest_outdated();
	log_manifest_free(&lr_previous);
	lr_have_previous = false;
}
