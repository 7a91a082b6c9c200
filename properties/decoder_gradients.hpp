// properties/decoder_gradients.hpp — the decoder gradient properties: the float32 training step
// (optimized/train_step.hpp) with the kernel under test as its attention (its version 2 forward
// with lse, then its backward) against the float64 oracle (reference::decoder_loss) and against
// itself. They are rows of decoder_properties()' table, run by the same runner, on trainable
// cases (DecoderCaseOptions::trainable) and a batch drawn from each case's data seed.
//
// The bound. A float32 gradient is compared with the float64 one tensor by tensor, by a
// scale-aware metric (the normwise test ratio of LAPACK's drivers and ggml's test-backend-ops,
// not an elementwise relative error, which cancellation makes meaningless):
//     ratio(T) = max_i |g32_i - g64_i| / max(max_i |g64_i|, kDecoderGradFloor * G)
// over the elements i of tensor T, with G the largest |g64| of any tensor of the model. A
// float32 step's error in an element is rounding of the terms summed into it, whose size follows
// the gradient flowing through the model (G), not that element's own value: a tensor whose
// gradient nearly cancels (a bias behind a LayerNorm, an embedding row used once) is judged
// against the floor, a fraction of G, instead of against rounding noise on its tiny scale.
// Unlike the attention's a-priori bound (reference/error_bound.hpp), kDecoderGradBound is
// measured: the largest ratio correct float32 steps reach, times a margin (docs/numerics.md,
// section 6, has the study and the reasoning).
//
// Dimension legend: V = vocab, d = d_model, N = max_len, T = tokens of a sequence, B = sequences.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "optimized/train_step.hpp"
#include "properties/decoder_properties.hpp"
#include "reference/decoder_grad.hpp"

namespace attncheck::properties {

// The largest ratio(T) (above) a correct float32 training step may reach: 16 times the worst
// measured, 6.3e-3 (docs/numerics.md, section 6: 100,000 trainable cases per built-in kernel,
// optimized_v2 and reference_v2 alike, and 30,000 more of d_model <= 2 where the tail lives: a
// post-norm LayerNorm over 2 features, whose gain reaches 1/sqrt(ln_eps) = 316, amplifying the
// rounding of its input). Every planted bug fails on its first case, shrunk still 10-1e9x over.
inline constexpr double kDecoderGradBound = 0.1;
// The floor of a tensor's scale, as a fraction of the model's largest gradient element G.
inline constexpr double kDecoderGradFloor = 1e-3;

// The decoder gradient properties' cases per property in a run without --cases, in place of
// the decoder level's 40: their models are small (d <= 24, N <= 16), a case costs ~0.2 ms.
// Measured (build/cli/attncheck fuzz --seed 5, AMD EPYC Zen 5, 2 vCPUs, with others building):
// the 8 runs (4 properties x optimized_v2, reference_v2) take 0.2 s at 40 cases, 0.6 s at 200,
// 1.4 s at 400; 200 keeps the default run within a second of what it took before them.
inline constexpr int kDecoderGradCases = 200;

// One training step's loss and gradients against another's (or the oracle's), tensor by tensor.
struct GradComparison {
    bool ok = true;
    double worst_ratio = 0;  // the largest ratio over the tensors (and the loss)
    // Where it is: the tensor ("loss" for the loss), the element's index in the tensor's shape
    // ("[3,7]"), the two values, |difference|, the tensor's scale (the denominator) and the bound.
    std::string tensor, element;
    double candidate = 0, expected = 0, error = 0, scale = 0, bound = 0;
    double scale_floor = 0;  // a tensor's scale is at least this fraction of the model's largest gradient
    std::string missing;  // a tensor one side has and the other lacks, or of another size
    // "embed.weight[3,7]: float32 step 0.0123, float64 oracle 0.0125: error 2e-4 is 1.6e-2 of the
    // tensor's scale 1.25e-2, 3.2x the bound 5e-3"
    std::string describe(const std::string& candidate_name, const std::string& expected_name) const;
};

// The comparison of a float32 step (loss, grads) with the float64 oracle (loss, grads; its names
// and shapes are the model's), by ratio(T) against `bound`, each tensor's scale floored at `scale_floor`
// of the model's largest gradient. Non-finite candidates fail. The properties use the defaults;
// the training step's own test (tests/optimized/train_step_test.cpp) a tighter bound on fixed
// models, with a floor that sets a zero gradient's rounding noise against a tensor's scale.
GradComparison compare_with_oracle(double loss, const optimized::Grads& grads, double oracle_loss,
                                   const reference::Params& oracle, double bound = kDecoderGradBound,
                                   double scale_floor = kDecoderGradFloor);

// The batch of a gradient case: 1-4 sequences of 2..N tokens (the first the case's own tokens),
// weights with zeros, and the self-attention mask.
struct TrainBatch {
    std::vector<reference::Sequence> sequences;
    reference::TrainMask mask = reference::TrainMask::causal;
};
std::string describe(const TrainBatch& b);
// The batch the properties train case c on, for a kernel that declares d: sequence 0 is the
// case's own tokens (so it shrinks with the case), more of 2..N tokens up to 4 sequences (at
// least min_sequences, within max_batch), tokens and weights from the case's data seed, about a
// third of the weights 0 but not all. Sequences of one length are one kernel call in the step,
// of different lengths one call each: both are drawn. `allow_none`: the mask is none in a
// quarter of the batches when d allows non-causal problems.
TrainBatch train_batch(const DecoderCase& c, const KernelDeclaration& d, bool allow_none, int min_sequences = 1);

// The rows of decoder_properties()' table that run the training step.
const std::vector<DecoderProperty>& decoder_gradient_properties();

}  // namespace attncheck::properties
