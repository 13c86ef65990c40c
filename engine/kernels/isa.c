/* Which instruction set the kernels use, decided at run time: what cpuid
 * says the CPU has, what XCR0 says the OS saves on a context switch, the
 * kernel's permission for AMX tile data, and the LATENT_ISA cap. One binary,
 * built for the x86-64 baseline, runs the best path each machine allows. */
#include "kernels/amx_tile.h"
#include "kernels/kernels.h"

#include <pthread.h>
#include <stdatomic.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

static unsigned long long xcr0(void) {
    unsigned int lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((unsigned long long)hi << 32) | lo;
}

static int amx_permitted = -1;

static latent_isa detect(void) {
    unsigned int a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return LATENT_ISA_GENERIC;
    int osxsave = (c >> 27) & 1, fma = (c >> 12) & 1;
    if (!osxsave) return LATENT_ISA_GENERIC;
    unsigned long long x = xcr0();
    if ((x & 0x6) != 0x6) return LATENT_ISA_GENERIC; /* the OS saves no YMM state */
    unsigned int b7 = 0, c7 = 0, d7 = 0, a71 = 0, t;
    __cpuid_count(7, 0, t, b7, c7, d7);
    __cpuid_count(7, 1, a71, t, t, t);
    (void)c7;
    int avx2 = (b7 >> 5) & 1, avx512f = (b7 >> 16) & 1, avx512bw = (b7 >> 30) & 1;
    int avx512bf16 = (a71 >> 5) & 1, amx_bf16 = (d7 >> 22) & 1, amx_tile = (d7 >> 24) & 1;
    if (!(avx2 && fma)) return LATENT_ISA_GENERIC;
    if (!(avx512f && avx512bw) || (x & 0xE0) != 0xE0) return LATENT_ISA_AVX2; /* no ZMM state saved */
    if (!avx512bf16) return LATENT_ISA_AVX512;
    if (!(amx_bf16 && amx_tile) || (x & 0x60000) != 0x60000) return LATENT_ISA_AVX512BF16;
    /* Tile data needs the kernel's permission (Linux 5.16+); without it the
     * first tile instruction would kill the process. */
    amx_permitted = syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
    return amx_permitted ? LATENT_ISA_AMX : LATENT_ISA_AVX512BF16;
}
#else
static int amx_permitted = 0;
static latent_isa detect(void) { return LATENT_ISA_GENERIC; }
#endif

static const char *const names[] = {"generic", "avx2", "avx512", "avx512bf16", "amx"};

const char *latent_isa_name(latent_isa isa) {
    return isa >= LATENT_ISA_GENERIC && isa <= LATENT_ISA_AMX ? names[isa] : "unknown";
}

int latent_isa_parse(const char *s, latent_isa *out) {
    for (int i = 0; i <= LATENT_ISA_AMX; i++)
        if (!strcmp(s, names[i])) {
            *out = (latent_isa)i;
            return 0;
        }
    return -1;
}

/* Set once (pthread_once: the first callers may be several engine threads
 * at once); `active` and the kernel table change later only through
 * latent_isa_set and latent_isa_set_path. */
static latent_isa detected;
static _Atomic int active;
/* The kernel table of the path: the one not in use is filled, then published */
static latent_kernels tables[2];
static _Atomic(const latent_kernels *) kernels;
static int amx_checked, amx_check_failed; /* the tile kernel's self-check, run before its first use */
static pthread_once_t isa_init_once = PTHREAD_ONCE_INIT;

/* A wrong tile kernel must never serve: one small product through the tiles
 * and through avx512bf16, when the amx path is first chosen (at start-up,
 * unless LATENT_ISA caps it). */
static int amx_self_check_fails(void) {
    double worst = 0;
    if (latent_gemm_amx_selfcheck(&latent_amx_hw, LATENT_ISA_AVX512BF16, &worst) == 0) return 0;
    fprintf(stderr, "latent: the AMX tile kernel disagrees with avx512bf16 beyond the bf16 bound (%.3g times it) "
                    "in its start-up self-check; bf16 products run on avx512bf16\n", worst);
    return 1;
}

static void apply(latent_isa isa, int use_model) {
    if (use_model && isa > LATENT_ISA_AVX512BF16) isa = LATENT_ISA_AVX512BF16; /* tiles only through the model */
    /* Only when the tiles would run: a cap below amx executes no tile instruction. */
    if (isa >= LATENT_ISA_AMX && detected == LATENT_ISA_AMX && !amx_checked)
        amx_checked = 1, amx_check_failed = amx_self_check_fails();
    latent_isa top = detected == LATENT_ISA_AMX && amx_check_failed ? LATENT_ISA_AVX512BF16 : detected;
    isa = isa < top ? isa : top;
    const latent_amx_ops *tiles = use_model ? &latent_amx_model : isa == LATENT_ISA_AMX ? &latent_amx_hw : NULL;
    latent_kernels *k = atomic_load(&kernels) == &tables[0] ? &tables[1] : &tables[0];
    latent_kernels_choose(k, isa, tiles, use_model ? "amx-model" : latent_isa_name(isa));
    atomic_store(&active, isa);
    atomic_store(&kernels, k);
}

static void isa_init(void) {
    detected = detect();
    latent_isa cap = LATENT_ISA_AMX;
    int use_model = 0;
    const char *env = getenv("LATENT_ISA");
    if (env && *env && !strcmp(env, "amx-model")) use_model = 1;
    else if (env && *env && latent_isa_parse(env, &cap) != 0)
        fprintf(stderr, "latent: LATENT_ISA=%s is not one of generic, avx2, avx512, avx512bf16, amx, amx-model; ignored\n", env);
    apply(cap, use_model);
}

static void isa_once(void) { pthread_once(&isa_init_once, isa_init); }

latent_isa latent_isa_detected(void) {
    isa_once();
    return detected;
}

int latent_isa_amx_refused(void) { return latent_isa_detected() >= LATENT_ISA_AVX512BF16 && amx_permitted == 0; }

latent_isa latent_isa_active(void) {
    isa_once();
    return (latent_isa)atomic_load_explicit(&active, memory_order_relaxed);
}

latent_isa latent_isa_set(latent_isa isa) {
    isa_once();
    apply(isa, 0);
    return latent_isa_active();
}

int latent_isa_set_path(const char *name) {
    latent_isa isa = LATENT_ISA_AMX;
    if (strcmp(name, "amx-model") && latent_isa_parse(name, &isa) != 0) return -1;
    isa_once();
    apply(isa, !strcmp(name, "amx-model"));
    return 0;
}

const latent_kernels *latent_kernels_active(void) {
    isa_once();
    return atomic_load_explicit(&kernels, memory_order_acquire);
}

const char *latent_isa_path(void) { return latent_kernels_active()->path; }

const struct latent_amx_ops *latent_isa_tile_ops(void) { return latent_kernels_active()->tiles; }

int latent_isa_amx_check_failed(void) {
    isa_once();
    return amx_check_failed;
}
