/*
 * The profiler's tick rules, through its real thread walk (pystate over a
 * synthetic 3.12 image, tests/lib/fakepy.h) and a fake backend standing in
 * for ptrace and /proc: every stop is matched by a resume and nothing is
 * left attached; never two threads held at once, the GIL holder first,
 * sleepers not stopped without -i, and with -i not when their stacks are
 * known unchanged; a process none of whose threads ran is not touched;
 * where the GIL's switch count can be read, only the GIL holder stopped,
 * the others read running while the count stays; else threads frozen
 * behind the holder's GIL walked without a stop of their own (not those
 * of an interpreter with its own GIL, nor with --native); the whole-process pause where a thread has no TID, with
 * no read while the process runs; the activity rule; torn and truncated
 * stacks; --nonblocking walks no idle thread without -i; the maps retry; -s follows descendants (of a root that is no Python process too, never attached, the session on past its exit); the loop ends when the
 * process does; continuous mode's windows (cmd/session.h) are whole
 * seconds, contiguous, and hold every tick.
 */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>

#include "cmd/session.h"
#include "common/util.h"
#include "profiler/internal.h"
#include "pystate/internal.h"
#include "tests/lib/check.h"
#include "tests/lib/fakepy.h"
#include "tests/lib/faketick.h"

#ifdef SPY_TEST_HOOKS

static void test_one_at_a_time(void)
{
	for (int idle = 0; idle < 2; idle++) {
		struct fake_world w;
		struct spy_strtab strs = SPY_STRTAB_INIT;
		fake_setup(&w);
		/* The holder listed last: it must still be stopped first. */
		struct fake_thread holder = w.procs[0].th[0];
		w.procs[0].th[0] = w.procs[0].th[2];
		w.procs[0].th[2] = holder;
		/* The other two in interpreters of their own: nothing frozen behind the holder. */
		w.procs[0].th[0].own_interp = w.procs[0].th[1].own_interp = true;
		/* Nothing tells the sleeper stayed asleep: -i stops it for its walk (see test_sleepers_not_stopped). */
		w.procs[0].no_still = true;
		/* Holds for every thread, as where the GIL's switch count is unknown (see test_read_running). */
		w.procs[0].no_switches = true;
		struct prof_opts o = { .idle = idle };
		struct profiler *p = fake_run(&w, o, 10, &strs);
		struct fake_proc *f = &w.procs[0];
		struct prof_stats s = fake_stats(p);
		CHECK_INT(s.samples, 10);
		CHECK_INT(f->pauses, 0);
		CHECK_INT(f->tracks, 10);
		CHECK_INT(f->first_stop_not_holder, 0);
		CHECK(!f->held);
		/* The holder and the R thread every tick; the sleeper only with -i. */
		CHECK_INT(f->stops_of[2], 10);
		CHECK_INT(f->stops_of[1], 10);
		CHECK_INT(f->stops_of[0], idle ? 10 : 0);
		/*
		 * The holder every tick; the R thread from its second on (its
		 * first R reading has nothing before it); the sleeper only with
		 * -i, marked idle (and the R thread's first).
		 */
		CHECK_INT(w.stacks, idle ? 30 : 10 + 9);
		CHECK_INT(w.idle_stacks, idle ? 10 + 1 : 0);
		CHECK_INT(s.gil_ticks, 10);
		CHECK_INT(s.thread_samples, 30);
		CHECK_INT(s.threads_seen, 3);
		CHECK_INT(prof_errors(&s), 0);
		CHECK_INT(f->detaches, 1);
		CHECK(!f->attached);
		fake_teardown(&w, p, &strs);
	}

	/* -g: the holder's stacks alone. */
	struct fake_world w;
	struct spy_strtab strs = SPY_STRTAB_INIT;
	fake_setup(&w);
	w.procs[0].no_switches = true;
	struct profiler *p = fake_run(&w, (struct prof_opts){ .gil = true }, 5, &strs);
	CHECK_INT(w.stacks, 5);
	fake_teardown(&w, p, &strs);

	/* A thread that exits before it is stopped is counted gone, not walked. */
	fake_setup(&w);
	w.procs[0].gone_tid = 101;
	w.procs[0].th[1].own_interp = true;
	w.procs[0].no_switches = true;
	p = fake_run(&w, (struct prof_opts){ 0 }, 5, &strs);
	CHECK_INT(w.stacks, 5);
	CHECK_INT(fake_stats(p).errors[SPY_SAMPLE_ERR_GONE], 5);
	fake_teardown(&w, p, &strs);
}

