// tests/cli/bench_test.cpp — `attncheck bench` as a kernel author and a CI job see it: the table
// and the JSON of a short run, a wrong kernel and a refusing kernel stopped before timing (exit
// 1, naming the shape), and bad usage (exit 2). Budgets are tiny (one repetition of 10 ms on one
// shape) and nothing here asserts a speed: only that the figures exist and are positive.
//
// The kernel libraries are tests/zoo/faulty_kernel_lib.c (zoo_mask_after_softmax is wrong,
// zoo_dims_8_16 refuses head_dim 64; of ABI version 2: zoo_v2_zeros is wrong, zoo_v2_head_dim_128
// declares head_dim 128, zoo_v2_refuses refuses), the correct examples/c-kernel/naive_kernel.c and
// examples/flash-kernel/flash_style_kernel.c (ABI version 2, bfloat16 only).
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "run_cli.hpp"

namespace {

using namespace cli_test;

const std::vector<std::string> kQuick = {"--reps", "1", "--min-time", "0.01", "--shapes", "prefill-512"};

std::vector<std::string> bench(std::vector<std::string> args, const std::vector<std::string>& tail = kQuick) {
    args.insert(args.begin(), "bench");
    args.insert(args.end(), tail.begin(), tail.end());
    return args;
}

bool has(const std::string& text, const std::string& what) { return text.find(what) != std::string::npos; }

// The repetition entries ("run_type": "iteration") of one benchmark name.
std::vector<nlohmann::json> iterations(const nlohmann::json& doc, const std::string& name) {
    std::vector<nlohmann::json> out;
    for (const auto& b : doc.at("benchmarks"))
        if (b.at("name") == name && b.at("run_type") == "iteration") out.push_back(b);
    return out;
}

// A run of the library kernel `symbol` against the built-in kernel optimized, its verdict allowed
// to be NOT JUDGED, its JSON written to `json`; `tail` chooses repetitions, time and shapes.
Result against_optimized(TempDir& dir, const std::string& lib, const std::string& symbol, const std::string& json,
                         const std::vector<std::string>& tail) {
    return run_ok(dir, bench({"--kernel-lib", lib, "--symbol", symbol, "--baseline-kernel", "optimized", "--allow-unjudged",
                              "--json", json},
                             tail));
}

// The repetition entries of one shape, `reps` for the candidate and as many for the baseline, at
// the thread count the run reports.
struct Compared {
    std::string threads;
    std::vector<nlohmann::json> candidate, baseline;
};
Compared compared(const nlohmann::json& doc, const std::string& shape, std::size_t reps) {
    const std::string threads = doc.at("context").at("attncheck_threads");
    Compared c{threads, iterations(doc, "attncheck_bench/" + shape + "/threads:" + threads),
               iterations(doc, "attncheck_bench_baseline/" + shape + "/threads:" + threads)};
    REQUIRE(c.candidate.size() == reps);
    REQUIRE(c.baseline.size() == reps);
    return c;
}

// `args` stops with exit `code` and each of `words` on stderr, before timing anything.
void stops_untimed(TempDir& dir, const std::vector<std::string>& args, int code, const std::vector<std::string>& words) {
    const Result r = run_cli(dir, args);
    INFO(r.describe());
    CHECK(r.code == code);
    for (const std::string& w : words) CHECK(has(r.err, w));
    CHECK_FALSE(has(r.out, "median ms"));
}

// A bad usage of the command, and words of the message it is refused with (exit 2).
struct Bad {
    std::vector<std::string> args;
    std::string words;
};
void refused_as_usage(TempDir& dir, const std::vector<Bad>& bad) {
    for (const Bad& b : bad) stops_untimed(dir, b.args, 2, {b.words});
}

}  // namespace

