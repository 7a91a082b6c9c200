// optimized/decoder.cpp — the float32 decoder of ../shared/spec/MODEL.md, fast.
//
// One layer stack, run_layers(), serves every way of running: it takes M rows of the target
// stream x [M, d] and an attention policy that knows where the rows sit (a padded batch of whole
// sequences, a chunk of one sequence at a cache position, one row per sequence of a batch
// step). Everything except attention is row-wise, so the policies only differ in how they lay
// Q, K, V out for the kernel ABI ([B, H, T, dk]) and which problem they pass:
//
//   teacher-forced batch  q, k, v scattered to [B, H, Tmax, dk]; one call: causal,
//                         q_offset 0, kv_valid_len = T_b (null for a single sequence)
//   session chunk/step    K/V appended to the cache [H, N, dk], no copy of the cache per step.
//                         Built-in kernel: one call for all heads, the cache layer passed as
//                         k, v [1, H, N, dk]: q_len n, kv_len N, q_offset pos, causal (the
//                         mask hides positions >= pos+n, which that kernel never reads).
//                         Any other kernel: one call per head (batch 1, heads 1), q_len n,
//                         kv_len pos+n, q_offset pos, causal, each head's cache being a
//                         contiguous [pos+n, dk] prefix (the exact incremental problem of
//                         KERNEL_ABI.md, with no work on unused cache rows).
//   batch step            caches [B, H, N, dk]; one call for all: q_len 1, kv_len N, no causal
//                         flag, kv_valid_len = pos_b + 1 (the rows past a sequence's position
//                         are padding: zero at start, stale but finite after a truncate/reset).
//   cross-attention       memory K/V computed once per call or session into [B, H, S, dk];
//                         causal 0, kv_valid_len = the memory's valid_len.
//
// The matrix products are gemm.hpp's linear() on weights packed at load time; Q, K and V come
// from one product with the concatenated [3d, d] weight, the memory's K and V from one [2d, d].
//
// Dimension legend: V = vocab, d = d_model, h = H = heads, dk = d/h, f = d_ff, L = layers,
// N = max_len, T = tokens in a call, S = memory rows, B = sequences, M = rows of a call.
#include "optimized/decoder.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>
#include <string>

#include "attncheck/error.hpp"
#include "optimized/gemm.hpp"
#include "reference/decoder.hpp"  // sinusoidal_positions: one definition of the table

