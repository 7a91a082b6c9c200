// properties/decoder_properties.cpp — the decoder-level properties: their checks, and the table
// decoder_properties() (at the bottom) that registers them.
//
// Adding a decoder property goes as adding a kernel property (the quick start at the top of
// kernel_properties.cpp), with these differences:
//   1. The check is Verdict my_property(const DecoderUnderTest& d, const DecoderCase& c), its
//      body inside refusal_unsupported() (a kernel's refusal inside the decoder is an unsupported case).
//      Built b(d, c) builds the case's model, tokens and memory and the decoder under test;
//      oracle_logits() gives the float64 logits and their bounds, agree() compares with them.
//   2. The table entry's options are DecoderCaseOptions (decoder_case.hpp), and a fifth field,
//      optimized_only, is true when the check needs the KV-cache API (Session, BatchSession,
//      forward_batch) that only optimized::Decoder has.
//   3. A failing case is named by its fields (describe() in decoder_case.cpp: "model V=2 d=2
//      h=1 ...; T=3 data_seed=... tokens=[...]").
//   4. Run it: `attncheck fuzz --property my_property` (--decoder reference, or --kernel NAME for
//      the optimized decoder with that kernel).
#include "properties/decoder_properties.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <optional>
#include <span>
#include <sstream>

#include "attncheck/tolerance.hpp"
#include "optimized/decoder.hpp"
#include "properties/decoder_gradients.hpp"
#include "properties/kernel_properties.hpp"
#include "properties/stream.hpp"
#include "reference/decoder.hpp"
#include "reference/error_bound.hpp"

namespace attncheck::properties {

std::string decoder_unavailable(const KernelDeclaration& d, bool v2) {
    if (v2 && !d.allows_dtype(ATTNCHECK_DTYPE_F32))
        return "it does not declare dtype f32 (the decoder's tensors are float32)";
    if (v2 && !d.dense) return "it declares dense=no (the decoder's query rows are dense, without cu_seqlens_q)";
    if (v2 && !d.positions_any)
        return "it declares positions=bottom_right (a padded batch and the cross-attention have query rows "
               "that are not the last rows of their sequence)";
    if (!d.causal) return "it declares mask=none (the decoder's self-attention is causal)";
    if (decoder_max_len(d) < 2)
        return "it declares " + std::string(d.max_q_len == 1 ? "max_q_len=1" : "max_kv_len=1") +
               " (a teacher-forced forward of T tokens makes calls of T query rows over T keys, and the "
               "decoder properties need T >= 2)";
    bool width = false;
    for (int w = 1; w <= 4096 && !width; ++w) width = decoder_width_allowed(d, w);
    if (!width) return "no declared head_dim is also a declared value_dim (a model's values are as wide as its keys)";
    return "";
}

std::string decoder_not_applicable(const DecoderProperty& prop, const KernelDeclaration& d, bool v2) {
    if (prop.backward) {
        // The training step calls the kernel's forward with lse, then its backward
        // (optimized/train_step.hpp).
        if (!d.backward)
            return !v2 ? "version 1 of the ABI has no backward pass"
                       : d.backward_said == KernelDeclaration::Said::no ? "declared backward=no" : std::string(kNoBackward);
        if (!d.lse) return "declared lse=no: the training step's backward reads the forward's lse";
        if (!d.layout_any)
            return "declared layout=contiguous: the training step's q, k, v are strided views into one [T, 3d] buffer";
        if (prop.name == "decoder_grad_determinism" && !d.deterministic)
            return "declared deterministic=no: the same step need not give the same bits";
        if (prop.name == "decoder_grad_determinism" && !d.deterministic_backward)
            return "declared deterministic_backward=no: the same step need not give the same bits";
    }
    if (prop.options.need_cross && !decoder_can_cross(d, v2))
        return d.non_causal ? "declared padding=no: the cross-attention passes the memory's valid length"
                            : "declared mask=causal: the cross-attention is not causal";
    // A version 2 kernel under padding=no gets a batch as one call per sequence (exact kv_len).
    if (prop.batches && !d.padding && !v2)
        return "declared padding=no: the sequences of a batch have different lengths, passed as valid lengths";
    if (prop.batches && d.max_batch == 1) return "declared max_batch=1: a batch has 2 or 3 sequences";
    // A version 1 kernel gets a batched step as one non-causal call over each sequence's valid
    // keys (the cache's rows past them are padding).
    if (prop.name == "batch_session" && !v2 && !d.non_causal)
        return "declared mask=causal: a batched step is a non-causal call over each sequence's valid keys";
    return "";
}

int DecoderUnderTest::decoder_block_size(const KernelDeclaration& d, int preferred) {
    if (!d.paged) return 0;
    if (d.allows_block_size(preferred)) return preferred;
    return d.block_sizes.empty() ? preferred : d.block_sizes.front().lo;
}

namespace {

std::string fmt(double x) {
    std::ostringstream s;
    s.precision(9);
    s << x;
    return s.str();
}

template <class T>
std::vector<T> flat(const xt::xtensor<T, 2>& x) {
    return std::vector<T>(x.begin(), x.end());
}

// The case's model, tokens and memory, and the decoder under test, built once per case.
struct Built {
    Model model;
    std::optional<optimized::Decoder> opt;
    std::optional<reference::Decoder<float>> ref;
    int V = 0;
    std::vector<int> tokens;
    std::optional<Memory> mem;

