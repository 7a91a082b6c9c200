// cli/inputs.cpp — the options the commands share and the checked model, tokens and memory
// they read (inputs.hpp).
#include "cli/inputs.hpp"

#include <cmath>
#include <cstddef>
#include <limits>

#include "attncheck/error.hpp"
#include "model/detail.hpp"

namespace attncheck::cli {

void MemoryFlags::add_to(CLI::App& sub) {
    sub.add_option("--memory", path,
                   "Cross-attention memory (the encoder output) m [S, d] as a 2-D float32 (or "
                   "float64) .npy; required for a model with cross-attention, refused for one without")
        ->type_name("FILE.npy");
    sub.add_option("--memory-valid-len", valid_len,
                   "Memory rows that are real; rows >= this are padding and masked (default: S, "
                   "all rows; must be in [0, S])")
        ->type_name("N");
}

CLI::App* add_model_command(CLI::App& app, const std::string& name, const std::string& description,
                            const std::string& footer, std::string& model, const std::string& tokens_flags,
                            std::string& tokens, const std::string& tokens_help) {
    CLI::App* sub = app.add_subcommand(name, description);
    sub->footer(footer);
    sub->add_option("--model,-m", model, "Model file (.safetensors)")->required()->type_name("FILE");
    sub->add_option(tokens_flags, tokens, tokens_help)->required()->type_name("LIST");
    return sub;
}

void add_impl_option(CLI::App& sub, std::string& impl, const std::string& help) {
    sub.add_option("--impl", impl, help)->check(CLI::IsMember({"reference", "optimized"}))->capture_default_str();
}

Model load_model_flag(const std::string& path) {
    try {
        return load_model(path);
    } catch (const InputError& e) {
        const std::string what = e.what();
        // load_model names the file in most messages; say it once more only when it does not.
        if (what.find(path) != std::string::npos) throw;
        throw InputError("--model " + path + ": " + what);
    }
}

std::vector<int> tokens_flag(const std::string& flag, const std::string& text, const ModelConfig& c,
                             long long extra_positions) {
    std::vector<int> tokens;
    try {
        tokens = parse_token_list(text);
        check_tokens(c, tokens);
    } catch (const InputError& e) {
        throw InputError(flag + " \"" + text + "\": " + e.what());
    }
    const long long needed = static_cast<long long>(tokens.size()) + extra_positions;
    if (needed > c.max_len)
        throw InputError(flag + ": " + std::to_string(tokens.size()) + " tokens + " +
                         std::to_string(extra_positions) + " new = " + std::to_string(needed) +
                         " positions, more than the model's max_len " + std::to_string(c.max_len));
    return tokens;
}

std::optional<Memory> memory_flag(const MemoryFlags& flags, const ModelConfig& c) {
    const std::string d = std::to_string(c.d_model);
    if (flags.path.empty()) {
        if (flags.valid_len)
            throw InputError("--memory-valid-len needs --memory (there is no memory to pad)");
        if (c.cross_attention)
            throw InputError("--memory is required: this model has cross-attention and needs a "
                             "memory m [S, " + d + "] (.npy)");
        return std::nullopt;
    }
    if (!c.cross_attention)
        throw InputError("--memory " + flags.path +
                         ": this model has no cross-attention, so it takes no memory");

    NpyArray a;
    try {
        a = read_npy(flags.path);
    } catch (const InputError& e) {
        const std::string what = e.what();
        if (what.find(flags.path) != std::string::npos) throw;
        throw InputError("--memory " + flags.path + ": " + what);
    }
    if (a.shape.size() != 2)
        throw InputError("--memory " + flags.path + ": expected a 2-D array [S, d] with d = " + d +
                         ", found shape " + detail::shape_string(a.shape));
    const std::size_t S = a.shape[0], width = a.shape[1];
    if (width != std::size_t(c.d_model))
        throw InputError("--memory " + flags.path + ": memory width " + std::to_string(width) +
                         " does not match the model's d_model " + d + " (shape " +
                         detail::shape_string(a.shape) + ")");
    if (S == 0) throw InputError("--memory " + flags.path + ": the memory has 0 rows (S must be >= 1)");
    if (S > std::size_t(std::numeric_limits<int>::max()))  // Memory::rows is an int
        throw InputError("--memory " + flags.path + ": " + std::to_string(S) + " rows is too many");
    const int rows = static_cast<int>(S);
    const int valid = flags.valid_len.value_or(rows);
    if (valid < 0 || valid > rows)
        throw InputError("--memory-valid-len " + std::to_string(valid) + " is outside [0, S] = [0, " +
                         std::to_string(rows) + "]");
    for (std::size_t i = 0; i < a.data.size(); ++i)
        if (!std::isfinite(a.data[i]))
            throw InputError("--memory " + flags.path + ": element [" + std::to_string(i / width) +
                             ", " + std::to_string(i % width) + "] is not finite (" +
                             std::to_string(a.data[i]) + ")");
    std::optional<Memory> m = Memory{rows, valid, std::move(a.data)};
    check_memory(c, m);  // the model module's own rules, in case they are stricter than ours
    return m;
}

}  // namespace attncheck::cli
