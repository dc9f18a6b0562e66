/*
 * spy dump --tasks: the asyncio section, per event loop, in text and JSON
 * (doc/asyncio.md, doc/dump-json.md "asyncio").
 *
 * Per loop: the thread running it, then every task with its state and the
 * coroutine chain it is suspended in (innermost first), the running task's
 * whole stack (its thread's), and the await tree: which task awaits which,
 * drawn as `python -m asyncio pstree` draws it. Task names and frames come
 * from the target and go through the terminal escaper.
 */
#include <stdlib.h>
#include <string.h>

#include "cmd/dump.h"
#include "common/json.h"
#include "common/term.h"
#include "common/util.h"

/* Tree depth drawn; deeper awaits (or a cycle in hostile memory) are cut. */
#define TREE_MAX_DEPTH 32

static const char *state_name(uint8_t s)
{
	return s == PYRT_TASK_DONE ? "done" : s == PYRT_TASK_CANCELLED ? "cancelled" : "pending";
}

static const struct prof_look_thread *thread_of(const struct dump_result *r, uint64_t thread_id)
{
	for (size_t i = 0; thread_id && i < r->n; i++) {
		if (r->threads[i].py.thread_id == thread_id) {
			return &r->threads[i];
		}
	}
	return NULL;
}

/*
 * Who awaits whom, indexed once: up to PROF_MAX_TASKS tasks with up to
 * PYRT_TASK_MAX_AWAITERS edges each must not take a scan per edge.
 */
struct tree {
	const struct dump_result *r;
	struct task_ref {
		spy_addr_t addr;
		size_t i;
	} *by_addr;            /* the tasks sorted by address */
	size_t *kid_start;     /* task i's children: kids[kid_start[i] .. kid_start[i + 1]) */
	size_t *kids;          /* in task order */
	bool *drawn;
};

static int by_addr_cmp(const void *a, const void *b)
{
	spy_addr_t x = ((const struct task_ref *)a)->addr, y = ((const struct task_ref *)b)->addr;
	return x < y ? -1 : x > y;
}

static const struct pyrt_task *task_at(const struct tree *tr, spy_addr_t addr)
{
	size_t lo = 0, hi = tr->r->ntasks;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		const struct task_ref *t = &tr->by_addr[mid];
		if (t->addr == addr) {
			return &tr->r->task_v[t->i];
		}
		if (t->addr < addr) {
			lo = mid + 1;
		} else {
			hi = mid;
		}
	}
	return NULL;
}

/* The task awaiting t through its k-th edge, when it is a listed task of t's loop. */
static const struct pyrt_task *parent_of(const struct tree *tr, const struct pyrt_task *t, size_t k)
{
	const struct pyrt_task *p = task_at(tr, t->awaited_by[k]);
	return p && p->loop == t->loop && p != t ? p : NULL;
}

static void tree_init(struct tree *tr, const struct dump_result *r)
{
	size_t n = r->ntasks;
	tr->r = r;
	tr->by_addr = spy_xcalloc(n + 1, sizeof(*tr->by_addr));
	tr->kid_start = spy_xcalloc(n + 2, sizeof(*tr->kid_start));
	tr->drawn = spy_xcalloc(n + 1, sizeof(*tr->drawn));
	for (size_t i = 0; i < n; i++) {
		tr->by_addr[i] = (struct task_ref){ r->task_v[i].addr, i };
	}
	qsort(tr->by_addr, n, sizeof(*tr->by_addr), by_addr_cmp);
	size_t edges = 0;
	for (size_t i = 0; i < n; i++) {
		for (size_t k = 0; k < r->task_v[i].nawaited_by; k++) {
			const struct pyrt_task *p = parent_of(tr, &r->task_v[i], k);
			if (p) {
				tr->kid_start[(size_t)(p - r->task_v) + 1]++;
				edges++;
			}
		}
	}
	for (size_t i = 0; i < n; i++) {
		tr->kid_start[i + 1] += tr->kid_start[i];
	}
	tr->kids = spy_xcalloc(edges + 1, sizeof(*tr->kids));
	size_t *fill = spy_xcalloc(n + 1, sizeof(*fill));
	for (size_t i = 0; i < n; i++) {
		for (size_t k = 0; k < r->task_v[i].nawaited_by; k++) {
			const struct pyrt_task *p = parent_of(tr, &r->task_v[i], k);
			if (p) {
				size_t pi = (size_t)(p - r->task_v);
				tr->kids[tr->kid_start[pi] + fill[pi]++] = i;
			}
		}
	}
	free(fill);
}