TEST_CASE("bench: a built-in kernel, its table and its JSON", "[cli][bench]") {
    TempDir dir;
    // Neither OpenMP wait variable set: the command re-executes itself with GOMP_SPINCOUNT=10000.
    const Result r = run_ok(dir, bench({"--kernel", "optimized", "--threads", "1", "--json", dir.file("b.json")}),
                            {"OMP_WAIT_POLICY", "GOMP_SPINCOUNT"});
    INFO(r.describe());
    CHECK(has(r.out, "attncheck bench: kernel optimized, threads 1"));
    CHECK(has(r.out, "calibration (this process): FMA peak"));
    CHECK(has(r.out, "GOMP_SPINCOUNT=10000"));
    CHECK(has(r.out, "checked: optimized agrees with the float64 reference on prefill-512"));
    CHECK(has(r.out, "verdict: no verdict"));
    const nlohmann::json doc = nlohmann::json::parse(slurp(dir.file("b.json")));
    const auto& ctx = doc.at("context");
    for (const char* key : {"cpu_model", "attncheck_isa", "attncheck_kernels", "cpu_count", "attncheck"})
        CHECK(ctx.at(key).is_string());
    CHECK(ctx.at("gomp_spincount") == "10000");
    CHECK(ctx.at("fma_peak_gflops").get<double>() > 0);
    // No decode shape: the DRAM rate is neither measured nor reported.
    CHECK_FALSE(ctx.contains("dram_read_gbs"));
    CHECK(has(r.out, "DRAM read not measured (no decode shape)"));
    const auto reps = iterations(doc, "attncheck_bench/prefill-512/threads:1");
    REQUIRE(reps.size() == 1);
    const auto& e = reps[0];
    CHECK(e.at("time_unit") == "ms");
    CHECK(e.at("iterations").get<long>() >= 1);
    for (const char* key : {"real_time", "cpu_time", "gflops", "frac_peak", "us_per_call"})
        CHECK(e.at(key).get<double>() > 0);
    CHECK_FALSE(e.contains("frac_bw"));  // only decode reports bandwidth
    // frac_peak divides by the FMA peak of the shape's own timed windows, given beside it.
    REQUIRE(e.contains("peak_gflops"));
    CHECK(e.at("peak_gflops").get<double>() > 0);
    CHECK(e.at("frac_peak").get<double>() ==
          Approx(e.at("gflops").get<double>() / e.at("peak_gflops").get<double>()).epsilon(1e-9));
    CHECK(has(r.out, "\"of FMA\" divides by the FMA peak of each shape's timed windows, GFLOP/s: prefill-512 "));
    bool median = false;
    for (const auto& b : doc.at("benchmarks"))
        median |= b.at("run_type") == "aggregate" && b.at("aggregate_name") == "median";
    CHECK(median);
}

TEST_CASE("bench: a library kernel against a baseline, decode", "[cli][bench]") {
    TempDir dir;
    const Result r = against_optimized(dir, NAIVE_KERNEL_LIB, "naive_attention", dir.file("ab.json"),
                                       {"--reps", "2", "--min-time", "0.01", "--shapes", "decode-4096"});
    INFO(r.describe());
    CHECK(has(r.out, "A/B: candidate time / baseline time"));
    CHECK(has(r.out, "the sign test cannot reach p < 0.05"));
    const nlohmann::json doc = nlohmann::json::parse(slurp(dir.file("ab.json")));
    const Compared ab = compared(doc, "decode-4096", 2);
    const auto& cand = ab.candidate;
    const auto& base = ab.baseline;
    for (const char* key : {"gbs", "frac_bw", "read_gbs", "frac_read", "speedup"}) CHECK(cand[0].at(key).get<double>() > 0);
    for (const char* key : {"gbs", "frac_bw", "read_gbs", "frac_read"}) CHECK(base[0].at(key).get<double>() > 0);
    // A decode shape divides by the DRAM rate of this process, reported in the context.
    const double dram = doc.at("context").at("dram_read_gbs").get<double>();
    CHECK(cand[0].at("frac_bw").get<double>() == Approx(cand[0].at("gbs").get<double>() / dram).epsilon(1e-9));
    // frac_read is the K/V rate over the rate of reading the same 4 copies (67.1 MB in float32).
    for (const auto* e : {&cand[0], &base[0]})
        CHECK(e->at("frac_read").get<double>() ==
              Approx(e->at("gbs").get<double>() / e->at("read_gbs").get<double>()).epsilon(1e-9));
    CHECK(has(r.out, "decode-4096 bound (between its timed repetitions): reading its 4 K/V copies again and again on " + ab.threads +
                         " threads, 67.1 MB at "));
    CHECK(has(r.out, "of read"));
    REQUIRE(doc.at("attncheck_comparison").size() == 1);
    CHECK(doc.at("attncheck_comparison")[0].at("ratios").size() == 2);
    CHECK(doc.at("attncheck_comparison")[0].at("slower") == false);  // 2 pairs cannot reach p < 0.05
}

