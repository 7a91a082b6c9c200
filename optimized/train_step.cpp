// optimized/train_step.cpp — the float32 training step (train_step.hpp): the forward pass over
// the whole batch as one block of M rows, the cross-entropy, and the backward pass in the order
// the chain rule takes it, with reference/decoder_grad.cpp's wiring (the oracle, same names).
//
// Every matrix product, forward and backward, is gemm.hpp's linear(): the forward's on the
// weights packed by pack_model(), the backward's on W^T (dX = dY W) and X^T (dW = dY^T X), packed
// per step from W and X as they are (train_ops.hpp). Attention goes only through the kernel
// under test: per layer one version 2 forward with lse over the batch, then its backward.
//
// Rows: the batch's sequences back to back, sequence b at rows row0[b] .. row0[b] + T_b - 1 of
// every [M, *] buffer (no padding). Dimension legend as in train_step.hpp; M = sum_b T_b.
#include "optimized/train_step.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "attncheck/error.hpp"
#include "attncheck/problem_shape_v2.hpp"
#include "optimized/decoder.hpp"
#include "optimized/gemm.hpp"
#include "optimized/train_ops.hpp"
#include "optimized/weights.hpp"

namespace attncheck::optimized {

using reference::GradBug;
using reference::Sequence;
using reference::TrainMask;
using namespace train_detail;

namespace {

// Where the sequences sit among the M rows.
struct Rows {
    int M = 0;
    std::vector<int> row0, len;   // [B]
    std::vector<int> seq, pos;    // [M]: the sequence and the position of each row
    std::vector<int> token;       // [M]
    std::vector<std::int32_t> q_pos;  // [B] zeros: every sequence starts at position 0
    bool same_length = true;

