/* ChatML, Llama-3 and plain chat templates, and recognising which a model uses. */
#include "chat_template.h"

#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

const char *srv_tmpl_name(srv_tmpl_kind k) {
    return k == SRV_TMPL_CHATML ? "chatml" : k == SRV_TMPL_LLAMA3 ? "llama3" : "plain";
}

static int kind_from_name(const char *name, srv_tmpl_kind *k) {
    if (!strcmp(name, "chatml")) *k = SRV_TMPL_CHATML;
    else if (!strcmp(name, "llama3")) *k = SRV_TMPL_LLAMA3;
    else if (!strcmp(name, "plain")) *k = SRV_TMPL_PLAIN;
    else return -1;
    return 0;
}

static void set_kind(srv_chat_template *t, srv_tmpl_kind k) {
    t->kind = k;
    t->end_of_turn = k == SRV_TMPL_CHATML ? "<|im_end|>" : k == SRV_TMPL_LLAMA3 ? "<|eot_id|>" : NULL;
}

/* The default system prompt of a SmolLM2-style ChatML template: the text
 * between "<|im_start|>system" + newline (real, or the two characters \n of
 * a Jinja string) and "<|im_end|>", inside an "if the first message is not a
 * system message" branch. Jinja escapes \n, \', \" and \\ are undone. */
static char *chatml_default_system(const char *j) {
    if (!strstr(j, "!= 'system'") && !strstr(j, "!= \"system\"")) return NULL;
    const char *p = strstr(j, "<|im_start|>system");
    if (!p) return NULL;
    p += strlen("<|im_start|>system");
    if (*p == '\n') p++;
    else if (p[0] == '\\' && p[1] == 'n') p += 2;
    else return NULL;
    const char *end = strstr(p, "<|im_end|>");
    if (!end || memchr(p, '{', (size_t)(end - p))) return NULL; /* not a literal */
    char *s = malloc((size_t)(end - p) + 1), *o = s;
    if (!s) return NULL;
    for (; p < end; p++) {
        if (*p == '\\' && p + 1 < end) {
            p++;
            *o++ = *p == 'n' ? '\n' : *p == 't' ? '\t' : *p;
        } else {
            *o++ = *p;
        }
    }
    *o = 0;
    return s;
}

int srv_tmpl_detect(srv_chat_template *t, const char *jinja, latent_err *err) {
    memset(t, 0, sizeof *t);
    if (!jinja) {
        set_kind(t, SRV_TMPL_PLAIN);
        return 0;
    }
    if (strstr(jinja, "<|im_start|>")) {
        set_kind(t, SRV_TMPL_CHATML);
        t->default_system = chatml_default_system(jinja);
        return 0;
    }
    if (strstr(jinja, "<|start_header_id|>")) {
        set_kind(t, SRV_TMPL_LLAMA3);
        return 0;
    }
    return latent_err_set(err, LATENT_E_UNSUPPORTED, "the model's chat template is not one latentd knows (ChatML, Llama-3); "
                               "pass --chat-template chatml|llama3|plain to choose one");
}

int srv_tmpl_load(srv_chat_template *t, const char *dir, const char *name, latent_err *err) {
    memset(t, 0, sizeof *t);
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    json_error_t jerr;
    json_t *root = NULL;
    FILE *f = fopen(path, "r");
    if (f) {
        root = json_loadf(f, 0, &jerr);
        fclose(f);
        if (!root) return latent_err_set(err, LATENT_E_FORMAT, "%s: invalid JSON: %s (line %d)", path, jerr.text, jerr.line);
    } else if (errno != ENOENT) {
        return latent_err_set(err, LATENT_E_IO, "%s: cannot open: %s", path, strerror(errno));
    }
    json_t *tj = json_object_get(root, "chat_template");
    const char *jinja = json_string_value(tj);
    if (json_is_array(tj)) { /* [{"name": "default", "template": ...}, ...] */
        size_t i;
        json_t *it;
        json_array_foreach(tj, i, it) {
            const char *n = json_string_value(json_object_get(it, "name"));
            if (n && !strcmp(n, "default")) jinja = json_string_value(json_object_get(it, "template"));
        }
    }
    int rc = 0;
    if (name) {
        srv_tmpl_kind k;
        if (kind_from_name(name, &k) != 0) {
            rc = latent_err_set(err, LATENT_E_FORMAT, "--chat-template must be chatml, llama3 or plain (got '%s')", name);
        } else {
            srv_chat_template found = {0};
            if (jinja && srv_tmpl_detect(&found, jinja, NULL) == 0 && found.kind == k) {
                *t = found;
            } else { /* another kind than the one asked for: its default system prompt is not used */
                srv_tmpl_free(&found);
                set_kind(t, k);
            }
        }
    } else {
        rc = srv_tmpl_detect(t, jinja, err);
        if (rc != 0) {
            char msg[LATENT_ERR_LEN];
            snprintf(msg, sizeof msg, "%s", err ? err->msg : "");
            latent_err_set(err, LATENT_E_FORMAT, "%s: %s", path, msg);
        }
    }
    json_decref(root);
    return rc;
}