TEST_CASE("bench: a comparison too short to judge is NOT JUDGED and fails (never PASS)", "[cli][bench]") {
    // The naive library kernel is about 10 times slower than the built-in one on a 64-row chunk
    // (a decode step reads memory as fast as any kernel: no use here): 3 pairs cannot show it
    // (the sign test's smallest p is 2^-3), 5 can.
    TempDir dir;
    const std::vector<std::string> against = {"--kernel-lib", NAIVE_KERNEL_LIB, "--symbol", "naive_attention",
                                              "--baseline-kernel", "optimized"};
    const std::vector<std::string> quick = {"--min-time", "0.01", "--shapes", "chunk-64@1024"};
    auto with = [](std::vector<std::string> a, const std::vector<std::string>& b) {
        a.insert(a.end(), b.begin(), b.end());
        return a;
    };
    const Result three = run_cli(dir, bench(against, with(quick, {"--reps", "3"})));
    INFO(three.describe());
    CHECK(three.code == 1);
    CHECK(has(three.out, "verdict: NOT JUDGED — the comparison with the baseline: 3 repetitions cannot reach sign-test p < 0.05 "
                         "(--reps 5 or more)"));
    CHECK_FALSE(has(three.out, "PASS"));

    const Result allowed = run_cli(dir, bench(with(against, {"--allow-unjudged"}), with(quick, {"--reps", "3"})));
    INFO(allowed.describe());
    CHECK(allowed.code == 0);
    CHECK(has(allowed.out, "verdict: NOT JUDGED"));
    CHECK(has(allowed.out, "exit 0 as --allow-unjudged asks"));

    const Result five = run_cli(dir, bench(against, with(quick, {"--reps", "5"})));
    INFO(five.describe());
    CHECK(five.code == 1);
    CHECK(has(five.out, "verdict: FAIL — slower than the baseline by more than the allowed slowdown: chunk-64@1024"));
    CHECK_FALSE(has(five.out, "NOT JUDGED"));
}

TEST_CASE("bench: spread-512, widely spread scores, checked and timed for a library kernel and the built-in",
          "[cli][bench]") {
    // Most weights exp(s - m) of spread-512 are below 2^-126: the naive kernel's expf returns
    // them as subnormals, the optimized kernel flushes them to 0; NUMERICS' bound admits both.
    TempDir dir;
    const Result r = against_optimized(dir, NAIVE_KERNEL_LIB, "naive_attention", dir.file("s.json"),
                                       {"--threads", "1", "--reps", "1", "--min-time", "0.01", "--shapes", "spread-512"});
    INFO(r.describe());
    CHECK(has(r.out, "agrees with the float64 reference on spread-512"));
    const nlohmann::json doc = nlohmann::json::parse(slurp(dir.file("s.json")));
    for (const char* name : {"attncheck_bench/spread-512/threads:1", "attncheck_bench_baseline/spread-512/threads:1"}) {
        const auto reps = iterations(doc, name);
        REQUIRE(reps.size() == 1);
        for (const char* key : {"gflops", "frac_peak"}) CHECK(reps[0].at(key).get<double>() > 0);
    }
}

