// optimized/decoder.cpp — the float32 decoder of docs/spec/MODEL.md, fast: the Decoder
// (teacher-forced logits of a batch, greedy generation).
//
// One layer stack, run_layers() (layers.hpp), serves every way of running: it takes M rows of
// the target stream x [M, d] and an attention policy that knows where the rows sit
// (attention_policy.hpp): here a padded batch of whole sequences; in session.cpp a chunk of one
// sequence at a cache position, or one row per sequence of a batch step. The matrix products are
// gemm.hpp's linear() on weights packed at load time (weights.hpp).
//
// Dimension legend: V = vocab, d = d_model, T = tokens in a call, B = sequences, M = rows of a
// call.
#include "optimized/decoder.hpp"

#include <cstddef>
#include <string>

#include "attncheck/error.hpp"
#include "optimized/attention_policy.hpp"
#include "optimized/gemm.hpp"
#include "optimized/layers.hpp"
#include "optimized/weights.hpp"

namespace attncheck::optimized {

namespace {

int argmax_lowest(const float* row, int V) {
    int best = 0;
    for (int v = 1; v < V; ++v)
        if (row[v] > row[best]) best = v;  // strict >: the lowest id wins ties
    return best;
}

}  // namespace

Decoder::Decoder(const Model& model, AttentionKernel kernel) : packed_(pack_model(model)), kernel_(kernel) {
    if (!kernel_.fn && !kernel_.fn_v2) throw InputError("optimized decoder: the attention kernel is null");
    if (kernel_.fn && kernel_.fn_v2)
        throw InputError("optimized decoder: the attention kernel is given for ABI version 1 and version 2 at once");
    if (kernel_.block_size < 0)
        throw InputError("optimized decoder: block_size = " + std::to_string(kernel_.block_size) + " (must be >= 0)");
}
Decoder::~Decoder() = default;
Decoder::Decoder(Decoder&&) noexcept = default;
Decoder& Decoder::operator=(Decoder&&) noexcept = default;

const ModelConfig& Decoder::config() const { return packed_->config; }

Logits Decoder::forward(const std::vector<int>& tokens, const std::optional<Memory>& memory) const {
    std::vector<std::optional<Memory>> mems;
    if (memory) mems.push_back(memory);
    auto out = forward_batch({tokens}, mems);
    return std::move(out[0]);
}

std::vector<Logits> Decoder::forward_batch(const std::vector<std::vector<int>>& tokens,
                                           const std::vector<std::optional<Memory>>& memories) const {
    const PackedWeights& P = *packed_;
    const ModelConfig& c = P.config;
    const int B = int(tokens.size());
    if (B == 0) return {};
    for (const auto& t : tokens) check_tokens(c, t);
    const std::vector<const Memory*> mems = checked_memories(c, memories, std::size_t(B));
    MemoryCache mem;
    mem.build(P, mems);

    TeacherAttention attn(P, kernel_of(*this), mem, tokens);
    const int M = attn.rows();
    const std::size_t d = std::size_t(c.d_model);
    std::vector<float> x(std::size_t(M) * d);  // [M, d]
    for (int b = 0; b < B; ++b)
        for (int t = 0; t < attn.len[std::size_t(b)]; ++t)
            embed_row(P, tokens[std::size_t(b)][std::size_t(t)], t, x.data() + std::size_t(attn.row0[std::size_t(b)] + t) * d);
    RowBuffers buf;
    buf.resize(c, M);
    run_layers(P, M, x.data(), buf, attn);

    const std::size_t V = std::size_t(c.vocab_size);
    Logits logits(std::size_t(M) * V);  // [M, V], written whole by the product
    linear(P.lm_head, x.data(), M, int(d), logits.data(), int(V));
    std::vector<Logits> out(static_cast<std::size_t>(B));
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

}  // namespace attncheck::optimized
