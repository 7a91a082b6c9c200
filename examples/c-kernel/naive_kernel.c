/* naive_kernel.c — a correct attention kernel in plain C, built as a shared library and checked
 * with `attncheck fuzz --kernel-lib libnaive_kernel.so --symbol naive_attention`.
 *
 * Dimension legend: B = batch, H = heads, Tq = q_len, Tk = kv_len, Dk = head_dim, Dv = value_dim.
 * q [B,H,Tq,Dk], k [B,H,Tk,Dk], v [B,H,Tk,Dv], out [B,H,Tq,Dv], contiguous row-major float32. */
#include <math.h>
#include <stdlib.h>

#include <attncheck/kernel_abi.h>

/* Optional: the ABI version this library was written against. attncheck refuses to load a
 * library that declares another version (instead of misreading attncheck_problem). */
const int32_t attncheck_abi_version = ATTNCHECK_ABI_VERSION;

int naive_attention(const attncheck_problem* p, const float* q, const float* k, const float* v,
                    float* out) {
    if (p->abi_version != ATTNCHECK_ABI_VERSION) return ATTNCHECK_UNSUPPORTED;
    if (p->batch < 1 || p->heads < 1 || p->q_len < 1 || p->kv_len < 1 || p->head_dim < 1 ||
        p->value_dim < 1 || p->q_offset < 0)
        return ATTNCHECK_UNSUPPORTED;
    const long Tq = p->q_len, Tk = p->kv_len, Dk = p->head_dim, Dv = p->value_dim;
    float* w = malloc((size_t)Tk * sizeof *w); /* one row of scores, then probabilities [Tk] */
    if (!w) return ATTNCHECK_UNSUPPORTED;
    for (long bh = 0; bh < (long)p->batch * p->heads; ++bh) {
        const long b = bh / p->heads;
        const long valid = p->kv_valid_len ? p->kv_valid_len[b] : Tk;
        for (long i = 0; i < Tq; ++i) {
            float* o = out + (bh * Tq + i) * Dv;
            float m = -INFINITY, sum = 0.0f;
            for (long j = 0; j < Tk; ++j) {
                const int visible = j < valid && (!p->causal || j <= p->q_offset + i);
                float dot = 0.0f;
                for (long c = 0; c < Dk; ++c) dot += q[(bh * Tq + i) * Dk + c] * k[(bh * Tk + j) * Dk + c];
                w[j] = visible ? p->scale * dot : -INFINITY;
                if (w[j] > m) m = w[j];
            }
            for (long c = 0; c < Dv; ++c) o[c] = 0.0f;
            if (m == -INFINITY) continue; /* no visible key: zeros, not 0/0 */
            for (long j = 0; j < Tk; ++j) sum += (w[j] = expf(w[j] - m));
            for (long j = 0; j < Tk; ++j) {
                if (w[j] == 0.0f) continue;
                for (long c = 0; c < Dv; ++c) o[c] += w[j] / sum * v[(bh * Tk + j) * Dv + c];
            }
        }
    }
    free(w);
    return ATTNCHECK_OK;
}
