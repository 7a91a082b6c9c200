// tests/cli/cli_train_test.cpp — `attncheck train` as a user runs it: the side-by-side table,
// logits_causality passing on the model trained with the mask and failing without it, the JSON
// with its curves, the checkpoints readable by the other commands, and bad flags.
#include <nlohmann/json.hpp>

#include "run_cli.hpp"

namespace {

using cli_test::Result;
using cli_test::run_cli;
using cli_test::run_ok;
using cli_test::slurp;
using cli_test::TempDir;

TEST_CASE("train: both masks side by side, causality verdicts, JSON and checkpoints", "[cli][train]") {
    const TempDir dir;
    const Result r = run_ok(dir, {"train", "--steps", "20", "--length", "3", "--alphabet", "4", "--batch", "8",
                                  "--eval-every", "10", "--json", dir.file("t.json"), "--out", dir.file("m.safetensors")});
    CHECK_THAT(r.out, Catch::Contains("mask causal") && Catch::Contains("mask none"));
    CHECK_THAT(r.out, Catch::Contains("generation accuracy (tokens)") && Catch::Contains("fraction of the fp32 FMA peak"));
    CHECK_THAT(r.out, Catch::Contains("logits_causality FAILS on the model trained with mask none"));
    const nlohmann::json j = nlohmann::json::parse(slurp(dir.file("t.json")));
    CHECK(j["runs"]["causal"]["logits_causality"]["status"] == "pass");
    CHECK(j["runs"]["none"]["logits_causality"]["status"] == "FAIL");
    CHECK_THAT(j["runs"]["none"]["logits_causality"]["message"].get<std::string>(), Catch::Contains("changed when the token at position"));
    CHECK(j["runs"]["causal"]["curve"].size() == 20);
    CHECK(j["step"] == "reference");  // the default
    CHECK(!j.contains("kernel"));
    CHECK(j["runs"]["causal"]["curve"][9].contains("eval"));
    CHECK(j["runs"]["none"]["frac_fma_peak_fp32"].get<double>() > 0);
    // The checkpoints are models: logits reads them (as MODEL.md's causal decoder).
    for (const char* mask : {"causal", "none"}) {
        const std::string model = dir.file(std::string("m-") + mask + ".safetensors");
        run_ok(dir, {"logits", "--model", model, "--tokens", "0,1,2,4,0,1", "--out", dir.file(std::string("l-") + mask + ".npy")});
    }
}

// The optimized float32 step around a registry kernel (here the reference one, whose backward is
// the float64 oracle rounded): which step and kernel ran, steps/s and GFLOP/s, in the text and
// the JSON.
TEST_CASE("train: --step optimized --kernel NAME, reported in the text and the JSON", "[cli][train]") {
    const TempDir dir;
    const Result r = run_ok(dir, {"train", "--mask", "causal", "--step", "optimized", "--kernel", "reference_v2", "--steps",
                                  "10", "--length", "3", "--alphabet", "4", "--batch", "8", "--eval-every", "10", "--json",
                                  dir.file("t.json")});
    CHECK_THAT(r.out, Catch::Contains("step optimized (float32, kernel reference_v2)"));
    CHECK_THAT(r.out, Catch::Contains("training steps/s") && Catch::Contains("training step GFLOP/s (float32)"));
    const nlohmann::json j = nlohmann::json::parse(slurp(dir.file("t.json")));
    CHECK(j["step"] == "optimized");
    CHECK(j["kernel"] == "reference_v2");
    CHECK(j["runs"]["causal"]["steps_per_s"].get<double>() > 0);
    CHECK(j["runs"]["causal"]["gflops"].get<double>() > 0);
    CHECK(j["runs"]["causal"]["curve"].size() == 10);
    CHECK(!j["runs"].contains("none"));
}

TEST_CASE("train: bad flags are refused with exit 2, naming them", "[cli][train]") {
    const TempDir dir;
    for (const auto& [flags, says] : std::vector<std::pair<std::vector<std::string>, std::string>>{
             {{"--mask", "half"}, "--mask half: expected causal, none or both"},
             {{"--task", "count"}, "--task count: expected copy, reverse or sort"},
             {{"--length", "0"}, "--length"},
             {{"--steps", "0"}, "--steps"},
             {{"--lr", "2"}, "--lr"},
             {{"--step", "fast"}, "--step fast: expected reference or optimized"},
             {{"--kernel", "optimized_v2"}, "--kernel optimized_v2: only the optimized step takes a kernel"},
             {{"--step", "optimized", "--kernel", "bogus"}, "--kernel bogus: no such kernel (the optimized step takes:"},
             {{"--step", "optimized", "--kernel", "optimized"}, "--kernel optimized: has no version 2 backward pass"},
             {{"--json", "/nonexistent-dir/t.json"}, "--json /nonexistent-dir/t.json"},
             {{"--out", "/nonexistent-dir/m.safetensors"}, "--out /nonexistent-dir/m-causal.safetensors"}}) {
        std::vector<std::string> args = {"train"};
        args.insert(args.end(), flags.begin(), flags.end());
        const Result r = run_cli(dir, args);
        INFO(r.describe());
        CHECK(r.code == 2);
        CHECK_THAT(r.err, Catch::Contains(says));
    }
}

}  // namespace
