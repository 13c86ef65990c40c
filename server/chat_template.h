/* Chat templates: messages -> prompt text. Three are built in: ChatML as
 * SmolLM2 uses it (with its default system prompt when the model's template
 * injects one), Llama-3, and a plain "User:/Assistant:" fallback. Which one a
 * model uses is recognised from tokenizer_config.json's chat_template, or
 * named by --chat-template; a template that is none of these is a start-up
 * error unless the flag names one. */
#ifndef SRV_CHAT_TEMPLATE_H
#define SRV_CHAT_TEMPLATE_H

#include <stddef.h>

#include "latent/error.h"
#include "openai_request.h"

typedef enum { SRV_TMPL_CHATML, SRV_TMPL_LLAMA3, SRV_TMPL_PLAIN } srv_tmpl_kind;

typedef struct srv_chat_template {
    srv_tmpl_kind kind;
    char *default_system;     /* ChatML: system prompt added when the first message is not one (NULL = none) */
    const char *end_of_turn;  /* special token text that ends a turn ("<|im_end|>", "<|eot_id|>") or NULL */
} srv_chat_template;

const char *srv_tmpl_name(srv_tmpl_kind k);

/* Recognises a Jinja template text (NULL = the model has none: plain).
 * Returns -1 with err set for an unknown template. */
int srv_tmpl_detect(srv_chat_template *t, const char *jinja, latent_err *err);

/* Reads dir/tokenizer_config.json (optional) and picks the template; `name`
 * (the flag, may be NULL) overrides recognition. */
int srv_tmpl_load(srv_chat_template *t, const char *dir, const char *name, latent_err *err);
void srv_tmpl_free(srv_chat_template *t);

/* The prompt text, malloc'd (NUL-terminated; *len its length), or NULL when
 * out of memory. */
char *srv_tmpl_render(const srv_chat_template *t, const srv_chat_msg *msgs, int n, int add_generation_prompt,
                      size_t *len);

#endif
