// properties/decoder_gradients.cpp — the decoder gradient properties (decoder_gradients.hpp): the
// comparison of a step's gradients, the batch a case trains on, the four checks, and their rows
// of the decoder property table (decoder_gradient_properties(), at the bottom).
//
// Each check trains the case's model (init_model from its seeds) on a batch drawn from its data
// seed, with optimized::train_loss and the kernel under test (TrainKernel: its version 2 forward
// and its backward), and with DecoderUnderTest::step_bug planted in the step (none in `attncheck
// fuzz`). What each one catches:
//   decoder_grad_agreement    any wrong gradient term of the step or the kernel's backward (a
//                             dropped mean or residual, a gradient not divided by the weight, a
//                             tied matrix counted once, a wrong dS), against the float64 oracle;
//   decoder_grad_causality    a gradient leaking from the future: a backward that recomputes P
//                             without the mask, a position's gradient landing on the next one;
//   decoder_grad_batch        a batch that is not the weighted sum of its sequences (a mean per
//                             sequence, a normalisation by the wrong total, sequences mixed);
//   decoder_grad_determinism  a race in the step's reductions (bitwise, same thread count).
//
// Dimension legend: V = vocab, d = d_model, N = max_len, T = tokens of a sequence, B = sequences.
#include "properties/decoder_gradients.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include "attncheck/model.hpp"
#include "optimized/decoder.hpp"
#include "properties/stream.hpp"

