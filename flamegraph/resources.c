/*
 * The process's resources over a recording (record --slice, -f chrome):
 * one reading of CPU time, RSS, threads, context switches and I/O per
 * window, kept in a folded profile as metadata and fitted against time for
 * report --trend.
 *
 * The decision a newcomer would question: readings are points in time, not
 * per-window values. Windows merge when a recording passes FG_MAX_SLICES,
 * and counters (CPU, switches, bytes) only mean something as differences
 * between two readings; points keep both questions out of the file, and
 * the rates are worked out when a trend is asked for. Past FG_MAX_SLICES
 * points every other one is dropped, as windows merge.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "flamegraph/internal.h"

/* What the columns of a res-I value are; a profile saying otherwise has its readings ignored. */
#define RES_LAYOUT "t-s user-ms sys-ms rss-kb threads ctxsw read-bytes write-bytes"
#define RES_FIELDS 8

struct fg_resources {
	struct fg_res_point *v;
	size_t n, alloc;
};

struct fg_resources *fg_resources_new(void)
{
	return spy_xcalloc(1, sizeof(struct fg_resources));
}

void fg_resources_free(struct fg_resources *r)
{
	if (r) {
		free(r->v);
		free(r);
	}
}

size_t fg_resources_count(const struct fg_resources *r)
{
	return r ? r->n : 0;
}

const struct fg_res_point *fg_resources_at(const struct fg_resources *r, size_t i)
{
	if (i >= r->n) {
		SPY_BUG("resource reading %zu of %zu", i, r->n);
	}
	return &r->v[i];
}

void fg_resources_add(struct fg_resources *r, const struct fg_res_point *pt)
{
	if (r->n == FG_MAX_SLICES) {
		for (size_t i = 0; 2 * i < r->n; i++) {
			r->v[i] = r->v[2 * i];
		}
		r->n = (r->n + 1) / 2;
	}
	SPY_GROW(r->v, r->alloc, r->n + 1);
	struct fg_res_point p = *pt;
	if (!(p.t >= 0) || !(p.t < 1e12)) {
		p.t = 0;
	}
	r->v[r->n++] = p;
}

/* ---- in a folded file ---------------------------------------------------- */

static void add_field(struct spy_buf *b, uint64_t v, uint64_t div)
{
	if (v == FG_RES_UNKNOWN) {
		spy_buf_adds(b, " -");
	} else {
		spy_buf_addf(b, " %" PRIu64, v / div);
	}
}

void fg_resources_store(const struct fg_resources *r, struct fg_profile *p)
{
	for (size_t i = 0; i < fg_profile_meta_count(p);) {
		const char *key, *value;
		fg_profile_meta_at(p, i, &key, &value);
		if (!strncmp(key, "res-", 4) || !strcmp(key, "resources")) {
			char *k = spy_xstrdup(key);
			fg_profile_meta_set(p, k, NULL);
			free(k);
		} else {
			i++;
		}
	}
	if (!r || !r->n) {
		return;
	}
	fg_profile_meta_set(p, "resources", RES_LAYOUT);
	struct spy_buf b = SPY_BUF_INIT;
	char key[FG_MAX_META_KEY + 1];
	for (size_t i = 0; i < r->n; i++) {
		const struct fg_res_point *pt = &r->v[i];
		spy_buf_reset(&b);
		spy_buf_addf(&b, "%.3f", pt->t);
		add_field(&b, pt->user_ns, 1000000);
		add_field(&b, pt->sys_ns, 1000000);
		add_field(&b, pt->rss, 1024);
		add_field(&b, pt->threads, 1);
		add_field(&b, pt->ctxsw, 1);
		add_field(&b, pt->read_bytes, 1);
		add_field(&b, pt->write_bytes, 1);
		snprintf(key, sizeof(key), "res-%zu", i);
		fg_profile_meta_set(p, key, b.buf);
	}
	spy_buf_release(&b);
}

/* One field: a decimal of at most 19 digits (scaled by mul, which must not overflow), or "-". */
static bool parse_field(const char **sp, uint64_t mul, uint64_t *out)
{
	const char *s = *sp;
	if (*s == '-') {
		*out = FG_RES_UNKNOWN;
		*sp = s + 1;
		return true;
	}
	uint64_t v = 0;
	size_t n = 0;
	while (*s >= '0' && *s <= '9' && n < 19) {
		v = v * 10 + (uint64_t)(*s++ - '0');
		n++;
	}
	*sp = s;
	if (!n || (*s >= '0' && *s <= '9') || v > (UINT64_MAX - 1) / mul) {
		return false;
	}
	*out = v * mul;
	return true;
}

