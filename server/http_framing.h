/* Refuses requests whose framing is ambiguous (both Content-Length and
 * Transfer-Encoding, several or malformed Content-Lengths, a field name that
 * is not a token, such as `Content-Length :` with a space before the colon,
 * a NUL or a bare CR in a field value), transfer codings
 * other than chunked (501), an HTTP/1.1 request without exactly one Host,
 * and a declared body over the limit (413). */
#ifndef SRV_HTTP_FRAMING_H
#define SRV_HTTP_FRAMING_H

#include <microhttpd.h>

#include "errors.h"

/* 0 when the request may be read (*content_length: what it announced, 0
 * when nothing or chunked); -1 with *e set otherwise. */
int srv_http_check_framing(struct MHD_Connection *mc, const char *version, long max_body,
                           unsigned long long *content_length, srv_error *e);

#endif