/*
 * Behind the GIL holder's hold, a thread its GIL freezes is walked without
 * a stop of its own; not one of an interpreter with its own GIL, nor when
 * walks need the thread stopped (--native).
 */
static void test_frozen_behind_holder(void)
{
	static const struct {
		bool own_interp, native;
	} cases[] = { { false, false }, { true, false }, { false, true } };
	/* --native's unwinds fail at once here (there is no thread to unwind): the Python stacks stay. */
	setenv("SPY_TEST_NATIVE_FAIL", "1", 1);
	for (size_t c = 0; c < SPY_ARRAY_SIZE(cases); c++) {
		struct fake_world w;
		struct spy_strtab strs = SPY_STRTAB_INIT;
		fake_setup(&w);
		w.procs[0].th[1].own_interp = cases[c].own_interp;
		w.procs[0].no_switches = true;
		struct profiler *p = fake_run(&w, (struct prof_opts){ .native = cases[c].native }, 10, &strs);
		struct fake_proc *f = &w.procs[0];
		bool frozen = !cases[c].own_interp && !cases[c].native;
		struct prof_stats s = fake_stats(p);
		CHECK_INT(s.samples, 10);
		CHECK_INT(f->stops_of[0], 10);
		/* The R thread: stopped only when not frozen, or the first time (its first walk is too long for another's hold). */
		CHECK_INT(f->stops_of[1], frozen ? 1 : 10);
		CHECK_INT(f->stops_of[2], 0);
		/* --native: the stop waits for nothing, each thread being unwound. */
		CHECK_INT(f->waitless_stops, cases[c].native ? f->stops : 0);
		/* The same stacks either way. */
		CHECK_INT(w.stacks, 10 + 9);
		CHECK_INT(prof_errors(&s), cases[c].native ? s.errors[SPY_SAMPLE_ERR_NATIVE] : 0);
		CHECK(!f->held);
		fake_teardown(&w, p, &strs);
	}
	unsetenv("SPY_TEST_NATIVE_FAIL");
}

/*
 * Where the GIL's switch count can be read, only the GIL holder is
 * stopped: the others are read running, and taken if the count did not
 * move meanwhile. One whose count moves during its read is read once
 * more, and held if it moves again; the GIL's last holder (it may take the
 * GIL back without a switch counted) is held, and so is every thread with
 * --native.
 */
static void test_read_running(void)
{
	static const struct {
		int switch_reads;   /* th[1]'s reads that see the GIL change hands */
		bool last_holder, native, idle;
		int stops, most;    /* th[1]'s stops; the most threads stopped in a tick */
	} cases[] = {
		{ 0, false, false, false, 0, 1 },
		{ 0, false, false, true, 0, 1 },
		{ 1, false, false, false, 0, 1 },
		{ 1000, false, false, false, 10, 2 },
		{ 0, true, false, false, 10, 2 },
		{ 0, false, true, false, 10, 2 },
	};
	setenv("SPY_TEST_NATIVE_FAIL", "1", 1);
	for (size_t c = 0; c < SPY_ARRAY_SIZE(cases); c++) {
		struct fake_world w;
		struct spy_strtab strs = SPY_STRTAB_INIT;
		fake_setup(&w);
		struct fake_proc *f = &w.procs[0];
		f->th[1].switch_reads = cases[c].switch_reads;
		/* Not holding a GIL of its own, but the last to have held it. */
		f->th[1].own_interp = f->th[1].last_holder = cases[c].last_holder;
		struct prof_opts o = { .native = cases[c].native, .idle = cases[c].idle };
		struct profiler *p = fake_run(&w, o, 10, &strs);
		CHECK_INT(f->stops_of[0], 10);
		CHECK_INT(f->stops_of[1], cases[c].stops);
		CHECK_INT(f->stops_of[2], 0);
		CHECK_INT(f->most_tick_stops, cases[c].most);
		/* One switch seen: the second read stands. Always: read twice a tick, then held. */
		CHECK_INT(f->th[1].switch_reads, cases[c].switch_reads == 1 ? 0 : cases[c].switch_reads > 1 ? 1000 - 20 : 0);
		/* The same stacks whichever way they were read (the sleeper's with -i, marked idle). */
		CHECK_INT(w.stacks, cases[c].idle ? 30 : 10 + 9);
		struct prof_stats s = fake_stats(p);
		CHECK_INT(s.samples, 10);
		CHECK_INT(prof_errors(&s), cases[c].native ? s.errors[SPY_SAMPLE_ERR_NATIVE] : 0);
		CHECK(!f->held);
		fake_teardown(&w, p, &strs);
	}
	unsetenv("SPY_TEST_NATIVE_FAIL");
}

