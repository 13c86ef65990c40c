/* Checkpoints: complete model directories plus the optimizer's moments and
 * the trainer's state, committed by renames so a crash at any moment leaves
 * the previous checkpoint whole (train.h).
 *
 *   OUT/step-00000100/   config.json, model.safetensors (F32), tokenizer
 *                        files, optimizer.safetensors (AdamW moments, F32,
 *                        named exp_avg.<param> / exp_avg_sq.<param>),
 *                        trainer.json
 *   OUT/latest -> step-00000100
 *   OUT/config.json -> latest/config.json, likewise model.safetensors and the
 *                        tokenizer files: OUT itself loads as the newest model
 *
 * Order of a save: the model directory is written into OUT/.step-N.staging
 * (itself built in a temporary sibling and renamed), the optimizer state and
 * trainer.json are added (each temp + fsync + rename), the staging directory
 * is fsynced and renamed to step-N, OUT is fsynced, then `latest` is
 * replaced by renaming a fresh symlink over it and OUT is fsynced again. */
#include "latent/train.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "file_atomic.h"
#include "latent/model_init.h"
#include "safetensors.h"
#include "train/dir_io.h"

/* Removes the temporary directories that saves killed mid-write left in
 * out (".step-N.staging.tmp-PID", written by latent_model_dir_write), when
 * process PID is gone; a live run's (another trainer on the same OUT) stay. */
static void remove_stale_tmp_dirs(const char *out) {
    DIR *d = opendir(out);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        const char *tag = strstr(e->d_name, ".staging.tmp-");
        if (e->d_name[0] != '.' || !tag) continue;
        char *end;
        long pid = strtol(tag + strlen(".staging.tmp-"), &end, 10);
        if (*end || pid <= 0 || pid == (long)getpid()) continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue; /* alive, or not ours to judge */
        char *p = latent_path_join(out, e->d_name);
        if (p) latent_remove_flat_dir(p);
        free(p);
    }
    closedir(d);
}

void latent_ckpt_clean_stale(const char *out) { remove_stale_tmp_dirs(out); }

/* Test hook: LATENT_TRAIN_CRASH="STEP:POINT" kills the process with SIGKILL
 * at POINT (model, optimizer, rename, latest) of the save of step STEP, as a
 * power cut would. */
static void crash_point(int64_t step, const char *point) {
    const char *v = getenv("LATENT_TRAIN_CRASH");
    if (!v) return;
    char *colon;
    long long s = strtoll(v, &colon, 10);
    if (*colon == ':' && s == step && !strcmp(colon + 1, point)) raise(SIGKILL);
}

static int save_optimizer(const char *dir, const latent_optim *opt, latent_err *err) {
    if (!opt->o.adamw) return 0;
    const latent_weights *m = &opt->m;
    int n = m->n_params;
    char *path = latent_path_join(dir, "optimizer.safetensors");
    char **names = calloc(2 * n, sizeof *names);
    const float **data = calloc(2 * n, sizeof *data);
    int *ndims = calloc(2 * n, sizeof *ndims);
    int64_t(*shapes)[ST_MAX_DIMS] = calloc(2 * n, sizeof *shapes);
    int rc = -1;
    if (!path || !names || !data || !ndims || !shapes) {
        latent_err_set(err, LATENT_E_NOMEM, "%s: out of memory", dir);
        goto done;
    }
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < n; i++) {
            const latent_param *p = &(k ? &opt->v : m)->params[i];
            size_t len = strlen(p->name) + 16;
            if (!(names[k * n + i] = malloc(len))) {
                latent_err_set(err, LATENT_E_NOMEM, "%s: out of memory", dir);
                goto done;
            }
            snprintf(names[k * n + i], len, "%s.%s", k ? "exp_avg_sq" : "exp_avg", p->name);
            data[k * n + i] = *p->slot;
            ndims[k * n + i] = p->ndim;
            shapes[k * n + i][0] = p->shape[0];
            shapes[k * n + i][1] = p->shape[1];
        }
    rc = latent_st_write(path, 2 * n, (const char *const *)names, data, ndims, (const int64_t(*)[ST_MAX_DIMS])shapes, ST_F32,
                  err);
done:
    if (names)
        for (int i = 0; i < 2 * n; i++) free(names[i]);
    free(names), free(data), free(ndims), free(shapes), free(path);
    return rc;
}

/* The checkpoint's files into the staging directory: the model directory,
 * the optimizer, trainer.json; then the directory fsynced. 0, or -1 with err. */
