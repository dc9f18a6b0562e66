/*
 * record --push: handing finished windows to a Pyroscope server.
 *
 * The sampling thread encodes each window (a gzip'd pprof) and enqueues
 * it; a thread of this module's own sends them, oldest first, to the
 * documented ingest API (POST /ingest, format=pprof, the profile and its
 * sample type configuration as a multipart form). A failed push (no
 * connection, a timeout, a 5xx, 408 or 429) is retried with backoff and
 * its window kept; the queue is bounded in windows and bytes, and when
 * full the oldest window is dropped and counted. Sampling never waits for
 * the network: enqueueing takes a lock the sender holds only to move a
 * window in or out.
 *
 * Labels follow Pyroscope's rules: an application name of [A-Za-z0-9_.-],
 * label keys [A-Za-z_][A-Za-z0-9_]* (not starting "__"), values without
 * the characters of the name's grammar ({ } , = ") or blanks.
 */
#ifndef SPY_CMD_PUSH_H
#define SPY_CMD_PUSH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"
#include "common/err.h"
#include "common/http.h"

/* The queue's bounds. */
#define PUSH_MAX_WINDOWS 1024
#define PUSH_MAX_BYTES (64u << 20)
#define PUSH_MAX_LABELS 64
/* The most a Ctrl-C waits for the last windows to go out. */
#define PUSH_FLUSH_NS (5 * 1000 * 1000 * 1000ull)

struct push_label {
	char key[64];
	char value[256];
};

struct push_config {
	struct http_url url;
	const char *url_text;          /* as given, for messages */
	char app[256];
	struct push_label labels[PUSH_MAX_LABELS];
	size_t nlabels;
	char tenant[256];              /* X-Scope-OrgID, "" for none */
	char auth[1024];               /* the Authorization header's value, "" for none */
	double rate_hz;
	unsigned every_s;              /* the push period: the longest wait between retries */
	uint64_t timeout_ns;           /* per request */
};

/* What the sender has done, for the status line and the summary. */
struct push_status {
	uint64_t sent, dropped, rejected, empty;
	size_t queued;                 /* waiting, including one being sent */
	bool failing;                  /* the last attempt failed (the window is kept) */
	uint64_t failures;             /* attempts that failed, since the start */
	char last_error[600];
};

/* Whether s is a valid application name / label key / label value; if not, why (for a usage error). */
const char *push_check_app(const char *s);
const char *push_check_key(const char *s);
const char *push_check_value(const char *s);
/* s with every character a value may not hold replaced by '_' (spy's own labels: host names, commands). */
void push_sanitize(char *s, bool app);
/*
 * Set label key to value in c (replacing one of the same key); false if
 * the table is full.
 */
bool push_config_label(struct push_config *c, const char *key, const char *value);
/*
 * The Authorization header from the environment (SPY_PUSH_TOKEN: a bearer
 * token; SPY_PUSH_BASIC_AUTH: user:password) or a file (the same, read
 * whole, one trailing newline dropped); -SPY_EUSAGE/-SPY_EIO with err.
 */
int push_config_auth(struct push_config *c, const char *token_file, const char *basic_file,
		     struct spy_err *err);

struct pusher;
/* Start the sender thread; signals stay with the calling thread. */
int pusher_start(struct pusher **out, const struct push_config *c, struct spy_err *err);
/* Enqueue window [from_s, until_s): pprof (gzip'd) bytes, copied. Never blocks on the network. */
void pusher_enqueue(struct pusher *p, int64_t from_s, int64_t until_s, const void *pprof, size_t len);
/* A window with no samples, not sent (counted). */
void pusher_skip(struct pusher *p);
void pusher_status(struct pusher *p, struct push_status *st);
/*
 * Send what is queued, waiting at most wait_ns, then stop the thread and
 * free p; *st is the final status (queued: the windows left unsent). A
 * thread stuck in a name lookup (which has no deadline) is waited for 1 s
 * more, then left with p to the process's end.
 */
void pusher_finish(struct pusher *p, uint64_t wait_ns, struct push_status *st);

#endif