/*
 * Two threads read running under one GIL: the count read after the
 * first's walk is the second's before, so a tick reads it three times
 * (once before, once after each), not four. A
 * move during the first's walk is still seen, and the second's read,
 * begun after it, stands.
 */
static void test_read_running_chain(void)
{
	for (int moves = 0; moves < 2; moves++) {
		struct fake_world w;
		struct spy_strtab strs = SPY_STRTAB_INIT;
		fake_setup(&w);
		struct fake_proc *f = &w.procs[0];
		f->th[2].state = 'R';
		f->th[1].switch_reads = moves;
		struct profiler *p = fake_run(&w, (struct prof_opts){ 0 }, 10, &strs);
		CHECK_INT(f->stops_of[0], 10);
		CHECK_INT(f->stops_of[1], 0);
		CHECK_INT(f->stops_of[2], 0);
		/* Three a tick (the listing's look is in its view); a move: th[1] read again, once. */
		CHECK_INT(f->count_reads, 10 * 3 + moves);
		CHECK_INT(w.stacks, 10 + 2 * 9);
		CHECK(!f->held);
		fake_teardown(&w, p, &strs);
	}
}

/*
 * No thread holds the GIL when listed, so no hold ends the listing's memory
 * view before the others are read running: the switch count must still be
 * read from the target, not from that view, or a count that moves during
 * every read would be taken for one that stays.
 */
static void test_read_running_fresh(void)
{
	struct fake_world w;
	struct spy_strtab strs = SPY_STRTAB_INIT;
	fake_setup(&w);
	struct fake_proc *f = &w.procs[0];
	f->th[0].gil = false;
	f->th[1].switch_reads = 1000;
	struct profiler *p = fake_run(&w, (struct prof_opts){ 0 }, 10, &strs);
	CHECK_INT(f->stops_of[0], 0);
	CHECK_INT(f->stops_of[1], 10);
	CHECK(!f->held);
	fake_teardown(&w, p, &strs);
}

/* A thread the stop finds off a CPU is walked as held, and let go as any held thread. */
static void test_offcpu_held(void)
{
	struct fake_world w;
	struct spy_strtab strs = SPY_STRTAB_INIT;
	fake_setup(&w);
	w.procs[0].th[1].offcpu = true;
	w.procs[0].th[1].own_interp = true;
	w.procs[0].no_switches = true;
	struct profiler *p = fake_run(&w, (struct prof_opts){ 0 }, 10, &strs);
	struct fake_proc *f = &w.procs[0];
	CHECK_INT(f->stops_of[1], 10);
	CHECK_INT(f->offcpu_holds, 10);
	CHECK_INT(w.stacks, 10 + 9);
	struct prof_stats s = fake_stats(p);
	CHECK_INT(prof_errors(&s), 0);
	CHECK(!f->held);
	fake_teardown(&w, p, &strs);
}

/*
 * -i: a sleeper (th[2]) is not stopped. Its stack is read running once and
 * kept while it sleeps; read running every tick when it is scheduled
 * between ticks; stopped for its walk when it is scheduled during the
 * read, or when the backend cannot tell it stayed asleep.
 */
