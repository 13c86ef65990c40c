/* libFuzzer target for latentd's request parser and validator, the chat
 * templates and the stop-string text stream.
 *
 * Input: one selector byte (which API: completions, chat, tokenize,
 * detokenize), then the request body. Checks, beyond "no crash, no leak, no
 * undefined behaviour": a refused body yields a valid JSON error with a 4xx/5xx
 * status, and text fed through the stop-string stream in small pieces never
 * releases a stop string.
 * build: make build/fuzz/fuzz_request; run: build/fuzz/fuzz_request -max_total_time=30 DIR */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "chat_template.h"
#include "errors.h"
#include "openai_request.h"
#include "textstream.h"

static void check(int cond) {
    if (!cond) abort();
}

static int contains(const char *h, size_t n, const char *needle, size_t k) {
    if (k == 0 || k > n) return 0;
    for (size_t i = 0; i + k <= n; i++)
        if (!memcmp(h + i, needle, k)) return 1;
    return 0;
}

/* Feeds text in pieces of 1..4 bytes; the output must hold no stop string. */
static void stream_text(const srv_gen_request *r, const char *text, size_t len) {
    srv_textstream t;
    srv_text_init(&t, r->stop, r->stop_len, r->n_stop);
    srv_buf out = {0};
    size_t off = 0, step = 1;
    int stopped = 0;
    while (off < len && !stopped) {
        size_t k = len - off < step ? len - off : step;
        stopped = srv_text_feed(&t, text + off, k, &out);
        off += k;
        step = step % 4 + 1;
    }
    if (!stopped) srv_text_finish(&t, &out);
    for (int i = 0; i < r->n_stop; i++) check(!contains(out.p ? out.p : "", out.len, r->stop[i], r->stop_len[i]));
    srv_buf_free(&out);
    srv_text_free(&t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    srv_api api = (srv_api)(data[0] % 4);
    const char *body = (const char *)data + 1;
    size_t len = size - 1;
    srv_req_limits lim = {.vocab = 512};
    srv_gen_request r;
    srv_error e;
    if (srv_req_parse(&r, api, body, len, &lim, &e) != 0) {
        int st = srv_error_status(e.kind);
        check(st >= 400 && st < 600);
        char *j = srv_error_json(&e);
        check(j != NULL);
        json_t *back = json_loads(j, 0, NULL);
        check(back && json_is_object(json_object_get(back, "error")));
        json_decref(back);
        free(j);
        return 0;
    }
    check(r.n >= 1 && r.n <= SRV_MAX_N && r.n_stop <= SRV_MAX_STOP);
    for (int i = 0; i < r.n_bias; i++) check(r.bias[i].id >= 0 && r.bias[i].id < lim.vocab);
    for (int i = 0; i < r.n_prompts; i++) {
        const srv_prompt *p = &r.prompts[i];
        if (p->n_ids >= 0) {
            for (int k = 0; k < p->n_ids; k++) check(p->ids[k] >= 0 && p->ids[k] < lim.vocab);
        } else {
            stream_text(&r, p->text, p->len);
        }
    }
    if (r.n_messages) {
        static const char *names[] = {"chatml", "llama3", "plain"};
        for (int k = 0; k < 3; k++) {
            srv_chat_template t;
            check(srv_tmpl_load(&t, "/nonexistent", names[k], NULL) == 0);
            size_t n;
            char *s = srv_tmpl_render(&t, r.messages, r.n_messages, 1, &n);
            check(s != NULL);
            stream_text(&r, s, n);
            free(s);
            srv_tmpl_free(&t);
        }
    }
    srv_req_free(&r);
    /* The template recogniser on arbitrary text. */
    char *z = malloc(len + 1);
    if (z) {
        memcpy(z, body, len);
        z[len] = 0;
        srv_chat_template t;
        if (srv_tmpl_detect(&t, z, NULL) == 0) srv_tmpl_free(&t);
        free(z);
    }
    return 0;
}
