/* Safetensors reading: an 8-byte little-endian header length, a JSON header
 * {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {...}},
 * then the data. The file is mmapped read-only; tensors are views into it. */
#ifndef LATENT_SAFETENSORS_H
#define LATENT_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>
#include "latent/error.h"

typedef enum { ST_F32 = 0, ST_F16, ST_BF16 } st_dtype;

#define ST_MAX_DIMS 4

typedef struct st_tensor {
    char *name;               /* owned by the st_file */
    st_dtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    const void *data;         /* view into the mapping; valid until st_file_close */
    size_t nbytes;
} st_tensor;

typedef struct st_file {
    char *path;
    void *map; size_t map_len;
    size_t data_start;        /* 8 + header length */
    st_tensor *tensors; int n_tensors;
} st_file;

/* Maps and validates `path`: header JSON well formed, known dtypes, offsets
 * inside the file, sizes matching dtype*shape, no overlapping tensors. */
int latent_st_file_open(st_file *f, const char *path, latent_err *err);
void latent_st_file_close(st_file *f);   /* accepts a zeroed or NULL file */
const st_tensor *latent_st_file_find(const st_file *f, const char *name);

/* Converts n elements of src (dtype) to float32 in dst. */
void latent_st_to_f32(float *dst, const void *src, st_dtype dtype, size_t n);
const char *latent_st_dtype_name(st_dtype t);

/* Writing (trainer checkpoints, test models): `names[i]` with float32 data
 * `data[i]` of shape shapes[i][0..ndims[i]-1], stored as `dtype` (F32 or
 * BF16). Written to path.tmp, fsynced and renamed over path. */
int latent_st_write(const char *path, int n, const char *const *names, const float *const *data,
             const int *ndims, const int64_t (*shapes)[ST_MAX_DIMS], st_dtype dtype,
             latent_err *err);

#endif