TEST_CASE("bench: --min-frac-peak fails a shape below it", "[cli][bench]") {
    TempDir dir;
    // Ten times the machine's FMA peak is out of any kernel's reach: the verdict must fail.
    const Result r = run_cli(dir, bench({"--min-frac-peak", "10", "--json", dir.file("v.json")}));
    INFO(r.describe());
    CHECK(r.code == 1);
    CHECK(has(r.out, "prefill-512: "));
    CHECK(has(r.out, "verdict: FAIL — below --min-frac-peak: prefill-512"));
    const nlohmann::json doc = nlohmann::json::parse(slurp(dir.file("v.json")));
    CHECK(doc.at("attncheck_verdict").at("failed") == true);
}

TEST_CASE("bench: a decode shape's verdict divides by the rate of reading its K/V copies", "[cli][bench]") {
    TempDir dir;
    // Not by the DRAM bandwidth: 4 copies of K/V (67 MB) stay in a large L3 (300 MiB on an
    // Emerald Rapids Xeon), where a decode step outruns DRAM.
    const Result r = run_cli(dir, bench({"--min-frac-peak", "10", "--json", dir.file("d.json")},
                                        {"--reps", "3", "--min-time", "0.01", "--shapes", "decode-4096"}));
    INFO(r.describe());
    CHECK(r.code == 1);
    CHECK(has(r.err + r.out, "verdict: FAIL — below --min-frac-peak: decode-4096"));
    const std::string tag = "decode-4096: ";
    const auto at = r.out.find(tag);
    REQUIRE(at != std::string::npos);
    const double printed = std::stod(r.out.substr(at + tag.size()));
    CHECK(has(r.out.substr(at), "of its bound (reading its K/V copies)"));
    const nlohmann::json doc = nlohmann::json::parse(slurp(dir.file("d.json")));
    double frac_read = -1;
    for (const auto& b : doc.at("benchmarks"))
        if (b.at("run_type") == "aggregate" && b.at("aggregate_name") == "median") frac_read = b.at("frac_read").get<double>();
    REQUIRE(frac_read > 0);
    CHECK(printed == Approx(frac_read).margin(0.0006));  // printed with 3 decimals
}

TEST_CASE("bench: a wrong or refusing kernel is not timed", "[cli][bench]") {
    TempDir dir;
    stops_untimed(dir, bench({"--kernel-lib", FAULTY_KERNEL_LIB, "--symbol", "zoo_mask_after_softmax", "--json", dir.file("w.json")}),
                  1, {"disagrees with the float64 reference on shape prefill-512", "a wrong kernel is not timed"});
    stops_untimed(dir, bench({"--kernel-lib", FAULTY_KERNEL_LIB, "--symbol", "zoo_dims_8_16"}), 1,
                  {"returned 1 (not ATTNCHECK_OK) on shape prefill-512"});
    // A wrong baseline is refused as well: its comparison would mean nothing.
    stops_untimed(dir, bench({"--baseline-lib", FAULTY_KERNEL_LIB, "--baseline-symbol", "zoo_mask_after_softmax"}), 1,
                  {"zoo_mask_after_softmax disagrees"});
}

