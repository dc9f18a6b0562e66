/*
 * spy dump's output: the text of the CLI contract (doc/spy-dump.md,
 * "Output"), the same information as one JSON document (doc/dump-json.md),
 * and the deadlock hint both print.
 *
 * Both printers walk the same look (struct prof_look) in the same order, so a
 * test can hold one against the other; the reprs of locals come from
 * pystate's one formatter, so they agree too.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cmd/dump.h"
#include "common/json.h"
#include "common/term.h"
#include "common/util.h"

const char *dump_state_name(enum prof_state s)
{
	switch (s) {
	case PROF_STATE_RUNNING:
		return "running";
	case PROF_STATE_IDLE:
		return "idle";
	case PROF_STATE_LOCK:
		return "waiting on a lock";
	case PROF_STATE_GIL:
		return "waiting for the GIL";
	default:
		return "unknown";
	}
}

/* Whether r's threads run in more than one interpreter: then each says which. */
static bool many_interps(const struct prof_look *r)
{
	for (size_t i = 0; i < r->n; i++) {
		if (r->threads[i].py.interp_id != 0 || r->threads[i].py.nouter) {
			return true;
		}
	}
	return false;
}

/* ", in interpreter 1 entered from 0": where thread d runs, and from where it got there. */
static void text_interps(struct spy_buf *b, const struct prof_look_thread *d)
{
	spy_buf_addf(b, ", in interpreter %lld", (long long)d->py.interp_id);
	for (size_t k = 0; k < d->py.nouter && k < PYRT_MAX_NEST; k++) {
		spy_buf_addf(b, "%s%lld", k ? " from " : " entered from ", (long long)d->py.outer[k].interp_id);
	}
}

static const struct prof_look_thread *gil_holder(const struct prof_look *r)
{
	for (size_t i = 0; i < r->n; i++) {
		if (r->threads[i].py.holds_gil) {
			return &r->threads[i];
		}
	}
	return NULL;
}

/*
 * A worker parked until there is work: its innermost Python frame is the
 * standard library's condition, event or queue wait. Every thread of an idle
 * pool waits on a lock that way, and none runs, which is no deadlock: such
 * waits are left out of the hint. A lock acquired in the program's own code
 * still counts.
 */
static bool waits_for_work(const struct prof_look_thread *d)
{
	for (size_t i = 0; i < d->stack.n; i++) {
		const struct spy_frame *f = &d->stack.v[i];
		if (f->kind != SPY_FRAME_PYTHON) {
			continue;
		}
		if (spy_ends_with(f->file, "/threading.py")) {
			return spy_ends_with(f->func, "wait");
		}
		return (spy_ends_with(f->file, "/queue.py") || spy_ends_with(f->file, "/Queue.py")) &&
		       spy_ends_with(f->func, "get");
	}
	return false;
}

void dump_hint(const struct prof_look *r, struct spy_buf *out)
{
	size_t locked = 0, running = 0;
	const struct prof_look_thread *gil_waiter = NULL;
	for (size_t i = 0; i < r->n; i++) {
		enum prof_state s = r->threads[i].state;
		if (s == PROF_STATE_LOCK && waits_for_work(&r->threads[i])) {
			continue;
		}
		locked += s == PROF_STATE_LOCK;
		running += s == PROF_STATE_RUNNING;
		if (s == PROF_STATE_GIL && !gil_waiter) {
			gil_waiter = &r->threads[i];
		}
	}
	if (locked >= 2 && running == 0) {
		spy_buf_addf(out, "possible deadlock: %zu threads wait on locks and none is running (", locked);
		const char *sep = "";
		for (size_t i = 0; i < r->n; i++) {
			if (r->threads[i].state == PROF_STATE_LOCK && !waits_for_work(&r->threads[i])) {
				spy_buf_addf(out, "%s%d", sep, (int)r->threads[i].py.native_tid);
				sep = ", ";
			}
		}
		spy_buf_addch(out, ')');
		return;
	}
	const struct prof_look_thread *h = gil_holder(r);
	if (gil_waiter && h && h->state != PROF_STATE_RUNNING && h->state != PROF_STATE_UNKNOWN) {
		spy_buf_addf(out, "possible deadlock: thread %d waits for the GIL, held by thread %d, which is %s",
			     (int)gil_waiter->py.native_tid, (int)h->py.native_tid,
			     dump_state_name(h->state));
	}
}

/*
 * The locals of the frame at fr, whose index among the Python frames is
 * *pj (advanced here): native frames merged into the stack have none.
 */
static const struct prof_frame_locals *frame_locals(const struct prof_look_thread *d,
						    const struct spy_frame *fr, size_t *pj)
{
	if (fr->kind != SPY_FRAME_PYTHON || !d->frame_locals || *pj >= d->nframe_locals) {
		return NULL;
	}
	return &d->frame_locals[(*pj)++];
}

/*
 * Every string below came from the target (names, reprs, the command
 * line, the version) and goes through the terminal escaper: a "\n" in a
 * function name must not forge a frame, nor an escape reach the terminal.
 */
