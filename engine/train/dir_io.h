/* Paths, fsync and flat directories: what writing model directories
 * (model_init.c) and checkpoints (train_ckpt.c) share (private to
 * engine/train/). */
#ifndef LATENT_DIR_IO_H
#define LATENT_DIR_IO_H

/* "a/b", malloc'd (the caller frees it); NULL when out of memory. */
char *latent_path_join(const char *a, const char *b);
/* fsync of a file, or of a directory (its entries) when directory is set; 0 or -1 (errno). */
int latent_fsync_path(const char *path, int directory);
/* Removes the regular files of a directory we created (flat: no
 * subdirectories), then the directory; what cannot be removed stays. */
void latent_remove_flat_dir(const char *dir);

#endif