static void tree_release(struct tree *tr)
{
	free(tr->by_addr);
	free(tr->kid_start);
	free(tr->kids);
	free(tr->drawn);
}

/* The loops in order of first appearance: index of each task's loop. */
static size_t loops_of(const struct dump_result *r, spy_addr_t *loops)
{
	size_t n = 0;
	for (size_t i = 0; i < r->ntasks; i++) {
		size_t k = 0;
		while (k < n && loops[k] != r->task_v[i].loop) {
			k++;
		}
		if (k == n) {
			loops[n++] = r->task_v[i].loop;
		}
	}
	return n;
}

static void add_thread_label(struct spy_buf *b, const struct prof_look_thread *d)
{
	spy_buf_addf(b, "thread %d \"", (int)d->py.native_tid);
	spy_term_adds(b, d->name ? d->name : d->comm);
	spy_buf_addch(b, '"');
}

static void add_frame(struct spy_buf *b, const char *indent, const struct spy_frame *fr)
{
	spy_buf_adds(b, indent);
	spy_term_adds(b, fr->func);
	spy_buf_adds(b, " (");
	spy_term_adds(b, fr->file);
	if (fr->line) {
		spy_buf_addf(b, ":%u", fr->line);
	}
	spy_buf_adds(b, ")\n");
}

/* A root of the tree: no task of the same loop awaits it. */
static bool is_root(const struct tree *tr, const struct pyrt_task *t)
{
	for (size_t k = 0; k < t->nawaited_by; k++) {
		if (parent_of(tr, t, k)) {
			return false;
		}
	}
	return true;
}

static void tree_node(const struct tree *tr, const struct pyrt_task *t, struct spy_buf *b,
		      char *prefix, size_t plen, bool last, size_t depth)
{
	size_t ti = (size_t)(t - tr->r->task_v);
	tr->drawn[ti] = true;
	spy_buf_adds(b, "    ");
	spy_buf_add(b, prefix, plen);
	spy_buf_adds(b, last ? "\u2514\u2500\u2500 \"" : "\u251c\u2500\u2500 \"");
	spy_term_adds(b, t->name);
	spy_buf_addch(b, '"');
	if (t->nchain) {
		/* The task's own coroutine: the outermost frame of its chain. */
		spy_buf_adds(b, " ");
		spy_term_adds(b, t->chain[t->nchain - 1].func);
	}
	spy_buf_adds(b, t->running ? " (running)\n" : "\n");
	if (depth >= TREE_MAX_DEPTH) {
		return;
	}
	const char *more = last ? "    " : "\u2502   ";
	size_t mlen = strlen(more);
	memcpy(prefix + plen, more, mlen);
	/* A task awaited by several is drawn under the first that reaches it. */
	for (size_t k = tr->kid_start[ti]; k < tr->kid_start[ti + 1]; k++) {
		if (tr->drawn[tr->kids[k]]) {
			continue;
		}
		bool more_kids = false;
		for (size_t j = k + 1; j < tr->kid_start[ti + 1] && !more_kids; j++) {
			more_kids = !tr->drawn[tr->kids[j]];
		}
		tree_node(tr, &tr->r->task_v[tr->kids[k]], b, prefix, plen + mlen, !more_kids, depth + 1);
	}
}

