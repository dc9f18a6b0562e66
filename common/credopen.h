/*
 * Opening a file a program named with the program's own rights.
 *
 * spy runs as root against programs it does not trust, and reads files
 * their memory names (a code object's co_filename, for source lines). A
 * name is only a claim: a program running as nobody can compile code whose
 * file name is /etc/shadow, or plant a link to it in its own directory.
 * So such a file is opened by a helper process holding the program's file
 * system uid, gid and supplementary groups (from /proc/PID/status) and no
 * capability, under common/mapfile.h's rules (inside the program's root, a
 * regular file only), and the descriptor is passed back over a socket
 * (SCM_RIGHTS). What the program could not open, spy does not read.
 *
 * One helper per set of credentials, forked the first time a file is
 * needed for them. A helper that stops answering within CREDOPEN_WAIT_MS
 * is killed and not replaced: the files it would have opened are not read.
 *
 * When no helper is needed: spy is neither root nor holding
 * CAP_DAC_OVERRIDE or CAP_DAC_READ_SEARCH (it then has no rights beyond its
 * user's, and cannot take another's), or the program itself could read any
 * file of its root (file system uid 0 in spy's user namespace, with one of
 * those in effect), now and when spy opened it. Then spy opens the file
 * itself, under the same rules. A spy with a DAC capability but no
 * CAP_SETUID cannot become another user: its helper fails, and nothing of
 * that program's is read.
 */
#ifndef SPY_COMMON_CREDOPEN_H
#define SPY_COMMON_CREDOPEN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define CREDOPEN_WAIT_MS 1000
/* Helpers alive at once; a program with more credential sets than this
 * (it changes uid as it runs) replaces the oldest. */
#define CREDOPEN_HELPERS 4
/* Supplementary groups taken from /proc/PID/status (the kernel's NGROUPS_MAX). */
#define CREDOPEN_MAX_GROUPS 65536

/* A program's credentials for opening files, as /proc/PID/status gives them. */
struct spy_creds {
	uid_t fsuid;
	gid_t fsgid;
	gid_t *groups;      /* malloc'ed, ngroups of them */
	size_t ngroups;
	uint64_t cap_eff;
	bool mixed;         /* its real, effective, saved and fs ids are not all one (a set-id program) */
	uint64_t exe_dev, exe_ino;   /* its executable (spy_creds_read; 0 when unknown) */
};

/*
 * Parse the text of /proc/PID/status (len bytes) into c. 0, or -EINVAL
 * when a field is missing or malformed (c is then released).
 */
int spy_creds_parse(const char *text, size_t len, struct spy_creds *c);
void spy_creds_release(struct spy_creds *c);
/* Process pid's credentials now, with its executable's identity. 0 or -errno. */
int spy_creds_read(pid_t pid, struct spy_creds *c);

struct spy_credopen;

struct spy_credopen *spy_credopen_new(void);
/* Ends every helper (and waits for it). NULL is allowed. */
void spy_credopen_free(struct spy_credopen *co);

/*
 * Open path, relative to dirfd (the program's root or working directory,
 * opened by the caller), as process pid could: SPY_OPEN_IN_ROOT rules,
 * read-only. The descriptor, or -errno. -EACCES or -EPERM: the program
 * could not open it, and it was not opened.
 *
 * then (NULL: none) is pid's credentials when spy opened it, before it
 * read the memory that named path: the rights are decided from it and
 * from now, not from now alone, since the program may have exec'd a
 * set-uid program since (it can watch for spy's opens and time it). When
 * the two differ, the less privileged one opens (one that could read any
 * file, fs uid 0 with a DAC capability, gives way to one that cannot); two
 * unprivileged sets that differ open nothing (-EPERM). spy opens a file
 * itself only when the program could read any file now and then alike,
 * its ids are not mixed (set-id), and its executable is the same.
 */
int spy_credopen(struct spy_credopen *co, pid_t pid, const struct spy_creds *then, int dirfd,
		 const char *path);

/* Whether -errno e means "the program has no right to this file". */
static inline bool spy_credopen_denied(int e)
{
	return e == -13 /* EACCES */ || e == -1 /* EPERM */;
}

#endif
