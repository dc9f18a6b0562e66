/*
 * Continuous mode, as record --push and the agent both run it: the push
 * options, their rules, the sender (cmd/push.h) and the lines saying how
 * it goes, one per command (struct stream_sink); and per process profiled
 * (struct stream) the labels its windows are filed under and the metadata
 * each window carries. Written once so that a new label, option or push
 * API is added for both commands at once, and --help, doc/ and the man
 * pages say the same of the options in both.
 *
 * When a window closes is cmd/session.h's windows, on wall-clock
 * multiples of --push-every for both (the agent's first and last whole
 * periods, record's the parts it sampled); what a window holds is each
 * command's (record's fg_profile, the agent's budgeted agent_window): both
 * hand the closed profile here.
 */
#ifndef SPY_CMD_STREAM_H
#define SPY_CMD_STREAM_H

#include <stdbool.h>
#include <stdint.h>

#include "cmd/opts.h"
#include "cmd/push.h"
#include "flamegraph/flamegraph.h"

/* --push-every: the default (the backends' own agents push every 10 s) and the longest. */
#define STREAM_EVERY_S 10
#define STREAM_EVERY_MAX_S 3600

/* The push options' values, as given. */
struct stream_opts {
	const char *url, *api, *ca, *cert, *key, *tenant, *token_file, *basic_file;
	bool insecure;
	unsigned every_s;            /* --push-every; UINT_MAX until given (stream_sink_init) */
	/* record's alone (STREAM_SERIES_OPTIONS): the agent names and labels each process itself */
	const char *app;
	bool send_command;
	struct opt_strings labels;   /* --label K=V, as given */
};

/*
 * The option rows both commands' tables include, in this order. URL_HELP
 * is --push's own (what the command does with it); WITH is "" where
 * --push is required, else the condition ("with --push: ") the rows
 * that need it start with.
 */
#define STREAM_PUSH_OPTIONS(so, URL_HELP, WITH)                                                                  \
	{ 0, "push", OPT_STRING, &(so)->url, "URL", URL_HELP },                                                   \
	{ 0, "push-every", OPT_UINT, &(so)->every_s, "S",                                                         \
	  WITH "a window every S seconds, on wall-clock multiples (default 10)" },                                \
	{ 0, "push-api", OPT_STRING, &(so)->api, "API",                                                           \
	  WITH "push (Pyroscope's /push.v1.PusherService/Push, the default) or ingest (/ingest, for older servers)" }, \
	{ 0, "push-ca", OPT_STRING, &(so)->ca, "FILE",                                                            \
	  "with an https --push: trust the CA certificates in FILE (PEM) instead of the system's" },              \
	{ 0, "push-cert", OPT_STRING, &(so)->cert, "FILE",                                                        \
	  "with an https --push: a client certificate (PEM), for mutual TLS" },                                   \
	{ 0, "push-key", OPT_STRING, &(so)->key, "FILE",                                                          \
	  "with --push-cert: its private key (PEM), if not in the certificate's file" },                          \
	{ 0, "tenant", OPT_STRING, &(so)->tenant, "ID", WITH "the tenant, sent as X-Scope-OrgID" },                \
	{ 0, "token-file", OPT_STRING, &(so)->token_file, "FILE",                                                 \
	  WITH "a bearer token, read from FILE (or from $SPY_PUSH_TOKEN)" },                                      \
	{ 0, "basic-auth-file", OPT_STRING, &(so)->basic_file, "FILE",                                            \
	  WITH "USER:PASSWORD for basic auth, read from FILE (or from $SPY_PUSH_BASIC_AUTH)" },                   \
	{ 0, "push-insecure", OPT_BOOL, &(so)->insecure, NULL,                                                    \
	  WITH "send the credentials over http:// to a host that is not loopback, in the clear" }

/* record's rows: what one process's windows are named and labelled, chosen on its command line. */
#define STREAM_SERIES_OPTIONS(so)                                                                              \
	{ 0, "push-command", OPT_BOOL, &(so)->send_command, NULL,                                                 \
	  "with --push: send the whole command line, arguments included (default: the program's name only)" },  \
	{ 0, "app", OPT_STRING, &(so)->app, "NAME",                                                               \
	  "with --push: the application name (default: the script's or program's name)" },                        \
	{ 0, "label", OPT_STRINGS, &(so)->labels, "K=V",                                                          \
	  "with --push: one more label (repeatable; host, pid and python are set)" }

/* One command's continuous mode: its options, the sender, what its lines told. */
struct stream_sink {
	struct stream_opts o;
	const char *cmd;             /* the command, for its usage errors */
	struct push_config *push;    /* NULL: no --push */
	struct pusher *pusher;       /* once started */
	char host[256];              /* the host label */
	uint64_t last_look_ns;
	struct push_status shown;    /* what the lines printed so far told */
};

void stream_sink_init(struct stream_sink *k, const char *cmd);
/*
 * The options' rules, once parsed; the configuration without the
 * credentials. 0 (k->push NULL without --push), else the exit code: 2 for
 * a usage error (an option that goes with --push given without it among
 * them), cmd_fail's for another.
 */
int stream_sink_check(struct stream_sink *k);
/* The credentials (cmd/push.h's push_config_auth): 0 or the exit code, as stream_sink_check. */
int stream_sink_auth(struct stream_sink *k);
/* Start the sender: 0 or the exit code. */
int stream_sink_start(struct stream_sink *k);
/*
 * A line, through say, when pushing starts failing, works again, windows
 * are refused or dropped from a full queue; looked at every 0.1 s at most.
 */
void stream_sink_lines(struct stream_sink *k, uint64_t now_ns, void (*say)(void *ctx, const char *line), void *ctx);
/* Send what is queued within wait_ns, stop the sender; *st its last status. */
void stream_sink_finish(struct stream_sink *k, uint64_t wait_ns, struct push_status *st);
void stream_sink_release(struct stream_sink *k);

/* One process's stream: the series its windows are filed under. */
struct stream {
	struct stream_sink *sink;
	struct push_series series;
	int pid;
};

/*
 * The labels of pid's windows: service_name app (NULL: --app, else the
 * default from cmdline), then host, pid, python (unless ""), then --label's.
 * 0, or the exit code (too many labels).
 */
int stream_open(struct stream *s, struct stream_sink *k, const char *app, const char *cmdline, int pid,
		const char *python);
/* Set a label after stream_open's (the agent's container and k8s ones); false if the table is full. */
bool stream_label(struct stream *s, const char *key, const char *value);
/*
 * The window [from_s, until_s) of p, sampled at rate_hz, to the sender,
 * with the metadata every window has (each command may have set its own
 * before): spy's version, the pid, python, the rate, the duration and
 * command (pusher_command's). A profile without samples is counted, not
 * sent, and gets no metadata.
 */
void stream_window(struct stream *s, struct fg_profile *p, const char *python, const char *command, double rate_hz,
		   int64_t from_s, int64_t until_s);

#endif
