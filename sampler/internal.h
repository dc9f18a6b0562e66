/*
 * Private to sampler/: the layout of struct proc and the helpers its files
 * share. Nothing outside sampler/ includes this header.
 *
 * All ptrace bookkeeping lives in tracees[], one entry per thread we have
 * seized, holding what waitpid() last told us about it. The invariant the
 * ptrace code keeps: a tracee is TRACEE_STOPPED only while it sits in a
 * ptrace-stop that we have collected and not yet restarted, and its sig is
 * nonzero only if that stop is a signal-delivery-stop whose signal is still
 * owed to the thread.
 */
#ifndef SPY_SAMPLER_INTERNAL_H
#define SPY_SAMPLER_INTERNAL_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "common/buf.h"
#include "common/hashmap.h"
#include "common/mem.h"
#include "sampler/sampler.h"

enum tracee_state {
	TRACEE_RUNNING = 0, /* seized, and not in a stop we have collected */
	TRACEE_STOPPED,     /* in a ptrace-stop we collected */
	TRACEE_GONE,        /* exited, or no longer ours to wait for */
};

struct proc_tracee {
	pid_t tid;
	uint8_t state;         /* enum tracee_state */
	bool interrupted;      /* PTRACE_INTERRUPT sent, its trap not collected yet */
	bool group_stop;       /* last stop was a group-stop: restart with PTRACE_LISTEN */
	int sig;               /* signal owed to the thread (see the invariant above) */
	unsigned redeliveries; /* signals re-delivered during the current pause */
	bool straggler;        /* missed a pause deadline, not stopped since: not waited for */
};

/*
 * The page cache behind proc_mem() (memcache.c). Lines are 4 KiB, aligned:
 * mappings are page-granular and pages are at least 4 KiB, so a line is
 * either wholly readable or not at all, and fetching the whole line around a
 * readable read cannot fail where the read itself would succeed. 512 lines
 * (2 MiB, touched only as used) hold a deep stack's frames, code objects and
 * strings with room to spare; two-way set-associative by line number, so a
 * lookup is two compares.
 */
#define MEMCACHE_LINE 4096u
#define MEMCACHE_LINES 512u
#define MEMCACHE_WAYS 2u
#define MEMCACHE_SETS (MEMCACHE_LINES / MEMCACHE_WAYS)
/* A prefetch copies the bytes last read, widened to whole granules of this
 * size: a walk that moves a little (a frame pushed) still finds them. */
#define MEMCACHE_GRANULE 256u
/* Larger reads go straight to the target: the syscall would not be saved. */
#define MEMCACHE_MAX_READ (16u * 1024u)

/*
 * The lines one view read (memcache.c), in the order first read, each with
 * the bytes read of it: trails[0] may hold every line, a held thread's
 * MEMCACHE_TRAIL (a 100-frame 3.11 walk reads about ten). While its view
 * lasts, slot[] lists the slots as first read; when it ends they become
 * line[]/lo[]/hi[] (a slot may be reused before the next view). One trail
 * a thread for 128 threads held or read running in turn, each tick: fewer,
 * and the least recently used is the one the tick needs next.
 */
#define MEMCACHE_TRAILS 129u
#define MEMCACHE_TRAIL 64u
struct memcache_trail {
	pid_t key;           /* the thread held; 0 for trails[0] */
	uint64_t gen;        /* the view that filled it, 0 for none yet */
	size_t cap, n;
	uint64_t *line;
	uint16_t *lo, *hi, *slot;
};

