// tiled_attention.cpp — an online-softmax attention kernel over key tiles (see the header).
//
// Dimension legend: B = batch, H = heads, Tq = q_len, Tk = kv_len, Dk = head_dim, Dv = value_dim.
// Per query row it keeps a running max m, a running sum l of exp(s - m) and an unnormalised
// accumulator acc [Dv]; a tile whose max exceeds m rescales l and acc by exp(m_old - m_new).
#include "tiled_attention.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace {
constexpr std::int64_t kTileKeys = 8;  // keys per tile: scores of one tile stay in registers

bool well_formed(const attncheck_problem& p) {
    if (p.abi_version != ATTNCHECK_ABI_VERSION) return false;  // refuse what we do not know
    if (p.batch < 1 || p.heads < 1 || p.q_len < 1 || p.kv_len < 1 || p.head_dim < 1 ||
        p.value_dim < 1 || p.q_offset < 0)
        return false;
    if (p.kv_valid_len)
        for (std::int32_t b = 0; b < p.batch; ++b)
            if (p.kv_valid_len[b] < 0 || p.kv_valid_len[b] > p.kv_len) return false;
    return true;
}
}  // namespace

extern "C" int tiled_attention(const attncheck_problem* p, const float* q, const float* k,
                               const float* v, float* out) {
    if (!p || !well_formed(*p)) return ATTNCHECK_UNSUPPORTED;
    const std::int64_t B = p->batch, H = p->heads, Tq = p->q_len, Tk = p->kv_len,
                       Dk = p->head_dim, Dv = p->value_dim;
    const float neg_inf = -std::numeric_limits<float>::infinity();
    std::vector<float> acc(static_cast<std::size_t>(Dv));  // [Dv]
    for (std::int64_t b = 0; b < B; ++b) {
        const std::int64_t valid = p->kv_valid_len ? p->kv_valid_len[b] : Tk;
        for (std::int64_t h = 0; h < H; ++h) {
            const std::int64_t bh = b * H + h;
            const float* qh = q + bh * Tq * Dk;  // [Tq, Dk]
            const float* kh = k + bh * Tk * Dk;  // [Tk, Dk]
            const float* vh = v + bh * Tk * Dv;  // [Tk, Dv]
            float* oh = out + bh * Tq * Dv;      // [Tq, Dv]
            for (std::int64_t i = 0; i < Tq; ++i) {
                // Keys this row may see: [0, end) (padding and, if causal, the future are cut).
                std::int64_t end = valid;
                if (p->causal) end = std::min(end, p->q_offset + i + 1);
                float m = neg_inf, l = 0.0f;
                std::fill(acc.begin(), acc.end(), 0.0f);
                for (std::int64_t t0 = 0; t0 < end; t0 += kTileKeys) {
                    const std::int64_t t1 = std::min(end, t0 + kTileKeys);
                    float s[kTileKeys];  // scores of this tile
                    float tile_max = neg_inf;
                    for (std::int64_t j = t0; j < t1; ++j) {
                        float dot = 0.0f;
                        for (std::int64_t c = 0; c < Dk; ++c) dot += qh[i * Dk + c] * kh[j * Dk + c];
                        s[j - t0] = p->scale * dot;
                        tile_max = std::max(tile_max, s[j - t0]);
                    }
                    const float m_new = std::max(m, tile_max);
                    const float alpha = std::exp(m - m_new);  // 0 on the first tile (m = -inf)
                    l *= alpha;
                    for (float& a : acc) a *= alpha;
                    for (std::int64_t j = t0; j < t1; ++j) {
                        const float e = std::exp(s[j - t0] - m_new);
                        l += e;
                        for (std::int64_t c = 0; c < Dv; ++c) acc[std::size_t(c)] += e * vh[j * Dv + c];
                    }
                    m = m_new;
                }
                // A row with no visible key (end == 0) has l == 0 and gives zeros, not 0/0.
                for (std::int64_t c = 0; c < Dv; ++c)
                    oh[i * Dv + c] = l > 0.0f ? acc[std::size_t(c)] / l : 0.0f;
            }
        }
    }
    return ATTNCHECK_OK;
}
