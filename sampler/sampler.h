/*
 * sampler: reaching a live target. A struct proc is one process: its
 * identity (/proc/PID/{cmdline,exe}), its mappings, its threads, a
 * struct spy_mem that reads its memory (process_vm_readv, falling back to
 * /proc/PID/mem), and ptrace control to pause and resume every thread.
 *
 * The sampling engine (engine.h) runs on top: one loop for record, top
 * and dump, reaching a process through a handle whose backend (live or
 * core, process.c) says what it can do.
 *
 * Ptrace discipline: threads are attached with PTRACE_SEIZE and stopped with
 * PTRACE_INTERRUPT, never PTRACE_ATTACH/SIGSTOP. ptrace(2) guarantees that
 * when the tracer dies its tracees are detached and restarted unless they are
 * in group-stop, and a SIGSTOP-based attach is how they would get there; so
 * even a SIGKILL of spy leaves the target running. SIGINT and SIGTERM only set
 * proc_stop_requested (see proc_install_stop_handlers); whoever holds a paused
 * proc checks it and calls proc_detach(), and proc_free() always detaches.
 */
#ifndef SPY_SAMPLER_SAMPLER_H
#define SPY_SAMPLER_SAMPLER_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/err.h"
#include "common/mem.h"
#include "common/wait.h"

struct proc;

/*
 * One thread as sampler knows it: listed from /proc (tid, state, comm;
 * wait unknown until proc_task_wait reads it), or from a core's notes
 * (tid and wait; state from the wait, comm empty).
 */
struct proc_thread {
	pid_t tid;
	char state;      /* the state letter of /proc/PID/task/TID/stat: R, S, D, t, ... */
	char comm[17];   /* /proc/PID/task/TID/comm, without the newline */
	struct spy_wait wait;
};

/*
 * Set by the SIGINT/SIGTERM handler to the signal's number; the one stop flag
 * spy allows.
 */
extern volatile sig_atomic_t proc_stop_requested;

/*
 * Install SIGINT, SIGTERM and SIGHUP handlers that only set proc_stop_requested.
 * Installed without SA_RESTART so that a blocking wait returns EINTR and the
 * caller can notice the flag.
 */
void proc_install_stop_handlers(void);
/*
 * From now on SIGHUP does not stop: it is only noted, for proc_hup_seen
 * (which clears it) -- a daemon's choice (the agent). Every later
 * proc_install_stop_handlers leaves SIGHUP to it.
 */
void proc_ignore_hup(void);
bool proc_hup_seen(void);

/*
 * Open pid: check that it exists (else -SPY_ENOPROC), read its command line,
 * executable and mappings, and check that its memory can be read (else
 * -SPY_EPERM with a remedy naming ptrace_scope / CAP_SYS_PTRACE).
 */
int proc_open(struct proc **out, pid_t pid, struct spy_err *err);
/* Detach from every thread if attached, then free. NULL is a no-op. */
void proc_free(struct proc *p);

pid_t proc_pid(const struct proc *p);
/* The pid as the process's own PID namespace numbers it (its pid where that is spy's). */
pid_t proc_ns_pid(const struct proc *p);
/* A TID as the process numbers it (its memory's) to spy's; 0 if no thread has it. */
pid_t proc_host_tid(struct proc *p, pid_t tid);
/* The arguments joined by single spaces ("" for kernel threads). */
const char *proc_cmdline(const struct proc *p);
/* readlink(/proc/PID/exe), " (deleted)" stripped; "" if unreadable. */
const char *proc_exe(const struct proc *p);

/*
 * The memory reader. Valid until proc_free(); its maps are the ones read by
 * the last proc_open()/proc_read_maps().
 */
const struct spy_mem *proc_mem(const struct proc *p);
int proc_read_maps(struct proc *p, struct spy_err *err);

/* Re-read the thread list from /proc/PID/task (tids ascending). */
int proc_list_threads(struct proc *p, struct spy_err *err);
/* The list read by the last proc_list_threads(); valid until the next call. */
const struct proc_thread *proc_threads(const struct proc *p, size_t *n);

