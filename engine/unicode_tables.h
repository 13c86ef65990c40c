/* Unicode classes the tokenizer's pre-tokenizer regex needs: \p{L}, \p{N}
 * (range tables generated into unicode_tables.c) and \s (White_Space, as
 * Oniguruma and Rust's regex define it). Private to the engine. */
#ifndef LATENT_UNICODE_TABLES_H
#define LATENT_UNICODE_TABLES_H

#include <stddef.h>
#include <stdint.h>

typedef struct latent_unicode_range {
    uint32_t lo, hi; /* inclusive */
} latent_unicode_range;

extern const latent_unicode_range latent_unicode_letters[];
extern const size_t latent_unicode_letters_len;
extern const latent_unicode_range latent_unicode_numbers[];
extern const size_t latent_unicode_numbers_len;

#endif