static void print_loop(const struct tree *tr, spy_addr_t loop, struct spy_buf *b)
{
	const struct dump_result *r = tr->r;
	size_t n = 0;
	const struct prof_look_thread *d = NULL;
	for (size_t i = 0; i < r->ntasks; i++) {
		if (r->task_v[i].loop == loop) {
			n++;
			d = d ? d : thread_of(r, r->task_v[i].loop_thread_id);
		}
	}
	spy_buf_addf(b, "\nEvent loop 0x%llx, ", (unsigned long long)loop);
	if (d) {
		add_thread_label(b, d);
	} else {
		spy_buf_adds(b, "not running");
	}
	spy_buf_addf(b, " (%zu task%s)\n", n, n == 1 ? "" : "s");
	for (size_t i = 0; i < r->ntasks; i++) {
		const struct pyrt_task *t = &r->task_v[i];
		if (t->loop != loop) {
			continue;
		}
		spy_buf_adds(b, "    task \"");
		spy_term_adds(b, t->name);
		spy_buf_addf(b, "\" (0x%llx) %s", (unsigned long long)t->addr,
			     t->running ? "running" : state_name(t->state));
		for (size_t k = 0; k < t->nawaited_by; k++) {
			const struct pyrt_task *p = task_at(tr, t->awaited_by[k]);
			spy_buf_adds(b, k ? ", \"" : ", awaited by \"");
			if (p) {
				spy_term_adds(b, p->name);
				spy_buf_addch(b, '"');
			} else {
				spy_buf_addf(b, "0x%llx\"", (unsigned long long)t->awaited_by[k]);
			}
		}
		spy_buf_addch(b, '\n');
		for (size_t k = 0; k < t->nchain; k++) {
			add_frame(b, "        ", &t->chain[k]);
		}
		if (t->chain_truncated) {
			spy_buf_adds(b, "        ... (chain truncated)\n");
		}
		const struct prof_look_thread *rd = t->running ? thread_of(r, t->thread_id) : NULL;
		if (rd) {
			spy_buf_adds(b, "      its stack, on ");
			add_thread_label(b, rd);
			spy_buf_adds(b, ":\n");
			for (size_t k = 0; k < rd->stack.n; k++) {
				add_frame(b, "        ", &rd->stack.v[k]);
			}
		}
	}
	spy_buf_adds(b, "    await tree:\n");
	/* Up to 6 bytes per level ("\u2502   " is 3 + 3). */
	char prefix[6 * (TREE_MAX_DEPTH + 1)];
	size_t nroots = 0, seen = 0;
	for (size_t i = 0; i < r->ntasks; i++) {
		nroots += r->task_v[i].loop == loop && is_root(tr, &r->task_v[i]);
	}
	for (size_t i = 0; i < r->ntasks; i++) {
		const struct pyrt_task *t = &r->task_v[i];
		if (t->loop == loop && is_root(tr, t) && !tr->drawn[i]) {
			seen++;
			tree_node(tr, t, b, prefix, 0, seen == nroots, 0);
		}
	}
	/* Tasks only a cycle of awaits reaches (hostile or corrupt memory). */
	for (size_t i = 0; i < r->ntasks; i++) {
		if (r->task_v[i].loop == loop && !tr->drawn[i]) {
			tree_node(tr, &r->task_v[i], b, prefix, 0, true, 0);
		}
	}
}

void dump_print_tasks_text(const struct dump_result *r, struct spy_buf *b)
{
	if (r->tasks_error) {
		spy_buf_adds(b, "\nasyncio: ");
		spy_term_adds(b, r->tasks_error);
		spy_buf_addch(b, '\n');
		return;
	}
	spy_addr_t *loops = spy_xcalloc(r->ntasks + 1, sizeof(*loops));
	struct tree tr;
	tree_init(&tr, r);
	size_t nl = loops_of(r, loops);
	spy_buf_addf(b, "\nasyncio: %zu task%s in %zu event loop%s\n", r->tasks_total,
		     r->tasks_total == 1 ? "" : "s", nl, nl == 1 ? "" : "s");
	for (size_t i = 0; i < nl; i++) {
		print_loop(&tr, loops[i], b);
	}
	if (r->tasks_total > r->ntasks) {
		spy_buf_addf(b, "\n... %zu more tasks not shown (at most %d)\n", r->tasks_total - r->ntasks,
			     PROF_MAX_TASKS);
	}
	tree_release(&tr);
	free(loops);
}

