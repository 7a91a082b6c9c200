// tests/cli/fuzz_test.cpp — `attncheck fuzz` as a user and a CI job see it: what it refuses
// before running (exit 2), what it selects, the environment it reads, the progress and verdict
// lines of a --kernel-lib run, the crash and failure reports, and the --json / --junit files.
//
// The kernels under test are tests/zoo/faulty_kernel_lib.c (zoo_mask_after_softmax fails most
// properties; zoo_trap_fail and zoo_trap_crash fail or abort on the same cases, Dk = 3) and the
// correct examples/c-kernel/naive_kernel.c. Budgets are small: these tests are about the
// reports, not about finding bugs.
#include <cstdlib>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "attncheck/check.hpp"
#include "attncheck/isa.hpp"
#include "kernels/registry.hpp"
#include "properties/decoder_gradients.hpp"
#include "properties/isolation/kernel_lib.hpp"
#include "run_cli.hpp"

namespace {

using namespace cli_test;

nlohmann::json read_json(const std::string& path) {
    return nlohmann::json::parse(slurp(path));
}

std::vector<std::string> lib_args(const std::string& lib, const std::string& symbol) {
    return {"fuzz", "--kernel-lib", lib, "--symbol", symbol};
}

std::vector<std::string> operator+(std::vector<std::string> a, const std::vector<std::string>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
}

std::size_t count(const std::string& text, const std::string& what) {
    std::size_t n = 0;
    for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
    return n;
}

// The case number N of "crashed (...) on case N" or of "FAIL @N" in a report.
int case_number(const std::string& text, const std::string& pattern) {
    std::smatch m;
    if (!std::regex_search(text, m, std::regex(pattern))) return -1;
    return std::stoi(m[1]);
}

// setenv for the scope (the replay test runs check_kernel in this process).
struct ScopedEnv {
    std::vector<std::string> names;
    void set(const std::string& name, const std::string& value) {
        ::setenv(name.c_str(), value.c_str(), 1);
        names.push_back(name);
    }
    ~ScopedEnv() {
        for (const auto& n : names) ::unsetenv(n.c_str());
    }
};

}  // namespace

TEST_CASE("fuzz: flags and exit codes", "[cli][fuzz]") {
    TempDir dir;
    CHECK(run_cli(dir, {"fuzz", "--help"}).code == 0);
    const Result list = run_cli(dir, {"fuzz", "--list"});
    CHECK(list.code == 0);
    CHECK(list.out.find("kernel-level properties:\n  agreement") != std::string::npos);
    CHECK(list.out.find("decoder-level properties:\n") != std::string::npos);
    // Bad usage, refused before the run starts, with the words that name the problem.
    struct Bad {
        std::vector<std::string> args;
        std::string words;
    };
    const std::vector<Bad> bad = {
        {{"--bogus"}, "--bogus"},
        {{"--property", "no_such_property"}, "--property no_such_property: no such property"},
        {{"--kernel", "no_such_kernel"}, "--kernel no_such_kernel: no such kernel"},
        {{"--cases", "0"}, "--cases 0: expected an integer in [1, 100000000]"},
        {{"--seed", "-3"}, "--seed -3: expected a non-negative integer"},
        {{"--timeout", "0"}, "--timeout 0: expected seconds"},
        {{"--level", "both"}, "--level both: expected kernel or decoder"},
        {{"--decoder", "optimized"}, "only 'reference'"},
        {{"--kernel-lib", "/nonexistent/lib.so", "--symbol", "k"}, "/nonexistent/lib.so"},
        {{"--kernel-lib", "x.so"}, "--kernel-lib needs --symbol NAME"},
        {{"--symbol", "k"}, "--symbol needs --kernel-lib PATH"},
        {{"--mutants", "--kernel", "reference"}, "does not combine"},
        {{"--mutants", "--junit", "r.xml"}, "--junit does not combine with --mutants"},
        {{"--cases"}, "--cases"},
    };
    for (const Bad& b : bad) {
        const Result r = run_cli(dir, std::vector<std::string>{"fuzz"} + b.args);
        INFO(b.words << "\n" << r.describe());
        CHECK(r.code == 2);
        CHECK(r.err.find(b.words) != std::string::npos);
        CHECK(r.out.find("attncheck fuzz: seed") == std::string::npos);
    }

    // Repeated --kernel adds up; a single-valued flag given twice takes its last value.
    const std::string json = dir.file("r.json");
    run_ok(dir, {"fuzz", "--kernel", "reference", "--kernel", "zoo_base", "--property", "determinism", "--level",
                 "kernel", "--cases", "9", "--cases", "5", "--seed", "1", "--json", json});
    const nlohmann::json j = read_json(json);
    REQUIRE(j["results"].size() == 2);
    CHECK(j["results"][0]["subject"] == "reference");
    CHECK(j["results"][1]["subject"] == "zoo_base");
    CHECK(j["results"][0]["status"] == "pass");
    CHECK(j["results"][0]["cases"] == 5);
    CHECK(j["isa"] == attncheck::isa_line());

    // A mutant through --kernel fails with exit 1, and the report names the code path it ran on
    // (a verdict near a bound depends on it).
    const Result mutant =
        run_cli(dir, {"fuzz", "--kernel", "diagonal_masked", "--property", "agreement", "--cases", "50", "--seed", "1"});
    INFO(mutant.describe());
    CHECK(mutant.code == 1);
    CHECK(mutant.out.find("attncheck fuzz: seed 1; " + attncheck::isa_line()) != std::string::npos);
    CHECK(mutant.out.find("  ran on: " + attncheck::isa_line()) != std::string::npos);
}

