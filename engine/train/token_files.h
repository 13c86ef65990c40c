/* The one naming rule and reader for token files and their companions
 * (private to libengine; latent_tokens_open itself is public in train.h). */
#ifndef LATENT_TOKEN_FILES_H
#define LATENT_TOKEN_FILES_H

#include "latent/train.h"

/* NAME.ext for NAME.bin (a path without .bin gets ext appended); malloc'd,
 * NULL when out of memory. */
char *latent_token_companion(const char *bin_path, const char *ext);

#endif