static void print_frame_locals(const struct prof_look_thread *d, const struct prof_frame_locals *fl,
			       struct spy_buf *out)
{
	struct spy_buf b = SPY_BUF_INIT;
	if (fl->over_budget) {
		spy_buf_addf(out, "        (locals left out: --locals read its budget of %zu MiB or %zu reads)\n",
			     PROF_LOCALS_BUDGET >> 20, PROF_LOCALS_READS);
	} else if (fl->unreadable) {
		spy_buf_adds(out, "        (locals unreadable)\n");
	}
	for (size_t k = fl->first; k < fl->first + fl->n; k++) {
		const struct py_local *l = &d->locals[k];
		spy_buf_reset(&b);
		prof_value_repr(&l->v, &b);
		spy_buf_addf(out, "        %s ", l->is_arg ? "arg  " : "local");
		spy_term_adds(out, l->name);
		spy_buf_adds(out, " = ");
		spy_term_escape(out, b.buf, b.len, (size_t)-1, NULL);
		spy_buf_addch(out, '\n');
	}
	spy_buf_release(&b);
}

void dump_print_text(const struct prof_look *r, FILE *f)
{
	struct spy_buf b = SPY_BUF_INIT;
	spy_buf_addf(&b, "Process %d: ", r->pid);
	spy_term_adds(&b, r->cmdline);
	spy_buf_adds(&b, "\nPython ");
	spy_term_adds(&b, r->version);
	spy_buf_adds(&b, !r->free_threaded ? "" : r->no_gil ? " free-threaded, running without a GIL" :
							     " free-threaded, GIL switched on");
	spy_buf_adds(&b, " (");
	spy_term_adds(&b, r->binary);
	spy_buf_adds(&b, ")\n");
	fwrite(b.buf, 1, b.len, f);
	spy_buf_reset(&b);
	bool interps = many_interps(r);
	for (size_t i = 0; i < r->n; i++) {
		const struct prof_look_thread *d = &r->threads[i];
		if (d->native_only) {
			/* --native: a thread with no Python thread state has no Python id either. */
			spy_buf_addf(&b, "\nThread %d (native) \"", (int)d->py.native_tid);
		} else {
			spy_buf_addf(&b, "\nThread %d (python 0x%llx) \"", (int)d->py.native_tid,
				     (unsigned long long)d->py.thread_id);
		}
		spy_term_adds(&b, d->name ? d->name : d->comm);
		spy_buf_addf(&b, "\" %s%s", dump_state_name(d->state),
			     d->py.holds_gil ? ", holds the GIL" : "");
		if (interps) {
			text_interps(&b, d);
		}
		spy_buf_addch(&b, '\n');
		if (d->stack.n == 0) {
			spy_buf_adds(&b, d->native_only ? "    (no frames: its native stack could not be read)\n"
						      : "    (no Python frames)\n");
		}
		size_t pj = 0;
		for (size_t j = 0; j < d->stack.n; j++) {
			const struct spy_frame *fr = &d->stack.v[j];
			spy_buf_adds(&b, "    ");
			spy_term_adds(&b, fr->func);
			/* A marker (--native: frames not placed) names no place. */
			if (fr->kind != SPY_FRAME_SYNTHETIC) {
				spy_buf_adds(&b, " (");
				spy_term_adds(&b, fr->file);
				if (fr->line) {
					spy_buf_addf(&b, ":%u", fr->line);
				}
				spy_buf_adds(&b, ")");
			}
			spy_buf_adds(&b, "\n");
			const struct prof_frame_locals *fl = frame_locals(d, fr, &pj);
			if (r->o.locals && fl) {
				print_frame_locals(d, fl, &b);
			}
		}
		if (d->stack.truncated) {
			spy_buf_adds(&b, "    ... (stack truncated: the walk stopped at an unreadable or bounded frame)\n");
		}
		/* Bounded memory for many threads with deep stacks. */
		fwrite(b.buf, 1, b.len, f);
		spy_buf_reset(&b);
	}
	if (r->o.tasks) {
		dump_print_tasks_text(r, &b);
		fwrite(b.buf, 1, b.len, f);
		spy_buf_reset(&b);
	}
	if (r->incomplete) {
		fprintf(f, "\nIncomplete: the target was let go after %.0f ms stopped (the limit); "
			"%zu thread(s) shown%s\n", r->stopped_ms, r->n, r->o.tasks ? ", tasks not read" : "");
	}
	dump_hint(r, &b);
	if (b.len) {
		fprintf(f, "\nHint: %s\n", b.buf);
	}
	spy_buf_release(&b);
	fflush(f);
}

static void json_key_str(struct spy_buf *b, const char *key, const char *val)
{
	spy_buf_addf(b, "\"%s\": ", key);
	if (val) {
		spy_json_string(b, val);
	} else {
		spy_buf_adds(b, "null");
	}
}