TEST_CASE("fuzz's declaration flags apply in the order given", "[cli][fuzz][declaration]") {
    TempDir dir;
    // The later item wins: zero, then nan declared for the reference kernel (which writes zeros).
    const Result r = run_cli(dir, {"fuzz", "--kernel", "reference", "--declare", "empty_rows=zero", "--empty-rows", "nan",
                                   "--property", "empty_rows", "--cases", "20", "--seed", "1"});
    INFO(r.describe());
    CHECK(r.code == 1);
    CHECK(r.out.find("replay: attncheck fuzz --kernel reference --declare 'empty_rows=zero; empty_rows=nan' "
                     "--property empty_rows") != std::string::npos);
    const Result back = run_cli(dir, {"fuzz", "--kernel", "reference", "--empty-rows", "nan", "--declare",
                                      "empty_rows=zero", "--property", "empty_rows", "--cases", "20", "--seed", "1"});
    INFO(back.describe());
    CHECK(back.code == 0);
}

TEST_CASE("fuzz checks its --json and --junit files before the run", "[cli][fuzz]") {
    TempDir dir;
    const std::vector<std::string> run = {"fuzz", "--kernel", "reference", "--property", "determinism", "--cases", "2",
                                          "--seed", "1"};
    for (const std::string flag : {"--json", "--junit"}) {
        for (const auto& [path, words] : std::vector<std::pair<std::string, std::string>>{
                 {dir.file("no/such/dir/r.out"), "cannot create"}, {dir.path.string(), "is a directory"}}) {
            const Result r = run_cli(dir, run + std::vector<std::string>{flag, path});
            INFO(flag << " " << path << "\n" << r.describe());
            CHECK(r.code == 2);
            CHECK(r.err.find(flag + " " + path) != std::string::npos);
            CHECK(r.err.find(words) != std::string::npos);
            CHECK(r.out.find("attncheck fuzz: seed") == std::string::npos);  // never started
        }
        // A path that is fine is left as it was found when the run is refused for another reason.
        const std::string fresh = dir.file("fresh" + flag);
        CHECK(run_cli(dir, {"fuzz", "--property", "nosuch", flag, fresh}).code == 2);
        CHECK_FALSE(fs::exists(fresh));
    }
}

