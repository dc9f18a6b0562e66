/*
 * Unit tests for dump's decisions that need no process: the state a wait
 * gives (dump_classify) and the deadlock hint (dump_hint), on hand-built
 * thread lists.
 */
#include <stdlib.h>
#include <string.h>

#include "cmd/dump.h"
#include "common/buf.h"
#include "tests/lib/check.h"

static void test_classify(void)
{
	struct proc_wait w = { .kind = PROC_WAIT_FUTEX, .state = 'S', .futex = 0x1000 };
	CHECK_INT(dump_classify(&w, true, true), DUMP_GIL);
	CHECK_INT(dump_classify(&w, true, false), DUMP_LOCK);
	/* Where the GIL is unknown, a futex wait could be either: idle, never a guess. */
	CHECK_INT(dump_classify(&w, false, false), DUMP_IDLE);
	w.kind = PROC_WAIT_RUNNING;
	CHECK_INT(dump_classify(&w, true, false), DUMP_RUNNING);
	w.kind = PROC_WAIT_OTHER;
	CHECK_INT(dump_classify(&w, true, false), DUMP_IDLE);
	w.kind = PROC_WAIT_UNKNOWN;
	CHECK_INT(dump_classify(&w, true, false), DUMP_UNKNOWN);
	CHECK_STR(dump_state_name(DUMP_LOCK), "waiting on a lock");
	CHECK_STR(dump_state_name(DUMP_GIL), "waiting for the GIL");
}

static const char *hint_of(struct dump_thread *t, size_t n)
{
	static struct spy_buf b = SPY_BUF_INIT;
	struct dump_result r = { .threads = t, .n = n };
	spy_buf_reset(&b);
	dump_hint(&r, &b);
	return b.buf;
}

static void set(struct dump_thread *t, int tid, enum dump_state s, bool gil)
{
	memset(t, 0, sizeof(*t));
	t->py.native_tid = tid;
	t->state = s;
	t->py.holds_gil = gil;
}

static void test_hint(void)
{
	struct dump_thread t[3];
	set(&t[0], 10, DUMP_IDLE, false);
	set(&t[1], 11, DUMP_LOCK, false);
	set(&t[2], 12, DUMP_LOCK, false);
	CHECK_STR(hint_of(t, 3),
		  "possible deadlock: 2 threads wait on locks and none is running (11, 12)");
	/* Somebody runs: it may yet release a lock. */
	t[0].state = DUMP_RUNNING;
	CHECK_STR(hint_of(t, 3), "");
	/* One lock waiter alone is an ordinary wait. */
	set(&t[0], 10, DUMP_IDLE, false);
	t[2].state = DUMP_IDLE;
	CHECK_STR(hint_of(t, 3), "");

	/* Workers parked in the standard library's waits are an idle pool, not a deadlock. */
	struct spy_frame wait = { .func = "Condition.wait", .file = "/usr/lib/python3.11/threading.py",
				  .line = 320, .kind = SPY_FRAME_PYTHON };
	struct spy_frame get = { .func = "get", .file = "/usr/lib/python2.7/Queue.py",
				 .line = 168, .kind = SPY_FRAME_PYTHON };
	struct spy_frame mine = { .func = "transfer", .file = "/srv/app/bank.py",
				  .line = 12, .kind = SPY_FRAME_PYTHON };
	set(&t[0], 10, DUMP_LOCK, false);
	set(&t[1], 11, DUMP_LOCK, false);
	set(&t[2], 12, DUMP_LOCK, false);
	t[0].stack = (struct spy_stack){ .v = &wait, .n = 1 };
	t[1].stack = (struct spy_stack){ .v = &get, .n = 1 };
	CHECK_STR(hint_of(t, 3), "");
	/* Two threads stuck in the program's own acquire still are. */
	t[1].stack = (struct spy_stack){ .v = &mine, .n = 1 };
	CHECK_STR(hint_of(t, 3),
		  "possible deadlock: 2 threads wait on locks and none is running (11, 12)");

	/* A GIL waiter behind a holder that is itself blocked. */
	set(&t[0], 10, DUMP_IDLE, true);
	set(&t[1], 11, DUMP_GIL, false);
	CHECK_STR(hint_of(t, 2),
		  "possible deadlock: thread 11 waits for the GIL, held by thread 10, which is idle");
	t[0].state = DUMP_RUNNING;
	CHECK_STR(hint_of(t, 2), "");
	/* A holder whose state is unknown (a core without registers) proves nothing. */
	t[0].state = DUMP_UNKNOWN;
	CHECK_STR(hint_of(t, 2), "");
}

/* The header says what kind of build it is, and whether a GIL exists. */
static void test_header(void)
{
	struct dump_thread t[1];
	set(&t[0], 10, DUMP_RUNNING, false);
	struct dump_result r = { .pid = 7, .cmdline = "python3.14t app.py", .version = "3.14.10",
				 .binary = "/usr/bin/python3.14t", .threads = t, .n = 1 };
	const bool ft[] = { false, true, true }, nogil[] = { false, true, false };
	const char *want[] = {
		"Python 3.14.10 (/usr/bin/python3.14t)\n",
		"Python 3.14.10 free-threaded, running without a GIL (/usr/bin/python3.14t)\n",
		"Python 3.14.10 free-threaded, GIL switched on (/usr/bin/python3.14t)\n",
	};
	const char *json[] = {
		"\"free_threaded\": false, \"gil\": true,",
		"\"free_threaded\": true, \"gil\": false,",
		"\"free_threaded\": true, \"gil\": true,",
	};
	for (size_t i = 0; i < 3; i++) {
		char *text = NULL;
		size_t len = 0;
		r.free_threaded = ft[i];
		r.no_gil = nogil[i];
		FILE *f = open_memstream(&text, &len);
		dump_print_text(&r, f);
		fclose(f);
		CHECK(strstr(text, want[i]) != NULL);
		free(text);
		f = open_memstream(&text, &len);
		dump_print_json(&r, f);
		fclose(f);
		CHECK(strstr(text, json[i]) != NULL);
		free(text);
	}
}

int main(void)
{
	test_classify();
	test_hint();
	test_header();
	return check_done();
}