namespace attncheck::optimized {

namespace {

struct Norm32 {
    std::vector<float> weight, bias;  // [d]
};

struct LayerWeights {
    PackedMatrix qkv;  // [3d, d]: Wq, Wk, Wv stacked (bias bq, bk, bv)
    PackedMatrix o;    // [d, d]
    Norm32 norm_self;
    PackedMatrix cross_q;   // [d, d]
    PackedMatrix cross_kv;  // [2d, d]: Wk, Wv of the cross-attention
    PackedMatrix cross_o;   // [d, d]
    Norm32 norm_cross;
    PackedMatrix fc1;  // [f, d]
    PackedMatrix fc2;  // [d, f]
    Norm32 norm_ffn;
};

}  // namespace

struct PackedWeights {
    ModelConfig config;
    std::vector<float> embed;  // [V, d]
    std::vector<float> pos;    // [N, d], learned or sinusoidal
    float embed_scale = 1.0f;
    float attn_scale = 1.0f;   // 1/sqrt(dk)
    Activation32 act = Activation32::relu;
    std::vector<LayerWeights> layers;  // L
    Norm32 final_norm;                 // pre-norm only
    PackedMatrix lm_head;              // [V, d]
};

namespace {

Norm32 load_norm(const Model& m, const std::string& prefix) {
    return {m.at(prefix + "weight").data, m.at(prefix + "bias").data};
}

std::unique_ptr<PackedWeights> pack_model(const Model& m) {
    m.validate();
    const ModelConfig& c = m.config;
    const int d = c.d_model, f = c.d_ff;
    auto pw = std::make_unique<PackedWeights>();
    pw->config = c;
    pw->embed = m.at("embed.weight").data;
    if (c.positional == Positional::learned) {
        pw->pos = m.at("pos.weight").data;
    } else {
        const auto table = reference::sinusoidal_positions<float>(std::size_t(c.max_len), std::size_t(d));
        pw->pos.assign(table.begin(), table.end());
    }
    pw->embed_scale = c.embed_scale_sqrt_d ? std::sqrt(float(d)) : 1.0f;
    pw->attn_scale = float(1.0 / std::sqrt(double(c.head_dim())));
    pw->act = c.activation == Activation::relu   ? Activation32::relu
              : c.activation == Activation::gelu ? Activation32::gelu
                                                 : Activation32::gelu_tanh;
    auto w = [&](const std::string& name) { return m.at(name).data.data(); };
    for (int i = 0; i < c.n_layers; ++i) {
        const std::string p = "layers." + std::to_string(i) + ".";
        LayerWeights L;
        const std::string sa = p + "self_attn.";
        L.qkv = pack_weights({{w(sa + "q.weight"), d, w(sa + "q.bias")},
                              {w(sa + "k.weight"), d, w(sa + "k.bias")},
                              {w(sa + "v.weight"), d, w(sa + "v.bias")}}, d);
        L.o = pack_weights(w(sa + "o.weight"), d, d, w(sa + "o.bias"));
        L.norm_self = load_norm(m, p + "norm_self.");
        if (c.cross_attention) {
            const std::string ca = p + "cross_attn.";
            L.cross_q = pack_weights(w(ca + "q.weight"), d, d, w(ca + "q.bias"));
            L.cross_kv = pack_weights({{w(ca + "k.weight"), d, w(ca + "k.bias")},
                                       {w(ca + "v.weight"), d, w(ca + "v.bias")}}, d);
            L.cross_o = pack_weights(w(ca + "o.weight"), d, d, w(ca + "o.bias"));
            L.norm_cross = load_norm(m, p + "norm_cross.");
        }
        L.fc1 = pack_weights(w(p + "ffn.fc1.weight"), f, d, w(p + "ffn.fc1.bias"));
        L.fc2 = pack_weights(w(p + "ffn.fc2.weight"), d, f, w(p + "ffn.fc2.bias"));
        L.norm_ffn = load_norm(m, p + "norm_ffn.");
        pw->layers.push_back(std::move(L));
    }
    if (c.norm == Norm::pre) pw->final_norm = load_norm(m, "final_norm.");
    pw->lm_head = pack_weights(m.lm_head().data.data(), c.vocab_size, d, nullptr);
    return pw;
}

// LayerNorm of MODEL.md (biased variance), rows of x [m, d] -> y [m, d]; y may alias x.
// Statistics in double, more accurate than the float baseline, so they never eat into the
// tolerance. The sums run in kStatLanes interleaved partial sums (column c goes to lane
// c % kStatLanes, lanes added in order, then the columns past the last full group): one
// vector of doubles instead of a serial chain of d dependent adds, which made LayerNorm ~3% of
// a prefill. The order is fixed, so a row's result does not depend on where it is computed.
constexpr int kStatLanes = 8;

double row_sum(const float* xr, int d, double center, bool squares) {
    double acc[kStatLanes] = {};
    int c = 0;
    for (; c + kStatLanes <= d; c += kStatLanes)
        for (int l = 0; l < kStatLanes; ++l) {
            const double t = double(xr[c + l]) - center;
            acc[l] = squares ? std::fma(t, t, acc[l]) : acc[l] + t;
        }
    double s = 0;
    for (double a : acc) s += a;
    for (; c < d; ++c) {
        const double t = double(xr[c]) - center;
        s = squares ? std::fma(t, t, s) : s + t;
    }
    return s;
}

void layer_norm(const float* x, int m, int d, const Norm32& n, double eps, float* y) {
#pragma omp parallel for schedule(static) if (m >= 32)
    for (int i = 0; i < m; ++i) {
        const float* xr = x + std::size_t(i) * std::size_t(d);
        float* yr = y + std::size_t(i) * std::size_t(d);
        const double mean = row_sum(xr, d, 0.0, false) / d;
        const double var = row_sum(xr, d, mean, true) / d;
        const double inv_std = 1.0 / std::sqrt(var + eps);
        for (int c = 0; c < d; ++c)
            yr[c] = float((xr[c] - mean) * inv_std * n.weight[std::size_t(c)] + n.bias[std::size_t(c)]);
    }
}

// x[r] = embed[token] * s + pos[position], MODEL.md §decoder 1.
void embed_row(const PackedWeights& P, int token, int position, float* x) {
    const std::size_t d = std::size_t(P.config.d_model);
    const float* e = P.embed.data() + std::size_t(token) * d;
    const float* p = P.pos.data() + std::size_t(position) * d;
    for (std::size_t c = 0; c < d; ++c) x[c] = e[c] * P.embed_scale + p[c];
}

std::string describe(const attncheck_problem& p) {
    std::ostringstream s;
    s << "batch=" << p.batch << " heads=" << p.heads << " q_len=" << p.q_len << " kv_len=" << p.kv_len
      << " head_dim=" << p.head_dim << " value_dim=" << p.value_dim << " q_offset=" << p.q_offset
      << " causal=" << p.causal << " kv_valid_len=" << (p.kv_valid_len ? "given" : "null");
    return s.str();
}

attncheck_problem make_problem(const PackedWeights& P, int batch, int heads, int q_len, int kv_len,
                               int q_offset, bool causal, const int32_t* kv_valid_len) {
    return attncheck::make_problem({.batch = batch, .heads = heads, .q_len = q_len, .kv_len = kv_len,
                                    .head_dim = P.config.head_dim(), .value_dim = P.config.head_dim(),
                                    .q_offset = q_offset, .causal = causal,
                                    .kv_valid_len = kv_valid_len, .scale = P.attn_scale});
}

// The kernel of a decoder and how to read its rows with no visible key.
struct KernelRef {
    attncheck_kernel_fn fn;
    bool zero_empty_rows;  // Decoder::set_zero_empty_rows
};

void call_kernel(const KernelRef& kernel, const attncheck_problem& p, const float* q, const float* k,
                 const float* v, float* out, const char* where) {
    const int rc = kernel.fn(&p, q, k, v, out);
    if (rc != 0)
        throw KernelError(std::string("attention kernel returned ") + std::to_string(rc) +
                          " (unsupported) for the " + where + " problem: " + describe(p));
    // Row i of sequence b sees no key only when kv_valid_len[b] = 0 (key 0 is visible to every
    // row otherwise, since q_offset >= 0): such a sequence's whole output block.
    if (!kernel.zero_empty_rows || !p.kv_valid_len) return;
    const std::size_t per_b = std::size_t(p.heads) * std::size_t(p.q_len) * std::size_t(p.value_dim);
    for (int b = 0; b < p.batch; ++b)
        if (p.kv_valid_len[b] == 0) std::fill_n(out + std::size_t(b) * per_b, per_b, 0.0f);
}

// Row scratch of the layer stack for up to `rows` rows.
struct RowBuffers {
    int rows = 0;
    std::vector<float> h;    // [M, d]  LN(x) (pre-norm) or the sublayer output before LN (post)
    std::vector<float> qkv;  // [M, 3d]
    std::vector<float> q;    // [M, d]  cross-attention queries
    std::vector<float> att;  // [M, d]  attention output, heads concatenated
    std::vector<float> hid;  // [M, f]
    void resize(const ModelConfig& c, int m) {
        if (m <= rows) return;
        rows = m;
        const std::size_t M = std::size_t(m), d = std::size_t(c.d_model);
        h.assign(M * d, 0.0f);
        qkv.assign(M * 3 * d, 0.0f);
        q.assign(M * d, 0.0f);
        att.assign(M * d, 0.0f);
        hid.assign(M * std::size_t(c.d_ff), 0.0f);
    }
};

// The L layers and the final norm over x [M, d] in place (MODEL.md §One decoder layer).
//   post: x = LN(x + F(x))     pre: x = x + F(LN(x))
// Attn provides self(l, qkv [M, 3d], att [M, d]) and cross(l, q [M, d], att [M, d]).
template <class Attn>
void run_layers(const PackedWeights& P, int M, float* x, RowBuffers& B, Attn& attn) {
    const ModelConfig& c = P.config;
    const int d = c.d_model, f = c.d_ff;
    const bool pre = c.norm == Norm::pre;
    float* h = B.h.data();
    // One sublayer: in = pre ? LN(x) : x; y = F(in) ; x = pre ? x + y : LN(x + y). F ends with a
    // linear layer `out` whose residual is fused into its epilogue.
    auto sublayer = [&](const Norm32& ln, auto&& body, const PackedMatrix& out, const float* out_in,
                        int out_k) {
        const float* in = x;
        if (pre) {
            layer_norm(x, M, d, ln, c.ln_eps, h);
            in = h;
        }
        const float* o_in = body(in);
        if (!o_in) o_in = out_in;
        if (pre) {
            linear(out, o_in, M, out_k, x, d, Activation32::none, x, d);  // x += F
        } else {
            linear(out, o_in, M, out_k, h, d, Activation32::none, x, d);  // h = x + F
            layer_norm(h, M, d, ln, c.ln_eps, x);
        }
    };
    for (int l = 0; l < c.n_layers; ++l) {
        const LayerWeights& W = P.layers[std::size_t(l)];
        sublayer(
            W.norm_self,
            [&](const float* in) -> const float* {
                linear(W.qkv, in, M, d, B.qkv.data(), 3 * d);
                attn.self(l, B.qkv.data(), B.att.data());
                return B.att.data();
            },
            W.o, nullptr, d);
        if (c.cross_attention)
            sublayer(
                W.norm_cross,
                [&](const float* in) -> const float* {
                    linear(W.cross_q, in, M, d, B.q.data(), d);
                    attn.cross(l, B.q.data(), B.att.data());
                    return B.att.data();
                },
                W.cross_o, nullptr, d);
        sublayer(
            W.norm_ffn,
            [&](const float* in) -> const float* {
                linear(W.fc1, in, M, d, B.hid.data(), f, P.act);
                return B.hid.data();
            },
            W.fc2, nullptr, f);
    }
    if (pre) layer_norm(x, M, d, P.final_norm, c.ln_eps, x);
}

// Memory K/V of every layer: m [S, d] -> k, v [H, S_pad, dk] for one sequence, written at
// k_out/v_out (rows >= S untouched).
void memory_kv(const PackedWeights& P, int l, const Memory& mem, int S_pad, float* k_out, float* v_out,
               std::vector<float>& tmp) {
    const int d = P.config.d_model, H = P.config.n_heads, dk = P.config.head_dim();
    const int S = mem.rows;
    tmp.resize(std::size_t(S) * 2 * std::size_t(d));
    linear(P.layers[std::size_t(l)].cross_kv, mem.data.data(), S, d, tmp.data(), 2 * d);  // [S, 2d]
    for (int s = 0; s < S; ++s)
        for (int hh = 0; hh < H; ++hh) {
            const float* row = tmp.data() + std::size_t(s) * 2 * std::size_t(d) + std::size_t(hh * dk);
            const std::size_t at = (std::size_t(hh) * std::size_t(S_pad) + std::size_t(s)) * std::size_t(dk);
            std::memcpy(k_out + at, row, sizeof(float) * std::size_t(dk));
            std::memcpy(v_out + at, row + d, sizeof(float) * std::size_t(dk));
        }
}

// Cross-attention memory of B sequences, all layers: [L, B, H, Smax, dk] for K and V.
struct MemoryCache {
    int S = 0;                          // Smax (0: no cross-attention)
    std::vector<float> k, v;            // [L, B, H, S, dk]
    std::vector<int32_t> valid;         // [B] memory valid_len
    std::size_t seq_stride = 0;         // H * S * dk
    std::size_t layer_stride = 0;       // B * seq_stride
    void build(const PackedWeights& P, const std::vector<const Memory*>& mems) {
        const ModelConfig& c = P.config;
        if (!c.cross_attention) return;
        const std::size_t B = mems.size();
        S = 0;
        for (const Memory* m : mems) S = std::max(S, m->rows);
        seq_stride = std::size_t(c.n_heads) * std::size_t(S) * std::size_t(c.head_dim());
        layer_stride = B * seq_stride;
        k.assign(std::size_t(c.n_layers) * layer_stride, 0.0f);
        v.assign(k.size(), 0.0f);
        valid.resize(B);
        std::vector<float> tmp;
        for (std::size_t b = 0; b < B; ++b) {
            valid[b] = mems[b]->valid_len;
            for (int l = 0; l < c.n_layers; ++l)
                memory_kv(P, l, *mems[b], S, k.data() + std::size_t(l) * layer_stride + b * seq_stride,
                          v.data() + std::size_t(l) * layer_stride + b * seq_stride, tmp);
        }
    }
    const float* k_at(int l, int b) const { return k.data() + std::size_t(l) * layer_stride + std::size_t(b) * seq_stride; }
    const float* v_at(int l, int b) const { return v.data() + std::size_t(l) * layer_stride + std::size_t(b) * seq_stride; }
};

std::vector<const Memory*> checked_memories(const ModelConfig& c, const std::vector<std::optional<Memory>>& memories,
                                            std::size_t batch) {
    if (!memories.empty() && memories.size() != batch)
        throw InputError("memories: " + std::to_string(memories.size()) + " given for " +
                         std::to_string(batch) + " sequences (must be none or one per sequence)");
    std::vector<const Memory*> out;
    for (std::size_t b = 0; b < batch; ++b) {
        const std::optional<Memory> none;
        const std::optional<Memory>& m = memories.empty() ? none : memories[b];
        check_memory(c, m);
        if (c.cross_attention) out.push_back(&*m);
    }
    return out;
}

// Teacher-forced batch: B whole sequences, rows of sequence b at row0[b] .. row0[b]+T_b-1.
struct TeacherAttention {
    const PackedWeights& P;
    KernelRef kernel;
    const MemoryCache& mem;
    std::vector<int> row0, len;        // [B]
    std::vector<int32_t> valid;        // [B] = len
    int Tmax = 0;
    bool padded = false;               // some sequence shorter than Tmax
    std::vector<float> qh, kh, vh, oh;  // [B, H, Tmax, dk]; the cross-attention reuses qh/oh

