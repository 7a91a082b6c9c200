/* tests/zoo/faulty_kernel_lib.c — broken kernels for the tests of `attncheck fuzz --kernel-lib`'s
 * reports (tests/cli/fuzz_test.cpp). Built as one shared library, zoo_faulty_kernels.
 *
 *   zoo_mask_after_softmax   softmax over every key, then the masked weights set to 0 without
 *                            renormalising: wrong on nearly every causal or padded row, so every
 *                            property that compares values fails, at kernel and decoder level.
 *   zoo_trap_fail            correct, except that it writes NaN when head_dim == 3 (Dk = 3)
 *   zoo_trap_crash           correct, except that it aborts when head_dim == 3
 * The two traps fire on the same cases, so a crash report and a failure report of the same seed
 * must name the same case number. Version 2 kernels (attncheck/kernel_abi_v2.h, each with its own
 * <symbol>_abi_version), for `attncheck bench`'s tests (tests/cli/bench_test.cpp):
 *   zoo_v2_zeros             writes 0 to every output element: wrong
 *   zoo_v2_head_dim_128      declares head_dim=128 and refuses everything
 *   zoo_v2_refuses           declares nothing and refuses everything
 *   zoo_v2_grad_zeros        a correct forward (f32, dense, no GQA, window, softcap, ALiBi or
 *                            sinks: it refuses them), whose backward writes 0 to dq, dk and dv
 *
 * Dimension legend: B, H, Tq, Tk, Dk, Dv as in attncheck/kernel_abi.h. */
#include <math.h>
#include <stdlib.h>

#include "attncheck/kernel_abi.h"
#include "attncheck/kernel_abi_v2.h"

const int32_t attncheck_abi_version = ATTNCHECK_ABI_VERSION;

/* Attention into out [B,H,Tq,Dv]; renormalise = 0 is the mask-after-softmax bug. */
static int attention(const attncheck_problem* p, const float* q, const float* k, const float* v, float* out,
                     int renormalise) {
    if (p->abi_version != ATTNCHECK_ABI_VERSION) return ATTNCHECK_UNSUPPORTED;
    if (p->batch < 1 || p->heads < 1 || p->q_len < 1 || p->kv_len < 1 || p->head_dim < 1 ||
        p->value_dim < 1 || p->q_offset < 0)
        return ATTNCHECK_UNSUPPORTED;
    const long Tq = p->q_len, Tk = p->kv_len, Dk = p->head_dim, Dv = p->value_dim;
    float* w = malloc((size_t)Tk * sizeof *w); /* one row of scores, then weights [Tk] */
    char* seen = malloc((size_t)Tk);           /* which keys the row may see [Tk] */
    if (!w || !seen) {
        free(w);
        free(seen);
        return ATTNCHECK_UNSUPPORTED;
    }
    for (long bh = 0; bh < (long)p->batch * p->heads; ++bh) {
        const long valid = p->kv_valid_len ? p->kv_valid_len[bh / p->heads] : Tk;
        for (long i = 0; i < Tq; ++i) {
            float* o = out + (bh * Tq + i) * Dv;
            float m = -INFINITY, sum = 0.0f, kept = 0.0f;
            for (long j = 0; j < Tk; ++j) {
                seen[j] = j < valid && (!p->causal || j <= p->q_offset + i);
                float dot = 0.0f;
                for (long c = 0; c < Dk; ++c) dot += q[(bh * Tq + i) * Dk + c] * k[(bh * Tk + j) * Dk + c];
                w[j] = p->scale * dot;
                if ((renormalise ? seen[j] : 1) && w[j] > m) m = w[j];
            }
            for (long c = 0; c < Dv; ++c) o[c] = 0.0f;
            for (long j = 0; j < Tk; ++j) {
                w[j] = (renormalise && !seen[j]) || m == -INFINITY ? 0.0f : expf(w[j] - m);
                sum += w[j];
                if (!seen[j]) w[j] = 0.0f; /* the mask, applied after the softmax's sum */
                kept += w[j];
            }
            if (kept == 0.0f) continue; /* no visible key: zeros */
            for (long j = 0; j < Tk; ++j)
                for (long c = 0; c < Dv; ++c) o[c] += w[j] / sum * v[(bh * Tk + j) * Dv + c];
        }
    }
    free(w);
    free(seen);
    return ATTNCHECK_OK;
}

