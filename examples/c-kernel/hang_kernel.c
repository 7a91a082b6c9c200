/* hang_kernel.c — a kernel that loops forever on short sequences: it splits the keys into
 * kSplits tiles of kv_len / kSplits keys, and for kv_len < kSplits the tile width is 0, so the
 * tile loop never advances. attncheck's worker times out and reports "timed out: a case ran past
 * the limit of T s per case on case N (seed S) of PROPERTY", then carries on. */
#include <math.h>

#include <attncheck/kernel_abi.h>

enum { kSplits = 4 };

int hang_attention(const attncheck_problem* p, const float* q, const float* k, const float* v,
                   float* out) {
    if (p->abi_version != ATTNCHECK_ABI_VERSION) return ATTNCHECK_UNSUPPORTED;
    const long Tq = p->q_len, Tk = p->kv_len, Dk = p->head_dim, Dv = p->value_dim;
    const long tile = Tk / kSplits; /* BUG: 0 when Tk < kSplits */
    for (long bh = 0; bh < (long)p->batch * p->heads; ++bh) {
        const long valid = p->kv_valid_len ? p->kv_valid_len[bh / p->heads] : Tk;
        for (long i = 0; i < Tq; ++i) {
            float* o = out + (bh * Tq + i) * Dv;
            float m = -INFINITY, sum = 0.0f;
            for (long c = 0; c < Dv; ++c) o[c] = 0.0f;
            for (long pass = 0; pass < 2; ++pass)
                for (long t0 = 0; t0 < Tk; t0 += tile)
                    for (long j = t0; j < t0 + tile && j < Tk; ++j) {
                        if (j >= valid || (p->causal && j > p->q_offset + i)) continue;
                        float s = 0.0f;
                        for (long c = 0; c < Dk; ++c) s += q[(bh * Tq + i) * Dk + c] * k[(bh * Tk + j) * Dk + c];
                        s *= p->scale;
                        if (pass == 0) {
                            if (s > m) m = s;
                        } else {
                            const float e = expf(s - m);
                            sum += e;
                            for (long c = 0; c < Dv; ++c) o[c] += e * v[(bh * Tk + j) * Dv + c];
                        }
                    }
            if (sum > 0.0f)
                for (long c = 0; c < Dv; ++c) o[c] /= sum;
        }
    }
    return ATTNCHECK_OK;
}