static void test_sleepers_not_stopped(void)
{
	static const struct {
		bool scheduled, runs_in_read, no_still;
		int stops;
	} cases[] = {
		{ false, false, false, 0 },
		{ true, false, false, 0 },
		{ false, true, false, 10 },
		{ false, false, true, 10 },
	};
	for (size_t c = 0; c < SPY_ARRAY_SIZE(cases); c++) {
		struct fake_world w;
		struct spy_strtab strs = SPY_STRTAB_INIT;
		fake_setup(&w);
		w.procs[0].th[1].own_interp = w.procs[0].th[2].own_interp = true;
		w.procs[0].th[2].scheduled = cases[c].scheduled;
		w.procs[0].th[2].runs_in_read = cases[c].runs_in_read;
		w.procs[0].no_still = cases[c].no_still;
		w.procs[0].no_switches = true;
		struct profiler *p = fake_run(&w, (struct prof_opts){ .idle = true }, 10, &strs);
		struct fake_proc *f = &w.procs[0];
		CHECK_INT(f->stops_of[2], cases[c].stops);
		/* The holder and the R thread are stopped every tick, whatever the sleeper does. */
		CHECK_INT(f->stops_of[0], 10);
		CHECK_INT(f->stops_of[1], 10);
		/* Every thread's stack every tick, the sleeper's (and the R thread's first) marked idle. */
		CHECK_INT(w.stacks, 30);
		CHECK_INT(w.idle_stacks, 10 + 1);
		struct prof_stats s = fake_stats(p);
		CHECK_INT(prof_errors(&s), 0);
		fake_teardown(&w, p, &strs);
	}
}

/*
 * A process none of whose threads ran since the last tick: the tick is the
 * last one again, with nothing stopped, listed or read (only schedstat);
 * not when one ran, nor when the tracer seizes a thread that is not
 * Python's (it may have run unseen).
 */
static void test_still_process_repeated(void)
{
	static const struct {
		bool scheduled, only_python;
		int full;
	} cases[] = {
		{ false, true, 1 },
		{ true, true, 10 },
		{ false, false, 10 },
	};
	for (size_t c = 0; c < SPY_ARRAY_SIZE(cases); c++) {
		struct fake_world w;
		struct spy_strtab strs = SPY_STRTAB_INIT;
		fake_setup(&w);
		/* Two threads asleep, the first holding the GIL (its stack is kept every tick). */
		w.procs[0].nth = 2;
		w.procs[0].th[1].state = 'S';
		w.procs[0].th[1].scheduled = cases[c].scheduled;
		w.procs[0].only_python = cases[c].only_python;
		struct profiler *p = fake_run(&w, (struct prof_opts){ 0 }, 10, &strs);
		struct fake_proc *f = &w.procs[0];
		CHECK_INT(f->tracks, cases[c].full);
		CHECK_INT(f->fresh_views, cases[c].full);
		CHECK_INT(f->stops_of[0], cases[c].full);
		CHECK_INT(f->stops_of[1], 0);
		/* The same samples either way: the holder's stack every tick, the sleeper's never. */
		CHECK_INT(w.stacks, 10);
		struct prof_stats s = fake_stats(p);
		CHECK_INT(s.samples, 10);
		CHECK_INT(s.thread_samples, 20);
		CHECK_INT(s.active_samples, 10);
		CHECK_INT(s.gil_ticks, 10);
		CHECK_INT(prof_errors(&s), 0);
		CHECK_INT(f->detaches, 1);
		fake_teardown(&w, p, &strs);
	}
}

/*
 * A thread's state is read before the stop (schedstat, then stat for one
 * that ran), but the GIL holder's stat not at all: it is held and active
 * whatever it says. The other runner's is read every tick; in a
 * whole-process pause, which lists the threads only once they are
 * stopped, the holder's too.
 */
static void test_holder_state_not_read(void)
{
	for (int paused = 0; paused < 2; paused++) {
		struct fake_world w;
		struct spy_strtab strs = SPY_STRTAB_INIT;
		fake_setup(&w);
		struct fake_proc *f = &w.procs[0];
		f->th[0].state = 'R';
		f->th[0].scheduled = f->th[1].scheduled = true;
		f->paused_mode = paused;
		struct profiler *p = fake_run(&w, (struct prof_opts){ 0 }, 10, &strs);
		CHECK_INT(fake_stats(p).samples, 10);
		/*
		 * Held one at a time, the holder's one read is its first (new to
		 * the table, in the listing); paused, it is read as often as the
		 * other runner.
		 */
		CHECK(f->th[1].state_reads >= 10);
		CHECK_INT(f->th[0].state_reads, paused ? f->th[1].state_reads : 1);
		/* Held, the holder is kept every tick, its state unread or not. */
		CHECK_INT(w.stacks, 10 + 9);
		fake_teardown(&w, p, &strs);
	}
}

