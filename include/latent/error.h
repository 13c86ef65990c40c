/* Error reporting shared by the engine's start-up paths and request paths.
 *
 * Functions that can fail take a `latent_err *` (may be NULL) and return 0 on
 * success, -1 on failure after writing a message that names the file, the
 * thing and what was wrong. Request-path code never exits; offline tools print
 * err.msg and exit. */
#ifndef LATENT_ERROR_H
#define LATENT_ERROR_H

#include <stddef.h>

#define LATENT_ERR_LEN 512

typedef struct latent_err {
    char msg[LATENT_ERR_LEN];
} latent_err;

/* printf-style; a NULL err is allowed (the message is dropped). Returns -1 so
 * callers can write `return latent_err_set(err, "...")`. */
int latent_err_set(latent_err *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#endif
