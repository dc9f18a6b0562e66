/*
 * The fake backend test-profiler-tick drives the profiler through: fakepy
 * images (tests/lib/fakepy.h) behind a fake process standing in for ptrace
 * and /proc, which counts every stop, resume, view and read, and checks
 * that no two threads are held at once. Test builds only (SPY_TEST_HOOKS:
 * the profiler's prof_test_open).
 */
#ifndef SPY_TESTS_LIB_FAKETICK_H
#define SPY_TESTS_LIB_FAKETICK_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/strtab.h"
#include "profiler/profiler.h"
#include "tests/lib/fakepy.h"

#define MAX_FAKE_THREADS 4

struct fake_thread {
	pid_t tid;
	char state;          /* what its stat file says: 'R', 'S' */
	bool gil;
	bool truncated;      /* its walk meets unmapped memory after its frame */
	bool scheduled;      /* put on a CPU between any two refreshes (never slept) */
	bool runs_in_read;   /* scheduled while its stack is read running */
	bool offcpu;         /* a stop with a wait finds it off a CPU (stop_thread 1) */
	bool own_interp;     /* in a subinterpreter with a GIL of its own */
	bool last_holder;    /* (not holding it) the last thread to hold its GIL */
	int switch_reads;    /* this many reads of its frame, unstopped, see its GIL change hands */
	spy_addr_t tstate, frame;
	spy_addr_t switches; /* its GIL's switch count */
	uint64_t seen_switches; /* the count as the current view first read it */
	bool seen;           /* read in the current view */
	int state_reads;     /* its stat file read (task_refresh) */
};

struct fake_proc {
	pid_t pid;
	struct fake_thread th[MAX_FAKE_THREADS];
	size_t nth;
	struct fakepy *fp;
	struct spy_mem mem;        /* fakepy's, its reads counted */
	bool paused, attached, gone_after_ticks;
	int pauses, resumes, detaches, maps_reads, opens_tasks, tracks;
	int reads_running;         /* a frame read while attached, nothing stopped, in a paused-mode run */
	int count_reads;           /* a GIL switch count read from the target (no view) */
	bool paused_mode;          /* a thread without a TID: every tick pauses the whole process */
	bool broken_until_maps;    /* th[1]'s frame chain is cut until the maps are read again */
	pid_t children[4];
	size_t nchildren;
	pid_t held;                /* the thread stopped now, or 0 */
	pid_t gone_tid;            /* stop_thread says this one exited */
	int stops, first_stop_not_holder, waitless_stops, offcpu_holds;
	int stops_of[MAX_FAKE_THREADS];
	int tick_stops, most_tick_stops;   /* threads stopped since the last track; the most in a tick */
	bool no_switches;          /* the GIL's switch count cannot be read (as on 2.7, 3.6, free-threaded) */
	bool in_tick;              /* a stop happened since the last track */
	bool no_still;             /* the backend cannot tell a thread stayed asleep */
	bool only_python;          /* the tracer seizes the Python threads alone (traces_only can say yes) */
	/*
	 * Threads the tracer seizes that no interpreter lists (ascending, after
	 * the Python ones' TIDs): each reading of one's CPU time gives
	 * 100 ms more than the last; the second appears after the first reading.
	 */
	pid_t native_tids[2];
	size_t nnative;
	int cpu_reads[2];
	int python_cpu_reads;
	int fresh_views;
	bool view;                 /* a memory view is on: a line read again is served as first read */
	bool not_python;           /* opened, it has no runtime (a shell -s watches) */
	int attaches, alive_calls;
	int gone_after_alive;      /* > 0: gone once alive() was asked this many times */
	int image_checks;          /* same_image asked */
	int exec_at_check;         /* > 0: from this same_image on, an exec replaced its image */
};

struct fake_world {
	struct fake_proc procs[3];
	size_t nprocs;
	int stacks, idle_stacks;
	int untrusted_stacks;      /* of those, marked names_untrusted */
	pid_t seen_pids[8];
	size_t nseen;
	bool refuse_stacks;
};

/* One process (pid 100): the GIL holder, a thread running without it, an idle one. */
void fake_setup(struct fake_world *w);
/* Images for w's processes; the profiler opens them from now on. */
void fake_install(struct fake_world *w);
/* fake_install, then ticks ticks at 1 kHz (0: until the loop ends by itself). */
struct profiler *fake_run(struct fake_world *w, struct prof_opts o, int ticks, struct spy_strtab *strs);
void fake_teardown(struct fake_world *w, struct profiler *p, struct spy_strtab *strs);
struct prof_stats fake_stats(const struct profiler *p);

#endif
