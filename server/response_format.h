/* The request field response_format (OpenAI structured output): "text",
 * "json_object" or "json_schema", compiled into a grammar for the step
 * thread's token masks (latent/json_schema.h). */
#ifndef SRV_RESPONSE_FORMAT_H
#define SRV_RESPONSE_FORMAT_H

#include <jansson.h>

#include "errors.h"
#include "latent/json_schema.h"

/* v: the field's value, or NULL when absent. *out: NULL for text (or absent),
 * else a compiled grammar the caller owns. -1 with a 400 in *e when the field
 * or its schema is refused; the message names the keyword and JSON pointer. */
int srv_response_format_parse(const json_t *v, latent_json_grammar **out, srv_error *e);

#endif
