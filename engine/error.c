/* The error table (include/latent/error.h) and latent_err_set. */
#include "latent/error.h"

#include <stdarg.h>
#include <stdio.h>

static const struct {
    const char *name, *message;
} table[LATENT_E__COUNT] = {
    [LATENT_OK] = {"OK", "no error"},
#define LATENT_ERR_ROW(code, name, msg) [code] = {name, msg},
    LATENT_ERR_MAP(LATENT_ERR_ROW)
#undef LATENT_ERR_ROW
};

static int known(latent_err_code code) { return code >= LATENT_OK && code < LATENT_E__COUNT; }

const char *latent_err_name(latent_err_code code) { return known(code) ? table[code].name : "EUNKNOWN"; }
const char *latent_err_default_message(latent_err_code code) { return known(code) ? table[code].message : "unknown error"; }

int latent_err_set(latent_err *err, latent_err_code code, const char *fmt, ...) {
    if (err) {
        err->code = code;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
        if (!err->msg[0]) snprintf(err->msg, sizeof err->msg, "%s", latent_err_default_message(code));
    }
    return -1;
}