/* A thread without a TID cannot be held alone: the whole process is paused, and read only then. */
static void test_whole_pause(void)
{
	struct fake_world w;
	struct spy_strtab strs = SPY_STRTAB_INIT;
	fake_setup(&w);
	w.procs[0].paused_mode = true;
	struct profiler *p = fake_run(&w, (struct prof_opts){ 0 }, 10, &strs);
	struct fake_proc *f = &w.procs[0];
	CHECK_INT(fake_stats(p).samples, 10);
	CHECK_INT(f->pauses, 10);
	CHECK_INT(f->resumes, 10);
	CHECK_INT(f->reads_running, 0);
	CHECK_INT(f->detaches, 1);
	/* The holder every tick, the R thread from its second; the TID-less sleeper has no thread root and is idle. */
	CHECK_INT(w.stacks, 10 + 9);
	fake_teardown(&w, p, &strs);
}

static void test_nonblocking_and_truncated(void)
{
	struct fake_world w;
	struct spy_strtab strs = SPY_STRTAB_INIT;
	fake_setup(&w);
	w.procs[0].th[1].truncated = true;
	struct profiler *p = fake_run(&w, (struct prof_opts){ .nonblocking = true }, 6, &strs);
	/* Never stopped; a walk that does not reach the root is torn and not kept. */
	CHECK_INT(w.procs[0].pauses + w.procs[0].stops, 0);
	CHECK(!w.procs[0].attached);
	struct prof_stats s = fake_stats(p);
	CHECK_INT(s.errors[SPY_SAMPLE_ERR_TORN], 6);
	CHECK_INT(w.stacks, 6);
	fake_teardown(&w, p, &strs);

	/* Held, a truncated stack is counted and kept. */
	fake_setup(&w);
	w.procs[0].th[1].truncated = true;
	w.procs[0].th[1].own_interp = true;
	p = fake_run(&w, (struct prof_opts){ 0 }, 6, &strs);
	s = fake_stats(p);
	CHECK_INT(s.errors[SPY_SAMPLE_ERR_TRUNCATED], 6);
	CHECK_INT(s.errors[SPY_SAMPLE_ERR_TORN], 0);
	CHECK_INT(w.stacks, 6 + 5);
	fake_teardown(&w, p, &strs);
}

/*
 * An exec seen after a tick's reads marks that tick's stacks and every
 * later one's names_untrusted (read running, a stack may be partly the
 * new program's), in either mode; the image is asked once a tick.
 */
static void test_exec_untrusts_names(void)
{
	for (int nb = 0; nb < 2; nb++) {
		struct fake_world w;
		struct spy_strtab strs = SPY_STRTAB_INIT;
		fake_setup(&w);
		w.procs[0].exec_at_check = 3;
		struct profiler *p = fake_run(&w, (struct prof_opts){ .nonblocking = nb }, 6, &strs);
		CHECK_INT(w.procs[0].image_checks, 3);
		/*
		 * Ticks 1 and 2 trusted; from the third, every stack: the holder's
		 * and the thread running without the GIL's (from its second tick when held).
		 */
		CHECK_INT(w.stacks, nb ? 2 * 6 : 6 + 5);
		CHECK_INT(w.untrusted_stacks, nb ? 2 * 4 : 4 + 4);
		fake_teardown(&w, p, &strs);

		fake_setup(&w);
		p = fake_run(&w, (struct prof_opts){ .nonblocking = nb }, 6, &strs);
		CHECK_INT(w.procs[0].image_checks, 6);
		CHECK_INT(w.untrusted_stacks, 0);
		fake_teardown(&w, p, &strs);
	}
}

/*
 * --nonblocking without -i: the idle thread (no GIL, asleep) is neither
 * walked nor handed on, but still counted as a thread sampled idle; with
 * -i it is walked and kept.
 */
static void test_nonblocking_idle(void)
{
	for (int idle = 0; idle < 2; idle++) {
		struct fake_world w;
		struct spy_strtab strs = SPY_STRTAB_INIT;
		fake_setup(&w);
		struct profiler *p = fake_run(&w, (struct prof_opts){ .nonblocking = true, .idle = idle }, 6, &strs);
		struct prof_stats s = fake_stats(p);
		CHECK_INT(s.thread_samples, 18);
		CHECK_INT(s.active_samples, 12);
		/* The first tick walks all three: no state is known for a thread new to the table. */
		CHECK_INT(prof_root(p)->rt->walks, idle ? 18 : 13);
		CHECK_INT(w.stacks, idle ? 18 : 12);
		CHECK_INT(w.idle_stacks, idle ? 6 : 0);
		/* The GIL holder's state decides nothing: it is never read. */
		CHECK_INT(w.procs[0].th[0].state_reads, 0);
		CHECK(w.procs[0].th[1].state_reads >= 6 && w.procs[0].th[2].state_reads >= 5);
		fake_teardown(&w, p, &strs);
	}
}