/*
 * A thread watched across samples (tasks.c): its files stay open, so a
 * refresh costs a pread() or two: stat (the state letter) and, for a
 * sampler that pauses, schedstat (CPU time and times scheduled), opened on
 * first use; with schedstat, stat stays open only once the thread has been
 * found running (see proc_task_refresh). Descriptors stay open only within a budget that keeps
 * PROC_FD_RESERVE of the soft limit free (raised to the hard limit at the
 * first proc_open): past it a file is opened for each read.
 * An open that fails all the same leaves the state unknown and sets failed:
 * the caller counts it, and proc_task_active() says true rather than let a
 * thread pass for idle because spy ran out of descriptors.
 */
struct proc_task {
	pid_t tid;
	int dirfd;                 /* the proc's /proc/PID, borrowed */
	int stat_fd;               /* -1: opened for each read */
	int sched_fd;              /* schedstat; -1: opened for each read */
	char state;                /* the state letter at the last refresh; 0 if unknown */
	bool ran;                  /* see proc_task_refresh() */
	bool failed;               /* the last refresh could not open a file */
	bool slept;                /* with_cpu: not on a CPU since the previous refresh (see below) */
	uint64_t cpu_ns, read_ns;  /* schedstat's run time at the last R reading, and when */
	uint64_t run_ns, pcount;   /* schedstat's run time and times scheduled, last read */
	/* PROC_TASK_DEFER: the state read owed, and what the schedstat read before it found. */
	bool owed, owed_sched, owed_sched_gone;
	uint64_t owed_now, owed_cpu;
};

#define PROC_FD_RESERVE 32

void proc_task_open(const struct proc *p, struct proc_task *t, pid_t tid);
void proc_task_close(struct proc_task *t);
/*
 * Re-read the state letter. A pause interrupts sleeping syscalls, so right
 * after one a sleeper can read R for a while: with_cpu (for a sampler that
 * pauses) then also reads schedstat, and ran says whether the thread ran a
 * real share of the time since that was last read. Without with_cpu, or in
 * any state but R, ran is true.
 *
 * with_cpu reads schedstat first, and a thread that was not running at the
 * previous refresh and has not been put on a CPU since (proc_task_slept)
 * keeps its state without stat being read: slept is then set. On a pool of
 * idle threads that turns a stat read per thread a tick (the kernel formats
 * 52 fields) into a schedstat read (3).
 */
#define PROC_TASK_CPU 1u    /* with_cpu, above */
#define PROC_TASK_DEFER 2u  /* leave the state read to proc_task_settle */
void proc_task_refresh(struct proc_task *t, unsigned how);
/*
 * The state read a PROC_TASK_DEFER refresh left owed (nothing if none):
 * made now, or, runs, not made at all: the caller knows the thread runs
 * (it holds its GIL), and its state is taken as a running R. A sampler
 * that holds only the GIL holder reads schedstat before it lists the
 * threads, stat after, and the holder's not at all: on a one-thread
 * target, one read a tick fewer.
 */
void proc_task_settle(struct proc_task *t, bool runs);
/*
 * Whether a thread read R is active: a pause interrupts sleeping syscalls,
 * and a thread restarting one stays runnable (R) until a CPU is free,
 * which on a loaded machine can outlast a tick; so an R is trusted when
 * the thread was R at the previous refresh too (was: the state letter
 * then; states are read before anything is stopped, so that one saw no
 * pause of its own tick), or it ran a real share of the elapsed_ns since
 * its previous R reading. A thread starved of CPU, by load or by its
 * cgroup's cpu.max, runs only a sliver of each tick and is active all the
 * same: it reads R tick after tick, waiting for a CPU.
 *
 * Not used: schedstat's run_delay (the runqueue wait). The kernel adds a
 * wait only when it ends, so a starved thread's shows in few ticks; and a
 * sleeper that a hold woke has waited for a CPU too, so on a loaded
 * machine "waited longer than it ran" called sleepers busy
 * (test_kinds: in_sleep 81% idle, wanted 90).
 */
bool proc_task_ran(char was, uint64_t ran_ns, uint64_t elapsed_ns);
/*
 * The rule behind slept, pure: t's last refresh read a state that is not R
 * (and had read schedstat before it), and schedstat now says the same run
 * time and the same number of times scheduled. The kernel counts a
 * schedule-in as it happens, so an unchanged count means the thread has
 * not run since, and its memory (its Python stack) is as it was then.
 */
bool proc_task_slept(const struct proc_task *t, uint64_t run_ns, uint64_t pcount);
/*
 * Whether t, read asleep by its last with_cpu refresh, has still not been
 * scheduled since: one schedstat read, t unchanged. False when unknown.
 */
