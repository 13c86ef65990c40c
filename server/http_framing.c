/* Message framing checks libmicrohttpd leaves to us. A request whose length
 * two parties could read differently is how one request is smuggled inside
 * another past a proxy (RFC 9112 section 6.3), so it is refused, as nginx
 * does, and the connection closed by the caller. */
#include "http_framing.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

typedef struct {
    int bad_name, bad_value;
    int n_length, length_bad;
    unsigned long long length;
    int n_coding, coding_bad;
    int n_host;
} framing;

static int all_digits(const char *v) {
    if (!*v) return 0;
    for (; *v; v++)
        if (!isdigit((unsigned char)*v)) return 0;
    return 1;
}

/* RFC 9110 section 5.6.2: tchar. */
static int is_token(const char *k, size_t n) {
    if (n == 0 || strlen(k) != n) return 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)k[i];
        if (!isalnum(ch) && !strchr("!#$%&'*+-.^_`|~", ch)) return 0;
    }
    return 1;
}

/* A NUL or a CR or LF inside a value (MHD gives the length it framed, so a
 * NUL shows as a string shorter than the value). */
static int value_clean(const char *v, size_t n) {
    if (strlen(v) != n) return 0;
    return strpbrk(v, "\r\n") == NULL;
}

/* RFC 9112 section 5.1: whitespace between a field name and its colon is
 * refused with 400, since a proxy that trims it frames the message
 * differently; a name that is not a token, or a value with a NUL or a bare
 * CR, likewise. libmicrohttpd keeps such names verbatim, so they show here. */
static enum MHD_Result count_header(void *cls, enum MHD_ValueKind kind, const char *key, size_t key_size,
                                    const char *value, size_t value_size) {
    framing *f = cls;
    if (!key || !is_token(key, key_size)) f->bad_name = 1;
    if (value && !value_clean(value, value_size)) f->bad_value = 1;
    if (!key) return MHD_YES;
    if (!value) value = "";
    if (!strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH)) {
        f->n_length++;
        if (!all_digits(value) || strlen(value) > 19) f->length_bad = 1;
        else f->length = strtoull(value, NULL, 10);
    } else if (!strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING)) {
        f->n_coding++;
        if (strcasecmp(value, "chunked") != 0) f->coding_bad = 1; /* the only coding a request may use here */
    } else if (!strcasecmp(key, MHD_HTTP_HEADER_HOST)) {
        f->n_host++;
    }
    return MHD_YES;
}

int srv_http_check_framing(struct MHD_Connection *mc, const char *version, long max_body,
                           unsigned long long *content_length, srv_error *e) {
    framing f = {0};
    *content_length = 0;
    MHD_get_connection_values_n(mc, MHD_HEADER_KIND, count_header, &f);
    if (f.bad_name)
        return srv_error_set(e, SRV_ERR_BAD_FRAMING, NULL, "a header field name is not a token (whitespace before the colon?)");
    if (f.bad_value) return srv_error_set(e, SRV_ERR_BAD_FRAMING, NULL, "a header field value holds a NUL, CR or LF");
    if (f.n_coding && f.n_length)
        return srv_error_set(e, SRV_ERR_BAD_FRAMING, NULL, "a request may not carry both Content-Length and Transfer-Encoding");
    if (f.n_length > 1) return srv_error_set(e, SRV_ERR_BAD_FRAMING, NULL, "the request has more than one Content-Length");
    if (f.length_bad) return srv_error_set(e, SRV_ERR_BAD_FRAMING, NULL, "Content-Length is not a decimal number");
    if (f.n_coding > 1 || f.coding_bad)
        return srv_error_set(e, SRV_ERR_NOT_IMPLEMENTED, NULL, "the only Transfer-Encoding accepted is a single 'chunked'");
    if (version && !strcmp(version, MHD_HTTP_VERSION_1_1) && f.n_host != 1)
        return srv_error_set(e, SRV_ERR_BAD_FRAMING, NULL, "an HTTP/1.1 request needs exactly one Host header");
    if (f.n_length && f.length > (unsigned long long)max_body)
        return srv_error_set(e, SRV_ERR_TOO_LARGE, NULL, "the request body is larger than the limit of %ld bytes", max_body);
    *content_length = f.n_length ? f.length : 0;
    return 0;
}