TEST_CASE("fuzz: a write error at the end is exit 2, but a failed check wins (exit 1)", "[cli][fuzz]") {
    TempDir dir;
    // /dev/full opens for writing, and every write to it fails (ENOSPC).
    const Result pass = run_cli(dir, {"fuzz", "--kernel", "reference", "--property", "determinism", "--cases", "2",
                                      "--seed", "1", "--json", "/dev/full"});
    INFO(pass.describe());
    CHECK(pass.code == 2);
    CHECK(pass.out.find("all passed") != std::string::npos);
    CHECK(pass.err.find("--json /dev/full: cannot write") != std::string::npos);
    const Result fail = run_cli(dir, {"fuzz", "--kernel", "diagonal_masked", "--property", "agreement", "--cases",
                                      "50", "--seed", "1", "--junit", "/dev/full"});
    INFO(fail.describe());
    CHECK(fail.code == 1);
    CHECK(fail.err.find("--junit /dev/full: cannot write") != std::string::npos);
}

TEST_CASE("fuzz refuses a selection of no property, naming the problem", "[cli][fuzz]") {
    TempDir dir;
    struct Case {
        std::vector<std::string> args, env, words;
    };
    const std::vector<Case> cases = {
        {{"--property", "nosuch"}, {}, {"--property nosuch", "no such property"}},
        {{"--property", "agreement,nosuch"}, {}, {"--property nosuch", "no such property"}},
        {{"--property", "abi_version", "--level", "decoder"}, {}, {"no property selected", "abi_version", "--level decoder"}},
        {{"--decoder", "reference", "--property", "agreement"}, {}, {"no property selected", "reference decoder"}},
        {{"--mutants", "--level", "decoder"}, {}, {"no property selected", "--level decoder"}},
        {{"--kernel", "reference_v2", "--declare", "max_q_len=1", "--level", "decoder"},
         {},
         {"no property selected", "--level decoder", "declares max_q_len=1", "T query rows"}},
        {{}, {"ATTNCHECK_PROPERTY=nosuch"}, {"ATTNCHECK_PROPERTY", "nosuch"}},
        {{}, {"ATTNCHECK_CASES=many"}, {"ATTNCHECK_CASES", "many"}},
        {{}, {"ATTNCHECK_SEED=-1"}, {"ATTNCHECK_SEED", "-1"}},
    };
    CHECK(run_cli(dir, {"fuzz", "--help"}, {"ATTNCHECK_PROPERTY=nosuch"}).code == 0);
    for (const Case& c : cases) {
        const Result r = run_cli(dir, std::vector<std::string>{"fuzz"} + c.args, c.env);
        std::string line;
        for (const auto& e : c.env) line += e + " ";
        line += "attncheck fuzz";
        for (const auto& a : c.args) line += " " + a;
        INFO(line << "\n" << r.describe());
        CHECK(r.code == 2);
        CHECK(r.out.find("passed") == std::string::npos);
        for (const std::string& w : c.words) {
            INFO("expected \"" << w << "\" in the message");
            CHECK(r.err.find(w) != std::string::npos);
        }
    }
}

TEST_CASE("fuzz --property takes a comma list and may be repeated", "[cli][fuzz]") {
    TempDir dir;
    const std::string json = dir.file("r.json");
    run_ok(dir, {"fuzz", "--kernel", "reference", "--property", "determinism,causality", "--property", "row_sums",
                 "--cases", "3", "--seed", "1", "--json", json});
    std::multiset<std::string> ran;
    const nlohmann::json j = read_json(json);
    for (const auto& r : j["results"]) ran.insert(r["property"].get<std::string>());
    CHECK(ran == std::multiset<std::string>{"causality", "determinism", "row_sums"});
}

