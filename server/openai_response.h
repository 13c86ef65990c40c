/* The OpenAI response bodies of a generation request (openai_response.c):
 * the whole non-streaming body, SSE chunks, logprob entries. */
#ifndef SRV_OPENAI_RESPONSE_H
#define SRV_OPENAI_RESPONSE_H

#include <jansson.h>

#include "buf.h"
#include "generate.h"

const char *srv_resp_finish_reason(srv_finish f);
/* The whole non-streaming body (malloc'd JSON). */
char *srv_resp_final(const srv_gen *g);
/* One SSE event for a choice: its pending text and logprobs, role (chat,
 * first chunk), finish_reason when done. Appended to out as "data: ...\n\n". */
void srv_resp_chunk(const srv_gen *g, srv_choice *ch, const char *text, size_t len, int with_role, int finish,
                    srv_buf *out);
void srv_resp_usage_chunk(const srv_gen *g, srv_buf *out);
/* Completions echo: the prompt as given, or its ids decoded. */
void srv_resp_echo_text(const srv_gen *g, const srv_choice *ch, srv_buf *out);
/* Logprob entries. */
json_t *srv_resp_logprobs_new(int chat);
void srv_resp_logprobs_add(const srv_gen *g, srv_choice *ch, const srv_event *ev);

#endif