bool proc_task_still(struct proc_task *t);
/* R, and (see above) really running; or unknown because a file would not open. */
bool proc_task_active(const struct proc_task *t);
/* task/TID/stat's utime + stime in ns into *ns; < 0 (-SPY_EGONE: exited) if unread. */
int proc_task_cpu(const struct proc *p, pid_t tid, uint64_t *ns);
/* task/TID/comm without its newline ("" if unreadable) into buf. */
void proc_task_comm(const struct proc *p, pid_t tid, char *buf, size_t size);
/* False once the process has exited (zombie or reaped); one pread of a kept-open stat. */
bool proc_alive(struct proc *p);

/*
 * The process's resources at one moment (record --slice, -f chrome): what
 * was read is in known (PROC_RES_*); the rest is unknown, never an error.
 * CPU, RSS and threads come from one pread of the kept-open stat, I/O from
 * a kept-open io (often refused: then unknown for the whole run), context
 * switches from every live thread's task/TID/status (at most
 * SPY_MAX_THREADS): a thread that has exited no longer counts, so the sum
 * can fall.
 */
enum {
	PROC_RES_CPU = 1 << 0,
	PROC_RES_RSS = 1 << 1,
	PROC_RES_THREADS = 1 << 2,
	PROC_RES_CTXSW = 1 << 3,
	PROC_RES_IO = 1 << 4,
};
struct proc_resources {
	unsigned known;
	uint64_t utime, stime;   /* clock ticks (the parser), ns (proc_read_resources) */
	uint64_t rss;            /* pages (the parser), bytes (proc_read_resources) */
	uint64_t threads;
	uint64_t ctxsw;          /* voluntary + involuntary, summed over the live threads */
	uint64_t read_bytes, write_bytes;   /* storage I/O: io's read_bytes, write_bytes */
};
void proc_read_resources(struct proc *p, struct proc_resources *out);
/* The parsers it uses (fuzzed): each sets its fields and returns the PROC_RES_* bits it read, 0 if malformed. */
unsigned proc_parse_stat_resources(const char *text, size_t len, struct proc_resources *out);
/* A status file's voluntary_ctxt_switches + nonvoluntary_ctxt_switches into *sum. */
unsigned proc_parse_status_ctxsw(const char *text, size_t len, uint64_t *sum);
unsigned proc_parse_io(const char *text, size_t len, uint64_t *read_bytes, uint64_t *write_bytes);
/*
 * Every descendant of pid (children, theirs, ...: breadth first, at most
 * SPY_MAX_THREADS) from /proc/PID/task/TID/children, into *out (free()).
 * A snapshot of processes that may exit or be reused at any time: open
 * one with proc_open() before trusting it.
 */
size_t proc_list_descendants(pid_t pid, pid_t **out);
/* readlink(/proc/PID/exe) into buf ("" if unreadable), for telling an exec happened. */
void proc_exe_of(pid_t pid, char *buf, size_t size);

/*
 * PTRACE_SEIZE every thread. -SPY_EPERM (with remedy) if refused. ptrace ties
 * tracees to the tracing thread: from here to proc_detach(), call the ptrace
 * functions below from the thread that attached.
 */
int proc_attach(struct proc *p, struct spy_err *err);
/*
 * Stop every seized thread (PTRACE_INTERRUPT, then wait for each stop).
 * Threads that appear while pausing are seized and stopped too; threads that
 * exit are dropped. Returns -SPY_EINTR if proc_stop_requested was set while
 * waiting (the threads are then resumed before returning).
 */
int proc_pause(struct proc *p, struct spy_err *err);
/* Restart every stopped thread, re-delivering any signal that arrived while it was stopped. */
int proc_resume(struct proc *p, struct spy_err *err);
/*
 * One thread at a time, the rest running. proc_track, once a tick before
 * the threads are stopped: restart threads that stopped on their own and
 * seize threads that appeared (-SPY_EGONE once all are gone or it exec'd);
 * when no tracee has anything to report and task/'s link count has not
 * moved, that is two syscalls, whatever the number of threads.
 * proc_stop_thread: stop thread tid (seized, not paused, none held) and
 * serve reads from a fresh view while it is held: 0; -SPY_ENOPROC if it is
 * not a thread we seized, -SPY_EGONE if it has exited, -SPY_EBOUND if it
 * did not stop in time, -SPY_EINTR. With wait_ns (0: up to the pause's
 * timeout), a thread interrupted but not stopped that long is off a CPU,
 * and cannot run an instruction of its own before it stops: held as it
 * is, 1 (proc_track and proc_poll collect and restart it once it stops).
 * proc_resume_thread: restart the thread held, if any (and stopped).
 */
