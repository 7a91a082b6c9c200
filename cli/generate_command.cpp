// cli/generate_command.cpp — `attncheck generate`: greedy decoding from a prompt.
//
// Prints exactly one line on stdout: the max_new NEW token ids (not the prompt), comma-separated
// with no spaces, so that the output can be pasted back into --tokens or compared with `diff`
// between --impl reference and --impl optimized. Greedy = argmax of the last position's logits,
// the lowest id on ties (both decoders use that rule, so ties cannot make them disagree).
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "attncheck/error.hpp"
#include "attncheck/model.hpp"
#include "cli/commands.hpp"
#include "cli/inputs.hpp"
#include "optimized/decoder.hpp"
#include "reference/decoder.hpp"

namespace attncheck::cli {
namespace {

struct GenerateOptions {
    std::string model;
    std::string prompt;
    int max_new = 0;
    MemoryFlags memory;
    std::string impl = "reference";
    bool with_prompt = false;
};

int run_generate(const GenerateOptions& o) {
    const Model m = load_model_flag(o.model);
    if (o.max_new < 0)
        throw InputError("--max-new " + std::to_string(o.max_new) + ": must be >= 0");
    const std::vector<int> prompt = tokens_flag("--prompt", o.prompt, m.config, o.max_new);
    const std::optional<Memory> memory = memory_flag(o.memory, m.config);
    std::vector<int> generated;
    if (o.impl == "reference")
        generated = reference::Decoder<double>(m).generate(prompt, o.max_new, memory);
    else
        generated = optimized::Decoder(m).generate(prompt, o.max_new, memory);

    std::string line;
    const auto append = [&line](int id) {
        if (!line.empty()) line += ',';
        line += std::to_string(id);
    };
    if (o.with_prompt)
        for (int id : prompt) append(id);
    for (int id : generated) append(id);
    std::cout << line << "\n";
    return 0;
}

}  // namespace

Command add_generate_command(CLI::App& app) {
    auto o = std::make_shared<GenerateOptions>();
    CLI::App* sub = add_model_command(
        app, "generate", "Greedy decoding: print the new token ids",
        "Output: one line on stdout, the --max-new new token ids only (not the prompt), "
        "comma-separated without spaces, e.g. `7,7,30`; an empty line when --max-new is 0. "
        "--with-prompt prepends the prompt. Each new token is the argmax of the last position's "
        "logits (lowest id on ties). The prompt plus the new tokens must fit in max_len.\n"
        "--impl reference re-runs the float64 decoder over the whole sequence for every token; "
        "--impl optimized runs the float32 decoder with its K/V cache.\n"
        "Example: attncheck generate --model m.safetensors --prompt 1,2,3 --max-new 5",
        o->model, "--prompt,-p", o->prompt, "Prompt token ids, comma-separated (at least one)");
    sub->add_option("--max-new,-n", o->max_new, "How many tokens to generate (>= 0)")
        ->required()
        ->type_name("N");
    o->memory.add_to(*sub);
    add_impl_option(*sub, o->impl, "Decoder: reference (float64) or optimized (float32, K/V cache)");
    sub->add_flag("--with-prompt", o->with_prompt, "Print the prompt before the new ids");
    return {sub, [o] { return run_generate(*o); }};
}

}  // namespace attncheck::cli