static int stage_checkpoint(const char *staging, const char *out, const latent_model *m, const latent_optim *opt,
                            const latent_train_state *st, const char *tok_dir, int bf16, latent_err *err) {
    if (latent_model_dir_write(staging, &m->cfg, &m->w, bf16, tok_dir, 1, err) != 0) return -1;
    crash_point(st->step, "model");
    if (save_optimizer(staging, opt, err) != 0) return -1;
    crash_point(st->step, "optimizer");
    json_t *j = json_pack("{s:I, s:I, s:f, s:s}", "step", (json_int_t)st->step, "seed", (json_int_t)st->seed,
                          "loss", st->last_loss, "optimizer", opt->o.adamw ? "adamw" : "sgd");
    char *text = j ? json_dumps(j, JSON_INDENT(2) | JSON_REAL_PRECISION(17)) : NULL;
    json_decref(j);
    char *file = text ? latent_path_join(staging, "trainer.json") : NULL;
    if (!file) {
        free(text);
        return latent_err_set(err, LATENT_E_NOMEM, "%s: out of memory", out);
    }
    int w = latent_write_text_atomic(file, text, 0, err);
    free(text), free(file);
    if (w != 0) return -1;
    if (latent_fsync_path(staging, 1) != 0)
        return latent_err_set(err, LATENT_E_FORMAT, "%s: fsync failed: %s", staging, strerror(errno));
    return 0;
}

/* The staged checkpoint becomes OUT/name (replacing a stale directory of
 * that number from before a resume, never the latest one), then `latest`
 * points at it; each change fsynced. 0, or -1 with err. */
static int publish_checkpoint(const char *out, const char *staging, const char *final, const char *name,
                              const char *link_tmp, const char *link, int64_t step, latent_err *err) {
    crash_point(step, "rename");
    char target[PATH_MAX];
    ssize_t tl = readlink(link, target, sizeof target - 1);
    if (tl > 0) target[tl] = 0;
    if (access(final, F_OK) == 0) {
        if (tl > 0 && !strcmp(target, name))
            return latent_err_set(err, LATENT_E_FORMAT, "%s: is the latest checkpoint already", final);
        latent_remove_flat_dir(final);
    }
    if (rename(staging, final) != 0)
        return latent_err_set(err, LATENT_E_IO, "%s: cannot rename to %s: %s", staging, final, strerror(errno));
    if (latent_fsync_path(out, 1) != 0)
        return latent_err_set(err, LATENT_E_FORMAT, "%s: fsync failed: %s", out, strerror(errno));
    crash_point(step, "latest");
    unlink(link_tmp);
    if (symlink(name, link_tmp) != 0 || rename(link_tmp, link) != 0)
        return latent_err_set(err, LATENT_E_FORMAT, "%s: cannot point at %s: %s", link, name, strerror(errno));
    if (latent_fsync_path(out, 1) != 0)
        return latent_err_set(err, LATENT_E_FORMAT, "%s: fsync failed: %s", out, strerror(errno));
    return 0;
}

/* OUT as a model directory: symlinks through `latest` (never replacing a
 * real file of that name). */
static void link_model_files(const char *out, const char *final) {
    static const char *model_files[] = {"config.json", "model.safetensors", NULL};
    for (int k = 0; k < 2; k++) {
        const char *const *names = k ? latent_model_side_files : model_files;
        for (int i = 0; names[i]; i++) {
            char *in_ckpt = latent_path_join(final, names[i]), *at_out = latent_path_join(out, names[i]);
            char target_rel[256];
            snprintf(target_rel, sizeof target_rel, "latest/%s", names[i]);
            struct stat sb;
            if (in_ckpt && at_out && access(in_ckpt, F_OK) == 0 && lstat(at_out, &sb) != 0) symlink(target_rel, at_out);
            free(in_ckpt), free(at_out);
        }
    }
}

/* Keeps the newest `keep` checkpoints (by step number) and step `current`. */
static void prune_checkpoints(const char *out, int keep, int64_t current) {
    DIR *d = opendir(out);
    long long *steps = NULL;
    int n = 0, cap = 0;
    struct dirent *e;
    while (d && (e = readdir(d))) {
        long long s;
        char tail;
        if (sscanf(e->d_name, "step-%lld%c", &s, &tail) != 1) continue;
        if (n == cap) {
            long long *ns = realloc(steps, (cap = cap ? 2 * cap : 16) * sizeof *ns);
            if (!ns) break;
            steps = ns;
        }
        steps[n++] = s;
    }
    if (d) closedir(d);
    for (int i = 0; i < n; i++) {
        int newer = 0;
        for (int k = 0; k < n; k++) newer += steps[k] > steps[i];
        if (newer < keep || steps[i] == current) continue;
        char old[64];
        snprintf(old, sizeof old, "step-%08lld", steps[i]);
        char *p = latent_path_join(out, old);
        if (p) latent_remove_flat_dir(p);
        free(p);
    }
    free(steps);
}