int zoo_mask_after_softmax(const attncheck_problem* p, const float* q, const float* k, const float* v, float* out) {
    return attention(p, q, k, v, out, 0);
}

int zoo_trap_fail(const attncheck_problem* p, const float* q, const float* k, const float* v, float* out) {
    const int rc = attention(p, q, k, v, out, 1);
    if (rc == ATTNCHECK_OK && p->head_dim == 3) out[0] = NAN;
    return rc;
}

int zoo_trap_crash(const attncheck_problem* p, const float* q, const float* k, const float* v, float* out) {
    if (p->abi_version == ATTNCHECK_ABI_VERSION && p->head_dim == 3) abort();
    return attention(p, q, k, v, out, 1);
}

/* Correct kernels with conventions or limits of their own (kernel declarations):
 *   zoo_dims_8_16         supports head_dim 8 and 16 only, and exports that declaration
 *   zoo_dims_8_16_quiet   the same kernel without a declaration: most cases are refused
 *   zoo_nan_rows          PyTorch's convention: a row with no visible key gives NaN (declared
 *                         by the command line's --empty-rows nan only) */
static int dims_8_16(const attncheck_problem* p, const float* q, const float* k, const float* v, float* out) {
    if (p->head_dim != 8 && p->head_dim != 16) return ATTNCHECK_UNSUPPORTED;
    return attention(p, q, k, v, out, 1);
}
int zoo_dims_8_16(const attncheck_problem* p, const float* q, const float* k, const float* v, float* out) {
    return dims_8_16(p, q, k, v, out);
}
const char zoo_dims_8_16_declaration[] = "head_dim=8,16";
int zoo_dims_8_16_quiet(const attncheck_problem* p, const float* q, const float* k, const float* v, float* out) {
    return dims_8_16(p, q, k, v, out);
}

int zoo_nan_rows(const attncheck_problem* p, const float* q, const float* k, const float* v, float* out) {
    const int rc = attention(p, q, k, v, out, 1);
    if (rc != ATTNCHECK_OK || !p->kv_valid_len) return rc;
    const long per_b = (long)p->heads * p->q_len * p->value_dim;
    for (long b = 0; b < p->batch; ++b)
        if (p->kv_valid_len[b] == 0)
            for (long at = b * per_b; at < (b + 1) * per_b; ++at) out[at] = NAN;
    return rc;
}

const int32_t zoo_v2_zeros_abi_version = ATTNCHECK_ABI_VERSION_2;
const char zoo_v2_zeros_declaration[] = "dtype=f32";
int zoo_v2_zeros(const attncheck_problem_v2* p) {
    if (p->abi_version != ATTNCHECK_ABI_VERSION_2 || p->dtype != ATTNCHECK_DTYPE_F32 || p->cu_seqlens_q)
        return ATTNCHECK_UNSUPPORTED;
    float* out = (float*)p->out.data;
    for (long b = 0; b < p->batch; ++b)
        for (long h = 0; h < p->q_heads; ++h)
            for (long i = 0; i < p->q_len; ++i)
                for (long c = 0; c < p->value_dim; ++c)
                    out[b * p->out.stride[0] + h * p->out.stride[1] + i * p->out.stride[2] + c * p->out.stride[3]] = 0.0f;
    return ATTNCHECK_OK;
}

const int32_t zoo_v2_head_dim_128_abi_version = ATTNCHECK_ABI_VERSION_2;
const char zoo_v2_head_dim_128_declaration[] = "head_dim=128";
int zoo_v2_head_dim_128(const attncheck_problem_v2* p) {
    (void)p;
    return ATTNCHECK_UNSUPPORTED;
}

