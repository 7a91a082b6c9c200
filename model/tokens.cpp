// model/tokens.cpp — the checks on what a decoder call is given: the token list (from the
// command line's "1,2,3"), its range against the vocabulary and max_len, and the optional
// cross-attention memory. Both decoders call these before touching any buffer.
#include "attncheck/error.hpp"
#include "attncheck/model.hpp"

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

namespace attncheck {

std::vector<int> parse_token_list(const std::string& text) {
    std::vector<int> tokens;
    const auto is_space = [](char ch) { return ch == ' ' || ch == '\t'; };
    std::size_t start = 0;
    for (std::size_t index = 0;; ++index) {
        const std::size_t comma = text.find(',', start);
        const std::size_t stop = comma == std::string::npos ? text.size() : comma;
        std::size_t b = start, e = stop;
        while (b < e && is_space(text[b])) ++b;
        while (e > b && is_space(text[e - 1])) --e;
        const std::string entry = text.substr(b, e - b);
        const std::string where = "token list entry " + std::to_string(index);
        if (entry.empty()) {
            if (index == 0 && comma == std::string::npos) {
                throw InputError("token list is empty (expected e.g. \"1,2,3\")");
            }
            throw InputError(where + " is empty (in \"" + text + "\")");
        }
        if (entry[0] == '-') throw InputError(where + " ('" + entry + "') is negative");
        std::int64_t value = 0;
        for (char ch : entry) {
            if (ch < '0' || ch > '9') {
                throw InputError(where + " ('" + entry + "') is not a non-negative integer");
            }
            value = value * 10 + (ch - '0');
            if (value > std::numeric_limits<std::int32_t>::max()) {
                throw InputError(where + " ('" + entry + "') does not fit in int32");
            }
        }
        tokens.push_back(int(value));
        if (comma == std::string::npos) break;
        start = comma + 1;
    }
    return tokens;
}

void check_tokens(const ModelConfig& c, const std::vector<int>& tokens) {
    if (tokens.empty()) throw InputError("token sequence is empty");
    if (tokens.size() > std::size_t(c.max_len)) {
        throw InputError("too many tokens: " + std::to_string(tokens.size()) + " > max_len " +
                         std::to_string(c.max_len));
    }
    for (std::size_t i = 0; i < tokens.size(); ++i) {
        if (tokens[i] < 0 || tokens[i] >= c.vocab_size) {
            throw InputError("token " + std::to_string(tokens[i]) + " at index " +
                             std::to_string(i) + " is out of range [0, " +
                             std::to_string(c.vocab_size) + ")");
        }
    }
}

void check_memory(const ModelConfig& c, const std::optional<Memory>& memory) {
    if (!c.cross_attention) {
        if (memory) {
            throw InputError("memory was given, but the model has no cross-attention");
        }
        return;
    }
    if (!memory) throw InputError("the model has cross-attention but no memory was given");
    const Memory& m = *memory;
    if (m.rows < 1) {
        throw InputError("memory is empty (" + std::to_string(m.rows) +
                         " rows; need at least 1)");
    }
    const std::size_t d = std::size_t(c.d_model);
    const std::size_t expected = std::size_t(m.rows) * d;
    if (m.data.size() != expected) {
        std::string msg = "memory has " + std::to_string(m.data.size()) + " values, expected " +
                          std::to_string(m.rows) + " rows x d_model " + std::to_string(d) +
                          " = " + std::to_string(expected);
        if (m.data.size() % std::size_t(m.rows) == 0) {
            msg += " (its rows are " + std::to_string(m.data.size() / std::size_t(m.rows)) +
                   " wide)";
        }
        throw InputError(msg);
    }
    if (m.valid_len < 0 || m.valid_len > m.rows) {
        throw InputError("memory valid_len " + std::to_string(m.valid_len) +
                         " is outside [0, " + std::to_string(m.rows) + "]");
    }
    for (std::size_t i = 0; i < m.data.size(); ++i) {
        if (!std::isfinite(m.data[i])) {
            throw InputError("memory element [" + std::to_string(i / d) + ", " +
                             std::to_string(i % d) + "] is not finite (" +
                             std::to_string(m.data[i]) + ")");
        }
    }
}

}  // namespace attncheck