int proc_track(struct proc *p);
/*
 * Whether the threads seized are exactly tids (n distinct), all running
 * as far as ptrace goes: none stopped, interrupted or owed a signal. A
 * caller that knows each of them has not been on a CPU since it last
 * looked (schedstat) then knows the whole process has not either.
 */
bool proc_traces_only(struct proc *p, const pid_t *tids, size_t n);
/*
 * The threads seized and not known gone (ascending, at most max) into
 * out: every thread of the process as of the last proc_track or pause,
 * without a listing of task/ of its own.
 */
size_t proc_tids(const struct proc *p, pid_t *out, size_t max);
int proc_stop_thread(struct proc *p, pid_t tid, uint64_t wait_ns);
void proc_resume_thread(struct proc *p);
/*
 * proc_chld_hold(true): the calling thread, the one that samples, keeps
 * SIGCHLD blocked and takes it where it waits: for a stop, and for the
 * next tick (ticker_wait, which then ends early at a tracee's report, as
 * a handler's interrupted sleep did). proc_chld_drain, between ticks and
 * before looking for reports (proc_poll), throws away the SIGCHLD the
 * thread's own stops raised, so that only a report after the look ends
 * the sleep. false: back as it was. Returns whether it is held;
 * proc_chld_held says so too.
 */
bool proc_chld_hold(bool on);
bool proc_chld_held(void);
void proc_chld_drain(void);
/*
 * With SIGCHLD held, sleep ns or until one comes: 1 (slept it all: no
 * tracee reported since the last proc_chld_drain and look, so the next
 * tick's proc_track skips its own), 0 (a SIGCHLD), -SPY_EINTR (another
 * signal).
 */
int proc_chld_sleep(uint64_t ns);
/* Detach from every thread (resuming any that is stopped). Idempotent. */
void proc_detach(struct proc *p);
bool proc_is_paused(const struct proc *p);
/*
 * While attached and not paused, restart threads that stopped on their own.
 * A seized thread stops for every signal sent to it until its tracer restarts
 * it; proc_pause() and proc_detach() deliver such signals, so without this a
 * signal to the target waits until the next pause. Call it while waiting
 * between ticks to bound that delay. Never blocks. Returns 0, or -SPY_EGONE
 * once every thread has exited.
 */
int proc_poll(struct proc *p);
/*
 * True if the sampler reaped the exit of the thread-group leader, with its
 * wait status in *status (may be NULL). When spy started the target it is
 * both parent and tracer, and the sampler's waitpid() consumes that status:
 * this is then the only place to learn it.
 */
bool proc_exit_status(const struct proc *p, int *status);
/*
 * True once a thread of the traced process called exec: what was resolved
 * in the old image (the interpreter, every address) is void, so
 * proc_pause and proc_poll then say -SPY_EGONE and the caller reports it
 * rather than walk the new program with old addresses. Seen only while
 * attached (not with --nonblocking).
 */
bool proc_execed(const struct proc *p);
/*
 * Whether its address space is still the one proc_open found, attached or
 * not: no exec since (one pread of a word). False also when that cannot
 * be told (the word is no longer mapped): the caller then trusts nothing
 * read as the same program's.
 */
bool proc_same_image(const struct proc *p);

/*
 * The one parser of a /proc/.../stat line: comm is skipped from its last
 * ')' (a comm may hold spaces and ')'), then field 3 must be one letter;
 * fields 4 to upto (numbered as in proc(5), at most PROC_STAT_FIELDS - 1)
 * that are unsigned decimals are kept, the state alone read when upto is
 * PROC_STAT_STATE. false (state 0) when malformed.
 */