TEST_CASE("fuzz runs the decoder gradient properties on kernels with a backward, one row each", "[cli][fuzz][gradients]") {
    TempDir dir;
    const Result list = run_cli(dir, {"fuzz", "--list"});
    for (const char* name : {"decoder_grad_agreement", "decoder_grad_causality", "decoder_grad_batch", "decoder_grad_determinism"})
        CHECK(list.out.find(std::string("  ") + name) != std::string::npos);
    // --property selects one; a version 1 kernel has no backward: one line names what it lacks.
    const std::string json = dir.file("r.json");
    const Result r = run_ok(dir, {"fuzz", "--kernel", "optimized_v2", "--kernel", "optimized", "--property",
                                  "decoder_grad_agreement", "--seed", "1", "--json", json});
    INFO(r.describe());
    CHECK(r.out.find("[decoder optimized[optimized]] not applicable (no backward pass): decoder_grad_agreement") !=
          std::string::npos);
    const nlohmann::json j = read_json(json);
    REQUIRE(j["results"].size() == 1);
    CHECK(j["results"][0]["subject"] == "optimized[optimized_v2]");
    CHECK(j["results"][0]["property"] == "decoder_grad_agreement");
    CHECK(j["results"][0]["status"] == "pass");
    // Without --cases, the property's own default budget, not the decoder level's 40.
    CHECK(j["results"][0]["max_cases"] == attncheck::properties::kDecoderGradCases);
}

TEST_CASE("fuzz reads ATTNCHECK_SEED, ATTNCHECK_CASES and ATTNCHECK_PROPERTY and flags win", "[cli][fuzz]") {
    TempDir dir;
    const std::string json = dir.file("r.json");
    const std::vector<std::string> env = {"ATTNCHECK_SEED=5", "ATTNCHECK_CASES=4",
                                          "ATTNCHECK_PROPERTY=determinism,causality"};
    run_ok(dir, {"fuzz", "--kernel", "reference", "--json", json}, env);
    nlohmann::json j = read_json(json);
    CHECK(j["seed"] == 5);
    std::set<std::string> ran;
    for (const auto& r : j["results"]) {
        ran.insert(r["property"].get<std::string>());
        CHECK(r["cases"] == 4);
        CHECK(r["max_cases"] == 4);
    }
    CHECK(ran == std::set<std::string>{"causality", "determinism"});

    run_ok(dir, {"fuzz", "--kernel", "reference", "--json", json, "--seed", "6", "--cases", "3", "--property", "row_sums"},
           env);
    j = read_json(json);
    CHECK(j["seed"] == 6);
    REQUIRE(j["results"].size() == 1);
    CHECK(j["results"][0]["property"] == "row_sums");
    CHECK(j["results"][0]["cases"] == 3);
}

TEST_CASE("fuzz reads RapidCheck's RC_PARAMS seed and max_success after the flags and ATTNCHECK_* and says so", "[cli][fuzz]") {
    TempDir dir;
    const std::string json = dir.file("r.json");
    const Result r = run_cli(dir, {"fuzz", "--kernel", "reference", "--property", "row_sums", "--json", json},
                             {"RC_PARAMS=seed=9 max_success=3 noshrink=1"});
    INFO(r.describe());
    REQUIRE(r.code == 0);
    nlohmann::json j = read_json(json);
    CHECK(j["seed"] == 9);
    CHECK(j["results"][0]["cases"] == 3);
    CHECK(r.err.find("RC_PARAMS: seed=9 read as --seed 9") != std::string::npos);
    CHECK(r.err.find("RC_PARAMS: noshrink=1 ignored") != std::string::npos);
    // A flag and ATTNCHECK_CASES win over it.
    run_ok(dir, {"fuzz", "--kernel", "reference", "--property", "row_sums", "--seed", "4", "--json", json},
           {"RC_PARAMS=seed=9 max_success=3", "ATTNCHECK_CASES=2"});
    j = read_json(json);
    CHECK(j["seed"] == 4);
    CHECK(j["results"][0]["cases"] == 2);
}