    std::size_t at(int b, int hh, int t) const {
        const ModelConfig& c = P.config;
        return ((std::size_t(b) * std::size_t(c.n_heads) + std::size_t(hh)) * std::size_t(Tmax) + std::size_t(t)) *
               std::size_t(c.head_dim());
    }
    // rows of src [M, ld] (column offset col0, heads of dk) -> dst [B, H, Tmax, dk], and back.
    void scatter(const float* src, std::size_t ld, int col0, std::vector<float>& dst) const {
        const int B = int(len.size()), H = P.config.n_heads, dk = P.config.head_dim();
#pragma omp parallel for schedule(static)
        for (int b = 0; b < B; ++b)
            for (int t = 0; t < len[std::size_t(b)]; ++t)
                for (int hh = 0; hh < H; ++hh)
                    std::memcpy(dst.data() + at(b, hh, t),
                                src + std::size_t(row0[std::size_t(b)] + t) * ld + std::size_t(col0 + hh * dk),
                                sizeof(float) * std::size_t(dk));
    }
    void gather(float* att) const {
        const int B = int(len.size()), H = P.config.n_heads, dk = P.config.head_dim();
        const std::size_t d = std::size_t(P.config.d_model);
#pragma omp parallel for schedule(static)
        for (int b = 0; b < B; ++b)
            for (int t = 0; t < len[std::size_t(b)]; ++t)
                for (int hh = 0; hh < H; ++hh)
                    std::memcpy(att + std::size_t(row0[std::size_t(b)] + t) * d + std::size_t(hh * dk),
                                oh.data() + at(b, hh, t), sizeof(float) * std::size_t(dk));
    }
    void self(int, const float* qkv, float* att) {
        const std::size_t ld = 3 * std::size_t(P.config.d_model);
        const int d = P.config.d_model;
        scatter(qkv, ld, 0, qh);
        scatter(qkv, ld, d, kh);
        scatter(qkv, ld, 2 * d, vh);
        const attncheck_problem p = make_problem(P, int(len.size()), P.config.n_heads, Tmax, Tmax, 0, true,
                                                 padded ? valid.data() : nullptr);
        call_kernel(kernel, p, qh.data(), kh.data(), vh.data(), oh.data(), "self-attention prefill");
        gather(att);
    }
    void cross(int l, const float* q, float* att) {
        scatter(q, std::size_t(P.config.d_model), 0, qh);
        const attncheck_problem p = make_problem(P, int(len.size()), P.config.n_heads, Tmax, mem.S, 0, false,
                                                 mem.valid.data());
        call_kernel(kernel, p, qh.data(), mem.k_at(l, 0), mem.v_at(l, 0), oh.data(), "cross-attention prefill");
        gather(att);
    }
};

// One sequence's cache: K and V of every layer, [L, H, N, dk] at a layer stride (a BatchSession
// puts B of them side by side, so its layer stride is B * H * N * dk).
struct CacheView {
    float* k = nullptr;
    float* v = nullptr;
    std::size_t layer_stride = 0;
    std::size_t head_stride = 0;  // N * dk
};

// n rows of one sequence at cache positions pos .. pos+n-1 (a chunk of a prefill, or a step).
struct ChunkAttention {
    const PackedWeights& P;
    KernelRef kernel;
    CacheView cache;
    const float* mem_k = nullptr;  // per layer at mem_layer_stride: [H, S, dk]
    const float* mem_v = nullptr;
    std::size_t mem_layer_stride = 0;
    int mem_S = 0;
    const int32_t* mem_valid = nullptr;
    int pos = 0, n = 0;
    float* qh = nullptr;  // [H, n, dk] scratch (n > 1 only)
    float* oh = nullptr;  // [H, n, dk] scratch (n > 1 only)