enum {
	PROC_STAT_STATE = 3,
	PROC_STAT_FLAGS = 9,
	PROC_STAT_UTIME = 14,
	PROC_STAT_STIME = 15,
	PROC_STAT_THREADS = 20,
	PROC_STAT_STARTTIME = 22,
	PROC_STAT_VSIZE = 23,
	PROC_STAT_RSS = 24,
	PROC_STAT_FIELDS = 25,
};
struct proc_stat {
	char state;
	uint32_t have;                     /* bit i: field[i] was read */
	uint64_t field[PROC_STAT_FIELDS];  /* valid where have says so */
};
bool proc_parse_stat(const char *text, size_t len, unsigned upto, struct proc_stat *out);
static inline bool proc_stat_has(const struct proc_stat *st, unsigned field)
{
	return field < PROC_STAT_FIELDS && (st->have >> field & 1u);
}
/* The state letter alone, or 0 if malformed. */
char proc_parse_stat_state(const char *text, size_t len);
/*
 * Parse task/TID/schedstat: run time, time spent waiting on a runqueue
 * (ns; the kernel adds a wait when it ends, as the thread gets a CPU) and
 * times scheduled; false if malformed.
 */
bool proc_parse_schedstat(const char *text, size_t len, uint64_t *run_ns, uint64_t *delay_ns, uint64_t *pcount);
/*
 * Parse /proc/PID/maps text into a sorted array of spy_map (paths copied into
 * *paths_out storage owned by the caller, freed with free()). Exposed for unit
 * tests. Returns number of maps or a negative code.
 */
int proc_parse_maps(const char *text, size_t len, struct spy_map **maps_out, size_t *n_out,
		    char **paths_out, struct spy_err *err);

/*
 * What a thread is blocked in, for dump (tstate.c): the state letter, the
 * syscall from task/TID/syscall and, for a blocking futex wait, the futex
 * word's address (the caller decides whether that is the GIL or a lock).
 * Read it before pausing: a ptrace stop interrupts the wait. One look: a
 * thread waiting for the GIL wakes every switch interval (5 ms) and reads R
 * for a moment, so a caller that must tell looks again at those a little
 * later.
 */
void proc_task_wait(const struct proc *p, pid_t tid, struct spy_wait *out);
/*
 * Where thread tid sleeps in a syscall: its user stack pointer and pc from
 * task/TID/syscall (the registers saved at the syscall's entry, read
 * without a stop). 1 if blocked in a syscall, 0 if not (running, outside
 * one, gone).
 */
int proc_task_blocked_at(const struct proc *p, pid_t tid, spy_addr_t *sp, spy_addr_t *pc);
/* The parser it uses: "NR ARG1..ARG6 SP PC". */
int proc_parse_blocked_at(const char *text, spy_addr_t *sp, spy_addr_t *pc);
/* The pure part, for unit tests: classify a state letter and syscall text. */
void proc_classify_wait(char state, const char *syscall_text, struct spy_wait *out);
/* Then note the kernel function it sleeps in (task/TID/wchan's text). */
void proc_wait_note_wchan(struct spy_wait *w, const char *wchan);

/*
 * A core file (core.c): its memory and mappings (PT_LOAD segments, named by
 * the NT_FILE note; bytes a core leaves out of a file-backed mapping are
 * read from the file), its threads (NT_PRSTATUS) with what each was blocked
 * in (from its registers, x86-64; else unknown), and the command
 * (NT_PRPSINFO). exe, when not NULL, is the executable that dumped it,
 * standing in for the one the core names. -SPY_EIO if unreadable,
 * -SPY_EFORMAT if not a core or truncated.
 */
struct core;
int core_open(struct core **out, const char *path, const char *exe, const char *root,
	      struct spy_err *err);
void core_free(struct core *c);
/* Valid until core_free(). */
const struct spy_mem *core_mem(const struct core *c);
pid_t core_pid(const struct core *c);
const char *core_cmdline(const struct core *c);
/* The executable's path as the core names it (--exe if it names none; "" if unknown). */
const char *core_exe(const struct core *c);
/*
 * Open a file the core names (a path of its maps) for reading, under the
 * core's rules: the file --exe names for the executable, a path resolved
 * inside --root, or the path itself only if its GNU build-id is the one the
 * core recorded; never a symlink outside the root, a FIFO or a device. A
 * new descriptor (the caller closes it), or -errno (-ESTALE: the file is
 * another build; -EPERM: nothing vouches for it).
 */
