// tests/cli/cli_generate_test.cpp — `attncheck generate`: each new token is the argmax of the
// logits `attncheck logits` gives for the sequence so far, for both decoders.
#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "attncheck/tolerance.hpp"
#include "cli_models.hpp"

using namespace cli_test;

TEST_CASE("generate prints the greedy continuation, one comma-separated line", "[cli][generate]") {
    TempDir dir;
    const std::string model = init_model_file(dir, "m.safetensors", {"--seed", "21"});
    const std::vector<int> prompt = {5, 6, 7};
    const int max_new = 6;
    const Result r = run_ok(dir, {"generate", "--model", model, "--prompt", join(prompt), "--max-new",
                                  std::to_string(max_new)});
    REQUIRE(std::count(r.out.begin(), r.out.end(), '\n') == 1);
    const std::vector<int> generated = parse_ids(r.out);
    REQUIRE(generated.size() == std::size_t(max_new));

    // Each new token is the argmax (lowest id on ties) of the reference logits of the sequence
    // so far: check it against `logits` of prompt + generated[0 .. max_new-2].
    std::vector<int> seq = prompt;
    seq.insert(seq.end(), generated.begin(), generated.end() - 1);
    const NpyArray logits = logits_npy(dir, model, seq, 32, {});
    for (int k = 0; k < max_new; ++k) {
        const float* row = logits.data.data() + (prompt.size() - 1 + std::size_t(k)) * 32;
        INFO("new token " << k);
        CHECK(generated[std::size_t(k)] == int(std::max_element(row, row + 32) - row));
    }

    const Result with_prompt = run_ok(dir, {"generate", "--model", model, "--prompt", join(prompt),
                                            "--max-new", std::to_string(max_new), "--with-prompt"});
    std::vector<int> full = prompt;
    full.insert(full.end(), generated.begin(), generated.end());
    CHECK(parse_ids(with_prompt.out) == full);

    const Result none = run_ok(dir, {"generate", "--model", model, "--prompt", "1", "--max-new", "0"});
    CHECK(none.out == "\n");
}

TEST_CASE("optimized generate follows the optimized logits", "[cli][generate][optimized]") {
    TempDir dir;
    const std::string model = init_model_file(dir, "m.safetensors", {"--seed", "22", "--norm", "pre"});
    const std::vector<int> prompt = {9, 1};
    const int max_new = 8;
    const Result r = run_ok(dir, {"generate", "--model", model, "--prompt", join(prompt), "--max-new",
                                  std::to_string(max_new), "--impl", "optimized"});
    const std::vector<int> generated = parse_ids(r.out);
    REQUIRE(generated.size() == std::size_t(max_new));
    std::vector<int> seq = prompt;
    seq.insert(seq.end(), generated.begin(), generated.end() - 1);
    const NpyArray logits = logits_npy(dir, model, seq, 32, {"--impl", "optimized"});
    // The K/V-cache path and the teacher-forced pass may round differently; where the top two
    // logits are closer than that, either choice is right, so only clear winners are checked.
    constexpr double kClearMarginUlps = 64.0;
    int checked = 0;
    for (int k = 0; k < max_new; ++k) {
        const float* row = logits.data.data() + (prompt.size() - 1 + std::size_t(k)) * 32;
        std::vector<float> sorted(row, row + 32);
        std::sort(sorted.begin(), sorted.end(), std::greater<>());
        if (double(sorted[0] - sorted[1]) <= kClearMarginUlps * attncheck::kEps32 * std::abs(double(sorted[0])))
            continue;
        ++checked;
        INFO("new token " << k);
        CHECK(generated[std::size_t(k)] == int(std::max_element(row, row + 32) - row));
    }
    CHECK(checked > 0);
}