const int32_t zoo_v2_refuses_abi_version = ATTNCHECK_ABI_VERSION_2;
int zoo_v2_refuses(const attncheck_problem_v2* p) {
    (void)p;
    return ATTNCHECK_UNSUPPORTED;
}

/* Element (b, h, t, c) of a version 2 tensor (dense layout: t indexes rows of the sequence). */
static float* at_v2(const attncheck_tensor_v2* t, long b, long h, long r, long c) {
    return (float*)t->data + b * t->stride[0] + h * t->stride[1] + r * t->stride[2] + c * t->stride[3];
}

const int32_t zoo_v2_grad_zeros_abi_version = ATTNCHECK_ABI_VERSION_2;
const char zoo_v2_grad_zeros_declaration[] =
    "dtype=f32; gqa=no; padding=no; paged=no; varlen=no; window=no; softcap=no; alibi=no; max_kv_len=4096";
int zoo_v2_grad_zeros(const attncheck_problem_v2* p) {
    if (p->abi_version != ATTNCHECK_ABI_VERSION_2 || p->dtype != ATTNCHECK_DTYPE_F32 || p->cu_seqlens_q ||
        p->kv_lens || p->block_table || p->q_heads != p->kv_heads || p->window_left >= 0 || p->window_right >= 0 ||
        p->softcap > 0 || p->alibi_slopes || (p->struct_size >= (int32_t)sizeof(attncheck_problem_v2) && p->sinks) ||
        p->kv_len > 4096)
        return ATTNCHECK_UNSUPPORTED;
    float w[4096]; /* one row's scores, then weights [Tk] */
    for (long b = 0; b < p->batch; ++b)
        for (long h = 0; h < p->q_heads; ++h)
            for (long i = 0; i < p->q_len; ++i) {
                const long horizon = p->causal ? p->q_pos[b] + i : p->kv_len - 1; /* last visible key */
                float m = -INFINITY, sum = 0.0f;
                for (long j = 0; j <= horizon && j < p->kv_len; ++j) {
                    float dot = 0.0f;
                    for (long c = 0; c < p->head_dim; ++c) dot += *at_v2(&p->q, b, h, i, c) * *at_v2(&p->k, b, h, j, c);
                    w[j] = p->scale * dot;
                    if (w[j] > m) m = w[j];
                }
                for (long j = 0; j <= horizon && j < p->kv_len; ++j) sum += (w[j] = expf(w[j] - m));
                for (long c = 0; c < p->value_dim; ++c) {
                    float o = 0.0f;
                    for (long j = 0; j <= horizon && j < p->kv_len; ++j) o += w[j] / sum * *at_v2(&p->v, b, h, j, c);
                    *at_v2(&p->out, b, h, i, c) = sum > 0.0f ? o : 0.0f;
                }
                if (p->lse)
                    p->lse[b * p->lse_stride[0] + h * p->lse_stride[1] + i * p->lse_stride[2]] =
                        sum > 0.0f ? m + logf(sum) : -INFINITY;
            }
    return ATTNCHECK_OK;
}
int zoo_v2_grad_zeros_backward(const attncheck_problem_v2* p, const attncheck_grads_v2* g) {
    if (zoo_v2_grad_zeros(p) != ATTNCHECK_OK) return ATTNCHECK_UNSUPPORTED; /* the same refusals */
    for (long b = 0; b < p->batch; ++b)
        for (long h = 0; h < p->q_heads; ++h) {
            for (long i = 0; i < p->q_len; ++i)
                for (long c = 0; c < p->head_dim; ++c) *at_v2(&g->dq, b, h, i, c) = 0.0f;
            for (long j = 0; j < p->kv_len; ++j) {
                for (long c = 0; c < p->head_dim; ++c) *at_v2(&g->dk, b, h, j, c) = 0.0f;
                for (long c = 0; c < p->value_dim; ++c) *at_v2(&g->dv, b, h, j, c) = 0.0f;
            }
        }
    return ATTNCHECK_OK;
}