static void json_frame(struct spy_buf *b, const struct spy_frame *fr)
{
	spy_buf_adds(b, "{\"function\": ");
	spy_json_string(b, fr->func);
	spy_buf_adds(b, ", \"file\": ");
	spy_json_string(b, fr->file);
	if (fr->line) {
		spy_buf_addf(b, ", \"line\": %u}", fr->line);
	} else {
		spy_buf_adds(b, ", \"line\": null}");
	}
}

void dump_print_tasks_json(const struct dump_result *r, struct spy_buf *b)
{
	if (!r->tasks) {
		spy_buf_adds(b, "null");
		return;
	}
	if (r->tasks_error) {
		spy_buf_adds(b, "{\"error\": ");
		spy_json_string(b, r->tasks_error);
		spy_buf_adds(b, ", \"total\": 0, \"loops\": []}");
		return;
	}
	spy_addr_t *loops = spy_xcalloc(r->ntasks + 1, sizeof(*loops));
	size_t nl = loops_of(r, loops);
	spy_buf_addf(b, "{\"error\": null, \"total\": %zu, \"loops\": [", r->tasks_total);
	for (size_t l = 0; l < nl; l++) {
		const struct prof_look_thread *d = NULL;
		for (size_t i = 0; i < r->ntasks && !d; i++) {
			if (r->task_v[i].loop == loops[l]) {
				d = thread_of(r, r->task_v[i].loop_thread_id);
			}
		}
		spy_buf_addf(b, "%s\n  {\"loop\": \"0x%llx\", \"tid\": ", l ? "," : "",
			     (unsigned long long)loops[l]);
		if (d) {
			spy_buf_addf(b, "%d, \"thread\": ", (int)d->py.native_tid);
			spy_json_string(b, d->name ? d->name : d->comm);
		} else {
			spy_buf_adds(b, "null, \"thread\": null");
		}
		spy_buf_adds(b, ", \"tasks\": [");
		const char *sep = "";
		for (size_t i = 0; i < r->ntasks; i++) {
			const struct pyrt_task *t = &r->task_v[i];
			if (t->loop != loops[l]) {
				continue;
			}
			spy_buf_addf(b, "%s\n   {\"address\": \"0x%llx\", \"name\": ", sep,
				     (unsigned long long)t->addr);
			sep = ",";
			spy_json_string(b, t->name);
			spy_buf_adds(b, ", \"state\": ");
			spy_json_string(b, state_name(t->state));
			spy_buf_addf(b, ", \"running\": %s, \"chain_truncated\": %s, \"chain\": [",
				     t->running ? "true" : "false", t->chain_truncated ? "true" : "false");
			for (size_t k = 0; k < t->nchain; k++) {
				spy_buf_adds(b, k ? ", " : "");
				json_frame(b, &t->chain[k]);
			}
			spy_buf_adds(b, "], \"awaited_by\": [");
			for (size_t k = 0; k < t->nawaited_by; k++) {
				spy_buf_addf(b, "%s\"0x%llx\"", k ? ", " : "",
					     (unsigned long long)t->awaited_by[k]);
			}
			spy_buf_adds(b, "], \"stack\": ");
			const struct prof_look_thread *rd = t->running ? thread_of(r, t->thread_id) : NULL;
			if (rd) {
				spy_buf_addf(b, "{\"tid\": %d, \"frames\": [", (int)rd->py.native_tid);
				for (size_t k = 0; k < rd->stack.n; k++) {
					spy_buf_adds(b, k ? ", " : "");
					json_frame(b, &rd->stack.v[k]);
				}
				spy_buf_adds(b, "]}");
			} else {
				spy_buf_adds(b, "null");
			}
			spy_buf_addch(b, '}');
		}
		spy_buf_adds(b, "]}");
	}
	spy_buf_adds(b, "]}");
	free(loops);
}
