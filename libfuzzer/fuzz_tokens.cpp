// libfuzzer/fuzz_tokens.cpp — libFuzzer harness for the command line's token lists
// (`--tokens 1,2,3`, `--prompt ...`): parse_token_list, then check_tokens against a model.
//
// Contract: any text is either a list of ids in [0, 2^31) or an attncheck::InputError; an
// accepted list that check_tokens also accepts is in [0, V) and no longer than max_len.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "attncheck/error.hpp"
#include "attncheck/model.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string text(reinterpret_cast<const char*>(data), size);
    std::vector<int> tokens;
    try {
        tokens = attncheck::parse_token_list(text);
    } catch (const attncheck::InputError&) {
        return 0;
    }
    if (tokens.empty()) {
        std::fprintf(stderr, "parse_token_list accepted an empty list\n");
        std::abort();
    }
    for (int t : tokens) {
        if (t < 0) {
            std::fprintf(stderr, "parse_token_list accepted a negative id %d\n", t);
            std::abort();
        }
    }
    const attncheck::ModelConfig tiny = attncheck::preset_config("tiny");
    try {
        attncheck::check_tokens(tiny, tokens);
    } catch (const attncheck::InputError&) {
        return 0;
    }
    for (int t : tokens) {
        if (t >= tiny.vocab_size || tokens.size() > std::size_t(tiny.max_len)) {
            std::fprintf(stderr, "check_tokens accepted id %d (V=%d) in %zu tokens (N=%d)\n", t,
                         tiny.vocab_size, tokens.size(), tiny.max_len);
            std::abort();
        }
    }
    return 0;
}
