// cli/inputs.hpp — the options the subcommands share, and turning command-line strings into
// checked decoder inputs.
//
// Every subcommand that runs a model reads the same three things: the model file, a token list
// and (for a cross-attention model) a memory .npy. Their options are declared here with the same
// names and help everywhere, and they are read and checked here, once, so that every subcommand
// refuses the same bad input with the same message, naming the flag it came from:
// "--tokens: token 40 is outside the vocabulary [0, 32)".
//
// Dimension legend: V = vocab_size, d = d_model, N = max_len, T = tokens, S = memory rows.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "attncheck/model.hpp"

namespace attncheck::cli {

// The memory flags shared by logits, generate and explain.
struct MemoryFlags {
    std::string path;                   // --memory FILE.npy, "" when not given
    std::optional<int> valid_len;       // --memory-valid-len, S when not given
    void add_to(CLI::App& sub);
};

// A subcommand that runs a model on token ids (logits, generate, explain): its one-line
// description, the text after its options in --help, --model,-m FILE (required) into `model`,
// and the required comma-separated token-id list (`tokens_flags`: --tokens, --prompt) into `tokens`.
CLI::App* add_model_command(CLI::App& app, const std::string& name, const std::string& description,
                            const std::string& footer, std::string& model, const std::string& tokens_flags,
                            std::string& tokens, const std::string& tokens_help);

// --impl reference|optimized: which decoder runs; the default is shown in --help.
void add_impl_option(CLI::App& sub, std::string& impl, const std::string& help);

// load_model() with the file named in the error.
Model load_model_flag(const std::string& path);

// parse_token_list() + check_tokens(), errors prefixed with the flag ("--tokens: ...").
// extra_positions: positions the command will need beyond the list (generate's --max-new), so
// that "too long for max_len" is reported before any work is done.
std::vector<int> tokens_flag(const std::string& flag, const std::string& text, const ModelConfig& c,
                             long long extra_positions = 0);

// The memory m [S, d] of a cross-attention model from a 2-D float .npy, or nullopt for a model
// without cross-attention. Refuses: a memory missing for a cross-attention model or given to a
// model without it, a rank other than 2, a width other than d (naming both), zero rows, a
// valid length outside [0, S], --memory-valid-len without --memory, non-finite values.
std::optional<Memory> memory_flag(const MemoryFlags& flags, const ModelConfig& c);

}  // namespace attncheck::cli
