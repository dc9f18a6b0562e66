/*
 * A host's Python processes, for an agent: the profiler's face of
 * sampler/discover.h (cmd sees no sampler header). A scan lists the
 * candidates born and gone since the last one; prof_fleet_about() says
 * what a process tells of where it runs, for labels; prof_fleet_owner()
 * what an agent's filters need. Each process is then profiled through
 * prof_open() like any --pid.
 */
#ifndef SPY_PROFILER_FLEET_H
#define SPY_PROFILER_FLEET_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct prof_fleet;

/* procdir: "/proc" (or a directory laid out like it). NULL with errno set. */
struct prof_fleet *prof_fleet_new(const char *procdir);
void prof_fleet_free(struct prof_fleet *f);
/*
 * What the scans may spend: examinations per scan, and the share of one
 * core (0.01: 1%) their thread's CPU may take; the maps reads wait past it.
 */
void prof_fleet_set_budget(struct prof_fleet *f, size_t per_scan, double cpu_share);
/* Maps read since the start, and the processes whose maps read waits for the CPU budget. */
void prof_fleet_stats(const struct prof_fleet *f, uint64_t *maps_reads, size_t *maps_waiting);
/* How old pid was at the last scan (s); -1 if the scans have not examined it. */
int prof_fleet_age(const struct prof_fleet *f, pid_t pid, double *age_s);
/* One scan: the candidates born and gone since the last, valid until the next. Negative SPY_E* on failure. */
int prof_fleet_scan(struct prof_fleet *f, const pid_t **born, size_t *n_born, const pid_t **gone,
		    size_t *n_gone);

#define PROF_FLEET_MAX_K8S 16
struct prof_fleet_about {
	char service[256];        /* OTEL_SERVICE_NAME, else PYROSCOPE_APPLICATION_NAME, else "" */
	char container_id[65];    /* docker, containerd, CRI-O, podman; "" outside one */
	char pod_uid[37];         /* under kubepods; "" otherwise */
	struct {
		char name[129];   /* k8s_pod_name: OTEL_RESOURCE_ATTRIBUTES's k8s.* with '.' as '_' */
		char value[1025];
	} k8s[PROF_FLEET_MAX_K8S];
	size_t nk8s;
};
/* 0, or a negative SPY_E* code for a process gone or unreadable. */
int prof_fleet_about(const struct prof_fleet *f, pid_t pid, struct prof_fleet_about *out);
/*
 * The real uid of pid and its command line, arguments joined by spaces
 * (at most size - 1 bytes): what --uid, --match and --exclude look at.
 */
int prof_fleet_owner(const struct prof_fleet *f, pid_t pid, uid_t *uid, char *cmdline, size_t size);
/* The executable pid runs (its exe link, cut to size - 1 bytes): another one after an exec. */
int prof_fleet_exe(const struct prof_fleet *f, pid_t pid, char *buf, size_t size);

#endif
