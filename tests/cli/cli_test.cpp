// tests/cli/cli_test.cpp — the `attncheck` tool as a whole: every bad input refused with exit 2,
// --help and --version, and the hand-off to the fuzz driver.
//
// Every test of tests/cli spawns the built binary (ATTNCHECK_CLI) with posix_spawn (run_cli.hpp),
// stdout and stderr sent to two files of a fresh temporary directory, and checks the exit code
// (0 ok, 1 a check failed, 2 bad input), where the message went, and what the files it wrote
// contain. Models are made with `attncheck init` itself (cli_models.hpp), so the round trip
// init -> file -> logits is what is tested. One file per command: cli_init_test.cpp,
// cli_logits_test.cpp, cli_generate_test.cpp, cli_explain_test.cpp; fuzz_test.cpp for `fuzz`.
//
// To add an error-path case: append a row to the table of the "bad input" test case with the
// arguments and the words the message must contain; it is checked for exit code 2, a message
// on stderr prefixed "attncheck: error: ", and nothing on stdout.
#include <fstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "attncheck/model.hpp"
#include "cli_models.hpp"

using namespace cli_test;

// ---------------------------------------------------------------------------------------------
// Bad input: exit code 2, one clear message on stderr, nothing on stdout.
// ---------------------------------------------------------------------------------------------

