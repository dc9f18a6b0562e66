/*
 * record --push: handing finished windows to a Pyroscope server.
 *
 * The sampling thread hands each window's profile over (pusher_window):
 * it is encoded (a gzip'd pprof, in the request the API takes) and
 * enqueued; a thread of this module's own sends them, oldest first,
 * through common/http.h (libcurl: http and https, proxies). Two APIs:
 *  - push (the default): Pyroscope's stable ingestion API, the Connect
 *    unary call POST /push.v1.PusherService/Push with a push.v1.PushRequest
 *    (Content-Type application/proto): one series, its labels __name__
 *    (process_cpu), service_name and spy's own, one sample holding the
 *    gzip'd pprof (sample types samples/count and cpu/nanoseconds, period
 *    cpu/nanoseconds of 1e9 / rate, time_nanos the window's start);
 *  - ingest (--push-api ingest, for servers older than the push API):
 *    POST /ingest, the pprof and a sample type configuration as a
 *    multipart form, the labels in the name parameter.
 * A failed push (no connection, a timeout, a 5xx, 408 or 429) is retried
 * with backoff and its window kept; the queue is bounded in windows and
 * bytes, and when full the oldest window is dropped and counted. Sampling
 * never waits for the network: enqueueing takes a lock the sender holds
 * only to move a window in or out.
 *
 * What a window tells of its process: its pid, Python version, and its
 * program's name (the executable and the script or -m module), not its
 * arguments, which can hold secrets; --push-command sends the whole
 * command line (the root frame and the "command" metadata).
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
#include "common/strtab.h"
#include "flamegraph/flamegraph.h"

/* The queue's bounds. */
#define PUSH_MAX_WINDOWS 1024
#define PUSH_MAX_BYTES (64u << 20)
/*
 * The most one window's request may take: a larger one is not queued (it
 * would empty the queue of every other window, and still not fit), but
 * counted as refused, with the reason.
 */
#define PUSH_MAX_WINDOW_BYTES (PUSH_MAX_BYTES / 8)
#define PUSH_MAX_LABELS 64
/* The most a Ctrl-C waits for the last windows to go out. */
#define PUSH_FLUSH_NS (5 * 1000 * 1000 * 1000ull)

struct push_label {
	char key[64];
	char value[256];
};

/*
 * What a window is filed under: the application name (service_name) and
 * the labels (host, pid, python, --label's), and the rate it was sampled
 * at. record has one; an agent, one per process.
 */
struct push_series {
	char app[256];
	struct push_label labels[PUSH_MAX_LABELS];
	size_t nlabels;
	double rate_hz;                /* ingest's sampleRate (the pprof's period comes from the profile) */
};

enum push_api {
	PUSH_API_PUSH,     /* POST /push.v1.PusherService/Push, a PushRequest */
	PUSH_API_INGEST,   /* POST /ingest, a multipart form */
};

struct push_config {
	struct http_url url;
	const char *url_text;          /* as given (checked: no userinfo, query or control byte), for messages */
	enum push_api api;
	struct http_tls tls;           /* the file names live as long as the run (argv) */
	bool send_command;             /* --push-command: the command line, not only the program's name */
	bool insecure;                 /* --push-insecure */
	struct push_series series;     /* pusher_window's default */
	char tenant[256];              /* X-Scope-OrgID, "" for none */
	char auth[1024];               /* the Authorization header's value, "" for none */
	unsigned every_s;              /* the push period: the longest wait between retries */
	size_t max_window_bytes;       /* 0: PUSH_MAX_WINDOW_BYTES (a test's smaller cap) */
	uint64_t timeout_ns;           /* per request */
};

/* What the sender has done, for the status line and the summary. */
struct push_status {
	uint64_t sent, dropped, rejected, empty;
	size_t queued;                 /* waiting, including one being sent */
	bool failing;                  /* the last attempt failed (the window is kept) */
	uint64_t failures;             /* attempts that failed, since the start */
	char last_error[600];          /* the last failure's */
	char last_refusal[700];        /* the last refusal's: "HTTP 400 Bad Request: what the server said" */
};

