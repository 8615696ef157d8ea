/*
 * test_reader_epochs.c
 *		Epochs announced by lock-free readers (src/contract/reader_epochs.c):
 *		a ticket passes once every reader that entered before it has left.
 */
#include "unit.h"

#include <pthread.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "reader_epochs.h"

TEST(a_ticket_waits_for_readers_that_entered_before_it)
{
	uint64_t	ticket;
	uint64_t	later;

	CHECK(reader_epoch_passed(reader_epoch_retire()));	/* nobody reads */
	reader_epoch_enter();
	ticket = reader_epoch_retire();
	CHECK(!reader_epoch_passed(ticket));
	reader_epoch_exit();
	CHECK(reader_epoch_passed(ticket));

	/* a reader that entered after the ticket does not hold it */
	reader_epoch_enter();
	later = reader_epoch_retire();
	CHECK(!reader_epoch_passed(later));
	CHECK(reader_epoch_passed(ticket));
	reader_epoch_exit();
	CHECK(reader_epoch_passed(later));
}

TEST(sections_nest)
{
	uint64_t	ticket;

	reader_epoch_enter();
	reader_epoch_enter();
	ticket = reader_epoch_retire();
	reader_epoch_exit();
	CHECK(!reader_epoch_passed(ticket));	/* still inside the outer one */
	reader_epoch_exit();
	CHECK(reader_epoch_passed(ticket));
}

typedef struct Reader
{
	_Atomic int stage;			/* 1: inside; 2: told to leave; 3: left */
} Reader;

static void *
reader_main(void *arg)
{
	Reader	   *r = arg;

	reader_epoch_enter();
	atomic_store(&r->stage, 1);
	while (atomic_load(&r->stage) != 2)
		usleep(100);
	reader_epoch_exit();
	atomic_store(&r->stage, 3);
	return NULL;
}

/* Other threads' sections count; a thread's slot is free again once it exits. */
TEST(other_threads_hold_tickets_and_give_their_slots_back)
{
	Reader		readers[8];
	pthread_t	threads[8];
	uint32_t	claimed = reader_epoch_slots_claimed();
	uint64_t	ticket;

	for (int i = 0; i < 8; i++)
	{
		atomic_init(&readers[i].stage, 0);
		REQUIRE(pthread_create(&threads[i], NULL, reader_main, &readers[i]) == 0);
	}
	for (int i = 0; i < 8; i++)
		while (atomic_load(&readers[i].stage) != 1)
			usleep(100);
	CHECK_EQ(reader_epoch_slots_claimed(), claimed + 8);
	ticket = reader_epoch_retire();
	for (int i = 0; i < 8; i++)
	{
		CHECK(!reader_epoch_passed(ticket));
		atomic_store(&readers[i].stage, 2);
		while (atomic_load(&readers[i].stage) != 3)
			usleep(100);
	}
	CHECK(reader_epoch_passed(ticket));
	for (int i = 0; i < 8; i++)
		pthread_join(threads[i], NULL);
	CHECK_EQ(reader_epoch_slots_claimed(), claimed);
}

/*
 * Epochs of their own (shared memory, in the server): a section announced
 * there holds tickets of that instance only, and a new layout forgets the
 * readers of an earlier life.
 */
TEST(epochs_elsewhere)
{
	ReaderEpochs *mine = calloc(1, sizeof(ReaderEpochs));
	ReaderEpochs *other = calloc(1, sizeof(ReaderEpochs));
	uint64_t	ticket;

	REQUIRE(mine != NULL && other != NULL);
	reader_epochs_init(mine);
	reader_epochs_init(other);
	reader_epochs_use(mine);
	reader_epoch_enter();
	ticket = reader_epoch_retire();
	CHECK(!reader_epoch_passed(ticket));
	reader_epochs_use(other);
	CHECK(reader_epoch_passed(reader_epoch_retire()));	/* nobody reads there */
	reader_epochs_use(mine);
	reader_epoch_exit();
	CHECK(reader_epoch_passed(ticket));

	/* a reader that never left, then a new layout: nobody holds anything */
	reader_epoch_enter();
	ticket = reader_epoch_retire();
	CHECK(!reader_epoch_passed(ticket));
	reader_epochs_init(mine);
	CHECK(reader_epoch_passed(ticket));
	CHECK_EQ(reader_epoch_slots_claimed(), 0);
	reader_epoch_exit();
	free(other);
	/* mine stays in use: this thread's slot pointer still points into it */
}

/*
 * Epochs in shared memory: a reader in another process (a child, as the
 * server's processes are the postmaster's) holds this process's ticket.
 */
typedef struct SharedEpochs
{
	ReaderEpochs epochs;
	_Atomic int child_stage;	/* 1: inside its section; 2: left it */
	_Atomic int parent_done;
} SharedEpochs;

TEST(epochs_across_processes)
{
	SharedEpochs *shared = mmap(NULL, sizeof(SharedEpochs), PROT_READ | PROT_WRITE,
								MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	pid_t		child;
	uint64_t	ticket;
	int			status = 0;

	REQUIRE(shared != MAP_FAILED);
	reader_epochs_init(&shared->epochs);
	atomic_init(&shared->child_stage, 0);
	atomic_init(&shared->parent_done, 0);
	reader_epochs_use(&shared->epochs);
	child = fork();
	REQUIRE(child >= 0);
	if (child == 0)
	{
		reader_epoch_enter();
		atomic_store(&shared->child_stage, 1);
		while (atomic_load(&shared->parent_done) == 0)
			usleep(100);
		reader_epoch_exit();
		atomic_store(&shared->child_stage, 2);
		_exit(0);
	}
	while (atomic_load(&shared->child_stage) != 1)
		usleep(100);
	ticket = reader_epoch_retire();
	CHECK(!reader_epoch_passed(ticket));
	atomic_store(&shared->parent_done, 1);
	while (atomic_load(&shared->child_stage) != 2)
		usleep(100);
	CHECK(reader_epoch_passed(ticket));
	waitpid(child, &status, 0);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	/* shared stays mapped: this process uses it from now on */
}

UNIT_MAIN()