TEST_CASE("a --kernel-lib failure's check_kernel replay line replays the same failure", "[cli][fuzz]") {
    TempDir dir;
    const std::string json = dir.file("r.json");
    const Result r = run_cli(dir, lib_args(FAULTY_KERNEL_LIB, "zoo_trap_fail") +
                                      std::vector<std::string>{"--property", "agreement", "--cases", "100", "--seed",
                                                               "3", "--json", json});
    INFO(r.describe());
    REQUIRE(r.code == 1);
    CHECK(r.out.find("RC_PARAMS") == std::string::npos);  // read by neither fuzz nor check_kernel
    const nlohmann::json row = read_json(json)["results"][0];
    const std::string replay = row["replay_env"];
    CHECK(replay == "ATTNCHECK_SEED=3 ATTNCHECK_CASES=100 ATTNCHECK_PROPERTY=agreement <test binary>");
    CHECK(r.out.find(replay) != std::string::npos);

    // What a kernel author's test does with that line: check_kernel on the linked kernel, with
    // the variables set (CheckOptions::from_environment is its default argument).
    ScopedEnv env;
    std::smatch m;
    const std::regex var("(ATTNCHECK_[A-Z]+)=(\\S+)");
    for (auto it = std::sregex_iterator(replay.begin(), replay.end(), var); it != std::sregex_iterator(); ++it)
        env.set((*it)[1], (*it)[2]);
    REQUIRE(env.names.size() == 3);
    const auto lk = attncheck::properties::load_kernel_library(FAULTY_KERNEL_LIB, "zoo_trap_fail");
    const attncheck::CheckReport report = attncheck::check_kernel(lk.fn, "zoo_trap_fail");
    INFO(report.text);
    CHECK(report.failed == std::vector<std::string>{"agreement"});
    CHECK(report.text.find("FAIL at case " + std::to_string(row["failed_at"].get<int>())) != std::string::npos);
    CHECK(report.text.find(row["message"].get<std::string>()) != std::string::npos);
    CHECK(report.text.find(row["counterexample"].get<std::string>()) != std::string::npos);
}

TEST_CASE("fuzz --kernel-lib prints each verdict as it finishes, and progress with --progress", "[cli][fuzz]") {
    TempDir dir;
    const std::vector<std::string> args = lib_args(NAIVE_KERNEL_LIB, "naive_attention") +
                                          std::vector<std::string>{"--property", "agreement,row_sums", "--cases", "20",
                                                                   "--seed", "1"};
    const Result quiet = run_ok(dir, args);
    // The verdict lines come before the table, one per property, as each worker ends.
    const auto verdict = quiet.out.find("[kernel naive_attention] agreement: pass 20 in ");
    CHECK(verdict != std::string::npos);
    CHECK(quiet.out.find("[kernel naive_attention] row_sums: pass 20 in ") != std::string::npos);
    CHECK(verdict < quiet.out.find("kernel property"));
    // stderr is no terminal here: no progress unless asked for.
    CHECK(quiet.err.find("/20") == std::string::npos);

    const Result loud = run_ok(dir, args + std::vector<std::string>{"--progress"});
    INFO(loud.describe());
    CHECK(loud.err.find("[kernel naive_attention] agreement 20/20\n") != std::string::npos);
    CHECK(loud.err.find("[kernel naive_attention] row_sums 20/20\n") != std::string::npos);
}

TEST_CASE("a crash report names the case and its shape, numbered as a failure is", "[cli][fuzz]") {
    TempDir dir;
    const std::vector<std::string> rest = {"--property", "agreement,causality,row_sums", "--cases", "100", "--seed", "1"};
    const Result crash = run_cli(dir, lib_args(FAULTY_KERNEL_LIB, "zoo_trap_crash") + rest);
    const Result fail = run_cli(dir, lib_args(FAULTY_KERNEL_LIB, "zoo_trap_fail") +
                                         std::vector<std::string>{"--property", "agreement", "--cases", "100", "--seed",
                                                                  "1", "--shrink-time", "0.001"});
    INFO(crash.describe() << "\n" << fail.describe());
    CHECK(crash.code == 1);
    CHECK(fail.code == 1);
    // The two kernels trap on the same inputs (Dk = 3): the same case number in both reports.
    const int crashed_at = case_number(crash.out, R"(crashed \(SIGABRT\) on case (\d+) \(seed 1\) of agreement \[dtype=f32 B=\d+ [^\]]*Dk=3 )");
    const int failed_at = case_number(fail.out, R"(agreement +FAIL @(\d+))");
    CHECK(crashed_at > 0);
    CHECK(crashed_at == failed_at);
    CHECK(case_number(crash.out, R"(agreement +FAIL @(\d+))") == crashed_at);
    // The properties skipped after the crash: one line.
    CHECK(crash.out.find("skipped 2 properties (the kernel crashed or timed out earlier, in agreement): causality, row_sums\n") !=
          std::string::npos);
}

