// cli/explain_command.cpp — `attncheck explain`: one head's attention probabilities, as a
// textbook prints them.
//
// The point is to let a person see the causal mask at work: rows are query positions (with
// their token ids), columns are key positions, and every entry in the future of its query is
// shown as a blocked marker rather than as 0.0000. The two are different things: a blocked
// entry is exactly 0 because its score was -inf; a 0.0000 is a weight that merely rounds to 0.
// Each row ends with its sum, which is 1 up to rounding for any row with a visible key.
//
// The probabilities are those of the reference decoder in float64 (attention_probs()).
// Dimension legend: h = heads, T = tokens, S = memory rows.
#include <cstddef>
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "attncheck/error.hpp"
#include "attncheck/model.hpp"
#include "cli/commands.hpp"
#include "cli/inputs.hpp"
#include "model/detail.hpp"
#include "reference/decoder.hpp"

namespace attncheck::cli {
namespace {

// One display column, 8 characters wide. U+00B7 (middle dot) is one column on a terminal.
constexpr const char* kBlockedCell = "       \u00b7";  // causal mask: key in the query's future
constexpr const char* kPaddingCell = "     pad";       // cross-attention: memory row is padding

struct ExplainOptions {
    std::string model;
    std::string tokens;
    int layer = 0;
    int head = 0;
    bool cross = false;
    MemoryFlags memory;
};

void check_index(const char* flag, int value, int count, const char* what) {
    if (value < 0 || value >= count)
        throw InputError(std::string(flag) + " " + std::to_string(value) + " is out of range: the model has " +
                         std::to_string(count) + " " + what + " (valid: 0.." + std::to_string(count - 1) + ")");
}

int run_explain(const ExplainOptions& o) {
    const Model m = load_model_flag(o.model);
    const ModelConfig& c = m.config;
    const std::vector<int> tokens = tokens_flag("--tokens", o.tokens, c);
    check_index("--layer", o.layer, c.n_layers, "layers");
    check_index("--head", o.head, c.n_heads, "heads");
    if (o.cross && !c.cross_attention)
        throw InputError("--cross: this model has no cross-attention (only self-attention can be explained)");
    const std::optional<Memory> memory = memory_flag(o.memory, c);

    const reference::Decoder<double> dec(m);
    const auto probs = dec.attention_probs(tokens, memory);
    const auto& per_layer = o.cross ? probs.cross : probs.self;
    if (per_layer.size() != std::size_t(c.n_layers))
        throw std::runtime_error("attention_probs returned " + std::to_string(per_layer.size()) +
                                 " layers, expected " + std::to_string(c.n_layers));
    const xt::xtensor<double, 3>& P = per_layer[std::size_t(o.layer)];  // [h, T, T] or [h, T, S]
    const std::size_t T = tokens.size();
    const std::size_t K = o.cross ? std::size_t(memory->rows) : T;  // key columns
    if (P.shape(0) != std::size_t(c.n_heads) || P.shape(1) != T || P.shape(2) != K)
        throw std::runtime_error("attention_probs returned shape " +
                                 detail::shape_string({P.shape(0), P.shape(1), P.shape(2)}) + ", expected " +
                                 detail::shape_string({std::size_t(c.n_heads), T, K}));
    const std::size_t h = std::size_t(o.head);

    std::string token_list;
    for (int t : tokens) {
        if (!token_list.empty()) token_list += ',';
        token_list += std::to_string(t);
    }
    if (o.cross) {
        std::cout << "cross-attention probabilities P = softmax(Q K^T / sqrt(dk) + padding mask), ";
    } else {
        std::cout << "masked self-attention probabilities P = softmax(Q K^T / sqrt(dk) + causal mask), ";
    }
    std::cout << "layer " << o.layer << " (of 0.." << c.n_layers - 1 << "), head " << o.head << " (of 0.."
              << c.n_heads - 1 << ")\n"
              << "reference decoder, float64; tokens " << token_list << " (T = " << T << ")";
    if (o.cross) std::cout << "; memory S = " << memory->rows << ", valid rows " << memory->valid_len;
    std::cout << "\nlegend: rows = query positions i (with their token ids); columns = "
              << (o.cross ? "memory rows j" : "key positions j") << "\n";
    if (o.cross)
        std::cout << "        pad = padding row (j >= memory-valid-len: score -inf, weight exactly 0)\n";
    else
        std::cout << "        \u00b7 = blocked by the causal mask (j > i, a future key: score -inf, "
                     "weight exactly 0)\n";
    std::cout << "        0.0000 = a weight that is small, not masked; sum = the row's sum\n\n";

    std::printf("%6s %6s |", "", "");
    std::printf("  %s\n", o.cross ? "memory row j" : "key position j");
    std::printf("%6s %6s |", "query", "token");
    for (std::size_t j = 0; j < K; ++j) std::printf("%8zu", j);
    std::printf(" | %9s\n", "sum");
    for (std::size_t i = 0; i < T; ++i) {
        std::printf("%6zu %6d |", i, tokens[i]);
        double sum = 0;
        for (std::size_t j = 0; j < K; ++j) {
            const double p = P(h, i, j);
            sum += p;
            const bool blocked = o.cross ? j >= std::size_t(memory->valid_len) : j > i;
            if (blocked) {
                // The mask's promise is an exact zero; print the value if it is broken, so that
                // a bug shows up here instead of hiding behind the marker.
                if (p == 0.0)
                    std::printf("%s", o.cross ? kPaddingCell : kBlockedCell);
                else
                    std::printf(" !%6.4f", p);
            } else {
                std::printf("%8.4f", p);
            }
        }
        std::printf(" | %9.6f\n", sum);
    }
    std::fflush(stdout);
    return 0;
}

}  // namespace

Command add_explain_command(CLI::App& app) {
    auto o = std::make_shared<ExplainOptions>();
    CLI::App* sub = add_model_command(
        app, "explain", "Print one head's masked self-attention probabilities as a matrix",
        "Rows are query positions i (with their token ids), columns key positions j, entry "
        "P[i, j] of the reference decoder (float64) for a teacher-forced pass. Keys in the future "
        "of the query (j > i) are printed as a middle dot: the causal mask set their score to -inf "
        "so their weight is exactly 0 (a masked entry that is not exactly 0 would be printed as "
        "!value). Each row ends with its sum. --cross shows the cross-attention over the memory "
        "instead, with padding rows printed as `pad`.\n"
        "Example: attncheck explain --model m.safetensors --tokens 3,1,4,1 --layer 1 --head 0",
        o->model, "--tokens,-t", o->tokens, "Token ids, comma-separated");
    sub->add_option("--layer,-l", o->layer, "Decoder layer, 0 .. L-1")->capture_default_str();
    sub->add_option("--head", o->head, "Attention head, 0 .. h-1")->capture_default_str();
    sub->add_flag("--cross", o->cross, "Show the cross-attention over the memory instead of self-attention");
    o->memory.add_to(*sub);
    return {sub, [o] { return run_explain(*o); }};
}

}  // namespace attncheck::cli
