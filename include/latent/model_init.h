/* Model creation: weights for a new model (`latent init`), the recurrent path
 * added to a trained backbone without changing what it computes (`latent
 * retrofit`), and the atomic writing of a whole model directory.
 *
 * Random values come from one stream per tensor, seeded by (seed, tensor
 * name): a plain model and a recurrent one made with the same seed share
 * their backbone bit for bit, and the order of the parameter table does not
 * matter. */
#ifndef LATENT_MODEL_INIT_H
#define LATENT_MODEL_INIT_H

#include <stdint.h>
#include "latent/config.h"
#include "latent/error.h"
#include "latent/model.h"

typedef struct latent_init_opts {
    uint64_t seed;
    float std;          /* backbone matrices and embeddings: N(0, std); default 0.02 */
    int scale_residual; /* o_proj and down_proj get std / sqrt(2 * n_layers) (GPT-2); default 1 */
    float t2mlr_gamma;  /* gamma_rec = gamma_cur from scratch; default 0.1 */
    float t2mlr_gamma_rec, t2mlr_gamma_cur; /* when not NaN, override t2mlr_gamma for one gate */
    float lrt_gamma;    /* lrt.gamma from scratch; default 0.1 (models.md §3) */
} latent_init_opts;

void latent_init_defaults(latent_init_opts *o);

/* From scratch: fills every tensor of w (allocated for cfg).
 *   matrices N(0, std) (residual projections scaled), RMSNorm weights 1;
 *   T2MLR: w_rec N(0, 1/d) (keeps the state's scale), f_cur/f_rec N(0, std),
 *          biases 0 (gates start at 0.5), gammas t2mlr_gamma;
 *   LRT:   alpha 1, gamma lrt_gamma, gate weights 0 (gates 2*sigmoid(0) = 1),
 *          k/v projections N(0, std). */
void latent_weights_init(latent_weights *w, const latent_config *cfg, const latent_init_opts *o);

/* Retrofit: fills only the recurrent tensors of w, so that the model computes
 * exactly the backbone's logits (bit for bit) while every new tensor can learn:
 *   T2MLR: gammas 0 (Phi(h, R) = h), w_rec and f_* random as from scratch, so
 *          the gradient of each gamma is non-zero from the first step;
 *   LRT:   alpha 1, gamma 0, gate weights 0 (both gates 1) and k/v projections
 *          0: x <- 1*x + 0*m and k <- 1*k + 1*(m 0) leave the block unchanged,
 *          while dL/dK = g_fb (dL/dk)^T m and dL/dgamma = (dL/dx) . m are non-zero,
 *          so the memory path starts learning at once. */
void latent_weights_init_retrofit(latent_weights *w, const latent_config *cfg, uint64_t seed);

/* True for a tensor of the recurrent path (model.t2mlr.*, *.lrt.*). */
int latent_param_is_recurrent(const char *name);

/* Copies every backbone tensor of src into dst by name and shape; fails
 * naming the first tensor of dst's backbone that src lacks or shapes differently. */
int latent_weights_copy_backbone(latent_weights *dst, const latent_weights *src, latent_err *err);

/* Files copied beside the weights when present (tokenizer and generation
 * settings, never weights or config). NULL-terminated. */
extern const char *const latent_model_side_files[];

/* Writes a complete model directory: config.json, model.safetensors (F32, or
 * BF16 when bf16), and latent_model_side_files copied from `files_from` (may
 * be NULL). Everything goes into a temporary sibling directory first, each
 * file fsynced, then the directory is renamed into place and its parent
 * fsynced, so `dir` is either absent/old or complete. An existing `dir` is
 * refused unless `replace`, in which case it is swapped atomically
 * (renameat2 RENAME_EXCHANGE) and the old files removed. */
int latent_model_dir_write(const char *dir, const latent_config *cfg, const latent_weights *w,
                           int bf16, const char *files_from, int replace, latent_err *err);

#endif