static void test_maps_and_dropped(void)
{
	/* A walk cut short by memory mapped since reads the maps and walks again, while still held. */
	struct fake_world w;
	struct spy_strtab strs = SPY_STRTAB_INIT;
	fake_setup(&w);
	w.procs[0].th[1].own_interp = true;
	w.procs[0].broken_until_maps = true;
	/* The opening counts as a maps read: a retry waits 10 ms past it, truncated meanwhile. */
	struct profiler *p = fake_run(&w, (struct prof_opts){ 0 }, 40, &strs);
	struct prof_stats s = fake_stats(p);
	CHECK_INT(w.procs[0].maps_reads, 1);
	CHECK(!w.procs[0].broken_until_maps);
	CHECK(s.errors[SPY_SAMPLE_ERR_TRUNCATED] > 0 && s.errors[SPY_SAMPLE_ERR_TRUNCATED] < 15);
	CHECK_INT(w.stacks, 40 + 39);
	fake_teardown(&w, p, &strs);

	/* A stack the command refuses is counted as dropped. */
	fake_setup(&w);
	w.refuse_stacks = true;
	p = fake_run(&w, (struct prof_opts){ 0 }, 4, &strs);
	s = fake_stats(p);
	CHECK_INT(s.errors[SPY_SAMPLE_ERR_DROPPED], (uint64_t)w.stacks);
	struct spy_buf b = SPY_BUF_INIT;
	prof_format_errors(&s, &b);
	CHECK(strstr(b.buf, "dropped") != NULL);
	spy_buf_release(&b);
	fake_teardown(&w, p, &strs);
}

static void test_end_and_descendants(void)
{
	/* The process exits: the loop ends by itself. */
	struct fake_world w;
	struct spy_strtab strs = SPY_STRTAB_INIT;
	fake_setup(&w);
	w.procs[0].gone_after_ticks = true;
	struct profiler *p = fake_run(&w, (struct prof_opts){ 0 }, 0, &strs);
	CHECK_INT(fake_stats(p).samples, 3);
	fake_teardown(&w, p, &strs);

	/* -s: a Python child is found, attached, sampled under its own root, and detached. */
	fake_setup(&w);
	w.nprocs = 2;
	w.procs[0].children[0] = 200;
	w.procs[0].children[1] = 300;   /* not Python: retried a while, never opened */
	w.procs[0].nchildren = 2;
	w.procs[1].pid = 200;
	w.procs[1].nth = 1;
	w.procs[1].th[0] = (struct fake_thread){ .tid = 200, .state = 'R', .gil = true };
	p = fake_run(&w, (struct prof_opts){ .subprocesses = true }, 20, &strs);
	CHECK_INT(fake_stats(p).processes, 2);
	CHECK(w.procs[1].stops > 0);
	CHECK_INT(w.procs[1].detaches, 1);
	CHECK_INT(w.nseen, 2);
	fake_teardown(&w, p, &strs);
}

