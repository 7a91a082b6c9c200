/* crash_kernel.c — the naive kernel with a bug that segfaults: it reads kv_valid_len[b] without
 * checking for NULL (the ABI allows NULL: "no padding"). attncheck runs it in an isolated
 * worker and reports "crashed (SIGSEGV) on case N (seed S) of PROPERTY" with the replay line,
 * then carries on. */
#include <math.h>

#include <attncheck/kernel_abi.h>

int crash_attention(const attncheck_problem* p, const float* q, const float* k, const float* v,
                    float* out) {
    if (p->abi_version != ATTNCHECK_ABI_VERSION) return ATTNCHECK_UNSUPPORTED;
    const long Tq = p->q_len, Tk = p->kv_len, Dk = p->head_dim, Dv = p->value_dim;
    for (long bh = 0; bh < (long)p->batch * p->heads; ++bh) {
        const long valid = p->kv_valid_len[bh / p->heads]; /* BUG: kv_valid_len may be NULL */
        for (long i = 0; i < Tq; ++i) {
            float* o = out + (bh * Tq + i) * Dv;
            float m = -INFINITY, sum = 0.0f;
            for (long c = 0; c < Dv; ++c) o[c] = 0.0f;
            for (long pass = 0; pass < 2; ++pass)
                for (long j = 0; j < Tk; ++j) {
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