TEST_CASE("bench: a version 2 kernel, in the dtype its declaration allows, against a version 1 kernel",
          "[cli][bench][v2]") {
    TempDir dir;
    // The built-in version 2 kernel allows every dtype: float32, the same values as version 1's.
    const Result builtin = run_ok(dir, bench({"--kernel", "optimized_v2", "--baseline-kernel", "optimized",
                                              "--allow-unjudged", "--json", dir.file("v2.json")},
                                             {"--reps", "2", "--min-time", "0.01", "--shapes", "decode-4096"}));
    INFO(builtin.describe());
    CHECK(has(builtin.out, "attncheck bench: kernel optimized_v2 (ABI version 2, f32) against baseline optimized"));
    CHECK(has(builtin.out, "checked: optimized_v2 agrees with the float64 reference on decode-4096"));
    const nlohmann::json doc = nlohmann::json::parse(slurp(dir.file("v2.json")));
    CHECK(doc.at("context").at("attncheck_kernel_description") == "optimized_v2 (ABI version 2, f32)");
    const Compared ab = compared(doc, "decode-4096", 2);
    // The same K/V bytes in float32: GB/s over time is the same constant for both kernels.
    const auto bytes = [](const nlohmann::json& e) { return e.at("gbs").get<double>() * e.at("real_time").get<double>(); };
    CHECK(bytes(ab.candidate[0]) == Approx(bytes(ab.baseline[0])).epsilon(1e-9));

    // A bfloat16-only library kernel is timed in bfloat16: half the K/V bytes of float32.
    const Result flash = against_optimized(dir, FLASH_KERNEL_LIB, "flash_attention", dir.file("bf16.json"),
                                           {"--reps", "1", "--min-time", "0.01", "--shapes", "chunk-64@1024,decode-4096"});
    INFO(flash.describe());
    for (const char* words : {":flash_attention (ABI version 2, bf16) against baseline optimized",
                              "agrees with the float64 reference on chunk-64@1024"})
        CHECK(has(flash.out, words));
    const Compared bf = compared(nlohmann::json::parse(slurp(dir.file("bf16.json"))), "decode-4096", 1);
    CHECK(bytes(bf.candidate[0]) == Approx(0.5 * bytes(bf.baseline[0])).epsilon(1e-9));
}

TEST_CASE("bench: a wrong, undeclared or refusing version 2 kernel is not timed", "[cli][bench][v2]") {
    TempDir dir;
    const std::vector<std::pair<const char*, std::vector<std::string>>> refused = {
        {"zoo_v2_zeros", {"zoo_v2_zeros disagrees with the float64 reference on shape prefill-512"}},
        {"zoo_v2_head_dim_128", {"is outside its declaration: head_dim 64 is not declared", "nothing was timed"}},
        {"zoo_v2_refuses", {"zoo_v2_refuses returned 1 (not ATTNCHECK_OK) on shape prefill-512"}},
    };
    for (const auto& [symbol, words] : refused)
        stops_untimed(dir, bench({"--kernel-lib", FAULTY_KERNEL_LIB, "--symbol", symbol}), 1, words);
}

TEST_CASE("bench --backward: the backward pass checked, then timed, at 10*D flops per visible pair", "[cli][bench][backward]") {
    TempDir dir;
    // The default kernel of the backward is optimized_v2; the default shapes leave decode out.
    const Result r = run_ok(dir, bench({"--backward", "--threads", "1", "--json", dir.file("bwd.json")},
                                       {"--reps", "1", "--min-time", "0.01", "--shapes", "prefill-512,chunk-64@1024"}));
    INFO(r.describe());
    CHECK(has(r.out, "attncheck bench: the backward pass of kernel optimized_v2 (ABI version 2, f32), threads 1"));
    CHECK(has(r.out, "checked: optimized_v2's forward and backward agree with the float64 references on prefill-512 (all 8 heads"));
    CHECK(has(r.out, "checked: optimized_v2's forward and backward agree with the float64 references on chunk-64@1024"));
    const nlohmann::json doc = nlohmann::json::parse(slurp(dir.file("bwd.json")));
    CHECK(doc.at("context").at("attncheck_pass") == "backward");
    const auto reps = iterations(doc, "attncheck_bench_backward/prefill-512/threads:1");
    REQUIRE(reps.size() == 1);
    CHECK(iterations(doc, "attncheck_bench/prefill-512/threads:1").empty());
    // prefill-512: 8 heads, 512 * 513 / 2 visible pairs each, 10 * 64 flops per pair.
    const double flops = 8.0 * 512.0 * 513.0 / 2.0 * 640.0;
    CHECK(reps[0].at("gflops").get<double>() * reps[0].at("real_time").get<double>() * 1e-3 ==
          Approx(flops * 1e-9).epsilon(1e-9));

    // A bfloat16 library kernel's backward against the built-in's, each on its own forward's out and lse.
    const Result flash = run_ok(dir, bench({"--backward", "--kernel-lib", FLASH_KERNEL_LIB, "--symbol", "flash_attention",
                                            "--baseline-kernel", "optimized_v2", "--allow-unjudged"}));
    INFO(flash.describe());
    CHECK(has(flash.out, "the backward pass of kernel " + std::string(FLASH_KERNEL_LIB) +
                             ":flash_attention (ABI version 2, bf16) against baseline optimized_v2 (ABI version 2, f32)"));
    CHECK(has(flash.out, "; baseline too (worst "));
    CHECK(has(flash.out, "verdict: NOT JUDGED"));
}