struct memcache {
	/*
	 * The current view. A line is valid only while its gen equals this,
	 * so invalidating is one increment; 0 is never a view, so zeroed
	 * entries start invalid.
	 */
	uint64_t gen;
	/*
	 * Whether reads may be served from the cache at all. Off while the
	 * target runs unless the caller asked for a view (proc_mem_invalidate),
	 * so code that polls a running target keeps seeing it move.
	 */
	bool on;
	uint64_t line[MEMCACHE_LINES];     /* remote address / MEMCACHE_LINE */
	uint64_t line_gen[MEMCACHE_LINES];
	/* The view in which each slot's line was last read from (see proc_mem_prefetch). */
	uint64_t line_used[MEMCACHE_LINES];
	/* The last view before the last proc_mem_trim(): lines last read in it or before go back at the next. */
	uint64_t trim_mark;
	/*
	 * Bytes [lo, hi) of a valid line are what it holds (a prefetch copies
	 * only the part of a line the last view read: the whole 4 KiB of a
	 * dozen lines cost more to copy than the walk that reads them);
	 * [used_lo, used_hi) is what the view of line_used read of it.
	 */
	uint16_t lo[MEMCACHE_LINES], hi[MEMCACHE_LINES];
	uint16_t used_lo[MEMCACHE_LINES], used_hi[MEMCACHE_LINES];
	bool prefetch;
	/*
	 * What views read, for the next view of their kind to fetch ahead:
	 * trails[0] for the views of the whole target (a pause, a fresh view
	 * of a running one), the rest for one thread held each (by TID,
	 * reused least recently filled first). cur is the trail the current
	 * view records into (NULL: a view that is off).
	 */
	struct memcache_trail *trails[MEMCACHE_TRAILS];
	struct memcache_trail *cur;
	uint8_t (*data)[MEMCACHE_LINE];    /* MEMCACHE_LINES lines, allocated once */
	struct proc_mem_stats stats;
};

struct proc {
	pid_t pid;
	/*
	 * /proc/PID opened once: it keeps naming the process we opened after
	 * that process exits and its PID is reused, where a fresh path would
	 * quietly start describing a stranger.
	 */
	int dirfd;
	/*
	 * Where cmdline, exe, maps and mem are read, and whose tid
	 * process_vm_readv is given: the process itself, unless its main
	 * thread has exited (pthread_exit) while others run on. That zombie
	 * has no address space left, so its maps read empty and reads through
	 * its pid fail with ESRCH; a live thread's task/TID serves instead.
	 */
	int memdirfd;
	pid_t mem_tid;
	int memfd;             /* mem under memdirfd when process_vm_readv is refused, else -1 */
	int statfd;            /* dirfd's stat, opened by the first proc_alive(), else -1 */
	/*
	 * mem under memdirfd, opened before the maps are read: it stays bound
	 * to the address space it was opened on, so once an exec replaced that
	 * one a read through it returns nothing (proc_same_image), however
	 * many execs came between; image_addr is a word check_memory read.
	 */
	int imagefd;
	uint64_t image_addr;
	int iofd;              /* dirfd's io, opened by the first proc_read_resources(); -1 not yet, -2 refused */
	char *cmdline;
	char *exe;

	/*
	 * mem.read is memcache_read(), which goes to the target through
	 * raw_read (process_vm_readv, or pread on memfd) on a miss.
	 */
	struct spy_mem mem;
	int (*raw_read)(void *ctx, spy_addr_t addr, void *dst, size_t len);
	struct memcache mc;
	struct spy_map *maps;
	char *map_paths;       /* storage behind maps[i].path */
	size_t nmaps;

	struct proc_thread *threads;
	size_t nthreads, threads_alloc;
	pid_t *tids;           /* scratch for procfs_list_tids(), sorted */
	size_t tids_alloc;

	struct proc_tracee *tracees; /* sorted by tid */
	size_t ntracees, tracees_alloc;
	bool attached;
	bool paused;
	pid_t held;   /* the one thread stopped by proc_stop_thread, or 0 */
	bool held_wait;   /* proc_stop_thread is waiting, SIGCHLD blocked: sleep on it */
	sigset_t held_chld;
	/*
	 * Between pauses (proc_track, proc_poll) the tracees are looked at
	 * only when one has something to report (collect_noticed in
	 * ptrace.c); task/ is listed again only when its link count says the
	 * threads changed (tasks_changed).
	 */
	uint64_t looked_ns;     /* when the tracees were last all looked at */
	uint64_t quiet_ns;      /* when a look last found nothing to report, */
	unsigned quiet_news;    /* ... and ptrace.c's chld_news then */
	uint64_t listed_ns;     /* when task/ was last listed */
	uint64_t counted_ns;    /* when task/'s link count last matched the tracees */
	bool listed_whole;      /* every thread the last listing named is a tracee */
	bool relist;            /* a thread not traced was asked for: list task/ at the next track */
	pid_t tracer;          /* getpid() of the process that attached */
	bool execed;           /* a thread exec'd: the image we resolved is gone */
	bool exited;           /* we reaped the thread-group leader's exit ... */
	int exit_status;       /* ... and this is its wait status */
	/*
	 * In another PID namespace (a container's, unshare -p's): its own pid
	 * (ns_pid), and its threads' TIDs as it numbers them (what its memory
	 * holds) to spy's, read again when one is missing (nspid.c).
	 */
	bool ns_other;
	pid_t ns_pid;
	struct spy_hmap ns_tids;
	uint64_t ns_read_ns;
	struct proc *next_attached; /* link in registry.c's registry of attached procs */
};

