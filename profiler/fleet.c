/*
 * The profiler's face of sampler/discover.h, for an agent (see fleet.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "profiler/fleet.h"
#include "sampler/discover.h"

struct prof_fleet {
	struct discover *d;
};

struct prof_fleet *prof_fleet_new(const char *procdir)
{
	struct discover *d = discover_new(procdir);
	if (!d) {
		return NULL;
	}
	struct prof_fleet *f = calloc(1, sizeof(*f));
	if (!f) {
		discover_free(d);
		return NULL;
	}
	f->d = d;
	return f;
}

void prof_fleet_free(struct prof_fleet *f)
{
	if (f) {
		discover_free(f->d);
		free(f);
	}
}

void prof_fleet_set_budget(struct prof_fleet *f, size_t per_scan, double cpu_share)
{
	discover_set_budget(f->d, per_scan);
	discover_set_cpu_budget(f->d, cpu_share);
}

void prof_fleet_stats(const struct prof_fleet *f, uint64_t *maps_reads, size_t *maps_waiting)
{
	discover_stats(f->d, maps_reads, maps_waiting);
}

int prof_fleet_age(const struct prof_fleet *f, pid_t pid, double *age_s)
{
	return discover_age(f->d, pid, age_s);
}

int prof_fleet_scan(struct prof_fleet *f, const pid_t **born, size_t *n_born, const pid_t **gone,
		    size_t *n_gone)
{
	return discover_scan(f->d, born, n_born, gone, n_gone);
}

int prof_fleet_about(const struct prof_fleet *f, pid_t pid, struct prof_fleet_about *out)
{
	memset(out, 0, sizeof(*out));
	struct proc_about *a = calloc(1, sizeof(*a));
	struct about_label *l = calloc(PROF_FLEET_MAX_K8S, sizeof(*l));
	int rc = a && l ? proc_read_about(f->d, pid, a) : -1;
	if (rc == 0) {
		snprintf(out->service, sizeof(out->service), "%s", a->service);
		snprintf(out->container_id, sizeof(out->container_id), "%s", a->container_id);
		snprintf(out->pod_uid, sizeof(out->pod_uid), "%s", a->pod_uid);
		out->nk8s = otel_k8s_labels(a->resource_attrs, l, PROF_FLEET_MAX_K8S);
		for (size_t i = 0; i < out->nk8s; i++) {
			snprintf(out->k8s[i].name, sizeof(out->k8s[i].name), "%s", l[i].name);
			snprintf(out->k8s[i].value, sizeof(out->k8s[i].value), "%s", l[i].value);
		}
	}
	free(a);
	free(l);
	return rc;
}

int prof_fleet_owner(const struct prof_fleet *f, pid_t pid, uid_t *uid, char *cmdline, size_t size)
{
	return proc_read_owner(f->d, pid, uid, cmdline, size);
}

int prof_fleet_exe(const struct prof_fleet *f, pid_t pid, char *buf, size_t size)
{
	return proc_read_exe(f->d, pid, buf, size);
}
