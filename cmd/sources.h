/*
 * The source files of a recording's sampled frames, each read once, as
 * soon as a sample first names it, through the target's /proc/PID/root,
 * and kept until the profile is written (fg_profile_source_capture picks
 * the hot lines then). Files are hostile and bounded: see sources.c.
 */
#ifndef SPY_CMD_SOURCES_H
#define SPY_CMD_SOURCES_H

#include <stddef.h>
#include <sys/types.h>

#include "common/buf.h"
#include "common/hashmap.h"
#include "common/sample.h"

/* Bytes of one file read (a larger file is not kept), of all files, and files. */
#define CMD_SOURCE_MAX_FILE ((size_t)4 << 20)
#define CMD_SOURCE_MAX_TOTAL ((size_t)64 << 20)
#define CMD_SOURCE_MAX_FILES 4096

struct cmd_source_file;
struct spy_credopen;

struct cmd_sources {
	struct cmd_source_file *v;
	size_t n, alloc;
	struct spy_hmap index; /* the file name's pointer -> index into v */
	size_t bytes;        /* read and kept */
	pid_t dir_pid;       /* whose /proc/PID/root and cwd are open: */
	int rootfd, cwdfd;   /* -1 when not open */
	size_t read_bytes;   /* read, kept or not (what CMD_SOURCE_MAX_TOTAL bounds) */
	struct spy_credopen *co; /* opens them with the program's rights; NULL until needed */
	size_t withheld;     /* files the program itself could not open, or named across an exec: not read */
	size_t across_exec;  /* ... of those, named by a stack read across an exec (untrusted) */
	size_t unreadable;   /* files named but not kept (missing, not regular, too big, a bound) */
	uint64_t read_ns;    /* spy's CPU time opening and reading them */
};

/* Before any other call (the descriptors start closed). */
void cmd_sources_init(struct cmd_sources *s);
void cmd_sources_release(struct cmd_sources *s);

/*
 * Read the file of each Python frame of st that is not known yet, as
 * process pid sees it, with the rights of the less privileged of then
 * (its credentials when it was opened: prof_process_creds) and now.
 * File names are interned (compared by pointer). Called with the target
 * running. untrusted: st was read across an exec (prof_sample's
 * names_untrusted), so its names may be another program's, whose rights
 * then does not tell: its new files are withheld, not opened.
 */
struct spy_creds;
void cmd_sources_note(struct cmd_sources *s, const struct spy_stack *st, pid_t pid, const struct spy_creds *then,
		      bool untrusted);

/*
 * The files withheld, for the profile's "withheld" metadata: their count
 * and names (JSON strings), never any content.
 */
void cmd_sources_withheld(const struct cmd_sources *s, struct spy_buf *out);

/* The fg_source_fn of fg_profile_source_capture: ctx is a struct cmd_sources *. */
int cmd_sources_get(void *ctx, const char *file, const char **data, size_t *len);

#endif
