/* Small text files (config.json, trainer.json) written so that a crash
 * leaves the old file or the new one, never a mix. */
#ifndef LATENT_FILE_ATOMIC_H
#define LATENT_FILE_ATOMIC_H

#include "latent/error.h"

/* text (and a newline when newline != 0) to path: a temporary sibling
 * path.tmp, fsync, rename over path, then an fsync of the directory so the
 * rename survives a crash (best effort). 0, or -1 with err naming the file. */
int latent_write_text_atomic(const char *path, const char *text, int newline, latent_err *err);

#endif