/* Where a push goes, as record and agent take it: the options' values, any NULL but url. */
struct push_dest {
	const char *url;               /* --push */
	const char *api;               /* --push-api: push or ingest */
	const char *ca, *cert, *key;   /* --push-ca, --push-cert, --push-key */
	const char *tenant;            /* --tenant */
	bool insecure;                 /* --push-insecure: credentials over http:// to a host not loopback */
};
/*
 * Check d and set c's URL, API, TLS files and tenant from it. The TLS
 * files must each be a readable file, --push-key only with --push-cert,
 * all only with an https URL. -SPY_EUSAGE/-SPY_EIO with err: the command
 * says it, with its own exit code.
 */
int push_config_dest(struct push_config *c, const struct push_dest *d, struct spy_err *err);
/*
 * The program's name, from its command line (arguments joined by spaces):
 * the executable's base name and, for a Python, the script's base name or
 * "-m MODULE" or "-c"; never an argument beyond those.
 */
void push_program_name(const char *cmdline, char *out, size_t size);
/* The default application name: the script's base name without ".py", else the -m module, else the executable's. */
void push_default_app(const char *cmdline, char *out, size_t size);

/* Whether s is a valid application name / label key / label value; if not, why (for a usage error). */
const char *push_check_app(const char *s);
const char *push_check_key(const char *s);
const char *push_check_value(const char *s);
/* s with every character a value may not hold replaced by '_' (spy's own labels: host names, commands). */
void push_sanitize(char *s, bool app);
/*
 * Set label key to value in s (replacing one of the same key); false if
 * the table is full.
 */
bool push_series_label(struct push_series *s, const char *key, const char *value);
/*
 * The Authorization header from the environment (SPY_PUSH_TOKEN: a bearer
 * token; SPY_PUSH_BASIC_AUTH: user:password) or a file (the same, read
 * whole, one trailing newline dropped); -SPY_EUSAGE/-SPY_EIO with err.
 * Credentials cross a network only under TLS: with an http:// URL whose
 * host is not loopback they are refused (-SPY_EUSAGE) unless c->insecure,
 * and then one line on stderr says they go in the clear. Call it after
 * push_config_dest.
 */
int push_config_auth(struct push_config *c, const char *token_file, const char *basic_file,
		     struct spy_err *err);

struct pusher;
/* Start the sender thread; signals stay with the calling thread. */
int pusher_start(struct pusher **out, const struct push_config *c, struct spy_err *err);
/*
 * Window [from_s, until_s) of series s (NULL: the configuration's):
 * encoded and enqueued (a window without samples is counted, not sent).
 * Never blocks on the network.
 */
void pusher_window(struct pusher *p, const struct push_series *s, const struct fg_profile *w, int64_t from_s,
		   int64_t until_s);
/*
 * The root frame a window's stacks get for a process whose profile root is
 * root (interned `process PID "cmdline"`): root itself with
 * --push-command, else `process PID "PROGRAM"` interned in strs. For the
 * sampling thread only.
 */
const char *pusher_root(struct pusher *p, struct spy_strtab *strs, const char *root, int pid,
			const char *cmdline);
/* The "command" metadata of a window: the command line with --push-command, else the program's name. */
void pusher_command(const struct pusher *p, const char *cmdline, char *out, size_t size);
void pusher_status(struct pusher *p, struct push_status *st);
/*
 * Send what is queued, waiting at most wait_ns, then stop the thread and
 * free p; *st is the final status (queued: the windows left unsent). A
 * thread stuck in a name lookup (which has no deadline) is waited for 1 s
 * more, then left with p to the process's end.
 */
void pusher_finish(struct pusher *p, uint64_t wait_ns, struct push_status *st);

#endif