    explicit Rows(const std::vector<Sequence>& batch) {
        for (const Sequence& s : batch) {
            const int T = int(s.tokens.size());
            row0.push_back(M);
            len.push_back(T);
            same_length = same_length && T == len.front();
            for (int t = 0; t < T; ++t) {
                seq.push_back(int(row0.size()) - 1);
                pos.push_back(t);
                token.push_back(s.tokens[std::size_t(t)]);
            }
            M += T;
        }
        q_pos.assign(batch.size(), 0);
    }
};

// What the backward of one layer reads of its forward (pointers into its LayerBuffers).
struct LayerState {
    float* a_attn;       // [M, d]  the qkv product's input: LN(x) (pre) or x (post)
    NormRows norm_attn;  //         of x (pre) or of x + attn(x) (post)
    float* qkv;          // [M, 3d] q, k, v of a row, heads side by side
    float* att;          // [M, d]  the kernel's out, heads concatenated
    float* lse;          // [h * M] sequence b's [h, T_b] block at h * row0[b]
    float* a_ffn;        // [M, d]  fc1's input
    NormRows norm_ffn;
    float* pre;          // [M, f]  fc1's output before the activation
    float* post;         // [M, f]  after it: fc2's input
};
struct LayerBuffers {
    Scratch a_attn, xhat_attn, rstd_attn, qkv, att, lse, a_ffn, xhat_ffn, rstd_ffn, pre, post;
    LayerState state(std::size_t M, std::size_t d, std::size_t f, std::size_t h) {
        return {a_attn.get(M * d), {xhat_attn.get(M * d), rstd_attn.get(M)}, qkv.get(3 * M * d), att.get(M * d),
                lse.get(h * M),    a_ffn.get(M * d), {xhat_ffn.get(M * d), rstd_ffn.get(M)}, pre.get(M * f),
                post.get(M * f)};
    }
};

// The step's buffers, kept per thread from call to call as linear()'s scratch is: grown when a
// batch needs more, never shrunk. The forward's activations of every layer are most of it:
// ~17 MB per layer for the bench's model (M = 1024, d = 256, f = 1024).
struct Workspace {
    std::vector<LayerBuffers> layers;
    Scratch x, tmp, xf, xhat_final, rstd_final, logits, dx, dx_in, du, datt, dqkv, dhid, dYt, wqkv, dwqkv, dbqkv;
    PackedMatrix pack;  // the W^T or X^T of the product at hand
};

// The layer's attention through the kernel: the forward (att, lse) when dqkv is null, else the
// backward (dqkv from datt) of the forward as it was called.
//
// A batch of sequences of one length is one dense call, its views straight into qkv [M, 3d]
// (sequence stride T * 3d, head stride dk, row stride 3d). Sequences of different lengths are one
// dense call each: a padded dense call would need kv_lens, and its padding query rows would be
// rows of the problem (read, computed, their out and dq written), which a kernel that supports
// dense calls need not support (kv_lens), and varlen is a layout a kernel may refuse; a call of
// one sequence with q_len = kv_len = T is what every kernel that takes a dense problem takes.
void attend(const TrainKernel& kernel, const ModelConfig& c, const Rows& rows, TrainMask mask, int layer,
            const LayerState& s, const float* datt, float* dqkv) {
    const int d = c.d_model, h = c.n_heads, dk = c.head_dim(), B = int(rows.len.size());
    const bool whole = rows.same_length;
    for (int b0 = 0; b0 < B; b0 += whole ? B : 1) {
        const int nb = whole ? B : 1, T = rows.len[std::size_t(b0)], r0 = rows.row0[std::size_t(b0)];
        attncheck_problem_v2 p = make_problem_v2({.batch = nb, .q_heads = h, .kv_heads = h, .head_dim = dk,
                                                  .value_dim = dk, .causal = mask == TrainMask::causal,
                                                  .scale = float(1.0 / std::sqrt(double(dk)))});
        p.q_len = T;
        p.kv_len = T;
        p.q_pos = rows.q_pos.data();
        const std::int64_t rq = 3 * std::int64_t(d), ro = d;
        const auto view = [&](const float* base, std::int64_t row_stride) {
            return attncheck_tensor_v2{const_cast<float*>(base), {T * row_stride, dk, row_stride, 1}};
        };
        const float* qkv = s.qkv + std::size_t(r0) * std::size_t(rq);
        p.q = view(qkv, rq);
        p.k = view(qkv + d, rq);
        p.v = view(qkv + 2 * d, rq);
        p.out = view(s.att + std::size_t(r0) * std::size_t(d), ro);
        p.lse = s.lse + std::size_t(r0) * std::size_t(h);
        p.lse_stride[0] = std::int64_t(h) * T;
        p.lse_stride[1] = T;
        p.lse_stride[2] = 1;
        int rc = 0;
        const char* what = dqkv ? "backward" : "forward";
        if (!dqkv) {
            rc = kernel.forward(&p);
        } else {
            float* dq = dqkv + std::size_t(r0) * std::size_t(rq);
            attncheck_grads_v2 g{};
            g.struct_size = sizeof(attncheck_grads_v2);
            g.dout = view(datt + std::size_t(r0) * std::size_t(d), ro);
            g.dq = view(dq, rq);
            g.dk = view(dq + d, rq);
            g.dv = view(dq + 2 * d, rq);
            rc = kernel.backward(&p, &g);
        }
        if (rc != 0)
            throw KernelError("training step: the attention kernel's " + std::string(what) + " returned " +
                              std::to_string(rc) + " for layer " + std::to_string(layer) + " (" + std::to_string(nb) +
                              " sequence(s) of " + std::to_string(T) + " tokens, " + std::to_string(h) + " heads of " +
                              std::to_string(dk) + ", mask " + reference::to_string(mask) + ")");
    }
}

// A step of fewer flops than this runs on one thread. Its ~20 parallel regions per layer (the
// products, the kernel's calls, the row loops) each cost microseconds on an idle machine and
// milliseconds on a busy one, where every barrier waits for a descheduled thread: `attncheck
// train`'s default model (d = 32, 416 rows, 4e7 flops a step) ran 130 steps/s on one thread and
// 4.4 on two on the 2-vCPU Zen 5 VM under a load of 8. The bench's step (1e10 flops) is far above.
constexpr double kSerialBelowFlops = 1e8;

// Sets the calling thread's OpenMP thread count to 1 for a scope (when `on`), and restores it.
struct SerialScope {
    int saved = omp_get_max_threads();
    bool on;
    explicit SerialScope(bool on_) : on(on_) {
        if (on) omp_set_num_threads(1);
    }
    ~SerialScope() {
        if (on) omp_set_num_threads(saved);
    }
    SerialScope(const SerialScope&) = delete;
    SerialScope& operator=(const SerialScope&) = delete;
};

bool in_kernel_backward(GradBug b) {
    return b == GradBug::softmax_rowsum_dropped || b == GradBug::mask_ignored_in_backward;
}

const float* weight(const Model& m, const std::string& name) { return m.at(name).data.data(); }

}  // namespace

std::vector<GradBug> step_grad_bugs() {
    std::vector<GradBug> out;
    for (const GradBug b : reference::all_grad_bugs())
        if (!in_kernel_backward(b)) out.push_back(b);
    return out;
}

double train_loss(const Model& model, const std::vector<Sequence>& batch, const TrainKernel& kernel,
                  const StepOptions& o, Grads* grad) {
    const ModelConfig& c = model.config;
    const double total_weight = reference::check_batch(c, batch);
    if (in_kernel_backward(o.bug))
        throw InputError(std::string("training step: the bug ") + reference::to_string(o.bug) +
                         " lives in the attention kernel's backward: plant it with a backward zoo kernel");
    if (!kernel.forward || (grad && !kernel.backward))
        throw InputError("training step: the attention kernel's forward or backward is null");
    const SerialScope serial(train_flops(c, batch, o.mask) < kSerialBelowFlops);
    const std::unique_ptr<PackedWeights> P = pack_model(model);  // validates the model
    const Rows rows(batch);
    const int M = rows.M, d = c.d_model, f = c.d_ff, V = c.vocab_size, h = c.n_heads, L = c.n_layers;
    const std::size_t Md = std::size_t(M) * std::size_t(d), Mf = std::size_t(M) * std::size_t(f);
    const bool pre = c.norm == Norm::pre;
    thread_local Workspace ws;
    if (ws.layers.size() < std::size_t(L)) ws.layers.resize(std::size_t(L));

    // ---- forward -------------------------------------------------------------------------
    float* x = ws.x.get(Md);      // [M, d] the residual stream
    float* tmp = ws.tmp.get(Md);  // [M, d] x + F(x) before the LayerNorm (post)
#pragma omp parallel for schedule(static) if (Md >= (1u << 14))
    for (int r = 0; r < M; ++r)
        embed_row(*P, rows.token[std::size_t(r)], rows.pos[std::size_t(r)], x + std::size_t(r) * std::size_t(d));
    std::vector<LayerState> layers;
    for (int l = 0; l < L; ++l)
        layers.push_back(ws.layers[std::size_t(l)].state(std::size_t(M), std::size_t(d), std::size_t(f), std::size_t(h)));
    // One sublayer, x -> pre ? x + F(LN(x)) : LN(x + F(x)) with a = F's input; body(a) returns
    // F's last product's input, whose residual linear() adds in its epilogue.
    const auto sublayer = [&](const Norm32& ln, const NormRows& nc, float* a, auto&& body, const PackedMatrix& out,
                              int out_k) {
        if (pre)
            norm_forward(x, M, d, ln.weight.data(), ln.bias.data(), c.ln_eps, a, nc);
        else
            std::copy_n(x, Md, a);
        const float* o_in = body(a);
        if (pre) {
            linear(out, o_in, M, out_k, x, d, Activation32::none, x, d);
        } else {
            linear(out, o_in, M, out_k, tmp, d, Activation32::none, x, d);
            norm_forward(tmp, M, d, ln.weight.data(), ln.bias.data(), c.ln_eps, x, nc);
        }
    };
    for (int l = 0; l < L; ++l) {
        const LayerWeights& W = P->layers[std::size_t(l)];
        const LayerState& s = layers[std::size_t(l)];
        sublayer(W.norm_self, s.norm_attn, s.a_attn, [&](const float* a) -> const float* {
            linear(W.qkv, a, M, d, s.qkv, 3 * d);
            attend(kernel, c, rows, o.mask, l, s, nullptr, nullptr);
            return s.att;
        }, W.o, d);
        sublayer(W.norm_ffn, s.norm_ffn, s.a_ffn, [&](const float* a) -> const float* {
            linear(W.fc1, a, M, d, s.pre, f);
            activation_forward(P->act, s.pre, s.post, Mf);
            return s.post;
        }, W.fc2, f);
    }
    const NormRows norm_final{ws.xhat_final.get(Md), ws.rstd_final.get(std::size_t(M))};
    float* xf = x;  // [M, d] the lm head's input: x (post), LN(x) (pre)
    if (pre) {
        xf = ws.xf.get(Md);
        norm_forward(x, M, d, P->final_norm.weight.data(), P->final_norm.bias.data(), c.ln_eps, xf, norm_final);
    }
    float* logits = ws.logits.get(std::size_t(M) * std::size_t(V));  // [M, V], then dlogits in place
    linear(P->lm_head, xf, M, d, logits, V);

    // ---- cross-entropy: the loss, and dlogits = w / W (softmax - onehot(target)) ------------
    std::vector<double> row_loss(static_cast<std::size_t>(M), 0.0);
    const bool need_grad = grad != nullptr;
#pragma omp parallel for schedule(static) if (std::size_t(M) * std::size_t(V) >= (1u << 14))
    for (int r = 0; r < M; ++r) {
        const Sequence& q = batch[std::size_t(rows.seq[std::size_t(r)])];
        const std::size_t t = std::size_t(rows.pos[std::size_t(r)]);
        float* row = logits + std::size_t(r) * std::size_t(V);
        const double w = t + 1 < q.tokens.size() ? q.weights[t] : 0.0;
        if (w == 0) {
            if (need_grad) std::fill_n(row, V, 0.0f);
            continue;
        }
        const float mx = *std::max_element(row, row + V);
        const int target = q.tokens[t + 1];
        const double target_logit = row[target];
        double sum = 0;
        for (int v = 0; v < V; ++v) {  // e^(z - max), kept in the row for the gradient
            const float e = std::exp(row[v] - mx);
            sum += e;
            if (need_grad) row[v] = e;
        }
        row_loss[std::size_t(r)] = w * (double(mx) + std::log(sum) - target_logit);
        if (need_grad) {
            const double norm = o.bug == GradBug::loss_not_normalised ? w : w / total_weight;
            for (int v = 0; v < V; ++v) row[v] = float(norm * (row[v] / sum - (v == target ? 1.0 : 0.0)));
        }
    }
    double loss = 0;
    for (const double l : row_loss) loss += l;  // in row order: the same bits on any thread count
    loss /= total_weight;
    if (!grad) return loss;

    // ---- backward ----------------------------------------------------------------------------
    Grads& g = *grad;
    // A training loop passes the same map every step: its vectors are reused when its names are
    // this model's, else it starts again.
    const std::vector<TensorSpec> specs = expected_tensors(c);
    bool same_names = g.size() == specs.size();
    for (const TensorSpec& spec : specs) same_names = same_names && g.count(spec.name) == 1;
    if (!same_names) g.clear();
    for (const TensorSpec& spec : specs) {
        std::size_t n = 1;
        for (const std::size_t e : spec.shape) n *= e;
        g[spec.name].assign(n, 0.0f);
    }
    const auto gp = [&](const std::string& name) { return g.at(name).data(); };
    PackedMatrix& pack = ws.pack;
    const float* dlogits = logits;
    const std::string head = c.tie_embeddings ? "embed.weight" : "lm_head.weight";
    // logits = xf head^T: the head's gradient (the embedding's when tied, which the tokens' rows
    // add to below), and xf's.
    if (!(c.tie_embeddings && o.bug == GradBug::tied_embedding_once))
        backward_dw(dlogits, xf, M, V, d, gp(head), nullptr, ws.dYt, pack);
    float* dx = ws.dx.get(Md);        // [M, d] the gradient of the residual stream
    float* dx_in = ws.dx_in.get(Md);  // [M, d] the same one sublayer earlier
    float* du = ws.du.get(Md);        // [M, d] of a sublayer's F input (pre) or of x + F(x) (post)
    backward_dx(weight(model, head), V, d, dlogits, M, dx, false, pack);
    const bool drop_mean = o.bug == GradBug::layer_norm_mean_dropped;
    if (pre) {
        norm_backward(dx, norm_final, P->final_norm.weight.data(), M, d, dx_in, gp("final_norm.weight"),
                      gp("final_norm.bias"), drop_mean);
        std::swap(dx, dx_in);
    }
    float* datt = ws.datt.get(Md);      // [M, d]  the gradient of the kernel's out
    float* dqkv = ws.dqkv.get(3 * Md);  // [M, 3d] of q, k, v (written whole by the kernel's backward)
    float* dhid = ws.dhid.get(Mf);      // [M, f]  of fc1's output, after then before the activation
    const std::size_t dd = std::size_t(d) * std::size_t(d);
    float* wqkv = ws.wqkv.get(3 * dd);                // [3d, d] Wq, Wk, Wv stacked
    float* dwqkv = ws.dwqkv.get(3 * dd);              // [3d, d]
    float* dbqkv = ws.dbqkv.get(3 * std::size_t(d));  // [3d]
    for (int l = L - 1; l >= 0; --l) {
        const std::string prefix = "layers." + std::to_string(l) + ".";
        const LayerState& s = layers[std::size_t(l)];
        // One sublayer in reverse: dx, the gradient of its output, becomes that of its input. The
        // residual carries dx (pre) or du (post) straight through, except under residual_dropped
        // (the first sublayer). F_backward(dy, da) sets da from dy.
        const auto sublayer_backward = [&](const std::string& norm, const NormRows& nc, bool first, auto&& F_backward) {
            const float* w = weight(model, prefix + norm + ".weight");
            float* gw = gp(prefix + norm + ".weight");
            float* gb = gp(prefix + norm + ".bias");
            const bool keep_residual = !(first && o.bug == GradBug::residual_dropped);
            if (pre) {
                F_backward(dx, du);  // y = F(u), u = LN(x)
                norm_backward(du, nc, w, M, d, dx_in, gw, gb, drop_mean);
                if (keep_residual) add_into(dx_in, dx, Md);
            } else {
                norm_backward(dx, nc, w, M, d, du, gw, gb, drop_mean);  // x' = LN(z), z = x + F(x)
                F_backward(du, dx_in);
                if (keep_residual) add_into(dx_in, du, Md);
            }
            std::swap(dx, dx_in);
        };
        const std::string ffn = prefix + "ffn.", attn = prefix + "self_attn.";
        sublayer_backward("norm_ffn", s.norm_ffn, false, [&](const float* dy, float* da) {
            backward_dw(dy, s.post, M, d, f, gp(ffn + "fc2.weight"), gp(ffn + "fc2.bias"), ws.dYt, pack);
            backward_dx(weight(model, ffn + "fc2.weight"), d, f, dy, M, dhid, false, pack);
            activation_backward(P->act, s.pre, dhid, Mf);
            backward_dw(dhid, s.a_ffn, M, f, d, gp(ffn + "fc1.weight"), gp(ffn + "fc1.bias"), ws.dYt, pack);
            backward_dx(weight(model, ffn + "fc1.weight"), f, d, dhid, M, da, false, pack);
        });
        sublayer_backward("norm_self", s.norm_attn, true, [&](const float* dy, float* da) {
            backward_dw(dy, s.att, M, d, d, gp(attn + "o.weight"), gp(attn + "o.bias"), ws.dYt, pack);
            backward_dx(weight(model, attn + "o.weight"), d, d, dy, M, datt, false, pack);
            attend(kernel, c, rows, o.mask, l, s, datt, dqkv);
            backward_dw(dqkv, s.a_attn, M, 3 * d, d, dwqkv, dbqkv, ws.dYt, pack);
            for (int i = 0; i < 3; ++i) {
                const std::string w = attn + "qkv"[i];
                std::copy_n(dwqkv + std::size_t(i) * dd, dd, gp(w + ".weight"));
                std::copy_n(dbqkv + std::size_t(i) * std::size_t(d), d, gp(w + ".bias"));
                std::copy_n(weight(model, w + ".weight"), dd, wqkv + std::size_t(i) * dd);
            }
            backward_dx(wqkv, 3 * d, d, dqkv, M, da, false, pack);
        });
    }
    // x[r] = embed[token_r] * scale + pos[t_r]: each row's gradient lands on its token's row (and
    // its position's). Columns are split among the threads and every column takes the rows in
    // order, so a token that occurs twice sums its rows in the same order on any thread count.
    const float scale = P->embed_scale;
    float* ge = gp("embed.weight");
    float* gpos = c.positional == Positional::learned ? gp("pos.weight") : nullptr;
    const int N = c.max_len;
    const bool shifted = o.bug == GradBug::position_shifted;
    constexpr int kCols = 32;
#pragma omp parallel for schedule(static) if (Md >= (1u << 14))
    for (int c0 = 0; c0 < d; c0 += kCols) {
        const int c1 = std::min(d, c0 + kCols);
        for (int r = 0; r < M; ++r) {
            const float* dr = dx + std::size_t(r) * std::size_t(d);
            float* er = ge + std::size_t(rows.token[std::size_t(r)]) * std::size_t(d);
            for (int col = c0; col < c1; ++col) er[col] += scale * dr[col];
            if (gpos) {
                const int t = rows.pos[std::size_t(r)], to = shifted ? std::min(t + 1, N - 1) : t;
                float* pr = gpos + std::size_t(to) * std::size_t(d);
                for (int col = c0; col < c1; ++col) pr[col] += dr[col];
            }
        }
    }
    return loss;
}

// Counted from the shapes, in flops (2 per multiply-add), the matrix products only (LayerNorm,
// the activations, the softmax and the cross-entropy are O(M (d + f + V)), under 1% here):
//   the linear layers, per row: L (3d d + d d + 2 d f) + V d multiply-adds in the forward, and
//     twice that in the backward (dX = dY W and dW = dY^T X, every layer's dX included: the
//     embedding's gradient needs layer 0's);
//   attention, per visible (row, key) pair and head, dk multiply-adds for each of: the forward's
//     scores and P V; the backward's recomputed scores, dP = dout V^T, dV, dQ and dK
//     (FlashAttention-2's backward: 2.5 times the forward). Visible pairs per sequence: causal
//     T (T + 1) / 2, none T^2.
double train_flops(const ModelConfig& c, const std::vector<Sequence>& batch, TrainMask mask) {
    const double d = c.d_model, f = c.d_ff, V = c.vocab_size, L = c.n_layers;
    double rows = 0, pairs = 0;
    for (const Sequence& s : batch) {
        const double T = double(s.tokens.size());
        rows += T;
        pairs += mask == TrainMask::causal ? T * (T + 1) / 2 : T * T;
    }
    const double linear_macs = rows * (L * (4 * d * d + 2 * d * f) + V * d);
    const double attention_macs = L * pairs * d * (2 + 5);  // h heads of dk = d / h
    return 2 * (3 * linear_macs + attention_macs);
}

}  // namespace attncheck::optimized