TEST_CASE("a kernel that fails at kernel level: capped decoder runs, each shrunk case printed once", "[cli][fuzz]") {
    TempDir dir;
    const std::string json = dir.file("r.json");
    // Default budgets (no --cases): 300 kernel cases, then 10 instead of 40 per decoder property.
    const Result r = run_cli(dir, lib_args(FAULTY_KERNEL_LIB, "zoo_mask_after_softmax") +
                                      std::vector<std::string>{"--property", "agreement,row_sums,logits_causality",
                                                               "--seed", "1", "--json", json});
    INFO(r.describe());
    CHECK(r.code == 1);
    CHECK(r.out.find("note: optimized[zoo_mask_after_softmax]: decoder-level properties ran 10 cases each, not 40") !=
          std::string::npos);
    const nlohmann::json j = read_json(json);
    int decoder_rows = 0;
    for (const auto& row : j["results"]) {
        if (row["kind"] != "decoder") continue;
        ++decoder_rows;
        CHECK(row["max_cases"] == 10);
        CHECK(row["capped_from"] == 40);
        CHECK(row["replay"].get<std::string>().find("--cases 10") != std::string::npos);
    }
    CHECK(decoder_rows == 1);
    // agreement and row_sums shrink to the same case: printed once, then referred to.
    CHECK(count(r.out, "  case = dtype=") == 1);
    CHECK(r.out.find("  case: the same as for agreement on kernel zoo_mask_after_softmax above") != std::string::npos);
}

TEST_CASE("fuzz --shrink-time bounds shrinking and says so", "[cli][fuzz]") {
    TempDir dir;
    const Result r = run_cli(dir, lib_args(FAULTY_KERNEL_LIB, "zoo_mask_after_softmax") +
                                      std::vector<std::string>{"--property", "decoder_batch", "--cases", "10", "--seed",
                                                               "1", "--shrink-time", "0.001"});
    INFO(r.describe());
    CHECK(r.code == 1);
    CHECK(r.out.find("(shrinking stopped after ") != std::string::npos);
    CHECK(r.out.find("no exceptions thrown") == std::string::npos);
    const Result bad = run_cli(dir, {"fuzz", "--shrink-time", "-1"});
    CHECK(bad.code == 2);
    CHECK(bad.err.find("--shrink-time") != std::string::npos);
}

TEST_CASE("fuzz --verbose shows the input spread of --kernel-lib runs too", "[cli][fuzz]") {
    TempDir dir;
    const std::string json = dir.file("r.json");
    const Result r = run_ok(dir, lib_args(NAIVE_KERNEL_LIB, "naive_attention") +
                                     std::vector<std::string>{"--property", "agreement", "--cases", "20", "--seed", "1",
                                                              "--verbose", "--json", json});
    CHECK(r.out.find("kernel naive_attention / agreement spread: {") != std::string::npos);
    const nlohmann::json row = read_json(json)["results"][0];
    REQUIRE(row.contains("spread"));
    int total = 0;
    for (const auto& [tags, n] : row["spread"].items()) total += n.get<int>();
    CHECK(total > 0);
}

TEST_CASE("the worker's result file goes to TMPDIR and is removed", "[cli][fuzz]") {
    TempDir dir;
    const std::vector<std::string> args = lib_args(NAIVE_KERNEL_LIB, "naive_attention") +
                                          std::vector<std::string>{"--property", "agreement,causality", "--cases", "5",
                                                                   "--seed", "1"};
    const std::string tmp = dir.file("tmp");
    fs::create_directory(tmp);
    run_ok(dir, args, {"TMPDIR=" + tmp});
    CHECK(fs::is_empty(tmp));
    const std::string missing = dir.file("missing");
    const Result r = run_cli(dir, args, {"TMPDIR=" + missing});
    INFO(r.describe());
    CHECK(r.code == 2);
    CHECK(r.err.find(missing) != std::string::npos);
    CHECK(r.err.find("TMPDIR") != std::string::npos);
}