static void json_locals(struct spy_buf *b, const struct prof_look_thread *d,
			const struct prof_frame_locals *fl)
{
	struct spy_buf repr = SPY_BUF_INIT;
	spy_buf_addf(b, ", \"locals_unreadable\": %s, \"locals\": [", fl->unreadable ? "true" : "false");
	for (size_t k = fl->first; k < fl->first + fl->n; k++) {
		const struct py_local *l = &d->locals[k];
		spy_buf_reset(&repr);
		prof_value_repr(&l->v, &repr);
		spy_buf_adds(b, k > fl->first ? ", {" : "{");
		json_key_str(b, "name", l->name);
		spy_buf_addf(b, ", \"arg\": %s, ", l->is_arg ? "true" : "false");
		json_key_str(b, "type", l->v.type);
		spy_buf_adds(b, ", ");
		json_key_str(b, "repr", repr.buf);
		spy_buf_addch(b, '}');
	}
	spy_buf_addch(b, ']');
	spy_buf_release(&repr);
}

static void json_thread(struct spy_buf *b, const struct prof_look *r, const struct prof_look_thread *d)
{
	if (d->native_only) {
		spy_buf_addf(b, "{\"tid\": %d, \"thread_id\": null, \"native_only\": true, ", (int)d->py.native_tid);
	} else {
		spy_buf_addf(b, "{\"tid\": %d, \"thread_id\": \"0x%llx\", \"native_only\": false, ",
			     (int)d->py.native_tid, (unsigned long long)d->py.thread_id);
	}
	json_key_str(b, "name", d->name ? d->name : d->comm);
	spy_buf_adds(b, ", ");
	json_key_str(b, "os_name", d->comm);
	spy_buf_adds(b, ", ");
	json_key_str(b, "state", dump_state_name(d->state));
	spy_buf_addf(b, ", \"holds_gil\": %s, ", d->py.holds_gil ? "true" : "false");
	spy_buf_addf(b, "\"interpreter\": %lld, \"entered_from\": [", (long long)d->py.interp_id);
	for (size_t k = 0; k < d->py.nouter && k < PYRT_MAX_NEST; k++) {
		spy_buf_addf(b, "%s%lld", k ? ", " : "", (long long)d->py.outer[k].interp_id);
	}
	spy_buf_adds(b, "], ");
	json_key_str(b, "wchan", d->wait.wchan[0] ? d->wait.wchan : NULL);
	if (d->wait.kind == SPY_WAIT_FUTEX && d->wait.futex) {
		spy_buf_addf(b, ", \"futex\": \"0x%llx\"", (unsigned long long)d->wait.futex);
	} else {
		spy_buf_adds(b, ", \"futex\": null");
	}
	spy_buf_addf(b, ", \"truncated\": %s, \"frames\": [", d->stack.truncated ? "true" : "false");
	size_t pj = 0;
	for (size_t j = 0; j < d->stack.n; j++) {
		const struct spy_frame *fr = &d->stack.v[j];
		spy_buf_adds(b, j ? ", {" : "{");
		json_key_str(b, "kind", fr->kind == SPY_FRAME_NATIVE	   ? "native"
					: fr->kind == SPY_FRAME_SYNTHETIC ? "marker"
									   : "python");
		spy_buf_adds(b, ", ");
		json_key_str(b, "function", fr->func);
		spy_buf_adds(b, ", ");
		json_key_str(b, "file", fr->file);
		if (fr->line) {
			spy_buf_addf(b, ", \"line\": %u", fr->line);
		} else {
			spy_buf_adds(b, ", \"line\": null");
		}
		const struct prof_frame_locals *fl = frame_locals(d, fr, &pj);
		if (r->o.locals && fl) {
			json_locals(b, d, fl);
		}
		spy_buf_addch(b, '}');
	}
	spy_buf_adds(b, "]}");
}

void dump_print_json(const struct prof_look *r, FILE *f)
{
	struct spy_buf b = SPY_BUF_INIT, hint = SPY_BUF_INIT;
	spy_buf_addf(&b, "{\"pid\": %d, ", r->pid);
	json_key_str(&b, "command", r->cmdline);
	spy_buf_adds(&b, ", ");
	json_key_str(&b, "python", r->version);
	spy_buf_adds(&b, ", ");
	json_key_str(&b, "binary", r->binary);
	spy_buf_addf(&b, ", \"free_threaded\": %s, \"gil\": %s, ", r->free_threaded ? "true" : "false",
		     r->no_gil ? "false" : "true");
	json_key_str(&b, "core", r->o.core);
	spy_buf_adds(&b, ",\n \"threads\": [");
	for (size_t i = 0; i < r->n; i++) {
		spy_buf_adds(&b, i ? ",\n  " : "\n  ");
		json_thread(&b, r, &r->threads[i]);
	}
	dump_hint(r, &hint);
	spy_buf_adds(&b, "],\n \"asyncio\": ");
	dump_print_tasks_json(r, &b);
	spy_buf_adds(&b, ",\n ");
	json_key_str(&b, "hint", hint.len ? hint.buf : NULL);
	spy_buf_addf(&b, ", \"incomplete\": %s", r->incomplete ? "true" : "false");
	spy_buf_adds(&b, "}\n");
	fwrite(b.buf, 1, b.len, f);
	fflush(f);
	spy_buf_release(&b);
	spy_buf_release(&hint);
}