namespace attncheck::properties {

namespace {

using reference::GradBug;
using reference::Params;
using reference::Sequence;
using reference::TrainMask;

std::string fmt(double x, int precision = 9) {
    std::ostringstream s;
    s.precision(precision);
    s << x;
    return s.str();
}

// "[i,j]" of flat index e in a row-major tensor of this shape.
std::string element_of(std::size_t e, const std::vector<std::size_t>& shape) {
    std::vector<std::size_t> at(shape.size());
    for (std::size_t k = shape.size(); k-- > 0;) {
        const std::size_t n = std::max<std::size_t>(shape[k], 1);
        at[k] = e % n;
        e /= n;
    }
    std::string s = "[";
    for (std::size_t k = 0; k < at.size(); ++k) (s += k ? "," : "") += std::to_string(at[k]);
    return s + "]";
}

double max_abs(const std::vector<double>& x) {
    double m = 0;
    for (const double v : x) m = std::max(m, std::abs(v));
    return m;
}
double max_abs(const std::vector<float>& x) {
    double m = 0;
    for (const float v : x) m = std::max(m, std::abs(double(v)));
    return m;
}

// A tensor's scale: its largest |gradient|, floored at `scale_floor` of the model's largest.
double floored(double tensor_scale, double model_scale, double scale_floor) {
    return std::max(tensor_scale, scale_floor * model_scale);
}

// error / scale, infinite for a non-finite error or any error on a zero scale.
double ratio_of(double error, double scale) {
    if (!std::isfinite(error)) return std::numeric_limits<double>::infinity();
    if (!(scale > 0)) return error > 0 ? std::numeric_limits<double>::infinity() : 0.0;
    return error / scale;
}

// The attention of the step: the kernel under test, forward and backward.
optimized::TrainKernel train_kernel(const DecoderUnderTest& d) { return {d.kernel.fn_v2, d.backward}; }

double step(const DecoderUnderTest& d, const Model& model, const std::vector<Sequence>& batch, TrainMask mask,
            optimized::Grads& grads) {
    return optimized::train_loss(model, batch, train_kernel(d), {.mask = mask, .bug = d.step_bug}, &grads);
}

// The weight of predicting tokens[t + 1]: 0 in about a third of the positions (a position that
// does not count, as outside a task's answer), else a multiple of 1/4 up to 2 (exact in float32).
double draw_weight(Stream& rng) { return rng.integer(0, 2) == 0 ? 0.0 : 0.25 * rng.integer(1, 8); }

// Some weight of the batch nonzero (a batch without one is refused): position t of sequence 0
// gets 1 when none is.
void ensure_some_weight(TrainBatch& b, std::size_t t) {
    for (const Sequence& q : b.sequences)
        for (const double w : q.weights)
            if (w > 0) return;
    b.sequences[0].weights[t] = 1.0;
}

double total_weight(const Sequence& q) {
    double w = 0;
    for (const double x : q.weights) w += x;
    return w;
}

}  // namespace

TrainBatch train_batch(const DecoderCase& c, const KernelDeclaration& d, bool allow_none, int min_sequences) {
    Stream rng(std::uint64_t(c.data_seed) + 0x6EAD5ull);
    TrainBatch b;
    int B = rng.integer(min_sequences, 4);
    if (d.max_batch) B = std::min(B, d.max_batch);
    for (int s = 0; s < B; ++s) {
        Sequence q;
        if (s == 0) {
            q.tokens = c.tokens();
        } else {
            q.tokens.resize(std::size_t(rng.integer(2, c.config.max_len)));
            for (int& t : q.tokens) t = rng.integer(0, c.config.vocab_size - 1);
        }
        q.weights.resize(q.tokens.size() - 1);
        for (double& w : q.weights) w = draw_weight(rng);
        // Cross-attention: the case's memory for sequence 0; for the others memories of the same
        // S rows with their own values and valid length (0 included: a row that sees no key).
        if (c.config.cross_attention) {
            if (s == 0) {
                q.memory = c.memory();
            } else {
                Memory mem;
                mem.rows = c.memory_rows;
                mem.valid_len = rng.integer(0, c.memory_rows);
                mem.data.resize(std::size_t(mem.rows) * std::size_t(c.config.d_model));
                for (float& x : mem.data) x = float(rng.normal());
                q.memory = std::move(mem);
            }
        }
        b.sequences.push_back(std::move(q));
    }
    if (allow_none && d.non_causal && rng.integer(0, 3) == 0) b.mask = TrainMask::none;
    ensure_some_weight(b, b.sequences[0].weights.size() - 1);
    return b;
}

std::string GradComparison::describe(const std::string& candidate_name, const std::string& expected_name) const {
    if (!missing.empty()) return missing;
    std::ostringstream s;
    s << tensor << element << ": " << candidate_name << " " << fmt(candidate) << ", " << expected_name << " "
      << fmt(expected) << ": ";
    if (!std::isfinite(candidate)) return s.str() + "not finite";
    s << "error " << fmt(error, 3) << " is " << fmt(ratio_of(error, scale), 3) << " of the tensor's scale "
      << fmt(scale, 3) << " (max |gradient| of the tensor, floored at " << scale_floor
      << " of the model's largest), " << fmt(ratio_of(error, scale) / bound, 3) << "x the bound " << bound;
    return s.str();
}

GradComparison compare_with_oracle(double loss, const optimized::Grads& grads, double oracle_loss, const Params& oracle,
                                   double bound, double scale_floor) {
    GradComparison r;
    r.bound = bound;
    r.scale_floor = scale_floor;
    for (const auto& [name, g] : grads)
        if (!oracle.values.count(name)) {
            r.ok = false;
            r.missing = "the step returned a gradient for '" + name + "', which is not a parameter of the model";
            return r;
        }
    double model_scale = 0;
    for (const auto& [name, g] : oracle.values) model_scale = std::max(model_scale, max_abs(g));
    const auto consider = [&](const std::string& tensor, std::string element, double candidate, double expected,
                              double scale) {
        const double error = std::abs(candidate - expected);
        const double ratio = std::isfinite(candidate) ? ratio_of(error, scale) : std::numeric_limits<double>::infinity();
        if (ratio > r.worst_ratio || (r.tensor.empty() && ratio >= r.worst_ratio)) {
            r.worst_ratio = ratio;
            r.tensor = tensor, r.element = std::move(element);
            r.candidate = candidate, r.expected = expected, r.error = error, r.scale = scale;
        }
    };
    // The loss, against its own magnitude (a cross-entropy, about log V at initialisation).
    consider("loss", "", loss, oracle_loss, floored(std::abs(oracle_loss), 1.0, scale_floor));
    for (const auto& [name, want] : oracle.values) {
        const auto it = grads.find(name);
        if (it == grads.end() || it->second.size() != want.size()) {
            r.ok = false;
            r.missing = "the step's gradient of '" + name + "' " +
                        (it == grads.end() ? std::string("is missing")
                                           : "has " + std::to_string(it->second.size()) + " elements, the parameter " +
                                                 std::to_string(want.size()));
            return r;
        }
        const double scale = floored(max_abs(want), model_scale, scale_floor);
        const std::vector<float>& got = it->second;
        std::size_t worst = 0;
        double worst_error = -1;
        for (std::size_t i = 0; i < want.size(); ++i) {
            const double e = std::isfinite(got[i]) ? std::abs(double(got[i]) - want[i]) : std::numeric_limits<double>::infinity();
            if (e > worst_error) worst_error = e, worst = i;
        }
        if (!want.empty()) consider(name, element_of(worst, oracle.shapes.at(name)), got[worst], want[worst], scale);
    }
    r.ok = r.worst_ratio <= bound;
    return r;
}

std::string describe(const TrainBatch& b) {
    std::ostringstream s;
    s << b.sequences.size() << (b.sequences.size() == 1 ? " sequence" : " sequences") << ", mask "
      << reference::to_string(b.mask) << ":";
    for (std::size_t i = 0; i < b.sequences.size(); ++i) {
        const Sequence& q = b.sequences[i];
        s << " [" << i << "] tokens=[";
        for (std::size_t t = 0; t < q.tokens.size(); ++t) s << (t ? "," : "") << q.tokens[t];
        s << "] weights=[";
        for (std::size_t t = 0; t < q.weights.size(); ++t) s << (t ? "," : "") << q.weights[t];
        s << "]";
    }
    return s.str();
}

namespace {

// ---- the properties ---------------------------------------------------------------------

Verdict grad_agreement(const DecoderUnderTest& d, const DecoderCase& c) {
    return refusal_unsupported("the training step", [&] {
        const Model model = init_model(c.config, c.model_seed);
        const TrainBatch b = train_batch(c, d.declaration, /*allow_none=*/true);
        optimized::Grads grads;
        const double loss = step(d, model, b.sequences, b.mask, grads);
        const Params p = Params::from_model(model);
        Params oracle;
        const double oracle_loss = reference::decoder_loss(c.config, p, b.sequences, {.mask = b.mask}, &oracle);
        const GradComparison r = compare_with_oracle(loss, grads, oracle_loss, oracle);
        if (r.ok) return Verdict::pass();
        return Verdict::fail(r.describe("float32 step", "float64 oracle") + "; batch: " + describe(b));
    });
}

Verdict grad_causality(const DecoderUnderTest& d, const DecoderCase& c) {
    return refusal_unsupported("the training step", [&] {
        const ModelConfig& m = c.config;
        const bool learned = m.positional == Positional::learned;
        if (m.tie_embeddings && !learned)
            return Verdict::vacuous(
                "tied embeddings (the lm head's softmax reaches every embedding row) with sinusoidal positions: "
                "no parameter row that only the future reaches");
        TrainBatch b = train_batch(c, d.declaration, /*allow_none=*/false);
        // Sequence s counts positions 0..k[s] only: their loss sees the tokens at 0..k[s] as inputs
        // (and the one at k[s] + 1 as a target, through the lm head alone).
        Stream rng(std::uint64_t(c.data_seed) + 0xCA05A1ull);
        std::vector<int> k(b.sequences.size());
        std::set<int> seen;  // the token ids that are an input at or before k somewhere
        int last_k = 0;
        for (std::size_t s = 0; s < b.sequences.size(); ++s) {
            Sequence& q = b.sequences[s];
            k[s] = rng.integer(0, int(q.tokens.size()) - 2);
            for (std::size_t t = std::size_t(k[s]) + 1; t < q.weights.size(); ++t) q.weights[t] = 0;
            for (int t = 0; t <= k[s]; ++t) seen.insert(q.tokens[std::size_t(t)]);
            last_k = std::max(last_k, k[s]);
        }
        ensure_some_weight(b, std::size_t(k[0]));
        const bool some_token = !m.tie_embeddings && int(seen.size()) < m.vocab_size;
        if (!some_token && !(learned && last_k + 1 < m.max_len))
            return Verdict::vacuous("every token id is an input at or before k, and no position row is after every k");
        optimized::Grads grads;
        step(d, init_model(m, c.model_seed), b.sequences, TrainMask::causal, grads);

        std::ostringstream ks;
        for (std::size_t s = 0; s < k.size(); ++s) ks << (s ? "," : "") << k[s];
        const std::size_t D = std::size_t(m.d_model);
        const auto first_nonzero = [&](const char* tensor, int row) -> std::string {
            const auto it = grads.find(tensor);
            if (it == grads.end()) return std::string("the step returned no gradient for ") + tensor;
            for (std::size_t col = 0; col < D; ++col)
                if (const float x = it->second[std::size_t(row) * D + col]; x != 0.0f)
                    return std::string(tensor) + "[" + std::to_string(row) + "," + std::to_string(col) + "] is " + fmt(x);
            return "";
        };
        if (some_token)
            for (int v = 0; v < m.vocab_size; ++v) {
                if (seen.count(v)) continue;
                if (const std::string nz = first_nonzero("embed.weight", v); !nz.empty())
                    return Verdict::fail(nz + ": token " + std::to_string(v) +
                                         " is an input only after position k (or nowhere), and the loss counts positions "
                                         "0..k only (k per sequence [" + ks.str() + "]): must be exactly 0; batch: " +
                                         describe(b));
            }
        if (learned)
            for (int row = last_k + 1; row < m.max_len; ++row)
                if (const std::string nz = first_nonzero("pos.weight", row); !nz.empty())
                    return Verdict::fail(nz + ": position " + std::to_string(row) +
                                         " is after every counted position (k per sequence [" + ks.str() +
                                         "]): must be exactly 0; batch: " + describe(b));
        return Verdict::pass();
    });
}

Verdict grad_batch(const DecoderUnderTest& d, const DecoderCase& c) {
    return refusal_unsupported("the training step", [&] {
        const Model model = init_model(c.config, c.model_seed);
        TrainBatch b = train_batch(c, d.declaration, /*allow_none=*/true, /*min_sequences=*/2);
        // Two sequences that count, so that there is a sum to compare with.
        if (b.sequences.size() >= 2 && !(total_weight(b.sequences[1]) > 0)) b.sequences[1].weights.back() = 1.0;
        optimized::Grads together;
        step(d, model, b.sequences, b.mask, together);
        // The batch's loss is the mean over all its weights: sequence s alone (the mean over its
        // own, W_s) enters it with W_s / W. A sequence whose weights are all 0 adds nothing (and
        // cannot be trained alone).
        double W = 0;
        for (const Sequence& q : b.sequences) W += total_weight(q);
        std::map<std::string, std::vector<double>> sum;  // sum_s (W_s / W) g_s, in float64
        std::map<std::string, double> allowed;  // the bound of each tensor: its share from every step
        const auto charge = [&](const optimized::Grads& g, double share) {
            double model_scale = 0;
            for (const auto& [name, x] : g) model_scale = std::max(model_scale, max_abs(x));
            for (const auto& [name, x] : g) allowed[name] += share * kDecoderGradBound * floored(max_abs(x), model_scale, kDecoderGradFloor);
        };
        charge(together, 1.0);
        int alone = 0;
        for (const Sequence& q : b.sequences) {
            const double Ws = total_weight(q);
            if (!(Ws > 0)) continue;
            ++alone;
            optimized::Grads g;
            step(d, model, {q}, b.mask, g);
            charge(g, Ws / W);
            for (const auto& [name, x] : g) {
                std::vector<double>& acc = sum[name];
                acc.resize(x.size());
                for (std::size_t i = 0; i < x.size(); ++i) acc[i] += Ws / W * double(x[i]);
            }
        }
        if (alone < 2) return Verdict::vacuous("one sequence of the batch has a nonzero weight");
        // Each float32 gradient is within kDecoderGradBound of its exact value on its tensor's
        // scale, so the batch's and the weighted sum's differ by at most the sum of those.
        const Params shapes = Params::from_model(model);
        for (const auto& [name, x] : together) {
            const auto it = sum.find(name);
            if (it == sum.end() || it->second.size() != x.size())
                return Verdict::fail("the batch's gradient of '" + name + "' has no counterpart of its size in the sequences' own");
            for (std::size_t i = 0; i < x.size(); ++i) {
                const double error = std::abs(double(x[i]) - it->second[i]);
                if (!(error <= allowed[name]))
                    return Verdict::fail(name + element_of(i, shapes.shapes.at(name)) + ": the batch's " + fmt(x[i]) +
                                         ", the weighted sum of its " + std::to_string(alone) +
                                         " sequences' own (each times W_s / W) " + fmt(it->second[i]) + ": difference " +
                                         fmt(error, 3) + " beyond " + fmt(allowed[name], 3) +
                                         " (kDecoderGradBound " + fmt(kDecoderGradBound, 3) +
                                         " of each step's scale of the tensor, summed); batch: " + describe(b));
            }
        }
        return Verdict::pass();
    });
}

Verdict grad_determinism(const DecoderUnderTest& d, const DecoderCase& c) {
    return refusal_unsupported("the training step", [&] {
        const Model model = init_model(c.config, c.model_seed);
        const TrainBatch b = train_batch(c, d.declaration, /*allow_none=*/true);
        optimized::Grads first, again;
        const double loss = step(d, model, b.sequences, b.mask, first);
        const double loss_again = step(d, model, b.sequences, b.mask, again);
        const std::string how = "the same training step twice (same thread count; the kernel declares deterministic=yes "
                                "and deterministic_backward=yes)";
        if (std::memcmp(&loss, &loss_again, sizeof loss) != 0)
            return Verdict::fail("loss was " + fmt(loss, 17) + ", then " + fmt(loss_again, 17) + ": " + how + "; batch: " + describe(b));
        const Params shapes = Params::from_model(model);
        for (const auto& [name, x] : first) {
            const auto it = again.find(name);
            if (it == again.end() || it->second.size() != x.size())
                return Verdict::fail("the gradient of '" + name + "' is missing or of another size the second time");
            for (std::size_t i = 0; i < x.size(); ++i)
                if (std::memcmp(&x[i], &it->second[i], sizeof(float)) != 0)
                    return Verdict::fail(name + element_of(i, shapes.shapes.at(name)) + " was " + fmt(x[i]) + ", then " +
                                         fmt(it->second[i]) + ": " + how + "; batch: " + describe(b));
        }
        return Verdict::pass();
    });
}

}  // namespace

const std::vector<DecoderProperty>& decoder_gradient_properties() {
    const DecoderCaseOptions trainable{.min_tokens = 2, .trainable = true};
    static const std::vector<DecoderProperty> all = {
        {"decoder_grad_agreement",
         "the training step's loss and gradients (kernel's forward and backward as its attention) agree with the float64 "
         "reference per tensor within kDecoderGradBound (mask causal or none)",
         trainable, grad_agreement, true, false, true, kDecoderGradCases},
        {"decoder_grad_causality",
         "the loss of positions 0..k gives exactly 0 to the embedding rows of tokens only after k and to the position rows "
         "after k",
         trainable, grad_causality, true, false, true, kDecoderGradCases},
        {"decoder_grad_batch", "a batch's gradients equal the weighted sum of its sequences' own within the bound",
         trainable, grad_batch, true, true, true, kDecoderGradCases},
        {"decoder_grad_determinism", "the same training step twice (same thread count) gives bitwise the same loss and gradients",
         trainable, grad_determinism, true, false, true, kDecoderGradCases},
    };
    return all;
}

}  // namespace attncheck::properties
