/* A bf16 training step that cannot allocate its products' buffers fails
 * with LATENT_E_NOMEM instead of falling back to F32 products: an
 * allocation failure injected at each allocation point of a bf16 step (the
 * weight slots and their panels, the shared packed and rounded operands,
 * the tasks' scratch), in plain, T2MLR Jacobi and LRT, makes the step fail;
 * the same trainer's next step, without a failure, gives the loss and
 * gradients of a clean run bit for bit. A step after a successful one
 * allocates nothing (the buffers only grow), and an F32 step never
 * allocates on this path. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fault.h"
#include "latent/threads.h"
#include "latent/train.h"
#include "testutil.h"
#include "tiny_model.h"

#define B 2
#define T 12

typedef struct {
    latent_train_batch batch;
    int32_t tok[B * T], tgt[B * T];
} batch_buf;

static void make_batch(batch_buf *b, int V) {
    for (int i = 0; i < B * T; i++) b->tok[i] = (i * 7 + 3) % V, b->tgt[i] = (i * 11 + 5) % V;
    b->batch = (latent_train_batch){.tokens = b->tok, .targets = b->tgt};
}

static latent_trainer *trainer(const latent_model *m, latent_train_mode mode, int bf16) {
    latent_train_shape sh = {.mode = mode, .batch = B, .seq = T, .jacobi_iters = 4, .jacobi_grad_iters = 2,
                             .lrt_subsets = 2, .bf16 = bf16};
    latent_err err;
    latent_trainer *t = latent_trainer_new(m, &sh, &err);
    if (!t) abort();
    return t;
}

/* One step into g (zeroed first); its return code. */
static int step(latent_trainer *t, const batch_buf *b, latent_weights *g, double *loss, latent_err *err) {
    memset(g->slab, 0, g->slab_floats * sizeof(float));
    return latent_trainer_step(t, &b->batch, g, loss, err);
}

static int same_step(const latent_weights *a, double la, const latent_weights *b, double lb) {
    return la == lb && memcmp(a->slab, b->slab, a->slab_floats * sizeof(float)) == 0;
}

static void run_mode(const char *name, const latent_model *m, latent_train_mode mode) {
    batch_buf b;
    make_batch(&b, m->cfg.vocab);
    latent_err err;
    latent_weights clean, got;
    latent_weights_alloc(&clean, &m->cfg, &err);
    latent_weights_alloc(&got, &m->cfg, &err);
    double l_clean, l;

    latent_trainer *t = trainer(m, mode, 1);
    CHECK(step(t, &b, &clean, &l_clean, &err) == 0, "%s: clean step: %s", name, err.msg);
    latent_fault_inject(0);
    int rc = step(t, &b, &got, &l, &err);
    int calls = latent_fault_calls();
    latent_fault_inject(-1);
    CHECK(rc == 0 && calls == 0 && same_step(&clean, l_clean, &got, l),
          "%s: a second step allocates nothing (%d allocations) and repeats the first", name, calls);
    latent_trainer_free(t);

    int points = 0;
    for (int k = 0; k < 4096; k++) {
        t = trainer(m, mode, 1);
        latent_fault_inject(k);
        rc = step(t, &b, &got, &l, &err);
        int reached = latent_fault_calls() > k;
        latent_fault_inject(-1);
        if (!reached) { /* every allocation point has been failed once */
            CHECK(rc == 0 && same_step(&clean, l_clean, &got, l), "%s: step with no failure differs", name);
            latent_trainer_free(t);
            break;
        }
        points++;
        CHECK(rc != 0 && err.code == LATENT_E_NOMEM, "%s: failure %d: step %s (%s)", name, k,
              rc ? "failed" : "succeeded", latent_err_name(err.code));
        CHECK(step(t, &b, &got, &l, &err) == 0 && same_step(&clean, l_clean, &got, l),
              "%s: after failure %d the next step differs from a clean one", name, k);
        latent_trainer_free(t);
    }
    CHECK(points >= 5, "%s: only %d allocation points were exercised", name, points);
    fprintf(stderr, "  %s: %d allocation points failed in turn, each step LATENT_E_NOMEM, the next one clean\n", name,
            points);

    t = trainer(m, mode, 0);
    latent_fault_inject(0);
    rc = step(t, &b, &got, &l, &err);
    calls = latent_fault_calls();
    latent_fault_inject(-1);
    CHECK(rc == 0 && calls == 0, "%s: an F32 step allocates no product buffers (%d)", name, calls);
    latent_trainer_free(t);
    latent_weights_free(&clean), latent_weights_free(&got);
}

int main(void) {
    latent_set_threads(2);
    static const struct { const char *name; latent_train_mode mode; } modes[] = {
        {"plain", LATENT_TRAIN_PLAIN}, {"t2mlr jacobi", LATENT_TRAIN_JACOBI}, {"lrt", LATENT_TRAIN_LRT}};
    latent_config base = tm_config(32, 3, 4, 2, 48, 50);
    for (int i = 0; i < 3; i++) {
        latent_model m;
        latent_train_mode mode = modes[i].mode;
        tm_model(&m, mode == LATENT_TRAIN_JACOBI ? tm_t2mlr(base, 1, 1, 1) : mode == LATENT_TRAIN_LRT ? tm_lrt(base, 1, 0, 2, 0) : base,
                 3, 0);
        run_mode(modes[i].name, &m, mode);
        latent_weights_free(&m.w);
    }
    return tu_finish("test_train_faults");
}
