/* latent cpu: the kernel paths this machine can run (tests loop over them). */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "kernels/kernels.h"
#include "kernels/q8.h"

int cmd_cpu(int argc, char **argv) {
    if (argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        puts("usage: latent cpu\n\nPrints the instruction-set level detected (cpuid, the OS's saved state, the\n"
             "kernel's AMX permission), the level the kernels use (LATENT_ISA caps it), and\n"
             "every path this machine can run, one name per word (amx-model: the AMX tile\n"
             "kernel through a software model of the tile instructions, on any CPU):\n"
             "  detected avx512bf16\n  active avx512bf16\n  paths generic avx2 avx512 avx512bf16 amx-model\n"
             "and the path of --weights q8's int8 products (avx512vnni, amx, amx-model or generic):\n  q8 avx512vnni");
        return 0;
    }
    latent_isa d = latent_isa_detected();
    /* active: the path the products run on (amx-model: the tile kernel through its software model) */
    printf("detected %s\nactive %s\npaths", latent_isa_name(d), latent_isa_path());
    for (int i = LATENT_ISA_GENERIC; i <= (int)d; i++) printf(" %s", latent_isa_name((latent_isa)i));
    printf(" amx-model\n");
    /* --weights q8's integer products (gemm_q8.c) on the active path */
    printf("q8 %s\n", latent_q8_path());
    if (latent_isa_amx_check_failed())
        puts("note: the AMX tile kernel failed its start-up self-check; bf16 products run on avx512bf16");
    if (latent_isa_amx_refused()) puts("note: the CPU has AMX but the kernel refused the tile-data permission");
    return 0;
}