void srv_tmpl_free(srv_chat_template *t) {
    if (!t) return;
    free(t->default_system);
    memset(t, 0, sizeof *t);
}

typedef struct {
    char *s;
    size_t n, cap;
    int oom;
} sbuf;

static void put(sbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *p = realloc(b->s, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->s = p, b->cap = cap;
    }
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = 0;
}

static void puts_(sbuf *b, const char *s) { put(b, s, strlen(s)); }

static const char *role_name(srv_role r) {
    return r == SRV_ROLE_SYSTEM ? "system" : r == SRV_ROLE_USER ? "user" : r == SRV_ROLE_ASSISTANT ? "assistant" : "tool";
}

/* Llama-3's template trims each message's content. */
static void put_trimmed(sbuf *b, const char *s, size_t n) {
    while (n && isspace((unsigned char)*s)) s++, n--;
    while (n && isspace((unsigned char)s[n - 1])) n--;
    put(b, s, n);
}

char *srv_tmpl_render(const srv_chat_template *t, const srv_chat_msg *msgs, int n, int add_generation_prompt,
                      size_t *len) {
    sbuf b = {0};
    put(&b, "", 0);
    switch (t->kind) {
    case SRV_TMPL_CHATML:
        if (t->default_system && (n == 0 || msgs[0].role != SRV_ROLE_SYSTEM)) {
            puts_(&b, "<|im_start|>system\n");
            puts_(&b, t->default_system);
            puts_(&b, "<|im_end|>\n");
        }
        for (int i = 0; i < n; i++) {
            puts_(&b, "<|im_start|>");
            puts_(&b, role_name(msgs[i].role));
            puts_(&b, "\n");
            put(&b, msgs[i].content, msgs[i].len);
            puts_(&b, "<|im_end|>\n");
        }
        if (add_generation_prompt) puts_(&b, "<|im_start|>assistant\n");
        break;
    case SRV_TMPL_LLAMA3:
        puts_(&b, "<|begin_of_text|>");
        for (int i = 0; i < n; i++) {
            puts_(&b, "<|start_header_id|>");
            puts_(&b, msgs[i].role == SRV_ROLE_TOOL ? "ipython" : role_name(msgs[i].role));
            puts_(&b, "<|end_header_id|>\n\n");
            put_trimmed(&b, msgs[i].content, msgs[i].len);
            puts_(&b, "<|eot_id|>");
        }
        if (add_generation_prompt) puts_(&b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
        break;
    case SRV_TMPL_PLAIN:
        for (int i = 0; i < n; i++) {
            if (msgs[i].role == SRV_ROLE_SYSTEM) {
                put(&b, msgs[i].content, msgs[i].len);
                puts_(&b, "\n\n");
                continue;
            }
            puts_(&b, msgs[i].role == SRV_ROLE_USER ? "User: " : msgs[i].role == SRV_ROLE_ASSISTANT ? "Assistant: " : "Tool: ");
            put(&b, msgs[i].content, msgs[i].len);
            puts_(&b, "\n");
        }
        if (add_generation_prompt) puts_(&b, "Assistant:");
        break;
    }
    if (b.oom) {
        free(b.s);
        return NULL;
    }
    *len = b.n;
    return b.s;
}
