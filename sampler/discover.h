/*
 * Finding a host's Python processes, and what a process says about where it
 * runs: the mechanism under a node-wide agent.
 *
 * Discovery is a candidate filter, not a verdict: a process is a candidate
 * when its executable is named python* or it maps a libpython; whoever
 * attaches confirms it by finding the interpreter's runtime.
 *
 * Cost on a busy node: each scan is one readdir of /proc. A process is
 * examined (its stat and exe link) when first seen, then only again while
 * young (an entry point that execs python keeps its PID and start time),
 * ever less often as it ages, or once a recheck period, within a budget of
 * examinations per scan; the rest wait for the next scan. Its maps, the one
 * read whose cost the process chooses (a megabyte for 20,000 mappings), are
 * read once per executable and address-space size, and only while the
 * scans' CPU budget has credit left: a process that hoards mappings delays
 * the maps reads of others, never the rest of the scan.
 */
#ifndef SPY_SAMPLER_DISCOVER_H
#define SPY_SAMPLER_DISCOVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct discover;

/* A /proc to scan: "/proc", or a directory laid out like it (tests). The
 * descriptor is kept; NULL with errno set if it cannot be opened. */
struct discover *discover_new(const char *procdir);
void discover_free(struct discover *d);

/* Examinations per scan (default 256): a node that starts 10,000 processes
 * at once is caught up with over a few scans, each of them short. */
void discover_set_budget(struct discover *d, size_t per_scan);

/* The thread CPU the scans may spend, as a share of one core (default 1,
 * no limit to speak of): each scan's CPU, measured on the calling thread's
 * clock, is charged, and no maps are read while the credit (at most one
 * second's worth) is spent. Scans must all be made by one thread. */
void discover_set_cpu_budget(struct discover *d, double cpu_share);

/* Maps read since the start, and the processes whose maps read waited for
 * the CPU budget at the last scan. */
void discover_stats(const struct discover *d, uint64_t *maps_reads, size_t *maps_waiting);

/* How old pid was at the last scan, in seconds: 0, or -1 if the last scan
 * did not examine it (not seen, or waiting for the budget). */
int discover_age(const struct discover *d, pid_t pid, double *age_s);

/* One scan. *born lists the candidates seen for the first time (or that
 * became one by exec), *gone those that have exited or whose PID now names
 * another process; both are owned by d and valid until the next scan.
 * Returns the number of processes in /proc, or a negative SPY_E* code. */
int discover_scan(struct discover *d, const pid_t **born, size_t *n_born,
		  const pid_t **gone, size_t *n_gone);

/* Candidates known after the last scan. */
size_t discover_count(const struct discover *d);

/* What a process says about where it runs, for labels. Empty strings for
 * what it does not say. */
struct proc_about {
	/* OTEL_SERVICE_NAME, else PYROSCOPE_APPLICATION_NAME. */
	char service[256];
	/* OTEL_RESOURCE_ATTRIBUTES, whole or empty (never cut mid-pair). */
	char resource_attrs[4096];
	/* 64 hex digits, from the cgroup path of a docker, containerd, CRI-O
	 * or podman container. */
	char container_id[65];
	/* The Kubernetes pod UID, from a kubepods cgroup path. */
	char pod_uid[37];
};

/* Reads /proc/PID/cgroup and, from /proc/PID/environ, only the variables
 * struct proc_about names. 0, or a negative SPY_E* code when the process is
 * gone or unreadable (the struct is then all empty). */
int proc_read_about(const struct discover *d, pid_t pid, struct proc_about *out);

/* The target of pid's exe link (cut to size - 1 bytes): it changes when the process execs. */
int proc_read_exe(const struct discover *d, pid_t pid, char *buf, size_t size);
/* The real uid of pid and its command line (NULs as spaces, at most
 * size - 1 bytes): what an agent's filters look at. 0 or a negative SPY_E*. */
int proc_read_owner(const struct discover *d, pid_t pid, uid_t *uid, char *cmdline, size_t size);

/* The parsers under proc_read_about, on text (unit tests feed them). */
void proc_parse_cgroup(const char *text, size_t len, char container_id[65], char pod_uid[37]);
/* The value of NAME in a NUL-separated NAME=value block; NULL if absent. */
const char *proc_environ_get(const char *env, size_t len, const char *name, size_t *vlen);

/* The k8s.* attributes of an OTEL_RESOURCE_ATTRIBUTES value (key=value
 * pairs separated by commas, values percent-encoded), as label pairs named
 * the way Pyroscope's OTLP ingestion names them: k8s.pod.name becomes
 * k8s_pod_name. Pairs that are malformed, or whose name or value would not
 * make a label (control bytes, over 128/1024 bytes), are skipped. Returns
 * how many were written (at most max). */
struct about_label {
	char name[129];
	char value[1025];
};
size_t otel_k8s_labels(const char *attrs, struct about_label *out, size_t max);

#endif
