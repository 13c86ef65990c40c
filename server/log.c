/* Log lines, text or JSON, under one mutex. */
#include "log.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static FILE *log_fp;        /* NULL = stderr */
static char *log_path;
static srv_log_level log_level = SRV_LOG_INFO;
static int log_json;

static const char *level_names[] = {"error", "warn", "info", "debug"};

int srv_log_level_parse(const char *s) {
    for (int i = 0; i < 4; i++)
        if (!strcmp(s, level_names[i])) return i;
    if (!strcmp(s, "warning")) return SRV_LOG_WARN;
    return -1;
}

int srv_log_open(const char *path, srv_log_level level, int json) {
    pthread_mutex_lock(&log_mu);
    log_level = level, log_json = json;
    int rc = 0;
    if (path && *path) {
        FILE *f = fopen(path, "a");
        if (!f) {
            rc = -1;
        } else {
            setvbuf(f, NULL, _IOLBF, 0);
            if (log_fp) fclose(log_fp);
            log_fp = f;
            free(log_path);
            log_path = strdup(path);
        }
    }
    pthread_mutex_unlock(&log_mu);
    return rc;
}

int srv_log_reopen(void) {
    pthread_mutex_lock(&log_mu);
    int rc = 0;
    if (log_path) {
        FILE *f = fopen(log_path, "a");
        if (f) {
            setvbuf(f, NULL, _IOLBF, 0);
            fclose(log_fp);
            log_fp = f;
        } else {
            rc = -1;
        }
    }
    pthread_mutex_unlock(&log_mu);
    return rc;
}

void srv_log_close(void) {
    pthread_mutex_lock(&log_mu);
    if (log_fp) fclose(log_fp);
    log_fp = NULL;
    free(log_path);
    log_path = NULL;
    pthread_mutex_unlock(&log_mu);
}

int srv_log_enabled(srv_log_level level) { return level <= log_level; }

static void timestamp(char *buf, size_t cap) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    size_t n = strftime(buf, cap, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf + n, cap - n, ".%03ldZ", ts.tv_nsec / 1000000);
}

static void write_line(const char *line) {
    pthread_mutex_lock(&log_mu);
    FILE *f = log_fp ? log_fp : stderr;
    fputs(line, f);
    fputc('\n', f);
    fflush(f);
    pthread_mutex_unlock(&log_mu);
}

void srv_log_fields(srv_log_level level, const char *msg, json_t *fields) {
    if (!srv_log_enabled(level)) {
        json_decref(fields);
        return;
    }
    char ts[40];
    timestamp(ts, sizeof ts);
    if (log_json) {
        json_t *o = json_object();
        json_object_set_new(o, "ts", json_string(ts));
        json_object_set_new(o, "level", json_string(level_names[level]));
        json_t *m = json_string(msg);
        json_object_set_new(o, "msg", m ? m : json_string("(message not UTF-8)"));
        if (fields) json_object_update(o, fields);
        char *s = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(7));
        if (s) write_line(s);
        free(s);
        json_decref(o);
    } else {
        size_t cap = 256 + strlen(msg), n;
        char *line = malloc(cap);
        if (!line) {
            json_decref(fields);
            return;
        }
        n = (size_t)snprintf(line, cap, "%s %-5s %s", ts, level_names[level], msg);
        const char *key;
        json_t *v;
        json_object_foreach(fields, key, v) {
            char *val = json_is_string(v) ? strdup(json_string_value(v)) : json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT | JSON_REAL_PRECISION(7));
            if (!val) continue;
            size_t need = n + strlen(key) + strlen(val) + 8;
            if (need > cap) {
                char *l2 = realloc(line, need * 2);
                if (!l2) {
                    free(val);
                    break;
                }
                line = l2, cap = need * 2;
            }
            int quote = json_is_string(v) && (strchr(val, ' ') || !*val);
            n += (size_t)snprintf(line + n, cap - n, quote ? " %s=\"%s\"" : " %s=%s", key, val);
            free(val);
        }
        write_line(line);
        free(line);
    }
    json_decref(fields);
}

void srv_log(srv_log_level level, const char *fmt, ...) {
    if (!srv_log_enabled(level)) return;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    srv_log_fields(level, msg, NULL);
}
