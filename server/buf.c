#include "buf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int reserve(srv_buf *b, size_t extra) {
    if (b->len + extra + 1 <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra + 1) cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) {
        b->oom = 1;
        return -1;
    }
    b->p = p, b->cap = cap;
    return 0;
}

int srv_buf_reserve(srv_buf *b, size_t n) {
    if (b->len + n + 1 <= b->cap) return 0;
    char *p = realloc(b->p, b->len + n + 1);
    if (!p) {
        b->oom = 1;
        return -1;
    }
    b->p = p, b->cap = b->len + n + 1;
    return 0;
}

void srv_buf_append(srv_buf *b, const void *data, size_t n) {
    if (reserve(b, n) != 0) return;
    if (n) memcpy(b->p + b->len, data, n);
    b->len += n;
    b->p[b->len] = 0;
}

void srv_buf_puts(srv_buf *b, const char *s) { srv_buf_append(b, s, strlen(s)); }

void srv_buf_printf(srv_buf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || reserve(b, (size_t)n) != 0) return;
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

void srv_buf_consume(srv_buf *b, size_t n) {
    if (n >= b->len) {
        b->len = 0;
    } else {
        memmove(b->p, b->p + n, b->len - n);
        b->len -= n;
    }
    if (b->p) b->p[b->len] = 0;
}

void srv_buf_reset(srv_buf *b) {
    b->len = 0;
    if (b->p) b->p[0] = 0;
}

void srv_buf_free(srv_buf *b) {
    free(b->p);
    memset(b, 0, sizeof *b);
}
