/*
 * spy dump's printers (dump-print.c, dump-tasks.c), shared with its
 * command (dump.c): they print profiler's look (struct prof_look) as it
 * was read, each thread with its state, decided from /proc (or a core's
 * registers) and from where the GIL lives.
 */
#ifndef SPY_CMD_DUMP_H
#define SPY_CMD_DUMP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "common/buf.h"
#include "common/sample.h"
#include "profiler/look.h"

const char *dump_state_name(enum prof_state s);
/* One line of deadlock hint into out (empty when nothing looks stuck). */
void dump_hint(const struct prof_look *r, struct spy_buf *out);
void dump_print_text(const struct prof_look *r, FILE *f);
void dump_print_json(const struct prof_look *r, FILE *f);
/* dump-tasks.c: the --tasks section of the text and of the JSON document. */
void dump_print_tasks_text(const struct prof_look *r, struct spy_buf *b);
void dump_print_tasks_json(const struct prof_look *r, struct spy_buf *b);

#endif
