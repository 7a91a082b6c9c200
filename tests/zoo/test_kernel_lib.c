/* tests/zoo/test_kernel_lib.c — shared libraries for the kernel-loading tests.
 *
 * One source, several libraries (CMake compiles it with different defines):
 *   ZOO_ABI_VARIABLE=N   exports `const int32_t attncheck_abi_version = N;`
 *   ZOO_ABI_FUNCTION=N   exports `int32_t attncheck_abi_version(void)` returning N
 *   (neither)            declares no version (allowed)
 * Each exports `zoo_naive_kernel` (correct, refuses unknown ABI versions) and
 * `zoo_sloppy_kernel` (correct on version 1 but also accepts any other version: the
 * property abi_version's target). Dimension legend: B, H, Tq, Tk, Dk, Dv as in attncheck/kernel_abi.h. */
#include <math.h>
#include <stddef.h>

#include "attncheck/kernel_abi.h"
#include "attncheck/kernel_abi_v2.h"

#if defined(ZOO_ABI_VARIABLE)
const int32_t attncheck_abi_version = ZOO_ABI_VARIABLE;
#elif defined(ZOO_ABI_FUNCTION)
int32_t attncheck_abi_version(void) { return ZOO_ABI_FUNCTION; }
#endif

static int compute(const attncheck_problem* p, const float* q, const float* k, const float* v,
                   float* out) {
    if (p->batch < 1 || p->heads < 1 || p->q_len < 1 || p->kv_len < 1 || p->head_dim < 1 ||
        p->value_dim < 1 || p->q_offset < 0 || p->kv_len > 4096)
        return ATTNCHECK_UNSUPPORTED;
    const int Tq = p->q_len, Tk = p->kv_len, Dk = p->head_dim, Dv = p->value_dim;
    float s[4096]; /* scores of one row [Tk] */
    for (int bh = 0; bh < p->batch * p->heads; ++bh) {
        const int b = bh / p->heads;
        const int valid = p->kv_valid_len ? p->kv_valid_len[b] : Tk;
        for (int i = 0; i < Tq; ++i) {
            float m = -INFINITY, sum = 0.0f;
            for (int j = 0; j < Tk; ++j) {
                int visible = j < valid && (!p->causal || j <= p->q_offset + i);
                float dot = 0.0f;
                for (int c = 0; c < Dk; ++c)
                    dot += q[((size_t)bh * Tq + i) * Dk + c] * k[((size_t)bh * Tk + j) * Dk + c];
                s[j] = visible ? p->scale * dot : -INFINITY;
                if (s[j] > m) m = s[j];
            }
            float* o = out + ((size_t)bh * Tq + i) * Dv;
            for (int c = 0; c < Dv; ++c) o[c] = 0.0f;
            if (m == -INFINITY) continue;
            for (int j = 0; j < Tk; ++j) {
                s[j] = expf(s[j] - m);
                sum += s[j];
            }
            for (int j = 0; j < Tk; ++j)
                for (int c = 0; c < Dv; ++c) o[c] += s[j] / sum * v[((size_t)bh * Tk + j) * Dv + c];
        }
    }
    return ATTNCHECK_OK;
}

int zoo_naive_kernel(const attncheck_problem* p, const float* q, const float* k, const float* v,
                     float* out) {
    if (p->abi_version != ATTNCHECK_ABI_VERSION) return ATTNCHECK_UNSUPPORTED;
    return compute(p, q, k, v, out);
}

int zoo_sloppy_kernel(const attncheck_problem* p, const float* q, const float* k, const float* v,
                      float* out) {
    return compute(p, q, k, v, out);
}

/* Declarations (attncheck/declaration.hpp), exported as `<symbol>_declaration`: zoo_naive_kernel
 * declares one as a const char[] variable in the ZOO_ABI_VARIABLE builds and as a function in
 * the ZOO_ABI_FUNCTION builds; zoo_sloppy_kernel a malformed one in the ZOO_ABI_FUNCTION builds. */
#ifdef ZOO_ABI_VARIABLE
const char zoo_naive_kernel_declaration[] = "head_dim=1..512; deterministic=yes";
#endif
#ifdef ZOO_ABI_FUNCTION
const char* zoo_naive_kernel_declaration(void) { return "head_dim=1..512; max_kv_len=100000"; }
const char zoo_sloppy_kernel_declaration[] = "head_dim=zero";
#endif

/* A version 2 entry point in every build, declared by its own `<symbol>_abi_version`, which
 * takes precedence over the library-wide attncheck_abi_version (kernel-loading tests only: it
 * refuses every problem). */
const int32_t zoo_v2_stub_abi_version = ATTNCHECK_ABI_VERSION_2;
int zoo_v2_stub(const attncheck_problem_v2* p) {
    (void)p;
    return ATTNCHECK_UNSUPPORTED;
}
