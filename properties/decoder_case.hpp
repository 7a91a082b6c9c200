// properties/decoder_case.hpp — one random decoder problem: a small model, tokens, memory.
//
// RapidCheck generates the configuration (every option of MODEL.md: norm, cross-attention,
// positional, activation, embed scale, tied head, and in 40% of the cases the version 2
// additions: grouped-query heads, a sliding window, rope), the lengths and two seeds; init_model() makes
// the weights from the model seed and the Stream makes tokens and memory from the data seed.
//
// Dimension legend: V = vocab, d = d_model, h = heads, N = max_len, T = tokens, S = memory rows.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include <rapidcheck.h>

#include "attncheck/declaration.hpp"
#include "attncheck/model.hpp"

namespace attncheck::properties {

struct DecoderCase {
    ModelConfig config;
    std::uint32_t model_seed = 0;
    int tokens_len = 1;      // T
    int memory_rows = 0;     // S (0: no cross-attention)
    int memory_valid = 0;    // memory.valid_len
    std::uint32_t data_seed = 0;

    std::vector<int> tokens() const;          // [T], from data_seed
    std::optional<Memory> memory() const;     // [S, d], from data_seed; nullopt without cross
};

std::string describe(const DecoderCase& c);
void showValue(const DecoderCase& c, std::ostream& os);

struct DecoderCaseOptions {
    int min_tokens = 1;            // causality needs T >= 2
    bool need_cross = false;       // memory padding needs cross-attention ...
    bool need_memory_padding = false;  // ... and memory_valid < S
    // The large tier (a minority of cases, from case 1): d_model 64..256 with head_dim 32 or
    // 64, d_ff up to 512, vocab up to 100, T up to 160, so that a blocked decoder's GEMM blocks
    // (micro-panels of ~12 rows and ~32 columns, 256-deep K blocks, ~144-row blocks) and the
    // attention kernel's 64-key tiles are crossed. 0: never.
    int large_percent = 8;
    // A model the training step can train (reference::check_trainable), for the decoder
    // gradient properties: the small tier only, max_len at most kTrainableMaxLen,
    // cross-attention only for a kernel that takes non-causal problems (the step calls it on one
    // sequence's memory at a time, kv_len = the memory's valid length), and of the version 2
    // features (grouped-query heads, a window, rope) those check_trainable accepts, each tried
    // alone.
    bool trainable = false;
};

// The longest sequence of a trainable case (DecoderCaseOptions::trainable): long enough for a
// 4-row paged block and the kernel's masks to matter, short enough for the float64 loss.
inline constexpr int kTrainableMaxLen = 16;

rc::Gen<DecoderCase> gen_decoder_case(const DecoderCaseOptions& options = {});
// Cases whose every attention call is within what the kernel declares (v2: a version 2 kernel):
// head widths drawn from the declared ones (value_dim = head_dim in a model), heads and lengths
// within the declared maxima, cross-attention only for a kernel that takes non-causal problems
// with a valid length, and for a version 2 kernel windows and grouped heads only when declared.
// For the default declaration the cases are those of gen_decoder_case(options), draw for draw.
// The declaration must leave the decoder a way to run (decoder_unavailable() empty).
rc::Gen<DecoderCase> gen_decoder_case(const DecoderCaseOptions& options, const KernelDeclaration& declaration, bool v2);

// Whether a model may have heads of width w for a kernel that declares d: w is allowed as the
// key width and, with values as wide as keys, as the value width.
bool decoder_width_allowed(const KernelDeclaration& d, int w);
// Whether a model may have cross-attention for a kernel that declares d: the memory's calls are
// not causal and pass the memory's valid length (kv_valid_len; for version 2, kv_lens of a dense
// memory, or under padding=no one call per sequence with kv_len = its valid length).
bool decoder_can_cross(const KernelDeclaration& d, bool v2);
// The longest sequence (max_len) a model may have for a kernel that declares d: a teacher-forced
// forward makes calls of T query rows over T keys.
int decoder_max_len(const KernelDeclaration& d);

}  // namespace attncheck::properties