/*
 * Read the file name (relative to dirfd) whole into out, which is reset
 * first. Returns 0, -SPY_EGONE (ENOENT/ESRCH), -SPY_EPERM (EACCES/EPERM),
 * -SPY_EIO, or -SPY_EBOUND when the file holds more than max bytes (out then
 * holds the first max bytes).
 */
int procfs_read_file(int dirfd, const char *name, size_t max, struct spy_buf *out);
/* An errno from opening or reading /proc as a negative SPY_E* code (gone, no right, I/O). */
int procfs_errno_code(int e);

/*
 * List the thread ids in task/ into p->tids, ascending, at most
 * SPY_MAX_THREADS of them. Returns 0 (and *n) or a negative code as above.
 * Allocates only when the list outgrows every earlier one.
 */
int procfs_list_tids(struct proc *p, size_t *n);

/* The state letter of task/TID/stat into *state; -SPY_EGONE if the thread is gone. */
int procfs_thread_state(int dirfd, pid_t tid, char *state);

/* TracerPid from task/TID/status, 0 if untraced or unreadable. */
pid_t procfs_tracer_pid(int dirfd, pid_t tid);
/*
 * The NSpid line of the status file name (under dirfd): its first number
 * (as spy's procfs numbers the task) and its last (as the task's own PID
 * namespace does); how many it holds, 0 if unreadable.
 */
int procfs_nspid(int dirfd, const char *name, pid_t *first, pid_t *last);
/* nspid.c: the PID namespace read at proc_open; released by proc_free. */
void proc_ns_init(struct proc *p);
void proc_ns_free(struct proc *p);

/*
 * memcache.c. memcache_init() allocates the lines (once, in proc_open);
 * memcache_free() releases them. memcache_read() is the spy_mem read
 * callback. memcache_view() starts a new view (invalidates every line) and
 * turns serving from the cache on or off: ptrace.c turns it on when a pause
 * completes and off whenever the target is let run again.
 */
void memcache_init(struct proc *p);
void memcache_free(struct proc *p);
int memcache_read(void *ctx, spy_addr_t addr, void *dst, size_t len);
/* The spy_mem peek: bytes within one line this view holds, counted used as a read is. */
const void *memcache_peek(void *ctx, spy_addr_t addr, size_t len);
void memcache_view(struct proc *p, bool on);
/*
 * A new view for thread tid held alone: it fetches ahead what the view of
 * the last hold of tid read (not what other threads' views read: their
 * frames are elsewhere), and whole-target views keep their own trail.
 */
void memcache_view_held(struct proc *p, pid_t tid);
/*
 * proc.c: read len bytes at addr into the n buffers of local (each
 * MEMCACHE_LINE long, one per line) with a single syscall. Returns the bytes
 * read, which may stop short at an unreadable page, or -1.
 */
ssize_t proc_fetch_lines(struct proc *p, spy_addr_t addr, const struct iovec *local, size_t n);
/*
 * Fetch n scattered remote ranges (at addrs[i], local[i].iov_len bytes each,
 * none crossing a line) into local[i], in one process_vm_readv. Returns the
 * bytes read (the kernel stops at the first range it cannot read), or -1.
 * Not available over /proc/PID/mem (-1).
 */
ssize_t proc_fetch_scattered(struct proc *p, const spy_addr_t *addrs, const struct iovec *local,
			     size_t n);

/* registry.c: add p to the registry of attached procs, detached at exit... */
void tracer_remember(struct proc *p);
/* ... and drop it (see proc_free). */
void tracer_forget(struct proc *p);

/* The remedy attached to every -SPY_EPERM about reaching the target. */
#define SAMPLER_REMEDY_PERM \
	"run as root, or set kernel.yama.ptrace_scope=0 / grant CAP_SYS_PTRACE"


/*
 * RLIMIT_NOFILE (tasks.c): raise the soft limit to the hard one (once; at
 * the first proc_open), and put the original back in a launched child.
 */
void proc_fd_limit_raise(void);
void proc_fd_limit_restore(void);

#endif
