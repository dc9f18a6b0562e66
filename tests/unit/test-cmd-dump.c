/*
 * Unit tests for dump's decisions that need no process: the state a wait
 * gives (prof_classify) and the deadlock hint (dump_hint), on hand-built
 * thread lists.
 */
#include <stdlib.h>
#include <string.h>

#include "cmd/dump.h"
#include "common/buf.h"
#include "tests/lib/check.h"

static void test_classify(void)
{
	struct spy_wait w = { .kind = SPY_WAIT_FUTEX, .state = 'S', .futex = 0x1000 };
	CHECK_INT(prof_classify(&w, true, true), PROF_STATE_GIL);
	CHECK_INT(prof_classify(&w, true, false), PROF_STATE_LOCK);
	/* Where the GIL is unknown, a futex wait could be either: idle, never a guess. */
	CHECK_INT(prof_classify(&w, false, false), PROF_STATE_IDLE);
	w.kind = SPY_WAIT_RUNNING;
	CHECK_INT(prof_classify(&w, true, false), PROF_STATE_RUNNING);
	w.kind = SPY_WAIT_OTHER;
	CHECK_INT(prof_classify(&w, true, false), PROF_STATE_IDLE);
	w.kind = SPY_WAIT_UNKNOWN;
	CHECK_INT(prof_classify(&w, true, false), PROF_STATE_UNKNOWN);
	CHECK_STR(dump_state_name(PROF_STATE_LOCK), "waiting on a lock");
	CHECK_STR(dump_state_name(PROF_STATE_GIL), "waiting for the GIL");
}

static const char *hint_of(struct prof_look_thread *t, size_t n)
{
	static struct spy_buf b = SPY_BUF_INIT;
	struct prof_look r = { .threads = t, .n = n };
	spy_buf_reset(&b);
	dump_hint(&r, &b);
	return b.buf;
}

static void set(struct prof_look_thread *t, int tid, enum prof_state s, bool gil)
{
	memset(t, 0, sizeof(*t));
	t->py.native_tid = tid;
	t->state = s;
	t->py.holds_gil = gil;
}

static void test_hint(void)
{
	struct prof_look_thread t[3];
	set(&t[0], 10, PROF_STATE_IDLE, false);
	set(&t[1], 11, PROF_STATE_LOCK, false);
	set(&t[2], 12, PROF_STATE_LOCK, false);
	CHECK_STR(hint_of(t, 3),
		  "possible deadlock: 2 threads wait on locks and none is running (11, 12)");
	/* Somebody runs: it may yet release a lock. */
	t[0].state = PROF_STATE_RUNNING;
	CHECK_STR(hint_of(t, 3), "");
	/* One lock waiter alone is an ordinary wait. */
	set(&t[0], 10, PROF_STATE_IDLE, false);
	t[2].state = PROF_STATE_IDLE;
	CHECK_STR(hint_of(t, 3), "");

	/* Workers parked in the standard library's waits are an idle pool, not a deadlock. */
	struct spy_frame wait = { .func = "Condition.wait", .file = "/usr/lib/python3.11/threading.py",
				  .line = 320, .kind = SPY_FRAME_PYTHON };
	struct spy_frame get = { .func = "get", .file = "/usr/lib/python2.7/Queue.py",
				 .line = 168, .kind = SPY_FRAME_PYTHON };
	struct spy_frame mine = { .func = "transfer", .file = "/srv/app/bank.py",
				  .line = 12, .kind = SPY_FRAME_PYTHON };
	set(&t[0], 10, PROF_STATE_LOCK, false);
	set(&t[1], 11, PROF_STATE_LOCK, false);
	set(&t[2], 12, PROF_STATE_LOCK, false);
	t[0].stack = (struct spy_stack){ .v = &wait, .n = 1 };
	t[1].stack = (struct spy_stack){ .v = &get, .n = 1 };
	CHECK_STR(hint_of(t, 3), "");
	/* Two threads stuck in the program's own acquire still are. */
	t[1].stack = (struct spy_stack){ .v = &mine, .n = 1 };
	CHECK_STR(hint_of(t, 3),
		  "possible deadlock: 2 threads wait on locks and none is running (11, 12)");

	/* A GIL waiter behind a holder that is itself blocked. */
	set(&t[0], 10, PROF_STATE_IDLE, true);
	set(&t[1], 11, PROF_STATE_GIL, false);
	CHECK_STR(hint_of(t, 2),
		  "possible deadlock: thread 11 waits for the GIL, held by thread 10, which is idle");
	t[0].state = PROF_STATE_RUNNING;
	CHECK_STR(hint_of(t, 2), "");
	/* A holder whose state is unknown (a core without registers) proves nothing. */
	t[0].state = PROF_STATE_UNKNOWN;
	CHECK_STR(hint_of(t, 2), "");
}