TEST_CASE("fuzz --junit and --json describe every run, failures with their replay line", "[cli][fuzz]") {
    TempDir dir;
    const std::string json = dir.file("r.json"), junit = dir.file("r.xml");
    const Result r = run_cli(dir, lib_args(FAULTY_KERNEL_LIB, "zoo_trap_fail") +
                                      std::vector<std::string>{"--property", "agreement,causality,generation", "--cases",
                                                               "30", "--seed", "1", "--json", json, "--junit", junit});
    INFO(r.describe());
    REQUIRE(r.code == 1);
    const nlohmann::json j = read_json(json);
    CHECK(j["schema_version"] == 2);
    CHECK(j["passed"] == false);
    const nlohmann::json& failed = j["results"][0];
    REQUIRE(failed["status"] == "FAIL");
    // The shrunk case's fields, typed, beside its text.
    CHECK(failed["case"]["Dk"] == 3);
    CHECK(failed["case"]["B"] == 1);
    CHECK(failed["case"]["dtype"] == "f32");
    CHECK(failed["case"]["Tk"].is_array());
    CHECK(failed["counterexample_values"]["case"].get<std::string>().find("Dk=3") != std::string::npos);

    const std::string xml = slurp(junit);
    INFO(xml);
    CHECK(xml.rfind("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"attncheck fuzz\" tests=\"3\" failures=\"2\" errors=\"0\" skipped=\"0\"", 0) == 0);
    CHECK(xml.find("<testsuite name=\"kernel zoo_trap_fail\" tests=\"2\" failures=\"1\"") != std::string::npos);
    // The trap fires in the decoder too (a model with head_dim 3).
    CHECK(xml.find("<testsuite name=\"decoder optimized[zoo_trap_fail]\" tests=\"1\" failures=\"1\"") != std::string::npos);
    CHECK(xml.find("<testcase classname=\"attncheck.kernel.zoo_trap_fail\" name=\"causality\"") != std::string::npos);
    const auto failure = xml.find("<failure type=\"FAIL\" message=\"");
    REQUIRE(failure != std::string::npos);
    CHECK(xml.find("replay: attncheck fuzz --kernel-lib ", failure) != std::string::npos);
    CHECK(xml.find("ATTNCHECK_SEED=1 ATTNCHECK_CASES=30 ATTNCHECK_PROPERTY=agreement &lt;test binary&gt;", failure) !=
          std::string::npos);
    CHECK(count(xml, "<testcase ") == 3);
    CHECK(count(xml, "</testsuite>") == 2);
    CHECK(xml.find("</testsuites>\n") != std::string::npos);
}

TEST_CASE("fuzz reads a library's declaration, and flags override it", "[cli][fuzz][declaration]") {
    TempDir dir;
    const std::vector<std::string> small = {"--seed", "3", "--cases", "40", "--level", "kernel"};
    // Exported head_dim=8,16: every case fits it, none is refused, and the rest must be refused.
    const Result declared = run_cli(dir, lib_args(FAULTY_KERNEL_LIB, "zoo_dims_8_16") + small);
    INFO(declared.describe());
    CHECK(declared.code == 0);
    CHECK(declared.out.find("declared: head_dim=8,16") != std::string::npos);
    CHECK(declared.out.find("unsup") == std::string::npos);
    CHECK(declared.out.find("refuses_undeclared") != std::string::npos);

    // The same kernel undeclared: most cases refused. Too few supported cases is NOT CHECKED
    // and fails the run, unless --allow-unchecked; the flag can declare it instead.
    const std::vector<std::string> agreement = {"--seed", "3", "--cases", "40", "--property", "agreement"};
    const Result quiet = run_cli(dir, lib_args(FAULTY_KERNEL_LIB, "zoo_dims_8_16_quiet") + agreement);
    INFO(quiet.describe());
    CHECK(quiet.code == 1);
    CHECK(quiet.out.find("NOT CHECKED") != std::string::npos);
    CHECK(quiet.out.find("all passed") == std::string::npos);
    const Result allowed = run_cli(dir, lib_args(FAULTY_KERNEL_LIB, "zoo_dims_8_16_quiet") + agreement +
                                            std::vector<std::string>{"--allow-unchecked"});
    INFO(allowed.describe());
    CHECK(allowed.code == 0);
    CHECK(allowed.out.find("NOT CHECKED") != std::string::npos);
    const Result flagged = run_cli(dir, lib_args(FAULTY_KERNEL_LIB, "zoo_dims_8_16_quiet") + agreement +
                                            std::vector<std::string>{"--head-dim", "8,16"});
    INFO(flagged.describe());
    CHECK(flagged.code == 0);
    CHECK(flagged.out.find("declared: head_dim=8,16") != std::string::npos);
}

