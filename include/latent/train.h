/* Offline training (`latent train`): the three training modes of models.md
 * §2-3 over a batch, the optimizer, token files (§5) and checkpoints.
 *
 * State is split by lifetime, llm.c style: the model's weights (model.h) are
 * updated in place; gradients and the optimizer's moments are separate
 * latent_weights blocks with the same parameter table; activations live in
 * one slab owned by the latent_trainer, sized once for (mode, B, T). */
#ifndef LATENT_TRAIN_H
#define LATENT_TRAIN_H

#include <stddef.h>
#include <stdint.h>

#include "latent/error.h"
#include "latent/model.h"

/* ---- the forward/backward of one batch ---------------------------------- */

typedef enum {
    LATENT_TRAIN_PLAIN = 0, /* the backbone alone (a recurrent model's recurrent path switched off) */
    LATENT_TRAIN_JACOBI,    /* T2MLR Jacobi training, models.md §2 */
    LATENT_TRAIN_LRT,       /* LRT interleaved training, models.md §3 */
} latent_train_mode;

typedef struct latent_train_shape {
    latent_train_mode mode;
    int batch, seq;           /* B sequences of T positions per step */
    int jacobi_iters;         /* D >= 1 */
    int jacobi_grad_iters;    /* B of §2: gradients through the last B iterations run (>= 0; > D acts as D) */
    double jacobi_tol;        /* > 0: adaptive Jacobi, the middle passes stop once the largest change of the
                                 recurrent state between two iterations is below it (D is then a cap); 0: D */
    int jacobi_no_skip;       /* adaptive only. 0 (default): the middle passes without gradient compute only the
                                 positions from the first one whose state still moved by tol or more (frontier
                                 skipping), then the last K run as full passes; 1: every pass is a full pass and
                                 the step is the fixed-D step with D the iterations run (docs/training.md) */
    int lrt_subsets;          /* S, 1 <= S <= T */
    int bf16;                 /* linear layers' products but the LM head's (forward and both backward ones)
                                 with bf16 operands and F32 sums; weights, gradients, optimizer, norms,
                                 softmax, losses and the recurrence stay F32 (docs/training.md, "Precision") */
} latent_train_shape;

typedef struct latent_trainer latent_trainer;

/* Checks the shape against the model (mode vs recurrence type, T <= max_pos)
 * and allocates the activation slab. Borrows m (must outlive the trainer). */
latent_trainer *latent_trainer_new(const latent_model *m, const latent_train_shape *s, latent_err *err);
void latent_trainer_free(latent_trainer *t);
/* Bytes of the activation slab (every pass's saved activations, gradients' scratch). */
size_t latent_trainer_activation_bytes(const latent_trainer *t);

/* One batch of B*T rows (row b*T + t): input tokens, their targets, which
 * targets are scored (mask NULL: all) and each input's control flow (flow
 * NULL: all 2; models.md §2, used by the Jacobi mode only).
 *
 * Each loss is a mean over scored targets. scored_total, when not NULL,
 * gives each loss head's denominator (latent_trainer_count_scored's order)
 * in place of this batch's own count: data-parallel ranks each run a share
 * of a global batch with the global batch's counts, so their losses and
 * gradients add up to the global batch's. */
typedef struct latent_train_batch {
    int32_t *tokens, *targets;
    uint8_t *mask, *flow;
    const int64_t *scored_total;
} latent_train_batch;

/* The most loss heads a trainer has (LRT: the full pass and each subset). */
#define LATENT_TRAIN_MAX_HEADS(subsets) (1 + (subsets))
/* Writes, per loss head of this trainer's mode, how many of the batch's
 * targets it scores (plain and Jacobi: one head; LRT: the full pass, then
 * subset 0..S-1); returns the number of heads. */
int latent_trainer_count_scored(const latent_trainer *t, const latent_train_batch *batch, int64_t *counts);

/* Runs the mode's forward on one batch and returns its loss in *loss; when
 * grads is not NULL also runs the backward, ADDING every parameter's
 * gradient into grads (same config as the model; the caller zeroes it).
 * Fails (changing nothing) on a token id outside the vocabulary; fails with
 * LATENT_E_NOMEM when the buffers of bf16 products cannot be allocated (then
 * grads and the logits hold a partial step: do not apply them). The buffers
 * grow only, so after a first step that succeeded a step allocates nothing. */
int latent_trainer_step(latent_trainer *t, const latent_train_batch *batch, latent_weights *grads, double *loss,
                        latent_err *err);

/* The logits (B*T, vocab) of the last forward-only step (grads == NULL):
 * plain and Jacobi: the final pass; LRT: each position's logits from its
 * subset's pass. Written to out. */
void latent_trainer_logits(const latent_trainer *t, float *out);

/* Gate statistics of the last step (recurrent modes; zeros otherwise). */
typedef struct latent_gate_stats {
    double tanh_gamma_rec, tanh_gamma_cur;   /* T2MLR: tanh of the fusion scales */
    double gate_rec, gate_cur;               /* T2MLR: mean sigmoid gates of the final pass */
    double alpha, gamma;                     /* LRT: mean alpha_i, gamma_i over injected blocks */
    double gate_loc, gate_fb;                /* LRT: mean KV gates of the subset passes */
    int jacobi_iters;                        /* Jacobi: the iterations D the last step ran (adaptive: <= cap) */
    double jacobi_rows;                      /* Jacobi: rows the middle passes computed over (passes * B*T);
                                                below 1 when adaptive skipping left converged rows out */
} latent_gate_stats;
void latent_trainer_gate_stats(const latent_trainer *t, latent_gate_stats *out);

