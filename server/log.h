/* The daemon's log: text lines or JSON lines, to stderr or a file that SIGHUP
 * reopens (for logrotate). Safe to call from any thread; each line is written
 * whole. */
#ifndef SRV_LOG_H
#define SRV_LOG_H

#include <jansson.h>

typedef enum { SRV_LOG_ERROR = 0, SRV_LOG_WARN, SRV_LOG_INFO, SRV_LOG_DEBUG } srv_log_level;

/* Parses "error|warn|info|debug"; -1 when unknown. */
int srv_log_level_parse(const char *s);

/* path NULL or "" logs to stderr. Returns -1 (errno set) when the file cannot be opened. */
int srv_log_open(const char *path, srv_log_level level, int json);
/* Reopens the file (same path); keeps the old stream on failure. */
int srv_log_reopen(void);
void srv_log_close(void);
int srv_log_enabled(srv_log_level level);

void srv_log(srv_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A message with fields (an object, stolen: decref'd here; may be NULL):
 * text format appends key=value pairs, JSON format merges them into the line. */
void srv_log_fields(srv_log_level level, const char *msg, json_t *fields);

#endif