static bool parse_point(const char *v, struct fg_res_point *pt)
{
	char *end;
	errno = 0;
	pt->t = strtod(v, &end);
	if (errno || end == v || *end != ' ' || !(pt->t >= 0) || pt->t >= 1e12) {
		return false;
	}
	const char *s = end;
	uint64_t *f[RES_FIELDS - 1] = { &pt->user_ns, &pt->sys_ns, &pt->rss, &pt->threads,
					&pt->ctxsw, &pt->read_bytes, &pt->write_bytes };
	static const uint64_t mul[RES_FIELDS - 1] = { 1000000, 1000000, 1024, 1, 1, 1, 1 };
	for (size_t i = 0; i < RES_FIELDS - 1; i++) {
		if (*s++ != ' ' || !parse_field(&s, mul[i], f[i])) {
			return false;
		}
	}
	return *s == '\0';
}

static int cmp_point(const void *a, const void *b)
{
	const struct fg_res_point *x = a, *y = b;
	return x->t == y->t ? 0 : (x->t < y->t ? -1 : 1);
}

int fg_resources_load(struct fg_resources **out, const struct fg_profile *p, const char *name,
		      struct spy_err *err)
{
	*out = NULL;
	const char *layout = fg_profile_meta_get(p, "resources");
	/* None, or columns a later spy wrote: no readings, not an error. */
	if (!layout || strcmp(layout, RES_LAYOUT)) {
		return 0;
	}
	struct fg_resources *r = fg_resources_new();
	for (size_t i = 0; i < fg_profile_meta_count(p); i++) {
		const char *key, *value;
		fg_profile_meta_at(p, i, &key, &value);
		if (strncmp(key, "res-", 4)) {
			continue;
		}
		struct fg_res_point pt;
		if (!parse_point(value, &pt)) {
			fg_resources_free(r);
			return spy_err_set(err, SPY_EFORMAT,
					   "%s: # %s: expected %d fields (%s), each a number or -", name, key,
					   RES_FIELDS, RES_LAYOUT);
		}
		if (r->n < FG_MAX_SLICES) {
			SPY_GROW(r->v, r->alloc, r->n + 1);
			r->v[r->n++] = pt;
		}
	}
	if (r->n) {
		qsort(r->v, r->n, sizeof(*r->v), cmp_point);
	}
	*out = r;
	return 0;
}

/* ---- totals and the trend ------------------------------------------------ */

void fg_resources_totals(const struct fg_resources *r, struct fg_res_point *tot)
{
	memset(tot, 0xff, sizeof(*tot));   /* every field FG_RES_UNKNOWN */
	tot->t = 0;
	for (size_t i = 0; r && i < r->n; i++) {
		const struct fg_res_point *pt = &r->v[i];
		/* CPU and I/O are the last reading less the first: the recording's own share. */
		if (pt->rss != FG_RES_UNKNOWN && (tot->rss == FG_RES_UNKNOWN || pt->rss > tot->rss)) {
			tot->rss = pt->rss;
		}
		if (pt->threads != FG_RES_UNKNOWN && (tot->threads == FG_RES_UNKNOWN || pt->threads > tot->threads)) {
			tot->threads = pt->threads;
		}
	}
	if (!r || r->n < 2) {
		return;
	}
	const struct fg_res_point *a = &r->v[0], *b = &r->v[r->n - 1];
	tot->t = b->t - a->t;
#define DELTA(f) tot->f = a->f != FG_RES_UNKNOWN && b->f != FG_RES_UNKNOWN && b->f >= a->f ? b->f - a->f : FG_RES_UNKNOWN
	DELTA(user_ns);
	DELTA(sys_ns);
	DELTA(ctxsw);
	DELTA(read_bytes);
	DELTA(write_bytes);
#undef DELTA
}

/*
 * A least-squares fit kept as running means and co-moments about them
 * (Welford's updates), not as raw sums: n*sum(xy) - sum(x)*sum(y) cancels
 * two large, equal terms, and whether the compiler fuses a multiply-add
 * there (gcc does on aarch64) decides the sign of what is left, so a flat
 * series printed -0.00 on one machine and +0.00 on another. About the
 * mean, a flat series adds exact zeros to its co-moment everywhere.
 */
struct fit {
	double n, mx, my, cxx, cxy, cyy, first, last;
};

static void fit_add(struct fit *f, double x, double y)
{
	if (!f->n) {
		f->first = y;
	}
	f->last = y;
	f->n += 1;
	double dx = x - f->mx, dy = y - f->my;
	f->mx += dx / f->n;
	f->my += dy / f->n;
	f->cxx += dx * (x - f->mx);
	f->cxy += dx * (y - f->my);
	f->cyy += dy * (y - f->my);
}