    void self(int l, const float* qkv, float* att) {
        const ModelConfig& c = P.config;
        const int H = c.n_heads, dk = c.head_dim(), d = c.d_model;
        float* kl = cache.k + std::size_t(l) * cache.layer_stride;
        float* vl = cache.v + std::size_t(l) * cache.layer_stride;
        for (int t = 0; t < n; ++t) {
            const float* row = qkv + std::size_t(t) * 3 * std::size_t(d);
            for (int hh = 0; hh < H; ++hh) {
                const std::size_t at = std::size_t(hh) * cache.head_stride + std::size_t(pos + t) * std::size_t(dk);
                std::memcpy(kl + at, row + d + hh * dk, sizeof(float) * std::size_t(dk));
                std::memcpy(vl + at, row + 2 * d + hh * dk, sizeof(float) * std::size_t(dk));
                if (n > 1)
                    std::memcpy(qh + (std::size_t(hh) * std::size_t(n) + std::size_t(t)) * std::size_t(dk),
                                row + hh * dk, sizeof(float) * std::size_t(dk));
            }
        }
        // With one row, q [d] already is [H, 1, dk] and att [d] is out [H, 1, dk].
        const float* q = n > 1 ? qh : qkv;
        float* out = n > 1 ? oh : att;
        const char* where = n > 1 ? "self-attention chunk" : "self-attention step";
        if (kernel.fn == attncheck_optimized_kernel) {
            // The built-in kernel never reads a key past a row's last visible one, so the whole
            // cache layer [H, N, dk] can be passed as k [1, H, N, dk] with the causal mask
            // (q_offset = pos) hiding positions >= pos + n: one call for all heads instead of
            // H. Per-head calls cost one or two OpenMP regions each (a futex wake-up apiece
            // under OMP_WAIT_POLICY=passive) and a short head leaves a thread idle: on `base`
            // at ctx 1024 the attention of a step took 1.7 ms that way, 1.0 ms in one call.
            // The rows each query sees, and so every bit of the result, are the same.
            const int N = int(cache.head_stride / std::size_t(dk));
            const attncheck_problem p = make_problem(P, 1, H, n, N, pos, true, nullptr);
            call_kernel(kernel, p, q, kl, vl, out, where);
        } else {
            // Any other kernel gets the exact incremental problem of KERNEL_ABI.md (kv_len =
            // pos + n, one head at a time): a kernel under test may do work in proportion to
            // kv_len, and this is the shape the decoder-level properties check it with.
            const attncheck_problem p = make_problem(P, 1, 1, n, pos + n, pos, true, nullptr);
            for (int hh = 0; hh < H; ++hh)
                call_kernel(kernel, p, q + std::size_t(hh) * std::size_t(n) * std::size_t(dk),
                            kl + std::size_t(hh) * cache.head_stride, vl + std::size_t(hh) * cache.head_stride,
                            out + std::size_t(hh) * std::size_t(n) * std::size_t(dk), where);
        }
        if (n > 1) gather(att);
    }
    void cross(int l, const float* q, float* att) {
        const ModelConfig& c = P.config;
        const int H = c.n_heads, dk = c.head_dim(), d = c.d_model;
        if (n > 1)
            for (int t = 0; t < n; ++t)
                for (int hh = 0; hh < H; ++hh)
                    std::memcpy(qh + (std::size_t(hh) * std::size_t(n) + std::size_t(t)) * std::size_t(dk),
                                q + std::size_t(t) * std::size_t(d) + std::size_t(hh * dk), sizeof(float) * std::size_t(dk));
        const attncheck_problem p = make_problem(P, 1, H, n, mem_S, 0, false, mem_valid);
        call_kernel(kernel, p, n > 1 ? qh : q, mem_k + std::size_t(l) * mem_layer_stride,
                    mem_v + std::size_t(l) * mem_layer_stride, n > 1 ? oh : att, "cross-attention");
        if (n > 1) gather(att);
    }
    void gather(float* att) const {
        const ModelConfig& c = P.config;
        const int H = c.n_heads, dk = c.head_dim(), d = c.d_model;
        for (int t = 0; t < n; ++t)
            for (int hh = 0; hh < H; ++hh)
                std::memcpy(att + std::size_t(t) * std::size_t(d) + std::size_t(hh * dk),
                            oh + (std::size_t(hh) * std::size_t(n) + std::size_t(t)) * std::size_t(dk),
                            sizeof(float) * std::size_t(dk));
    }
};

void check_token(const ModelConfig& c, int token, const char* what) {
    if (token < 0 || token >= c.vocab_size)
        throw InputError(std::string(what) + ": token " + std::to_string(token) + " is outside [0, " +
                         std::to_string(c.vocab_size) + ")");
}

int argmax_lowest(const float* row, int V) {
    int best = 0;
    for (int v = 1; v < V; ++v)
        if (row[v] > row[best]) best = v;  // strict >: the lowest id wins ties
    return best;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Decoder
// ---------------------------------------------------------------------------------------------

Decoder::Decoder(const Model& model, attncheck_kernel_fn kernel) : packed_(pack_model(model)), kernel_(kernel) {
    if (!kernel_) throw InputError("optimized decoder: the attention kernel is null");
}
Decoder::~Decoder() = default;
Decoder::Decoder(Decoder&&) noexcept = default;
Decoder& Decoder::operator=(Decoder&&) noexcept = default;

const ModelConfig& Decoder::config() const { return packed_->config; }
attncheck_kernel_fn Decoder::kernel() const { return kernel_; }
void Decoder::set_kernel(attncheck_kernel_fn kernel) {
    if (!kernel) throw InputError("optimized decoder: the attention kernel is null");
    kernel_ = kernel;
}

std::vector<float> Decoder::forward(const std::vector<int>& tokens, const std::optional<Memory>& memory) const {
    std::vector<std::optional<Memory>> mems;
    if (memory) mems.push_back(memory);
    auto out = forward_batch({tokens}, mems);
    return std::move(out[0]);
}

std::vector<std::vector<float>> Decoder::forward_batch(const std::vector<std::vector<int>>& tokens,
                                                       const std::vector<std::optional<Memory>>& memories) const {
    const PackedWeights& P = *packed_;
    const ModelConfig& c = P.config;
    const int B = int(tokens.size());
    if (B == 0) return {};
    for (const auto& t : tokens) check_tokens(c, t);
    const std::vector<const Memory*> mems = checked_memories(c, memories, std::size_t(B));
    MemoryCache mem;
    mem.build(P, mems);

    TeacherAttention attn{P, {kernel_, zero_empty_rows_}, mem, {}, {}, {}, 0, false, {}, {}, {}, {}};
    int M = 0;
    for (const auto& t : tokens) {
        attn.row0.push_back(M);
        attn.len.push_back(int(t.size()));
        attn.valid.push_back(int32_t(t.size()));
        M += int(t.size());
        attn.Tmax = std::max(attn.Tmax, int(t.size()));
    }
    for (int l : attn.len) attn.padded = attn.padded || l != attn.Tmax;
    const std::size_t d = std::size_t(c.d_model);
    const std::size_t abi = std::size_t(B) * std::size_t(attn.Tmax) * d;  // B * H * Tmax * dk
    attn.qh.assign(abi, 0.0f);  // zero: padding rows stay zero (finite) in every layer
    attn.kh.assign(abi, 0.0f);
    attn.vh.assign(abi, 0.0f);
    attn.oh.assign(abi, 0.0f);

    std::vector<float> x(std::size_t(M) * d);  // [M, d]
    for (int b = 0; b < B; ++b)
        for (int t = 0; t < attn.len[std::size_t(b)]; ++t)
            embed_row(P, tokens[std::size_t(b)][std::size_t(t)], t, x.data() + std::size_t(attn.row0[std::size_t(b)] + t) * d);
    RowBuffers buf;
    buf.resize(c, M);
    run_layers(P, M, x.data(), buf, attn);

    const std::size_t V = std::size_t(c.vocab_size);
    std::vector<float> logits(std::size_t(M) * V);  // [M, V]
    linear(P.lm_head, x.data(), M, int(d), logits.data(), int(V));
    std::vector<std::vector<float>> out(static_cast<std::size_t>(B));
    if (B == 1) {  // the rows are exactly sequence 0's: no second 4*T*V-byte buffer to fault in and fill
        out[0] = std::move(logits);
        return out;
    }
    for (int b = 0; b < B; ++b) {
        const auto first = logits.begin() + std::ptrdiff_t(std::size_t(attn.row0[std::size_t(b)]) * V);
        out[std::size_t(b)].assign(first, first + std::ptrdiff_t(std::size_t(attn.len[std::size_t(b)]) * V));
    }
    return out;
}

std::vector<int> Decoder::generate(const std::vector<int>& prompt, int max_new, const std::optional<Memory>& memory) const {
    const ModelConfig& c = config();
    check_tokens(c, prompt);
    check_memory(c, memory);
    if (max_new < 0) throw InputError("generate: max_new = " + std::to_string(max_new) + " (must be >= 0)");
    if (std::int64_t(prompt.size()) + max_new > std::int64_t(c.max_len))
        throw InputError("generate: prompt length " + std::to_string(prompt.size()) + " + max_new " +
                         std::to_string(max_new) + " exceeds max_len " + std::to_string(c.max_len));
    std::vector<int> generated;
    if (max_new == 0) return generated;
    Session s(*this, memory);
    const std::vector<float> logits = s.prefill(prompt);  // [T, V]
    int next = argmax_lowest(logits.data() + (prompt.size() - 1) * std::size_t(c.vocab_size), c.vocab_size);
    generated.push_back(next);
    while (int(generated.size()) < max_new) {
        const std::span<const float> row = s.step(next);
        next = argmax_lowest(row.data(), c.vocab_size);
        generated.push_back(next);
    }
    return generated;
}

// ---------------------------------------------------------------------------------------------
// Session
// ---------------------------------------------------------------------------------------------

struct Session::State {
    const Decoder* decoder;
    int pos = 0;
    std::vector<float> k_cache, v_cache;  // [L, H, N, dk]
    MemoryCache mem;                      // [L, 1, H, S, dk]
    // Step scratch, sized at construction so that step() allocates nothing.
    RowBuffers step_rows;
    std::vector<float> x;       // [1, d]
    std::vector<float> logits;  // [V]
    // Prefill scratch, grown on demand.
    RowBuffers chunk_rows;
    std::vector<float> chunk_x, chunk_logits, qh, oh;

    ChunkAttention attention(int n, float* qhp, float* ohp) {
        const PackedWeights& P = decoder->packed();
        const ModelConfig& c = P.config;
        ChunkAttention a{P, {decoder->kernel(), decoder->zero_empty_rows()}, {}, nullptr, nullptr, 0, 0, nullptr, pos, n, qhp, ohp};
        a.cache.k = k_cache.data();
        a.cache.v = v_cache.data();
        a.cache.head_stride = std::size_t(c.max_len) * std::size_t(c.head_dim());
        a.cache.layer_stride = std::size_t(c.n_heads) * a.cache.head_stride;
        if (c.cross_attention) {
            a.mem_k = mem.k.data();
            a.mem_v = mem.v.data();
            a.mem_layer_stride = mem.layer_stride;
            a.mem_S = mem.S;
            a.mem_valid = mem.valid.data();
        }
        return a;
    }
};

Session::Session(const Decoder& decoder, const std::optional<Memory>& memory) : s_(std::make_unique<State>()) {
    const ModelConfig& c = decoder.config();
    s_->decoder = &decoder;
    std::vector<std::optional<Memory>> mems;
    if (memory) mems.push_back(memory);
    s_->mem.build(decoder.packed(), checked_memories(c, mems, 1));
    const std::size_t cache = std::size_t(c.n_layers) * std::size_t(c.max_len) * std::size_t(c.d_model);
    s_->k_cache.assign(cache, 0.0f);
    s_->v_cache.assign(cache, 0.0f);
    s_->step_rows.resize(c, 1);
    s_->x.assign(std::size_t(c.d_model), 0.0f);
    s_->logits.assign(std::size_t(c.vocab_size), 0.0f);
}
Session::~Session() = default;
Session::Session(Session&&) noexcept = default;

int Session::pos() const { return s_->pos; }

std::vector<float> Session::prefill(const std::vector<int>& tokens, int chunk) {
    State& s = *s_;
    const PackedWeights& P = s.decoder->packed();
    const ModelConfig& c = P.config;
    if (tokens.empty()) throw InputError("prefill: the token list is empty");
    if (chunk < 0) throw InputError("prefill: chunk = " + std::to_string(chunk) + " (must be >= 0)");
    for (int t : tokens) check_token(c, t, "prefill");
    if (std::int64_t(s.pos) + std::int64_t(tokens.size()) > c.max_len)
        throw InputError("prefill: " + std::to_string(tokens.size()) + " tokens at position " +
                         std::to_string(s.pos) + " would pass max_len " + std::to_string(c.max_len));
    const int total = int(tokens.size());
    const int step = chunk == 0 ? total : std::min(chunk, total);
    const std::size_t d = std::size_t(c.d_model), V = std::size_t(c.vocab_size);
    s.chunk_rows.resize(c, step);
    s.chunk_x.resize(std::size_t(step) * d);
    s.chunk_logits.resize(std::size_t(step) * V);
    s.qh.resize(std::size_t(step) * d);
    s.oh.resize(std::size_t(step) * d);
    std::vector<float> out(std::size_t(total) * V);  // [n, V]
    for (int t0 = 0; t0 < total; t0 += step) {
        const int n = std::min(step, total - t0);
        for (int t = 0; t < n; ++t) embed_row(P, tokens[std::size_t(t0 + t)], s.pos + t, s.chunk_x.data() + std::size_t(t) * d);
        ChunkAttention a = s.attention(n, s.qh.data(), s.oh.data());
        run_layers(P, n, s.chunk_x.data(), s.chunk_rows, a);
        linear(P.lm_head, s.chunk_x.data(), n, int(d), out.data() + std::size_t(t0) * V, int(V));
        s.pos += n;
    }
    return out;
}

std::span<const float> Session::step(int token) {
    State& s = *s_;
    const PackedWeights& P = s.decoder->packed();
    const ModelConfig& c = P.config;
    check_token(c, token, "step");
    if (s.pos >= c.max_len)
        throw InputError("step: position " + std::to_string(s.pos) + " would pass max_len " + std::to_string(c.max_len));
    embed_row(P, token, s.pos, s.x.data());
    ChunkAttention a = s.attention(1, nullptr, nullptr);
    run_layers(P, 1, s.x.data(), s.step_rows, a);
    linear(P.lm_head, s.x.data(), 1, c.d_model, s.logits.data(), c.vocab_size);
    s.pos += 1;
    return {s.logits.data(), s.logits.size()};
}

void Session::reset() { s_->pos = 0; }

void Session::truncate(int new_pos) {
    if (new_pos < 0 || new_pos > s_->pos)
        throw InputError("truncate: position " + std::to_string(new_pos) + " is outside [0, " + std::to_string(s_->pos) + "]");
    s_->pos = new_pos;
}

// ---------------------------------------------------------------------------------------------
// BatchSession
// ---------------------------------------------------------------------------------------------

namespace {

// One row per sequence, each at its own position: caches [L, B, H, N, dk], one kernel call for
// the whole batch with kv_len = N and kv_valid_len = pos_b + 1.
struct BatchStepAttention {
    const PackedWeights& P;
    KernelRef kernel;
    float* k_cache;
    float* v_cache;
    const MemoryCache& mem;
    const int32_t* valid;  // [B] pos_b + 1
    const int* pos;        // [B]
    int B;
    float* qh;  // [B, H, 1, dk] = [B, d]

    void self(int l, const float* qkv, float* att) {
        const ModelConfig& c = P.config;
        const int H = c.n_heads, dk = c.head_dim(), d = c.d_model, N = c.max_len;
        const std::size_t seq = std::size_t(H) * std::size_t(N) * std::size_t(dk);
        float* kl = k_cache + std::size_t(l) * std::size_t(B) * seq;
        float* vl = v_cache + std::size_t(l) * std::size_t(B) * seq;
        for (int b = 0; b < B; ++b) {
            const float* row = qkv + std::size_t(b) * 3 * std::size_t(d);
            std::memcpy(qh + std::size_t(b) * std::size_t(d), row, sizeof(float) * std::size_t(d));
            for (int hh = 0; hh < H; ++hh) {
                const std::size_t at = std::size_t(b) * seq + (std::size_t(hh) * std::size_t(N) + std::size_t(pos[b])) * std::size_t(dk);
                std::memcpy(kl + at, row + d + hh * dk, sizeof(float) * std::size_t(dk));
                std::memcpy(vl + at, row + 2 * d + hh * dk, sizeof(float) * std::size_t(dk));
            }
        }
        const attncheck_problem p = make_problem(P, B, H, 1, N, 0, false, valid);
        call_kernel(kernel, p, qh, kl, vl, att, "batch self-attention step");
    }
    void cross(int l, const float* q, float* att) {
        const attncheck_problem p = make_problem(P, B, P.config.n_heads, 1, mem.S, 0, false, mem.valid.data());
        call_kernel(kernel, p, q, mem.k_at(l, 0), mem.v_at(l, 0), att, "batch cross-attention step");
    }
};

}  // namespace

struct BatchSession::State {
    const Decoder* decoder;
    int B = 0;
    std::vector<int> pos;            // [B]
    std::vector<int32_t> valid;      // [B] pos + 1 during a step
    std::vector<float> k_cache, v_cache;  // [L, B, H, N, dk]
    MemoryCache mem;                 // [L, B, H, S, dk]
    RowBuffers step_rows;            // B rows
    std::vector<float> x, qh;        // [B, d]
    std::vector<float> logits;       // [B, V]
    std::vector<float> chunk_x, qh_chunk, oh_chunk;
    RowBuffers chunk_rows;
};

BatchSession::BatchSession(const Decoder& decoder, int batch, const std::vector<std::optional<Memory>>& memories)
    : s_(std::make_unique<State>()) {
    const ModelConfig& c = decoder.config();
    if (batch < 1) throw InputError("BatchSession: batch = " + std::to_string(batch) + " (must be >= 1)");
    State& s = *s_;
    s.decoder = &decoder;
    s.B = batch;
    s.mem.build(decoder.packed(), checked_memories(c, memories, std::size_t(batch)));
    s.pos.assign(std::size_t(batch), 0);
    s.valid.assign(std::size_t(batch), 0);
    const std::size_t cache = std::size_t(c.n_layers) * std::size_t(batch) * std::size_t(c.max_len) * std::size_t(c.d_model);
    s.k_cache.assign(cache, 0.0f);  // zero: rows past a position are padding the kernel may touch
    s.v_cache.assign(cache, 0.0f);
    s.step_rows.resize(c, batch);
    s.x.assign(std::size_t(batch) * std::size_t(c.d_model), 0.0f);
    s.qh.assign(s.x.size(), 0.0f);
    s.logits.assign(std::size_t(batch) * std::size_t(c.vocab_size), 0.0f);
}
BatchSession::~BatchSession() = default;
int BatchSession::batch() const { return s_->B; }
int BatchSession::pos(int b) const {
    if (b < 0 || b >= s_->B) throw InputError("BatchSession: sequence " + std::to_string(b) + " is outside [0, " + std::to_string(s_->B) + ")");
    return s_->pos[std::size_t(b)];
}

std::vector<float> BatchSession::prefill(int b, const std::vector<int>& tokens) {
    State& s = *s_;
    const PackedWeights& P = s.decoder->packed();
    const ModelConfig& c = P.config;
    const int p0 = pos(b);  // checks b
    if (tokens.empty()) throw InputError("BatchSession::prefill: the token list is empty");
    for (int t : tokens) check_token(c, t, "BatchSession::prefill");
    if (std::int64_t(p0) + std::int64_t(tokens.size()) > c.max_len)
        throw InputError("BatchSession::prefill: " + std::to_string(tokens.size()) + " tokens at position " +
                         std::to_string(p0) + " of sequence " + std::to_string(b) + " would pass max_len " +
                         std::to_string(c.max_len));
    const int n = int(tokens.size());
    const std::size_t d = std::size_t(c.d_model), V = std::size_t(c.vocab_size);
    s.chunk_rows.resize(c, n);
    s.chunk_x.resize(std::size_t(n) * d);
    s.qh_chunk.resize(std::size_t(n) * d);
    s.oh_chunk.resize(std::size_t(n) * d);
    for (int t = 0; t < n; ++t) embed_row(P, tokens[std::size_t(t)], p0 + t, s.chunk_x.data() + std::size_t(t) * d);
    const std::size_t seq = std::size_t(c.max_len) * d;  // H * N * dk
    ChunkAttention a{P, {s.decoder->kernel(), s.decoder->zero_empty_rows()}, {}, nullptr, nullptr, 0, 0, nullptr, p0, n, s.qh_chunk.data(), s.oh_chunk.data()};
    a.cache.k = s.k_cache.data() + std::size_t(b) * seq;
    a.cache.v = s.v_cache.data() + std::size_t(b) * seq;
    a.cache.layer_stride = std::size_t(s.B) * seq;
    a.cache.head_stride = std::size_t(c.max_len) * std::size_t(c.head_dim());
    if (c.cross_attention) {
        a.mem_k = s.mem.k_at(0, b);
        a.mem_v = s.mem.v_at(0, b);
        a.mem_layer_stride = s.mem.layer_stride;
        a.mem_S = s.mem.S;
        a.mem_valid = s.mem.valid.data() + b;
    }
    run_layers(P, n, s.chunk_x.data(), s.chunk_rows, a);
    std::vector<float> out(std::size_t(n) * V);
    linear(P.lm_head, s.chunk_x.data(), n, int(d), out.data(), int(V));
    s.pos[std::size_t(b)] += n;
    return out;
}

std::span<const float> BatchSession::step(const std::vector<int>& tokens) {
    State& s = *s_;
    const PackedWeights& P = s.decoder->packed();
    const ModelConfig& c = P.config;
    if (int(tokens.size()) != s.B)
        throw InputError("BatchSession::step: " + std::to_string(tokens.size()) + " tokens for " + std::to_string(s.B) + " sequences");
    for (int b = 0; b < s.B; ++b) {
        check_token(c, tokens[std::size_t(b)], "BatchSession::step");
        if (s.pos[std::size_t(b)] >= c.max_len)
            throw InputError("BatchSession::step: sequence " + std::to_string(b) + " at position " +
                             std::to_string(s.pos[std::size_t(b)]) + " would pass max_len " + std::to_string(c.max_len));
    }
    const std::size_t d = std::size_t(c.d_model);
    for (int b = 0; b < s.B; ++b) {
        embed_row(P, tokens[std::size_t(b)], s.pos[std::size_t(b)], s.x.data() + std::size_t(b) * d);
        s.valid[std::size_t(b)] = s.pos[std::size_t(b)] + 1;
    }
    BatchStepAttention a{P, {s.decoder->kernel(), s.decoder->zero_empty_rows()}, s.k_cache.data(), s.v_cache.data(), s.mem,
                         s.valid.data(), s.pos.data(), s.B, s.qh.data()};
    run_layers(P, s.B, s.x.data(), s.step_rows, a);
    linear(P.lm_head, s.x.data(), s.B, c.d_model, s.logits.data(), c.vocab_size);
    for (int& p : s.pos) ++p;
    return {s.logits.data(), s.logits.size()};
}

void BatchSession::reset() {
    std::fill(s_->pos.begin(), s_->pos.end(), 0);
}

}  // namespace attncheck::optimized
