/* flash_style_kernel.c — an attention kernel in FlashAttention's conventions, checked as it is
 * through attncheck's kernel ABI version 2 (attncheck/kernel_abi_v2.h):
 *
 *   - bfloat16 q, k, v, out (uint16_t bit patterns), float32 accumulation;
 *   - any strides, so FlashAttention's [B, T, H, D] layout is read in place;
 *   - grouped-query heads: query head h reads kv head h / (Hq / Hk), K/V never replicated;
 *   - a paged KV cache (k, v as [num_blocks, block_size, Hk, D] through block_table) or a dense one;
 *   - bottom-right causal alignment (query row i of a sequence with Tq rows and Tk keys sits at
 *     Tk - Tq + i), a left sliding window, softcapping;
 *   - online softmax over key blocks, the probabilities rounded to bfloat16 before P.V (as
 *     FlashAttention does), and the log-sum-exp of every row;
 *   - a backward pass, flash_attention_backward (FlashAttention-2's: P recomputed from the saved
 *     lse, D = rowsum(dout * out), dS = P (dP - D); P and dS rounded to bfloat16 before the
 *     products that take them, dk and dv accumulated in float32 over the query heads of a group).
 *
 * What it does not handle it declares (flash_attention_declaration below), and it refuses such
 * problems at run time as well (returns nonzero): ALiBi, varlen, other dtypes, other positions.
 *
 *   attncheck fuzz --kernel-lib libflash_style_kernel.so --symbol flash_attention
 * (the backward is found by its name, flash_attention_backward, and checked too). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <attncheck/kernel_abi_v2.h>

/* This symbol speaks version 2 of the ABI; its capabilities (attncheck/declaration.hpp). */
const int32_t flash_attention_abi_version = ATTNCHECK_ABI_VERSION_2;
const char flash_attention_declaration[] =
    "dtype=bf16; head_dim=1..256; value_dim=1..256; positions=bottom_right; varlen=no; alibi=no; "
    "rounds_probabilities=yes";

enum { kBlockKeys = 64, kMaxDim = 256 };