TEST_CASE("bench --backward: a wrong backward is not timed, a kernel without one is bad usage", "[cli][bench][backward]") {
    TempDir dir;
    const Result forward = run_ok(dir, bench({"--kernel-lib", FAULTY_KERNEL_LIB, "--symbol", "zoo_v2_grad_zeros"}));
    INFO(forward.describe());
    CHECK(has(forward.out, "checked: " + std::string(FAULTY_KERNEL_LIB) + ":zoo_v2_grad_zeros agrees"));
    stops_untimed(dir, bench({"--backward", "--kernel-lib", FAULTY_KERNEL_LIB, "--symbol", "zoo_v2_grad_zeros"}), 1,
                  {"zoo_v2_grad_zeros's backward disagrees with the float64 gradient reference on shape prefill-512 at d",
                   "a wrong kernel is not timed"});
    refused_as_usage(dir, {
        {bench({"--backward", "--kernel", "optimized"}), "--backward: the kernel optimized is of ABI version 1, which has no backward pass"},
        {bench({"--backward", "--kernel-lib", FAULTY_KERNEL_LIB, "--symbol", "zoo_v2_zeros"}), "has no backward entry point"},
        {bench({"--backward", "--baseline-kernel", "optimized"}), "--backward: the baseline optimized is of ABI version 1"},
        {bench({"--backward"}, {"--shapes", "decode-4096"}), "--shapes decode-4096 with --backward: a decode step"},
    });
}

TEST_CASE("bench: bad usage is exit 2 with a message", "[cli][bench]") {
    TempDir dir;
    refused_as_usage(dir, {
        {bench({"--kernel-lib", NAIVE_KERNEL_LIB, "--symbol", "nope"}), "no symbol 'nope'"},
        {bench({"--kernel-lib", dir.file("missing.so"), "--symbol", "f"}), "no such file"},
        {bench({"--kernel-lib", NAIVE_KERNEL_LIB}), "--kernel-lib needs --symbol"},
        {bench({"--symbol", "f"}), "--symbol needs --kernel-lib"},
        {bench({"--kernel", "optimized", "--kernel-lib", NAIVE_KERNEL_LIB, "--symbol", "naive_attention"}),
         "name two kernels"},
        {bench({"--kernel", "mask_after_softmax"}), "not a built-in kernel"},
        {bench({"--baseline-symbol", "f"}), "--baseline-symbol needs --baseline-lib"},
        {bench({}, {"--shapes", "prefill-513"}), "unknown shape 'prefill-513'"},
        {bench({}, {"--shapes", "prefill-512,"}), "an empty shape name"},
        {bench({}, {"--shapes", ","}), "an empty shape name"},
        {bench({}, {"--reps", "0"}), "--reps"},
        {bench({}, {"--threads", "-1"}), "--threads"},
        {bench({}, {"--min-time", "abc"}), "--min-time"},
        {bench({"--json", dir.file("no/such/dir/x.json")}), "cannot write"},
    });
}