static void test_watched_root(void)
{
	/* -s of a root that is no Python process: never attached nor sampled; its Python child is. */
	struct fake_world w;
	struct spy_strtab strs = SPY_STRTAB_INIT;
	struct spy_err err = SPY_ERR_INIT;
	fake_setup(&w);
	w.nprocs = 2;
	w.procs[0].not_python = true;
	w.procs[0].children[0] = 200;
	w.procs[0].nchildren = 1;
	w.procs[1].pid = 200;
	w.procs[1].nth = 1;
	w.procs[1].th[0] = (struct fake_thread){ .tid = 200, .state = 'R', .gil = true };
	struct profiler *p = fake_run(&w, (struct prof_opts){ .subprocesses = true }, 20, &strs);
	CHECK_INT(fake_stats(p).processes, 1);
	CHECK_INT(w.procs[0].attaches + w.procs[0].pauses + w.procs[0].stops, 0);
	CHECK(w.procs[1].stops > 0);
	CHECK(w.nseen == 1 && w.seen_pids[0] == 200);
	CHECK(!strncmp(prof_python(p), "3.12", 4));
	CHECK_INT(prof_check_found(p, &err), 0);
	fake_teardown(&w, p, &strs);

	/* The root exits, its child runs on: so does the session, to the child's end. */
	fake_setup(&w);
	w.nprocs = 2;
	w.procs[0].not_python = true;
	w.procs[0].gone_after_alive = 2;
	w.procs[0].children[0] = 200;
	w.procs[0].nchildren = 1;
	w.procs[1].pid = 200;
	w.procs[1].nth = 1;
	w.procs[1].th[0] = (struct fake_thread){ .tid = 200, .state = 'R', .gil = true };
	p = fake_run(&w, (struct prof_opts){ .subprocesses = true }, 100, &strs);
	CHECK(w.procs[0].alive_calls >= 2);
	CHECK_INT(fake_stats(p).samples, 100);
	fake_teardown(&w, p, &strs);

	/* A tree that ends with no Python in it: the loop ends, and the command is told. */
	fake_setup(&w);
	w.procs[0].not_python = true;
	w.procs[0].gone_after_alive = 2;
	p = fake_run(&w, (struct prof_opts){ .subprocesses = true }, 0, &strs);
	CHECK_INT(w.stacks, 0);
	CHECK_INT(prof_check_found(p, &err), -SPY_ENOPY);
	CHECK(strstr(err.msg, "or its descendants: they exited") != NULL);
	CHECK(!strcmp(prof_python(p), ""));
	fake_teardown(&w, p, &strs);
}

/* What the window callback saw. */
#define MAX_WINDOWS 8
static struct cmd_window windows[MAX_WINDOWS];
static size_t nwindows;

static void on_window(void *ctx, const struct cmd_window *win)
{
	if (nwindows < MAX_WINDOWS) {
		windows[nwindows++] = *win;
	}
}

static void test_windows(void)
{
	struct fake_world w;
	struct spy_strtab strs = SPY_STRTAB_INIT;
	fake_setup(&w);
	fake_install(&w);
	struct prof_opts o = { .rate = 1000, .duration = 1.3 };
	struct profiler *p = NULL;
	struct spy_err err = SPY_ERR_INIT;
	struct timespec t0;
	clock_gettime(CLOCK_REALTIME, &t0);
	CHECK_INT(prof_open(&p, &o, &strs, 100, NULL, &err), 0);
	struct cmd_windows win;
	cmd_windows_start(&win, 1, spy_now_ns(), on_window, NULL);
	struct prof_tick tk;
	enum prof_event ev;
	while ((ev = prof_next(p, &tk)) != PROF_END) {
		struct prof_stats s = fake_stats(p);
		if (ev == PROF_TICK) {
			cmd_windows_tick(&win, &s, tk.start_ns);
		}
		cmd_windows_check(&win, &s, spy_now_ns());
	}
	struct prof_stats s = fake_stats(p);
	cmd_windows_end(&win, &s, s.stop_ns);
	prof_detach(p);
	/* 1.3 s of 1 s windows aligned to whole seconds: two or three of them. */
	CHECK(nwindows >= 2 && nwindows <= 3);
	uint64_t ticks = 0;
	for (size_t i = 0; i < nwindows; i++) {
		CHECK_INT(windows[i].seq, i);
		CHECK(windows[i].until_s > windows[i].from_s);
		CHECK(windows[i].last == (i + 1 == nwindows));
		if (i > 0) {
			CHECK_INT(windows[i].from_s, windows[i - 1].until_s);
			CHECK_INT(windows[i].until_s - windows[i].from_s, 1);
		}
		ticks += windows[i].ticks;
	}
	CHECK(windows[0].from_s == t0.tv_sec || windows[0].from_s == t0.tv_sec + 1);
	CHECK_INT(ticks, s.samples);
	fake_teardown(&w, p, &strs);
}

/*
 * What a profiled process costs spy's heap is sized to the process, not
 * to spy's bounds: an agent holds hundreds of processes for days, and
 * tables of SPY_MAX_THREADS threads and SPY_MAX_PY_DEPTH frames each (700
 * KiB a process, and cleared, so resident, wherever the heap reused
 * memory) made its RSS grow with every process it had walked once. A
 * process of three threads one frame deep, walked every tick, holds under
 * PROCESS_HEAP_MAX; closed, it holds nothing.
 */