static float bf16_load(const uint16_t* base, int64_t offset) {
    const uint32_t u = (uint32_t)base[offset] << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static uint16_t bf16_round(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u); /* quiet NaN */
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* Element offset of key j of sequence b, kv head hk, column c (paged or dense). */
static int64_t kv_offset(const attncheck_problem_v2* p, const attncheck_tensor_v2* t, int b, int hk, int j, int c) {
    if (p->block_table) {
        const int32_t block = p->block_table[(int64_t)b * p->block_table_stride + j / p->block_size];
        return block * t->stride[0] + hk * t->stride[1] + (int64_t)(j % p->block_size) * t->stride[2] +
               c * t->stride[3];
    }
    return b * t->stride[0] + hk * t->stride[1] + (int64_t)j * t->stride[2] + c * t->stride[3];
}

static int supported(const attncheck_problem_v2* p) {
    if (p->abi_version != ATTNCHECK_ABI_VERSION_2 || p->struct_size < (int32_t)sizeof(attncheck_problem_v2))
        return 0;
    if (p->dtype != ATTNCHECK_DTYPE_BF16 || p->cu_seqlens_q || p->cu_seqlens_k || p->alibi_slopes) return 0;
    if (p->batch < 1 || p->q_heads < 1 || p->kv_heads < 1 || p->q_heads % p->kv_heads != 0) return 0;
    if (p->head_dim < 1 || p->head_dim > kMaxDim || p->value_dim < 1 || p->value_dim > kMaxDim) return 0;
    if (p->q_len < 1 || p->kv_len < 1 || !p->q_pos) return 0;
    if (p->block_table && (p->block_size < 1 || p->block_table_stride < 1 || p->num_blocks < 1)) return 0;
    for (int b = 0; b < p->batch; ++b) {
        const int tk = p->kv_lens ? p->kv_lens[b] : p->kv_len;
        if (tk < 0 || tk > p->kv_len || p->q_pos[b] != tk - p->q_len) return 0;
        if (p->block_table) {
            const int need = (tk + p->block_size - 1) / p->block_size;
            if (need > p->block_table_stride) return 0;
            for (int e = 0; e < need; ++e) {
                const int32_t blk = p->block_table[(int64_t)b * p->block_table_stride + e];
                if (blk < 0 || blk >= p->num_blocks) return 0;
            }
        }
    }
    return 1;
}

int flash_attention(const attncheck_problem_v2* p) {
    if (!p || !supported(p)) return ATTNCHECK_UNSUPPORTED;
    const int group = p->q_heads / p->kv_heads, dk = p->head_dim, dv = p->value_dim;
    const uint16_t* q = (const uint16_t*)p->q.data;
    const uint16_t* k = (const uint16_t*)p->k.data;
    const uint16_t* v = (const uint16_t*)p->v.data;
    uint16_t* out = (uint16_t*)p->out.data;

    for (int b = 0; b < p->batch; ++b) {
        const int tk = p->kv_lens ? p->kv_lens[b] : p->kv_len, tq = p->q_len;
        for (int h = 0; h < p->q_heads; ++h) {
            const int hk = h / group;
            for (int i = 0; i < tq; ++i) {
                const int a = tk - tq + i; /* bottom-right alignment */
                int lo = 0, hi = p->causal ? a : tk - 1;
                if (p->window_left >= 0 && a - p->window_left > lo) lo = a - p->window_left;
                if (!p->causal && p->window_right >= 0 && a + p->window_right < hi) hi = a + p->window_right;
                if (hi > tk - 1) hi = tk - 1;

                float qrow[kMaxDim], acc[kMaxDim];
                for (int c = 0; c < dk; ++c)
                    qrow[c] = bf16_load(q, b * p->q.stride[0] + h * p->q.stride[1] + (int64_t)i * p->q.stride[2] +
                                               c * p->q.stride[3]);
                for (int c = 0; c < dv; ++c) acc[c] = 0.0f;
                float m = -INFINITY, l = 0.0f;
                for (int j0 = lo; j0 <= hi; j0 += kBlockKeys) {
                    const int j1 = j0 + kBlockKeys - 1 < hi ? j0 + kBlockKeys - 1 : hi;
                    float s[kBlockKeys], block_max = -INFINITY;
                    for (int j = j0; j <= j1; ++j) {
                        float dot = 0.0f;
                        for (int c = 0; c < dk; ++c) dot += qrow[c] * bf16_load(k, kv_offset(p, &p->k, b, hk, j, c));
                        float sj = p->scale * dot;
                        if (p->softcap > 0.0f) sj = p->softcap * tanhf(sj / p->softcap);
                        s[j - j0] = sj;
                        if (sj > block_max) block_max = sj;
                    }
                    const float m_new = block_max > m ? block_max : m;
                    const float rescale = expf(m - m_new); /* 0 on the first block (m = -inf) */
                    l *= rescale;
                    for (int c = 0; c < dv; ++c) acc[c] *= rescale;
                    for (int j = j0; j <= j1; ++j) {
                        const float pj = expf(s[j - j0] - m_new);
                        l += pj;
                        const float pr = bf16_load(&(uint16_t){bf16_round(pj)}, 0); /* P in bf16 */
                        for (int c = 0; c < dv; ++c) acc[c] += pr * bf16_load(v, kv_offset(p, &p->v, b, hk, j, c));
                    }
                    m = m_new;
                }
                for (int c = 0; c < dv; ++c)
                    out[b * p->out.stride[0] + h * p->out.stride[1] + (int64_t)i * p->out.stride[2] +
                        c * p->out.stride[3]] = bf16_round(l > 0.0f ? acc[c] / l : 0.0f);
                if (p->lse)
                    p->lse[b * p->lse_stride[0] + h * p->lse_stride[1] + (int64_t)i * p->lse_stride[2]] =
                        l > 0.0f ? m + logf(l) : -INFINITY;
            }
        }
    }
    return ATTNCHECK_OK;
}

/* P or dS as FlashAttention's bf16 kernels feed them to the next product: rounded to bfloat16. */
static float to_bf16(float x) { return bf16_load(&(uint16_t){bf16_round(x)}, 0); }

/* The backward (attncheck_grads_v2): dense k and v only (a backward call has no block table). */
int flash_attention_backward(const attncheck_problem_v2* p, const attncheck_grads_v2* g) {
    if (!p || !g || !supported(p) || p->block_table || !p->lse || g->struct_size < (int32_t)sizeof(attncheck_grads_v2))
        return ATTNCHECK_UNSUPPORTED;
    const int group = p->q_heads / p->kv_heads, dk = p->head_dim, dv = p->value_dim, tq = p->q_len;
    const uint16_t *q = (const uint16_t*)p->q.data, *k = (const uint16_t*)p->k.data, *v = (const uint16_t*)p->v.data;
    const uint16_t *out = (const uint16_t*)p->out.data, *dout = (const uint16_t*)g->dout.data;
    uint16_t *dq = (uint16_t*)g->dq.data, *dkp = (uint16_t*)g->dk.data, *dvp = (uint16_t*)g->dv.data;
    float* dk_acc = malloc(sizeof(float) * (size_t)p->kv_len * (size_t)dk);
    float* dv_acc = malloc(sizeof(float) * (size_t)p->kv_len * (size_t)dv);
    if (!dk_acc || !dv_acc) {
        free(dk_acc);
        free(dv_acc);
        return ATTNCHECK_UNSUPPORTED;
    }
#define AT(t, b, h, r, c) ((b) * (t).stride[0] + (h) * (t).stride[1] + (int64_t)(r) * (t).stride[2] + (c) * (t).stride[3])
    for (int b = 0; b < p->batch; ++b) {
        const int tk = p->kv_lens ? p->kv_lens[b] : p->kv_len;
        for (int hk = 0; hk < p->kv_heads; ++hk) {
            memset(dk_acc, 0, sizeof(float) * (size_t)p->kv_len * (size_t)dk);
            memset(dv_acc, 0, sizeof(float) * (size_t)p->kv_len * (size_t)dv);
            for (int h = hk * group; h < (hk + 1) * group; ++h)
                for (int i = 0; i < tq; ++i) {
                    const int a = tk - tq + i;
                    int lo = 0, hi = p->causal ? a : tk - 1;
                    if (p->window_left >= 0 && a - p->window_left > lo) lo = a - p->window_left;
                    if (!p->causal && p->window_right >= 0 && a + p->window_right < hi) hi = a + p->window_right;
                    if (hi > tk - 1) hi = tk - 1;
                    float qrow[kMaxDim], dorow[kMaxDim], dqrow[kMaxDim], D = 0.0f;
                    for (int c = 0; c < dk; ++c) qrow[c] = bf16_load(q, AT(p->q, b, h, i, c)), dqrow[c] = 0.0f;
                    for (int c = 0; c < dv; ++c) {
                        dorow[c] = bf16_load(dout, AT(g->dout, b, h, i, c));
                        D += dorow[c] * bf16_load(out, AT(p->out, b, h, i, c));
                    }
                    const float lse = p->lse[b * p->lse_stride[0] + h * p->lse_stride[1] + (int64_t)i * p->lse_stride[2]];
                    for (int j = lo; j <= hi; ++j) { /* an empty row (lo > hi) has no key: dq stays 0 */
                        float dot = 0.0f, dP = 0.0f;
                        for (int c = 0; c < dk; ++c) dot += qrow[c] * bf16_load(k, kv_offset(p, &p->k, b, hk, j, c));
                        float sj = p->scale * dot, dtanh = 1.0f;
                        if (p->softcap > 0.0f) {
                            const float t = tanhf(sj / p->softcap);
                            sj = p->softcap * t;
                            dtanh = 1.0f - t * t;
                        }
                        const float pj = expf(sj - lse);
                        for (int c = 0; c < dv; ++c) dP += dorow[c] * bf16_load(v, kv_offset(p, &p->v, b, hk, j, c));
                        const float ds = to_bf16(pj * (dP - D) * dtanh), pr = to_bf16(pj);
                        for (int c = 0; c < dk; ++c) {
                            dqrow[c] += ds * bf16_load(k, kv_offset(p, &p->k, b, hk, j, c));
                            dk_acc[(size_t)j * dk + c] += ds * qrow[c];
                        }
                        for (int c = 0; c < dv; ++c) dv_acc[(size_t)j * dv + c] += pr * dorow[c];
                    }
                    for (int c = 0; c < dk; ++c) dq[AT(g->dq, b, h, i, c)] = bf16_round(p->scale * dqrow[c]);
                }
            /* Every row of the cache: rows past tk and keys no row sees get 0. */
            for (int j = 0; j < p->kv_len; ++j) {
                for (int c = 0; c < dk; ++c) dkp[AT(g->dk, b, hk, j, c)] = bf16_round(p->scale * dk_acc[(size_t)j * dk + c]);
                for (int c = 0; c < dv; ++c) dvp[AT(g->dv, b, hk, j, c)] = bf16_round(dv_acc[(size_t)j * dv + c]);
            }
        }
    }
#undef AT
    free(dk_acc);
    free(dv_acc);
    return ATTNCHECK_OK;
}