// Long for a function: it is one table of cases, a row per bad input, and the loop that runs them.
TEST_CASE("every bad input exits 2 with a message naming the problem", "[cli][errors]") {
    TempDir dir;
    const std::string model = init_model_file(dir, "m.safetensors", {"--seed", "1"});  // tiny: V 32, d 16, N 32
    const std::string cross = init_model_file(dir, "x.safetensors", {"--seed", "1", "--cross-attention"});
    const std::string mem = write_memory(dir, "mem.npy", 4, 16, 1);
    const std::string narrow = write_memory(dir, "narrow.npy", 4, 8, 1);
    const std::string flat = dir.file("flat.npy");
    attncheck::write_npy(flat, {16}, std::vector<float>(16, 0.5f));
    const std::string garbage = dir.file("garbage.safetensors");
    std::ofstream(garbage) << "this is not a safetensors file at all";
    std::string too_many;
    for (int i = 0; i < 33; ++i) {
        if (i) too_many += ',';
        too_many += std::to_string(i % 32);
    }

    struct Case {
        std::vector<std::string> args;
        std::vector<std::string> words;  // each must appear in the message
    };
    const std::vector<Case> cases = {
        // usage
        {{}, {"subcommand"}},
        {{"frobnicate"}, {"frobnicate"}},
        {{"logits", "--model", model}, {"--tokens"}},
        {{"logits", "--model", model, "--tokens", "1", "--bogus"}, {"--bogus"}},
        {{"init"}, {"--out"}},
        // tokens
        {{"logits", "--model", model, "--tokens", "1,99,2"}, {"--tokens", "99"}},
        {{"logits", "--model", model, "--tokens", too_many}, {"--tokens", "max_len"}},
        {{"logits", "--model", model, "--tokens", ""}, {"--tokens", "empty"}},
        {{"logits", "--model", model, "--tokens", "1,a,3"}, {"--tokens", "'a'"}},
        {{"logits", "--model", model, "--tokens", "1,-2"}, {"--tokens", "negative"}},
        {{"logits", "--model", model, "--tokens", "1,,2"}, {"--tokens", "empty"}},
        {{"logits", "--model", model, "--tokens", "99999999999"}, {"--tokens", "int32"}},
        // files
        {{"logits", "--model", dir.file("missing.safetensors"), "--tokens", "1"}, {"missing.safetensors", "no such file"}},
        {{"logits", "--model", garbage, "--tokens", "1"}, {"garbage.safetensors"}},
        {{"logits", "--model", model, "--tokens", "1", "--out", dir.file("no/such/dir/l.npy")}, {"no/such/dir"}},
        {{"init", "--out", dir.file("no/such/dir/m.safetensors")}, {"no/such/dir"}},
        // memory
        {{"logits", "--model", cross, "--tokens", "1,2"}, {"--memory", "required"}},
        {{"logits", "--model", model, "--tokens", "1,2", "--memory", mem}, {"--memory", "no cross-attention"}},
        {{"logits", "--model", cross, "--tokens", "1,2", "--memory", narrow}, {"width 8", "d_model 16"}},
        {{"logits", "--model", cross, "--tokens", "1,2", "--memory", flat}, {"2-D", "[16]"}},
        {{"logits", "--model", cross, "--tokens", "1,2", "--memory", dir.file("nomem.npy")}, {"nomem.npy"}},
        {{"logits", "--model", cross, "--tokens", "1,2", "--memory", mem, "--memory-valid-len", "5"},
         {"--memory-valid-len", "[0, 4]"}},
        {{"logits", "--model", cross, "--tokens", "1,2", "--memory", mem, "--memory-valid-len", "-1"},
         {"--memory-valid-len", "[0, 4]"}},
        {{"logits", "--model", model, "--tokens", "1,2", "--memory-valid-len", "1"}, {"--memory-valid-len", "--memory"}},
        // enums and numbers
        {{"logits", "--model", model, "--tokens", "1", "--impl", "fast"}, {"--impl", "fast"}},
        {{"logits", "--model", model, "--tokens", "1", "--mode", "parallel"}, {"--mode", "parallel"}},
        {{"logits", "--model", model, "--tokens", "1", "--impl", "optimized", "--precision", "float32"},
         {"--precision"}},
        {{"init", "--out", dir.file("n.safetensors"), "--norm", "middle"}, {"--norm", "middle"}},
        {{"init", "--out", dir.file("n.safetensors"), "--preset", "huge"}, {"--preset", "huge"}},
        {{"init", "--out", dir.file("n.safetensors"), "--activation", "swish"}, {"--activation", "swish"}},
        {{"init", "--out", dir.file("n.safetensors"), "--positional", "rotary"}, {"--positional", "rotary"}},
        {{"init", "--out", dir.file("n.safetensors"), "--preset", "llama-tiny", "--n-kv-heads", "3"}, {"n_kv_heads", "3"}},
        {{"init", "--out", dir.file("n.safetensors"), "--attn-window", "-2"}, {"attn_window", "-2"}},
        {{"init", "--out", dir.file("n.safetensors"), "--rope-theta", "100"}, {"rope_theta"}},
        {{"init", "--out", dir.file("n.safetensors"), "--positional", "rope", "--rope-theta", "0"}, {"rope_theta"}},
        {{"init", "--out", dir.file("n.safetensors"), "--embed-scale", "2"}, {"--embed-scale"}},
        {{"init", "--out", dir.file("n.safetensors"), "--cross-attention", "maybe"}, {"--cross-attention", "maybe"}},
        {{"init", "--out", dir.file("n.safetensors"), "--tie-embeddings", "yes please"}, {"--tie-embeddings"}},
        {{"init", "--out", dir.file("n.safetensors"), "--d-model", "15"}, {"d_model", "15"}},
        {{"init", "--out", dir.file("n.safetensors"), "--vocab-size", "0"}, {"vocab_size"}},
        {{"init", "--out", dir.file("n.safetensors"), "--ln-eps", "0"}, {"ln_eps"}},
        {{"init", "--out", dir.file("n.safetensors"), "--d-model", "lots"}, {"--d-model", "lots"}},
        {{"init", "--out", dir.file("n.safetensors"), "--seed", "-1"}, {"--seed"}},
        {{"init", "--out", dir.file("n.safetensors"), "--vocab-size", "1000000", "--d-model", "100000"},
         {"parameters"}},
        // generate
        {{"generate", "--model", model, "--prompt", "1,2", "--max-new", "31"}, {"--prompt", "max_len"}},
        {{"generate", "--model", model, "--prompt", "1,2", "--max-new", "-1"}, {"--max-new", ">= 0"}},
        {{"generate", "--model", model, "--prompt", "1,2"}, {"--max-new"}},
        // explain
        {{"explain", "--model", model, "--tokens", "1,2", "--layer", "2"}, {"--layer", "0..1"}},
        {{"explain", "--model", model, "--tokens", "1,2", "--layer", "-1"}, {"--layer", "0..1"}},
        {{"explain", "--model", model, "--tokens", "1,2", "--head", "2"}, {"--head", "0..1"}},
        {{"explain", "--model", model, "--tokens", "1,2", "--cross"}, {"--cross", "no cross-attention"}},
    };
    for (const Case& c : cases) {
        std::string line;
        for (const auto& a : c.args) line += " '" + a + "'";
        const Result r = run_cli(dir, c.args);
        INFO("attncheck" << line << "\n" << r.describe());
        CHECK(r.code == 2);
        CHECK(r.err.rfind("attncheck: error: ", 0) == 0);
        CHECK(r.out.empty());
        for (const std::string& w : c.words) {
            INFO("expected the message to contain \"" << w << "\"");
            CHECK(r.err.find(w) != std::string::npos);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Help.
// ---------------------------------------------------------------------------------------------

TEST_CASE("--help of the tool and of each subcommand exits 0 and lists its options", "[cli][help]") {
    TempDir dir;
    struct HelpCase {
        std::vector<std::string> args;
        std::vector<std::string> words;
    };
    const std::vector<HelpCase> cases = {
        {{"--help"}, {"init", "logits", "generate", "explain", "fuzz", "Exit codes"}},
        {{"init", "--help"}, {"--out", "--preset", "--vocab-size", "--d-model", "--n-heads", "--d-ff", "--n-layers",
                              "--max-len", "--norm", "--cross-attention", "--positional", "--activation",
                              "--embed-scale", "--tie-embeddings", "--ln-eps", "--seed", "--n-kv-heads",
                              "--attn-window", "--rope-theta", "llama-tiny"}},
        {{"logits", "--help"}, {"--model", "--tokens", "--memory", "--memory-valid-len", "--impl", "--mode",
                                "--out", "float64"}},
        {{"generate", "--help"}, {"--model", "--prompt", "--max-new", "--impl", "new token ids"}},
        {{"explain", "--help"}, {"--model", "--tokens", "--layer", "--head", "--memory"}},
    };
    for (const HelpCase& c : cases) {
        const Result r = run_cli(dir, c.args);
        INFO(c.args[0] << " --help\n" << r.describe());
        CHECK(r.code == 0);
        for (const std::string& w : c.words) {
            INFO("expected \"" << w << "\"");
            CHECK(r.out.find(w) != std::string::npos);
        }
    }
    const Result version = run_cli(dir, {"--version"});
    CHECK(version.code == 0);
    CHECK(version.out.find("attncheck") != std::string::npos);
    // The code path that runs: "isa avx2+fma (kernels: portable; cpu: ...)".
    CHECK(version.out.find("\nisa ") != std::string::npos);
    CHECK(version.out.find("(kernels: ") != std::string::npos);
}

TEST_CASE("fuzz --help lists fuzz's own options, and an unknown fuzz flag is bad usage", "[cli][fuzz]") {
    TempDir dir;
    const Result help = run_cli(dir, {"fuzz", "--help"});
    INFO(help.describe());
    CHECK(help.code == 0);
    // fuzz's own help, not the tool's list of subcommands.
    CHECK(help.out.find("generate") == std::string::npos);
    for (const std::string w : {"--kernel", "--kernel-lib", "--symbol", "--timeout", "--property", "--level", "--cases",
                                "--seed", "--shrink-time", "--declare", "--empty-rows", "--head-dim", "--deterministic",
                                "--allow-unchecked", "--mutants", "--json", "--junit", "--progress", "--list",
                                "--verbose", "ATTNCHECK_SEED", "ATTNCHECK_PROPERTY", "Exit: 0"}) {
        INFO("expected \"" << w << "\"");
        CHECK(help.out.find(w) != std::string::npos);
    }
    // The worker's flags are not for people.
    CHECK(help.out.find("--worker") == std::string::npos);
    const Result bad = run_cli(dir, {"fuzz", "--no-such-fuzz-flag"});
    INFO(bad.describe());
    CHECK(bad.code == 2);
    CHECK(bad.err.find("--no-such-fuzz-flag") != std::string::npos);
    CHECK(bad.out.empty());
}