int latent_ckpt_save_dtype(const char *out, const latent_model *m, const latent_optim *opt,
                           const latent_train_state *st, const char *tok_dir, int keep, int bf16, latent_err *err) {
    char name[64], staging_name[80];
    snprintf(name, sizeof name, "step-%08lld", (long long)st->step);
    snprintf(staging_name, sizeof staging_name, ".%s.staging", name);
    char *staging = latent_path_join(out, staging_name), *final = latent_path_join(out, name);
    char *link_tmp = latent_path_join(out, ".latest.tmp"), *link = latent_path_join(out, "latest");
    int rc = -1;
    if (!staging || !final || !link_tmp || !link) {
        latent_err_set(err, LATENT_E_NOMEM, "%s: out of memory", out);
        goto done;
    }
    latent_remove_flat_dir(staging); /* a crashed save's leftover */
    remove_stale_tmp_dirs(out);
    if (stage_checkpoint(staging, out, m, opt, st, tok_dir, bf16, err) != 0 ||
        publish_checkpoint(out, staging, final, name, link_tmp, link, st->step, err) != 0)
        goto done;
    link_model_files(out, final);
    rc = 0;
    if (keep > 0) prune_checkpoints(out, keep, st->step);
done:
    free(staging), free(final), free(link_tmp), free(link);
    return rc;
}

int latent_ckpt_load_state(const char *dir, latent_optim *opt, latent_train_state *st, latent_err *err) {
    char *path = latent_path_join(dir, "trainer.json");
    if (!path) return latent_err_set(err, LATENT_E_NOMEM, "%s: out of memory", dir);
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je);
    if (!j) {
        latent_err_set(err, LATENT_E_FORMAT, "%s: %s (line %d)", path, je.text, je.line);
        free(path);
        return -1;
    }
    json_t *step = json_object_get(j, "step"), *seed = json_object_get(j, "seed"), *loss = json_object_get(j, "loss");
    const char *o = json_string_value(json_object_get(j, "optimizer"));
    if (!json_is_integer(step) || !json_is_integer(seed) || !o) {
        latent_err_set(err, LATENT_E_FORMAT, "%s: needs integer step and seed and an optimizer name", path);
        json_decref(j);
        free(path);
        return -1;
    }
    st->step = json_integer_value(step);
    st->seed = (uint64_t)json_integer_value(seed);
    st->last_loss = json_number_value(loss);
    int adamw = !strcmp(o, "adamw");
    json_decref(j);
    free(path);
    if (adamw != opt->o.adamw)
        return latent_err_set(err, LATENT_E_FORMAT, "%s: checkpoint was trained with %s; resume with --optimizer %s", dir, o, o);
    opt->step = st->step;
    if (!adamw) return 0;
    path = latent_path_join(dir, "optimizer.safetensors");
    st_file f;
    if (!path || latent_st_file_open(&f, path, err) != 0) {
        free(path);
        return -1;
    }
    int rc = 0;
    for (int k = 0; k < 2 && rc == 0; k++) {
        latent_weights *w = k ? &opt->v : &opt->m;
        for (int i = 0; i < w->n_params; i++) {
            char name[128];
            snprintf(name, sizeof name, "%s.%s", k ? "exp_avg_sq" : "exp_avg", w->params[i].name);
            const st_tensor *t = latent_st_file_find(&f, name);
            if (!t || t->dtype != ST_F32 || t->nbytes != (size_t)w->params[i].numel * 4) {
                rc = latent_err_set(err, LATENT_E_FORMAT, "%s: tensor %s is %s", path, name, t ? "of the wrong type or size" : "missing");
                break;
            }
            latent_st_to_f32(*w->params[i].slot, t->data, t->dtype, (size_t)w->params[i].numel);
        }
    }
    latent_st_file_close(&f);
    free(path);
    return rc;
}

int latent_ckpt_save(const char *out, const latent_model *m, const latent_optim *opt, const latent_train_state *st,
                     const char *tok_dir, int keep, latent_err *err) {
    return latent_ckpt_save_dtype(out, m, opt, st, tok_dir, keep, 0, err);
}