    Built(const DecoderUnderTest& d, const DecoderCase& c)
        : model(init_model(c.config, c.model_seed)), tokens(c.tokens()), mem(c.memory()) {
        V = c.config.vocab_size;
        if (d.optimized())
            opt.emplace(optimized_decoder_of(d, model));
        else
            ref.emplace(model);
    }
    std::vector<float> forward(const std::vector<int>& tokens, const std::optional<Memory>& mem) const {
        if (!opt) return flat(ref->forward(tokens, mem));
        const optimized::Logits l = opt->forward(tokens, mem);
        return {l.begin(), l.end()};
    }
    std::vector<int> generate(const std::vector<int>& prompt, int n, const std::optional<Memory>& mem) const {
        return opt ? opt->generate(prompt, n, mem) : ref->generate(prompt, n, mem);
    }
};

// The float64 oracle's logits [T, V] and, per logit, the bound on the error of any correct
// float32 decoder (reference/error_bound.hpp's running error bound, any plugged kernel).
struct OracleLogits {
    std::vector<double> oracle;  // [T, V]
    std::vector<double> bound;   // [T, V]
};
OracleLogits oracle_logits(const Model& m, const std::vector<int>& tokens, const std::optional<Memory>& mem) {
    return {flat(reference::Decoder<double>(m).forward(tokens, mem)),
            reference::DecoderBound(m).forward(tokens, mem).bound};
}

template <class Alloc>  // std::allocator, or optimized::Logits' (forward_batch's rows)
Verdict agree(const std::string& what, const std::vector<float, Alloc>& cand, const OracleLogits& o, int V) {
    const Agreement a = check_against_bound(cand, o.oracle, o.bound);
    if (a.ok) return Verdict::pass();
    return Verdict::fail(what + " logits[" + std::to_string(a.worst_index / std::size_t(V)) + "," +
                         std::to_string(a.worst_index % std::size_t(V)) + "] [t,v]: " + a.describe());
}

std::string first_difference(std::span<const float> a, std::span<const float> b, std::size_t rows, int V) {
    for (std::size_t i = 0; i < rows * std::size_t(V) && i < a.size() && i < b.size(); ++i)
        if (std::bit_cast<std::uint32_t>(a[i]) != std::bit_cast<std::uint32_t>(b[i]))
            return "logits[" + std::to_string(i / std::size_t(V)) + "," + std::to_string(i % std::size_t(V)) +
                   "] was " + fmt(a[i]) + ", now " + fmt(b[i]);
    return {};
}

// The sequences in a batch property's batch: 2 or 3, within the declared max_batch.
int batch_size(Stream& rng, const KernelDeclaration& d) {
    const int b = rng.integer(2, 3);
    return d.max_batch ? std::min(b, d.max_batch) : b;
}

// ---- the properties ---------------------------------------------------------------------

Verdict logits_causality(const DecoderUnderTest& d, const DecoderCase& c) {
    return refusal_unsupported("the decoder", [&] {
        const Built b(d, c);
        Stream rng(std::uint64_t(c.data_seed) + 0xCA05A1ull);
        const int T = int(b.tokens.size());
        const int k = rng.integer(0, T - 2);  // tokens after position k change
        std::vector<int> changed = b.tokens;
        for (int t = k + 1; t < T; ++t) changed[std::size_t(t)] = (b.tokens[std::size_t(t)] + rng.integer(1, b.V - 1)) % b.V;
        const auto before = b.forward(b.tokens, b.mem), after = b.forward(changed, b.mem);
        if (!d.declaration.deterministic) {
            // Positions 0..k have the same oracle before and after: compared with it, not bitwise.
            const OracleLogits o = oracle_logits(b.model, b.tokens, b.mem);
            const std::size_t n = std::size_t(k + 1) * std::size_t(b.V);
            const std::vector<float> first(after.begin(), after.begin() + std::ptrdiff_t(n));
            const OracleLogits head{{o.oracle.begin(), o.oracle.begin() + std::ptrdiff_t(n)},
                                    {o.bound.begin(), o.bound.begin() + std::ptrdiff_t(n)}};
            return agree("(deterministic=no: within the bound, not bitwise) after changing the tokens after position " +
                             std::to_string(k) + ",",
                         first, head, b.V);
        }
        const std::string diff = first_difference(before, after, std::size_t(k + 1), b.V);
        if (!diff.empty())
            return Verdict::fail("changing the tokens after position " + std::to_string(k) +
                                 " changed an earlier position's logits: " + diff);
        return Verdict::pass();
    });
}

Verdict agreement(const DecoderUnderTest& d, const DecoderCase& c) {
    return refusal_unsupported("the decoder", [&] {
        const Built b(d, c);
        return agree("teacher-forced", b.forward(b.tokens, b.mem), oracle_logits(b.model, b.tokens, b.mem), b.V);
    });
}

Verdict incremental(const DecoderUnderTest& d, const DecoderCase& c) {
    return refusal_unsupported("the decoder", [&] {
        const Built b(d, c);
        const OracleLogits o = oracle_logits(b.model, b.tokens, b.mem);
        const std::size_t T = b.tokens.size(), V = std::size_t(b.V);
        if (!b.opt) return agree("textbook incremental", flat(b.ref->forward_incremental(b.tokens, b.mem)), o, b.V);

        // One token at a time through the K/V cache.
        optimized::Session steps(*b.opt, b.mem);
        std::vector<float> stepped;
        for (const int t : b.tokens) {
            const auto row = steps.step(t);
            stepped.insert(stepped.end(), row.begin(), row.end());
        }
        if (Verdict v = agree("step-by-step", stepped, o, b.V); v.failed()) return v;

        // Chunked prefill: pieces of random length, each fed with a random chunk size.
        Stream rng(std::uint64_t(c.data_seed) + 0xC4C4Eull);
        optimized::Session chunked(*b.opt, b.mem);
        std::vector<float> pieces;
        std::ostringstream plan;
        for (std::size_t at = 0; at < T;) {
            const std::size_t n = std::size_t(rng.integer(1, int(T - at)));
            const int chunk = rng.integer(0, int(n));
            plan << (at ? " " : "") << n << "/" << chunk;
            const auto part = chunked.prefill(std::vector<int>(b.tokens.begin() + std::ptrdiff_t(at),
                                                               b.tokens.begin() + std::ptrdiff_t(at + n)), chunk);
            pieces.insert(pieces.end(), part.begin(), part.end());
            at += n;
        }
        if (Verdict v = agree("chunked prefill (pieces/chunk: " + plan.str() + ")", pieces, o, b.V); v.failed())
            return v;

        // Back to an earlier position and forward again: the cache must forget what it held.
        int back = rng.integer(0, int(T) - 1);
        // A window's rolling cache holds the last w+1 keys only: a truncate that needs older ones
        // is refused (tests/optimized/decoder_session_test.cpp); go back by one position or to 0 instead.
        const int w = c.config.attn_window, held_from = int(T) - (w + 1);
        if (w >= 0 && w < c.config.max_len - 1 && back > 0 && std::max(0, back - w) < held_from) back = back % 2 ? int(T) - 1 : 0;
        chunked.truncate(back);
        std::vector<float> redone(pieces.begin(), pieces.begin() + std::ptrdiff_t(std::size_t(back) * V));
        const auto rest = chunked.prefill(std::vector<int>(b.tokens.begin() + back, b.tokens.end()));
        redone.insert(redone.end(), rest.begin(), rest.end());
        return agree("after truncate(" + std::to_string(back) + ") and prefill", redone, o, b.V);
    });
}

Verdict generation(const DecoderUnderTest& d, const DecoderCase& c) {
    return refusal_unsupported("the decoder", [&] {
        const Built b(d, c);
        const int N = c.config.max_len;
        const int P = std::min(int(b.tokens.size()), N - 1);  // N >= 2: room for one new token
        const std::vector<int> prompt(b.tokens.begin(), b.tokens.begin() + P);
        const int max_new = std::min(N - P, 6);
        const std::vector<int> cached = b.generate(prompt, max_new, b.mem);
        if (int(cached.size()) != max_new)
            return Verdict::fail("generate(prompt, " + std::to_string(max_new) + ") returned " +
                                 std::to_string(cached.size()) + " tokens");
        std::vector<int> seq = prompt;
        const std::size_t V = std::size_t(b.V);
        int near_ties = 0;  // steps not compared (a near-tie the cache resolved as the oracle did)
        for (int s = 0; s < max_new; ++s) {
            const auto cand = b.forward(seq, b.mem);
            const OracleLogits o = oracle_logits(b.model, seq, b.mem);
            const std::size_t last = (seq.size() - 1) * V;
            auto argmax = [&](auto&& at) {
                std::size_t best = 0;
                for (std::size_t v = 1; v < V; ++v)
                    if (at(v) > at(best)) best = v;  // strict: the lowest id wins ties
                return int(best);
            };
            const int recomputed = argmax([&](std::size_t v) { return cand[last + v]; });
            const int oracle_best = argmax([&](std::size_t v) { return o.oracle[last + v]; });
            // The decision is robust when the oracle's best logit beats every other by more than
            // the two logits' bounds together: then every correct float32 decoder picks it.
            double margin = INFINITY, bound = 0;
            const std::size_t best = last + std::size_t(oracle_best);
            for (std::size_t v = 0; v < V; ++v) {
                if (int(v) == oracle_best) continue;
                const double slack = o.oracle[best] - o.oracle[last + v] - (o.bound[best] + o.bound[last + v]);
                if (slack < margin - bound) {
                    margin = o.oracle[best] - o.oracle[last + v];
                    bound = o.bound[best] + o.bound[last + v];
                }
            }
            if (!(margin > bound)) {
                // A near-tie: float32 may legitimately pick either. Where the cached generation
                // picked the oracle's token anyway, it continues from the same sequence and its
                // later tokens are still comparable; where it picked another, they are not.
                if (cached[std::size_t(s)] == oracle_best) {
                    ++near_ties;
                    seq.push_back(oracle_best);
                    continue;
                }
                return Verdict::pass_with_note("near-tie (the oracle's best logit within the bounds of a rival) where "
                                               "the cache picked another token: compared " +
                                               std::to_string(s - near_ties) + " of " + std::to_string(max_new) +
                                               " tokens");
            }
            if (cached[std::size_t(s)] != recomputed || recomputed != oracle_best)
                return Verdict::fail("greedy token " + std::to_string(s) + " (position " + std::to_string(seq.size()) +
                                     "): with the cache " + std::to_string(cached[std::size_t(s)]) + ", recomputed " +
                                     std::to_string(recomputed) + ", float64 oracle " + std::to_string(oracle_best) +
                                     " (oracle margin " + fmt(margin) + " over the closest rival > their bounds together " + fmt(bound) + ")");
            seq.push_back(oracle_best);
        }
        return Verdict::pass();
    });
}

Verdict memory_padding(const DecoderUnderTest& d, const DecoderCase& c) {
    return refusal_unsupported("the decoder", [&] {
        const Built b(d, c);
        Memory moved = *b.mem;
        Stream rng(std::uint64_t(c.data_seed) + 0x9ADull);
        const std::size_t dm = std::size_t(c.config.d_model);
        for (std::size_t i = std::size_t(b.mem->valid_len) * dm; i < moved.data.size(); ++i)
            moved.data[i] = float(10.0 * rng.normal());
        const auto before = b.forward(b.tokens, b.mem), after = b.forward(b.tokens, moved);
        if (!d.declaration.deterministic)
            return agree("(deterministic=no: within the bound, not bitwise) after replacing the padded memory rows,",
                         after, oracle_logits(b.model, b.tokens, b.mem), b.V);
        std::string diff = first_difference(before, after, b.tokens.size(), b.V);
        if (!diff.empty())
            return Verdict::fail("replacing the padded memory rows (>= memory_valid_len " +
                                 std::to_string(b.mem->valid_len) + ") changed " + diff);
        if (b.opt) {
            optimized::Session s1(*b.opt, b.mem), s2(*b.opt, moved);
            diff = first_difference(s1.prefill(b.tokens), s2.prefill(b.tokens), b.tokens.size(), b.V);
            if (!diff.empty())
                return Verdict::fail("in a Session, replacing the padded memory rows changed " + diff);
        }
        return Verdict::pass();
    });
}

Verdict batch(const DecoderUnderTest& d, const DecoderCase& c) {
    return refusal_unsupported("the decoder", [&] {
        const Built b(d, c);
        Stream rng(std::uint64_t(c.data_seed) + 0xBA7Cull);
        const int B = batch_size(rng, d.declaration);
        std::vector<std::vector<int>> seqs;
        std::vector<std::optional<Memory>> mems;
        for (int i = 0; i < B; ++i) {
            DecoderCase one = c;
            one.data_seed = c.data_seed + std::uint32_t(i);
            one.tokens_len = i == 0 ? c.tokens_len : rng.integer(1, c.config.max_len);
            if (c.config.cross_attention && i > 0) one.memory_valid = rng.integer(0, c.memory_rows);
            seqs.push_back(one.tokens());
            mems.push_back(one.memory());
        }
        const auto together = b.opt->forward_batch(seqs, c.config.cross_attention ? mems : std::vector<std::optional<Memory>>{});
        bool bitwise = true;
        for (int i = 0; i < B; ++i) {
            const auto alone = b.forward(seqs[std::size_t(i)], mems[std::size_t(i)]);
            if (!first_difference(alone, together[std::size_t(i)], seqs[std::size_t(i)].size(), b.V).empty()) bitwise = false;
            if (together[std::size_t(i)].size() != alone.size())
                return Verdict::fail("forward_batch gave " + std::to_string(together[std::size_t(i)].size()) +
                                     " logits for sequence " + std::to_string(i) + ", alone " + std::to_string(alone.size()));
            const OracleLogits o = oracle_logits(b.model, seqs[std::size_t(i)], mems[std::size_t(i)]);
            if (Verdict v = agree("sequence " + std::to_string(i) + " of " + std::to_string(B) + " in forward_batch,",
                                  together[std::size_t(i)], o, b.V);
                v.failed())
                return v;
        }
        return bitwise ? Verdict::pass() : Verdict::pass_with_note("forward_batch differs from forward alone (within tolerance)");
    });
}

// B sequences in one BatchSession, each prefilled with its own prompt (so they sit at different
// positions), then stepped together: the rows the batch gives a sequence must agree with the
// oracle on that sequence alone. Catches a batched step that mixes the sequences' caches, uses
// one position (or one kv_valid_len) for all, or lets a longer sequence's keys leak into a
// shorter one's attention.
Verdict batch_session(const DecoderUnderTest& d, const DecoderCase& c) {
    return refusal_unsupported("the decoder", [&] {
        const Built b(d, c);
        Stream rng(std::uint64_t(c.data_seed) + 0xB5E55ull);
        const int N = c.config.max_len;
        const int B = batch_size(rng, d.declaration);
        std::vector<int> prompt_len(static_cast<std::size_t>(B));
        int longest = 0;
        for (int& p : prompt_len) {
            p = rng.integer(1, N - 1);
            longest = std::max(longest, p);
        }
        const int steps = rng.integer(1, N - longest);  // every sequence stays within N
        std::vector<std::vector<int>> seqs;
        std::vector<std::optional<Memory>> mems;
        for (int i = 0; i < B; ++i) {
            DecoderCase one = c;
            one.data_seed = c.data_seed + std::uint32_t(i);
            one.tokens_len = prompt_len[std::size_t(i)] + steps;
            if (c.config.cross_attention && i > 0) one.memory_valid = rng.integer(0, c.memory_rows);
            seqs.push_back(one.tokens());
            mems.push_back(one.memory());
        }
        optimized::BatchSession session(*b.opt, B, c.config.cross_attention ? mems : std::vector<std::optional<Memory>>{});
        std::vector<std::vector<float>> got(static_cast<std::size_t>(B));
        for (int i = 0; i < B; ++i) {
            const auto& s = seqs[std::size_t(i)];
            got[std::size_t(i)] = session.prefill(i, std::vector<int>(s.begin(), s.begin() + prompt_len[std::size_t(i)]));
        }
        const std::size_t V = std::size_t(b.V);
        for (int t = 0; t < steps; ++t) {
            std::vector<int> next(static_cast<std::size_t>(B));
            for (int i = 0; i < B; ++i)
                next[std::size_t(i)] = seqs[std::size_t(i)][std::size_t(prompt_len[std::size_t(i)] + t)];
            const auto logits = session.step(next);  // [B, V]
            if (logits.size() != std::size_t(B) * V)
                return Verdict::fail("BatchSession::step returned " + std::to_string(logits.size()) +
                                     " logits for " + std::to_string(B) + " sequences of vocab " + std::to_string(V));
            for (int i = 0; i < B; ++i)
                got[std::size_t(i)].insert(got[std::size_t(i)].end(), logits.begin() + std::ptrdiff_t(std::size_t(i) * V),
                                           logits.begin() + std::ptrdiff_t(std::size_t(i + 1) * V));
        }
        std::ostringstream plan;
        for (int i = 0; i < B; ++i) plan << (i ? "," : "") << prompt_len[std::size_t(i)];
        for (int i = 0; i < B; ++i) {
            if (session.pos(i) != int(seqs[std::size_t(i)].size()))
                return Verdict::fail("BatchSession::pos(" + std::to_string(i) + ") is " + std::to_string(session.pos(i)) +
                                     " after feeding " + std::to_string(seqs[std::size_t(i)].size()) + " tokens");
            const OracleLogits o = oracle_logits(b.model, seqs[std::size_t(i)], mems[std::size_t(i)]);
            if (Verdict v = agree("sequence " + std::to_string(i) + " of a BatchSession (prompts [" + plan.str() + "], " +
                                      std::to_string(steps) + " steps together),",
                                  got[std::size_t(i)], o, b.V);
                v.failed())
                return v;
        }
        return Verdict::pass();
    });
}

}  // namespace

optimized::Decoder optimized_decoder_of(const DecoderUnderTest& d, const Model& model) {
    optimized::Decoder dec(model, d.kernel);
    dec.set_zero_empty_rows(d.declaration.empty_rows_nan);
    dec.set_exact_kv_len(d.kernel.fn_v2 != nullptr && !d.declaration.padding);
    return dec;
}

const std::vector<DecoderProperty>& decoder_properties() {
    static const std::vector<DecoderProperty> all = {
        {"logits_causality", "changing tokens after position k leaves logits 0..k bitwise unchanged",
         {.min_tokens = 2}, logits_causality},
        {"decoder_agreement", "teacher-forced logits agree with the float64 reference decoder", {}, agreement},
        {"incremental", "step-by-step, chunked-prefill (random chunks) and truncated KV-cache logits agree with teacher-forced",
         {}, incremental},
        {"generation", "greedy generation with the cache equals recompute generation (compared while the oracle's margin exceeds the logits' bounds)",
         {}, generation},
        {"memory_padding", "replacing padded cross-attention memory rows changes nothing, bitwise",
         {.need_cross = true, .need_memory_padding = true}, memory_padding},
        {"decoder_batch", "each sequence of forward_batch agrees with the reference (and is compared with forward alone)",
         {}, batch, true, true},
        {"batch_session", "B sequences at different positions stepping together in a BatchSession each agree with the reference alone",
         {}, batch_session, true, true},
    };
    static const std::vector<DecoderProperty> with_gradients = [] {
        std::vector<DecoderProperty> v = all;
        const std::vector<DecoderProperty>& grads = decoder_gradient_properties();
        v.insert(v.end(), grads.begin(), grads.end());
        return v;
    }();
    return with_gradients;
}

}  // namespace attncheck::properties
