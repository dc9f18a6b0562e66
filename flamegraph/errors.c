/*
 * The errors metadata ("N (kind n, ...)", common/sample.h's kinds) in
 * words, for the headers of the SVG and the HTML report: a user reading
 * "errors: 1 (truncated 1)" on a demo cannot tell what went wrong, or
 * that it was the interpreter's start-up (record's FG_META_STARTUP).
 */
#include <stdio.h>
#include <string.h>

#include "common/util.h"
#include "flamegraph/internal.h"

void fg_errors_words(const struct fg_profile *p, struct spy_buf *out)
{
	const char *e = fg_profile_meta_get(p, FG_META_ERRORS);
	const char *v = fg_profile_meta_get(p, FG_META_STARTUP);
	unsigned long long total = 0, n = 0, cut = 0;
	if (!e || sscanf(e, "%llu", &total) != 1) {
		return;
	}
	if (!v || sscanf(v, "%llu %llu", &n, &cut) != 2) {
		cut = 0;
	}
	const char *paren = strchr(e, '(');
	if (!total || !paren) {
		spy_buf_addf(out, "%llu", total);
		return;
	}
	/* "N (kind n, kind n)": each kind in words, the unknown ones as they are. */
	const char *q = paren + 1;
	bool first = true;
	while (*q && *q != ')') {
		char name[32];
		unsigned long long k;
		int used = 0;
		if (sscanf(q, " %31[a-z-] %llu%n", name, &k, &used) != 2 || used <= 0) {
			break;
		}
		q += used;
		q += *q == ',';
		spy_buf_adds(out, first ? "" : "; ");
		first = false;
		enum spy_sample_error i = spy_sample_error_named(name);
		if (i == SPY_SAMPLE_ERR_MAX) {
			spy_buf_addf(out, "%s %llu", name, k);
			continue;
		}
		spy_buf_addf(out, "%llu %s", k, k == 1 ? spy_sample_errors[i].one : spy_sample_errors[i].many);
		if (!strcmp(name, "truncated") && cut) {
			spy_buf_addf(out, cut >= k ? ", in the start-up" : ", %llu in the start-up", cut);
		}
	}
	if (first) {
		spy_buf_adds(out, e);
	}
}