#define PROCESS_HEAP_MAX (192u << 10)

/* Where the probe's block goes: a block nobody reads would be optimized away, and mallinfo2 with it. */
static void *volatile heap_probe;

static size_t heap_in_use(void)
{
	struct mallinfo2 m = mallinfo2();
	return m.uordblks + m.hblkhd;
}

static void test_heap_per_process(void)
{
	struct fake_world w;
	struct spy_strtab strs = SPY_STRTAB_INIT;
	fake_setup(&w);
	fake_install(&w);
	/* Whether mallinfo2 sees this process's allocations (a sanitizer's allocator is not glibc's). */
	size_t base = heap_in_use();
	heap_probe = malloc(PROCESS_HEAP_MAX);
	bool counted = heap_in_use() >= base + PROCESS_HEAP_MAX;
	free(heap_probe);
	if (!counted) {
		printf("note: mallinfo2 does not see this build's allocations (a sanitizer's allocator): "
		       "the heap bound is not checked\n");
	}
	/* A first run warms what lives as long as spy (the logger, stdio). */
	for (int round = 0; round < 2 && counted; round++) {
		size_t before = heap_in_use();
		struct profiler *p = NULL;
		struct spy_err err = SPY_ERR_INIT;
		struct prof_opts o = { .rate = 1000, .duration = -1 };
		CHECK_INT(prof_open(&p, &o, &strs, w.procs[0].pid, NULL, &err), 0);
		struct prof_tick tk;
		for (int n = 0; n < 20;) {
			n += prof_next(p, &tk) == PROF_TICK;
		}
		size_t held = heap_in_use() - before;
		prof_detach(p);
		prof_close(p);
		spy_strtab_release(&strs);
		size_t after = heap_in_use();
		if (round == 1) {
			printf("heap per process: %zu KiB while profiled, %zd bytes left after closing\n", held >> 10,
			       (ssize_t)(after - before));
			CHECK(held < PROCESS_HEAP_MAX);
			CHECK(after <= before);
		}
	}
	fakepy_free(w.procs[0].fp);
}

/*
 * Without --native, the threads no interpreter lists are not walked or
 * stopped; their CPU time is read at the first reading (after the first
 * tick) and at the end, and the difference counted; one new since the
 * first reading counts from its start.
 */
static void test_unsampled(void)
{
	struct fake_world w;
	struct spy_strtab strs = SPY_STRTAB_INIT;
	fake_setup(&w);
	struct fake_proc *f = &w.procs[0];
	f->nnative = 2;
	f->native_tids[0] = 900;
	f->native_tids[1] = 901;
	struct profiler *p = fake_run(&w, (struct prof_opts){ 0 }, 5, &strs);
	struct prof_stats s = fake_stats(p);
	/* 900: read at 100 ms, then 200 ms; 901: new, read once at 100 ms. */
	CHECK_INT(f->cpu_reads[0], 2);
	CHECK_INT(f->cpu_reads[1], 1);
	CHECK_INT(f->python_cpu_reads, 0);
	CHECK_INT(s.unsampled_threads, 2);
	CHECK_INT(s.unsampled_ns, 200000000ull);
	CHECK_INT(f->stops_of[0], 5);
	fake_teardown(&w, p, &strs);
}

int main(void)
{
	/* Which threads are stopped, not how fast this machine walks: the
	 * holder's hold takes on every frozen thread (see frozen_budget_ns). */
	setenv("SPY_TEST_FROZEN_BUDGET_MS", "10000", 1);
	test_one_at_a_time();
	test_frozen_behind_holder();
	test_read_running();
	test_read_running_chain();
	test_read_running_fresh();
	test_offcpu_held();
	test_sleepers_not_stopped();
	test_still_process_repeated();
	test_holder_state_not_read();
	test_whole_pause();
	test_nonblocking_and_truncated();
	test_nonblocking_idle();
	test_exec_untrusts_names();
	test_maps_and_dropped();
	test_end_and_descendants();
	test_watched_root();
	test_windows();
	test_heap_per_process();
	test_unsampled();
	return check_done();
}

#else

#include <stdio.h>

int main(void)
{
	printf("SKIP: the profiler's fake backend needs a build with -Dtest_hooks=true\n");
	return 77;
}

#endif
