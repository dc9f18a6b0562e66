/*
 * Debug logging for modules. The level comes from the environment variable
 * SPY_LOG (error, warn, info, debug, trace), so the CLI contract is untouched.
 * spy_log tests the level before formatting, so a disabled debug line costs a
 * compare. Modules log at debug and trace only: anything the user must see
 * travels as a struct spy_err to cmd/main.c.
 */
#ifndef SPY_COMMON_LOG_H
#define SPY_COMMON_LOG_H

enum spy_log_level {
	SPY_LOG_ERROR = 0,
	SPY_LOG_WARN,
	SPY_LOG_INFO,
	SPY_LOG_DEBUG,
	SPY_LOG_TRACE,
};

/* One of the two globals spy allows (the other is the stop flag). */
extern int spy_log_level;

void spy_log_init_from_env(void);
void spy_log_write(int level, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

#define spy_log(level, ...)                          \
	do {                                         \
		if ((level) <= spy_log_level) {      \
			spy_log_write((level), __VA_ARGS__); \
		}                                    \
	} while (0)

#endif
