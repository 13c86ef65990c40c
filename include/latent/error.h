/* Error reporting shared by the engine's start-up paths and request paths.
 *
 * Functions that can fail take a `latent_err *` (may be NULL) and return 0 on
 * success, -1 on failure after writing a code from the table below and a
 * message that names the file, the thing and what was wrong. Callers branch
 * on the code; the message is for people. Request-path code never exits;
 * offline tools print err.msg and exit. */
#ifndef LATENT_ERROR_H
#define LATENT_ERROR_H

#include <stddef.h>

#define LATENT_ERR_LEN 512

/* X(code, name, default message): the one table of error codes. */
#define LATENT_ERR_MAP(X)                                                                 \
    X(LATENT_E_INVALID, "EINVAL", "invalid argument")                                     \
    X(LATENT_E_NOMEM, "ENOMEM", "out of memory")                                          \
    X(LATENT_E_IO, "EIO", "a file or socket could not be opened, read or written")        \
    X(LATENT_E_FORMAT, "EFORMAT", "a model, tokenizer, config or data file is malformed") \
    X(LATENT_E_UNSUPPORTED, "EUNSUPPORTED", "valid but not supported here")               \
    X(LATENT_E_EXISTS, "EEXIST", "the output already exists")                             \
    X(LATENT_E_KV_FULL, "EKVFULL", "the KV pool has too few free pages")                  \
    X(LATENT_E_CONTEXT, "ECONTEXT", "longer than the model's context")

typedef enum latent_err_code {
    LATENT_OK = 0,
#define LATENT_ERR_ENUM(code, name, msg) code,
    LATENT_ERR_MAP(LATENT_ERR_ENUM)
#undef LATENT_ERR_ENUM
    LATENT_E__COUNT
} latent_err_code;

typedef struct latent_err {
    latent_err_code code;
    char msg[LATENT_ERR_LEN];
} latent_err;

/* printf-style; a NULL err is allowed (the message is dropped). Returns -1 so
 * callers can write `return latent_err_set(err, LATENT_E_IO, "...")`. */
int latent_err_set(latent_err *err, latent_err_code code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* "EIO" etc.; "OK" for LATENT_OK, "EUNKNOWN" outside the table. */
const char *latent_err_name(latent_err_code code);
/* The table's default message for a code. */
const char *latent_err_default_message(latent_err_code code);

#endif