int core_open_file(struct core *c, const char *path);
const struct proc_thread *core_threads(const struct core *c, size_t *n);
/* --root as an O_PATH descriptor (the core's), or -1 without. */
int core_root(const struct core *c);
/*
 * Thread tid's general registers as its NT_PRSTATUS note saved them (NULL
 * if the core has no such thread), and in *pac_mask the bits of a code
 * address that its notes say carry an authentication code (0: none).
 */
struct spy_regs;
const struct spy_regs *core_regs(const struct core *c, pid_t tid, uint64_t *pac_mask);
/*
 * Parse an NT_FILE note's descriptor into maps (lo, hi, offset, path; paths
 * point into *paths). Exposed for unit tests; -SPY_EFORMAT if malformed.
 */
int core_parse_nt_file(const unsigned char *desc, size_t len, struct spy_map **maps, size_t *n,
		       char **paths, struct spy_err *err);

/*
 * The tick loop and launching a program (sampler/ticker.c, sampler/spawn.c).
 *
 * A ticker keeps absolute deadlines start + k * period on CLOCK_MONOTONIC,
 * so a slow sample never shifts the ones after it. When the caller falls
 * more than TICKER_SLACK_NS (or a whole period, if longer) behind, the
 * deadlines that passed are skipped and counted in missed rather than
 * sampled in a burst: for any run, taken + missed is the number of
 * deadlines that fell in it.
 */
#define TICKER_SLACK_NS (10 * 1000 * 1000ull)
/*
 * Periods shorter than this (rates above 20 kHz) are waited for by
 * spinning on the clock rather than sleeping. A timed sleep here wakes
 * 10-15 us late even with spy's timer slack at 1 ns (65 us with the
 * default 50 us slack), and the sleep and wake-up cost a few us of CPU
 * more: with a sample taking 3-10 us, a period under 50 us has no room
 * for a sleep that saves anything, and sleeping only makes the ticks late.
 * The price is a core kept busy for as long as the recording lasts.
 */
#define TICKER_SPIN_PERIOD_NS (50 * 1000ull)
struct ticker {
	uint64_t start_ns;   /* the first deadline */
	uint64_t period_ns;
	bool spin;           /* period_ns < TICKER_SPIN_PERIOD_NS: ticker_wait spins */
	uint64_t next;       /* index of the next deadline */
	uint64_t taken;      /* deadlines handed to the caller */
	uint64_t missed;     /* deadlines skipped because the caller was late */
};

/* Period from a rate; hz must be > 0. The first deadline is now_ns. */
void ticker_init(struct ticker *t, double hz, uint64_t now_ns);
/* The next deadline, in CLOCK_MONOTONIC nanoseconds. */
uint64_t ticker_deadline(const struct ticker *t);
/*
 * Called once the tick at ticker_deadline() has been sampled, with now_ns
 * the time the sample finished: move to the next deadline, and if that one
 * is already the slack (above) or more in the past, skip to the latest
 * deadline <= now_ns (to be taken late), counting the skipped ones in
 * missed. Pure arithmetic, for unit tests.
 */
void ticker_take(struct ticker *t, uint64_t now_ns);
/*
 * Sleep (clock_nanosleep, TIMER_ABSTIME) until the next deadline or for at
 * most max_ns, whichever comes first, so the caller can do housekeeping
 * (proc_poll) while waiting for a slow tick; with SIGCHLD held
 * (proc_chld_hold) the sleep waits for it too (sigtimedwait). A spinning
 * ticker (t->spin) reads the clock in a loop instead, looking at
 * proc_stop_requested each time round. Returns 1 when the deadline has
 * been reached (call ticker_take), 0 when max_ns ran out first or a
 * SIGCHLD came, -SPY_EINTR when a signal interrupted the sleep or a stop
 * was requested while spinning. *now_out (unless NULL): the clock as last
 * read, when nothing slept since (a deadline already past, or spun for),
 * else 0; a caller behind its ticks reads the clock once a tick, not twice.
 */
int ticker_wait(struct ticker *t, uint64_t max_ns, uint64_t *now_out);

/*
 * Launching `-- PROGRAM ARGS`: fork and execvp, reporting an exec failure
 * (program not found) as an error here rather than as a child that exits
 * 127. The child keeps spy's process group and terminal, so Ctrl-C reaches
 * it from the terminal on its own. spawn_install_signals() replaces the stop
 * handlers with ones that also note whether the signal came from the
 * terminal (si_code SI_KERNEL): only a signal sent to spy alone (kill, a
 * supervisor's SIGTERM) needs forwarding with spawn_forward().
 */
