/* A growable byte buffer: (ptr, len) slices appended in place. */
#ifndef SRV_BUF_H
#define SRV_BUF_H

#include <stddef.h>

typedef struct srv_buf {
    char *p;                  /* NUL-terminated when non-NULL */
    size_t len, cap;
    int oom;                  /* an append failed: contents are incomplete */
} srv_buf;

void srv_buf_append(srv_buf *b, const void *data, size_t n);
void srv_buf_puts(srv_buf *b, const char *s);
void srv_buf_printf(srv_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Grows the capacity to hold exactly n more bytes (and the NUL) when it is
 * short: 0, or -1 when out of memory. */
int srv_buf_reserve(srv_buf *b, size_t n);
/* Drops the first n bytes. */
void srv_buf_consume(srv_buf *b, size_t n);
void srv_buf_reset(srv_buf *b);
void srv_buf_free(srv_buf *b);

#endif