TEST_CASE("fuzz --empty-rows nan: a NaN-convention kernel passes, and is flagged without it", "[cli][fuzz][declaration]") {
    TempDir dir;
    const std::vector<std::string> small = {"--seed", "3", "--cases", "40"};
    const Result undeclared = run_cli(dir, lib_args(FAULTY_KERNEL_LIB, "zoo_nan_rows") + small +
                                               std::vector<std::string>{"--property", "empty_rows"});
    INFO(undeclared.describe());
    CHECK(undeclared.code == 1);
    CHECK(undeclared.out.find("declares empty_rows=nan") != std::string::npos);
    const Result declared = run_cli(dir, lib_args(FAULTY_KERNEL_LIB, "zoo_nan_rows") + small +
                                             std::vector<std::string>{"--empty-rows", "nan"});
    INFO(declared.describe());
    CHECK(declared.code == 0);
    CHECK(declared.out.find("declared: empty_rows=nan") != std::string::npos);

    // A declaration that is false fails, and the replay line carries the declaration.
    const Result wrong = run_cli(dir, {"fuzz", "--kernel", "reference", "--empty-rows", "nan", "--property", "empty_rows",
                                       "--cases", "20", "--seed", "1"});
    INFO(wrong.describe());
    CHECK(wrong.code == 1);
    CHECK(wrong.out.find("but the kernel declares empty_rows=nan") != std::string::npos);
    CHECK(wrong.out.find("replay: attncheck fuzz --kernel reference --declare 'empty_rows=nan' --property empty_rows") !=
          std::string::npos);

    const Result bad = run_cli(dir, {"fuzz", "--empty-rows", "maybe"});
    CHECK(bad.code == 2);
    CHECK(bad.err.find("--empty-rows maybe: declaration item 'empty_rows=maybe': expected zero or nan") != std::string::npos);
}

TEST_CASE("a registry kernel that reads out of bounds runs isolated, and each such mutant is killed", "[cli][fuzz][zoo]") {
    // Its reads may fault (the guard page after q, k, v) or, in a sanitized build, end in an
    // AddressSanitizer report: either is a crash of one worker, reported, never of the run. The
    // report goes to the worker's stderr (read by the isolation), not to a sanitizer log file.
    const TempDir dir;
    int isolated = 0;
    for (const attncheck::KernelEntry& e : attncheck::kernel_registry()) {
        if (!e.reads_out_of_bounds) continue;
        ++isolated;
        INFO(e.name << " (" << e.bug << ")");
        // 30 cases and five properties: each of these mutants fails one of them within 30 cases at
        // this seed (the forward ones agreement, the backward ones grad_batch; the guard pages'
        // properties are the ones about reading out of bounds), so the default selection, which
        // holds these five, kills them too. Each property is one worker process, about a second
        // under the sanitizers: the whole selection took 100 s there for what the five show.
        const Result r = run_cli(dir, {"fuzz", "--kernel", e.name, "--cases", "30", "--seed", "1", "--property",
                                       "agreement,no_oob_read,grad_batch,grad_no_oob_read,grad_causality"},
                                 {"ASAN_OPTIONS=halt_on_error=1:log_path=stderr:handle_segv=0:detect_leaks=0"});
        INFO(r.describe());
        CHECK(r.code == 1);
        CHECK(r.out.find("FAIL") != std::string::npos);
        CHECK(r.out.find("FAILED:") != std::string::npos);
    }
    CHECK(isolated >= 1);
}