struct spawn {
	pid_t pid;
	bool reaped;
	int status;    /* wait status once reaped */
};

int spawn_start(struct spawn *s, char *const argv[], struct spy_err *err);
/*
 * A launch that failed after the program started (no interpreter found,
 * cannot attach): the program must not run on unsupervised. SIGTERM, up to
 * a second to exit, then SIGKILL; reaped. Nothing if already reaped.
 */
void spawn_abandon(struct spawn *s);
/* Set up SIGINT/SIGTERM/SIGHUP for launch mode (see above); sets proc_stop_requested too. */
void spawn_install_signals(void);
/* Send the child the stop signal received, unless the terminal already sent it. */
void spawn_forward(struct spawn *s);
/*
 * Reap the child if it has exited (never blocks unless block is set).
 * Returns true once it has been reaped, with the wait status in s->status.
 * A blocking wait returns false early when a signal interrupts it.
 */
bool spawn_reap(struct spawn *s, bool block);

/*
 * The page cache behind proc_mem() (sampler/memcache.c). A read of at most
 * 16 KiB is served from cached 4 KiB lines of the target when they hold it,
 * and otherwise fetches those whole lines with one syscall; a walk issues
 * many small reads close together, and one process_vm_readv costs about the
 * same for 64 bytes as for a page. Larger reads, and reads whose lines cannot
 * all be fetched (the exact read is then retried alone), are never cached.
 *
 * Cached data is a view of the target at one moment, so it must be dropped
 * whenever the target may have run since:
 *   - proc_pause() starts a fresh view, served until the threads are let
 *     run again (proc_resume(), an interrupted pause, proc_detach()), which
 *     turns the cache off;
 *   - while the target runs, the cache is off (every read goes to the
 *     target) until proc_mem_invalidate(), which drops every cached line and
 *     turns it on: a --nonblocking sampler calls it once per sample, and
 *     each sample then sees lines fetched during it only.
 * Not thread-safe: one thread reads a proc at a time, as before.
 */
struct proc_mem_stats {
	uint64_t reads;     /* calls to the reader */
	uint64_t hits;      /* served from cached lines, no syscall */
	uint64_t misses;    /* fetched whole lines (one syscall) */
	uint64_t uncached;  /* read exactly: cache off, read too large, or a failed fetch */
	uint64_t fallbacks; /* of the misses, those whose fetch fell short (also uncached) */
	uint64_t syscalls;  /* process_vm_readv / pread / preadv issued by the reader */
	uint64_t prefetched; /* lines fetched ahead by proc_mem_prefetch's views */
	uint64_t trimmed;   /* lines given back to the kernel by proc_mem_trim() */
};

/* Drop every cached line (O(1)) and serve later reads from a fresh view. */
void proc_mem_invalidate(struct proc *p);
/*
 * The same, for a walk of thread tid alone, running: the view fetches
 * ahead what tid's last view read, as a hold of it does, not what the
 * last whole-target view read (a thread read running after another would
 * otherwise fetch the other's frames, and miss its own).
 */
void proc_mem_thread_view(struct proc *p, pid_t tid);
/*
 * End the current view: reads go to the target, uncached, until the next
 * view. For a value read twice around a walk (a sequence count), whose
 * second read must not be served from what the first one fetched.
 */
void proc_mem_uncached(struct proc *p);
/*
 * With on, each new view (a pause, proc_mem_invalidate) starts by fetching,
 * in one syscall, every line the previous such view read, and each hold of
 * one thread (proc_stop_thread) what that thread's previous hold read: for
 * a sampler that walks much the same memory every tick. Off by default.
 * Needs process_vm_readv (no effect over the /proc/PID/mem fallback).
 */
void proc_mem_prefetch(struct proc *p, bool on);
/*
 * Give back to the kernel the cached lines no view read since the
 * previous call (none at the first): a caller that holds a process for long
 * calls it on a clock, so a process that stops reading some memory, or
 * sleeps, holds none of the cache's pages for it after two periods.
 */
void proc_mem_trim(struct proc *p);
/* Counters since proc_open(). */
void proc_mem_stats(const struct proc *p, struct proc_mem_stats *out);

#endif