/* ---- optimizer ---------------------------------------------------------- */

typedef struct latent_optim_opts {
    int adamw;                /* 1: AdamW, 0: SGD */
    float lr;                 /* peak learning rate */
    float weight_decay;       /* decoupled, on 2-D tensors only (not norms, biases, gates' scalars) */
    float beta1, beta2, eps;
    float grad_clip;          /* global L2 norm clip; 0 = off */
    int warmup;               /* linear warmup steps */
    int cosine;               /* 1: cosine decay to 0 at `steps`; 0: constant after warmup */
    int64_t steps;            /* total steps of the run (for the schedule) */
} latent_optim_opts;

typedef struct latent_optim {
    latent_optim_opts o;
    latent_weights m, v;      /* AdamW moments (unallocated for SGD) */
    int64_t step;             /* steps taken */
    uint8_t *frozen;          /* (n_params) 1: never updated (the recurrent path in plain mode) */
} latent_optim;

int latent_optim_init(latent_optim *opt, const latent_config *cfg, const latent_optim_opts *o, latent_err *err);
void latent_optim_free(latent_optim *opt);
/* The learning rate of 0-based step s. */
double latent_optim_lr(const latent_optim_opts *o, int64_t s);
/* Global L2 norm of the gradients (frozen params excluded). */
double latent_grad_norm(const latent_weights *g, const uint8_t *frozen);
/* Clips (when enabled) and applies one update to w; returns the lr used. */
double latent_optim_step(latent_optim *opt, latent_weights *w, latent_weights *g, double grad_norm);

/* ---- token files (models.md §5; docs/training.md "Data files") --------- */

typedef struct latent_tokens {
    char *path;
    const uint32_t *ids; int64_t n;   /* NAME.bin, mapped */
    const uint32_t *labels;           /* NAME.labels: targets in place of ids, or NULL */
    const uint8_t *mask;              /* NAME.mask: 1 = token i is a scored target, or NULL (all) */
    const uint8_t *flow;              /* NAME.flow: control flow of token i as an input, or NULL (all 2) */
    void *maps[4];
    size_t lens[4];
} latent_tokens;

/* Maps NAME.bin and whichever of NAME.labels, .mask, .flow exist beside it;
 * checks their sizes (one entry per token), ids and labels < vocab, flows 1
 * or 2, and that there are more than T + 1 tokens. */
int latent_tokens_open(latent_tokens *f, const char *path, int vocab, int seq, latent_err *err);
void latent_tokens_close(latent_tokens *f);   /* accepts a zeroed struct */
/* Row b of step s (0-based) reads the window at offset o: inputs ids[o..o+T-1],
 * targets labels-or-ids[o+1..o+T], mask[o+1..o+T], flow[o..o+T-1]. Without
 * shuffling o = ((s*B + b) * T) mod (n - T - 1) (§5). With shuffling the
 * windows at multiples of T are visited in a seeded random order, a new
 * order each epoch (every window once per epoch). Fills the batch's four
 * arrays (B*T entries each; mask 1 and flow 2 where the file has none). */
void latent_tokens_batch(const latent_tokens *f, int64_t s, int B, int T, int shuffle, uint64_t seed,
                         latent_train_batch *out);
/* The window offset of row b of step s (what latent_tokens_batch reads). */
int64_t latent_tokens_offset(const latent_tokens *f, int64_t s, int b, int B, int T, int shuffle, uint64_t seed);

/* ---- checkpoints -------------------------------------------------------- */

typedef struct latent_train_state {
    int64_t step;             /* steps completed */
    uint64_t seed;
    double last_loss;
} latent_train_state;

/* Writes a checkpoint <out>/step-<N>: config.json, model.safetensors (F32),
 * tokenizer files copied from tok_dir (may be NULL), optimizer.bin (the
 * moments) and trainer.json (state). Built in a temporary directory in <out>
 * (each file fsynced), renamed into place, the directory fsynced, then
 * <out>/latest is switched to it by an atomic rename of a symlink: a crash at
 * any moment leaves the previous checkpoint whole and `latest` pointing at a
 * complete one. Keeps the newest `keep` checkpoints. */
int latent_ckpt_save(const char *out, const latent_model *m, const latent_optim *opt, const latent_train_state *st,
                     const char *tok_dir, int keep, latent_err *err);
/* The same with model.safetensors in bf16 (--save-dtype bf16): half the
 * bytes, but a resume continues from the rounded weights. */
int latent_ckpt_save_dtype(const char *out, const latent_model *m, const latent_optim *opt,
                           const latent_train_state *st, const char *tok_dir, int keep, int bf16, latent_err *err);
/* Loads <dir> (a checkpoint directory) into a model already loaded from it
 * and opt (initialized with the same config): moments, step, state. */
int latent_ckpt_load_state(const char *dir, latent_optim *opt, latent_train_state *st, latent_err *err);
/* Removes what saves killed mid-write left in <out> (their temporary
 * directories), unless the process that wrote them still runs. Each save
 * does it too; the trainer calls it at start and resume. */
void latent_ckpt_clean_stale(const char *out);

#endif