enum { R_RSS, R_CPU, R_THREADS, R_CTXSW, R_IO, R_N };

static const char *const row_name[R_N] = { "[rss]", "[cpu]", "[threads]", "[ctxsw]", "[io]" };
static const char *const row_unit[R_N] = {
	"MB resident", "% of one CPU, user+sys", "threads", "switches/s, all threads",
	"KB/s read+written to storage",
};

/* A gauge's value at reading i, or < 0 if unknown. */
static double gauge(const struct fg_res_point *pt, int row)
{
	uint64_t v = row == R_RSS ? pt->rss : pt->threads;
	if (v == FG_RES_UNKNOWN) {
		return -1;
	}
	return row == R_RSS ? (double)v / 1e6 : (double)v;
}

/* A counter's rate between readings a and b, or < 0 if unknown (or it fell: a thread's switches leave with it). */
static double rate(const struct fg_res_point *a, const struct fg_res_point *b, int row)
{
	double dt = b->t - a->t;
	uint64_t x, y;
	double scale;
	if (row == R_CPU) {
		if (a->user_ns == FG_RES_UNKNOWN || b->user_ns == FG_RES_UNKNOWN ||
		    a->sys_ns == FG_RES_UNKNOWN || b->sys_ns == FG_RES_UNKNOWN) {
			return -1;
		}
		x = a->user_ns + a->sys_ns;
		y = b->user_ns + b->sys_ns;
		scale = 100.0 / 1e9;
	} else if (row == R_CTXSW) {
		x = a->ctxsw;
		y = b->ctxsw;
		scale = 1;
	} else {
		if (a->read_bytes == FG_RES_UNKNOWN || a->write_bytes == FG_RES_UNKNOWN ||
		    b->read_bytes == FG_RES_UNKNOWN || b->write_bytes == FG_RES_UNKNOWN) {
			return -1;
		}
		x = a->read_bytes + a->write_bytes;
		y = b->read_bytes + b->write_bytes;
		scale = 1.0 / 1e3;
	}
	if (x == FG_RES_UNKNOWN || y == FG_RES_UNKNOWN || y < x || !(dt > 0.05)) {
		return -1;
	}
	return (double)(y - x) * scale / dt;
}

void fg_resources_trend(const struct fg_resources *r, struct spy_buf *out)
{
	if (!r || r->n < 2) {
		spy_buf_adds(out, "resources: fewer than 2 readings (record with --slice on a spy that reads them)\n");
		return;
	}
	struct fit f[R_N];
	memset(f, 0, sizeof(f));
	for (size_t i = 0; i < r->n; i++) {
		const struct fg_res_point *pt = &r->v[i];
		double x = pt->t / 3600.0;
		for (int row = R_RSS; row <= R_THREADS; row += R_THREADS - R_RSS) {
			double y = gauge(pt, row);
			if (y >= 0) {
				fit_add(&f[row], x, y);
			}
		}
		if (!i) {
			continue;
		}
		/* A rate belongs to the middle of the interval it was measured over. */
		double xm = (r->v[i - 1].t + pt->t) / 2 / 3600.0;
		for (int row = R_CPU; row < R_N; row++) {
			if (row == R_THREADS) {
				continue;
			}
			double y = rate(&r->v[i - 1], pt, row);
			if (y >= 0) {
				fit_add(&f[row], xm, y);
			}
		}
	}
	spy_buf_addf(out, "resources: %zu readings over %.1f s; slope per hour (least squares over the readings), "
		     "first, last and mean value, r2\n", r->n, r->v[r->n - 1].t - r->v[0].t);
	spy_buf_addf(out, "%10s %9s %9s %9s %5s  %s\n", "slope/h", "first", "last", "mean", "r2", "resource (unit)");
	for (int row = 0; row < R_N; row++) {
		const struct fit *ff = &f[row];
		if (ff->n < 1) {
			spy_buf_addf(out, "%10s %9s %9s %9s %5s  %s (%s)\n", "-", "-", "-", "-", "-", row_name[row],
				     row == R_IO ? "unknown: io unreadable" : "unknown");
			continue;
		}
		/* The variances and covariance scaled by n, as the thresholds were set for. */
		double vx = ff->n * ff->cxx, cov = ff->n * ff->cxy, vy = ff->n * ff->cyy;
		double slope = vx > 1e-18 ? cov / vx : 0;
		double r2 = vx > 1e-18 && vy > 1e-9 ? cov * cov / (vx * vy) : 0;
		spy_buf_addf(out, "%+10.2f %9.2f %9.2f %9.2f %5.2f  %s (%s)\n", slope, ff->first, ff->last,
			     ff->my, r2, row_name[row], row_unit[row]);
	}
}