/* The header says what kind of build it is, and whether a GIL exists. */
static void test_header(void)
{
	struct prof_look_thread t[1];
	set(&t[0], 10, PROF_STATE_RUNNING, false);
	struct prof_look r = { .pid = 7, .cmdline = "python3.14t app.py", .version = "3.14.10",
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

/* A task t[i] in loop 0x100, awaited by the tasks at awaiters (addresses 0x1000 + 16 * j). */
static void mk_task(struct pyrt_task *t, size_t i, const char *name, const size_t *awaiters, size_t n)
{
	memset(t, 0, sizeof(*t));
	t->addr = 0x1000 + 16 * i;
	t->loop = 0x100;
	t->name = name;
	for (size_t k = 0; k < n; k++) {
		t->awaited_by[t->nawaited_by++] = 0x1000 + 16 * awaiters[k];
	}
}

/*
 * The --tasks section's await tree: as asyncio pstree draws it; a cycle of
 * awaits (hostile memory) drawn once per task; a chain deeper than the
 * tree's bound cut, not overflowing the prefix.
 */
static void test_tasks_tree(void)
{
	struct pyrt_task *t = calloc(80, sizeof(*t));
	size_t zero = 0, three = 3, four = 4;
	mk_task(&t[0], 0, "main", NULL, 0);
	mk_task(&t[1], 1, "child", &zero, 1);
	mk_task(&t[2], 2, "solo", NULL, 0);
	mk_task(&t[3], 3, "a", &four, 1); /* a and b await each other */
	mk_task(&t[4], 4, "b", &three, 1);
	struct prof_look r = { .o.tasks = true, .task_v = t, .ntasks = 5, .tasks_total = 5 };
	struct spy_buf b = SPY_BUF_INIT;
	dump_print_tasks_text(&r, &b);
	CHECK(strstr(b.buf, "asyncio: 5 tasks in 1 event loop\n") != NULL);
	CHECK(strstr(b.buf, "    task \"child\" (0x1010) pending, awaited by \"main\"\n") != NULL);
	CHECK(strstr(b.buf, "    await tree:\n"
			    "    \u251c\u2500\u2500 \"main\"\n"
			    "    \u2502   \u2514\u2500\u2500 \"child\"\n"
			    "    \u2514\u2500\u2500 \"solo\"\n"
			    "    \u2514\u2500\u2500 \"a\"\n"
			    "        \u2514\u2500\u2500 \"b\"\n") != NULL);
	/* A chain 40 deep (tasks 0, 2, 4, ...) where every level has a second, last child: each
	 * level's prefix is the widest ("\u2502   "); the tree stops at depth 32. */
	for (size_t i = 0; i < 80; i += 2) {
		size_t up = i >= 2 ? i - 2 : 0;
		mk_task(&t[i], i, "deep", &up, i >= 2 ? 1 : 0);
		mk_task(&t[i + 1], i + 1, "leaf", &up, i >= 2 ? 1 : 0);
	}
	t[1].nawaited_by = 1;
	t[1].awaited_by[0] = t[0].addr;
	r.ntasks = r.tasks_total = 80;
	spy_buf_reset(&b);
	dump_print_tasks_text(&r, &b);
	CHECK(strstr(b.buf, "asyncio: 80 tasks in 1 event loop\n") != NULL);
	struct spy_buf want = SPY_BUF_INIT;
	spy_buf_adds(&want, "\n        "); /* the root is the last of its level */
	for (int i = 0; i < 31; i++) {
		spy_buf_adds(&want, "\u2502   ");
	}
	spy_buf_adds(&want, "\u251c\u2500\u2500 \"deep\"\n");
	CHECK(strstr(b.buf, want.buf) != NULL);
	spy_buf_release(&want);
	spy_buf_reset(&b);
	dump_print_tasks_json(&r, &b);
	const char *head = "{\"error\": null, \"total\": 80, \"loops\": [";
	CHECK(strncmp(b.buf, head, strlen(head)) == 0);
	/* The most dump shows, each awaited by the most it keeps: indexed, not
	 * scanned per edge (that took seconds). */
	free(t);
	t = calloc(PROF_MAX_TASKS, sizeof(*t));
	for (size_t i = 0; i < PROF_MAX_TASKS; i++) {
		size_t up[PYRT_TASK_MAX_AWAITERS];
		for (size_t k = 0; k < PYRT_TASK_MAX_AWAITERS; k++) {
			up[k] = (i * 7919 + k * 104729) % PROF_MAX_TASKS;
		}
		mk_task(&t[i], i, "many", up, i ? PYRT_TASK_MAX_AWAITERS : 0);
	}
	r.task_v = t;
	r.ntasks = r.tasks_total = PROF_MAX_TASKS;
	spy_buf_reset(&b);
	dump_print_tasks_text(&r, &b);
	CHECK(strstr(b.buf, "asyncio: 4096 tasks in 1 event loop\n") != NULL);
	spy_buf_release(&b);
	free(t);
}

int main(void)
{
	test_classify();
	test_hint();
	test_header();
	test_tasks_tree();
	return check_done();
}
