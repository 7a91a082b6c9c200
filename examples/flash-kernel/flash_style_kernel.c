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
 *     FlashAttention does), and the log-sum-exp of every row.
 *
 * What it does not handle it declares (flash_attention_declaration below), and it refuses such
 * problems at run time as well (returns nonzero): ALiBi, varlen, other dtypes, other positions.
 *
 *   attncheck fuzz --kernel-lib libflash_style_kernel.so --symbol flash_attention */
#include <math.h>
#include <stdint.h>
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
