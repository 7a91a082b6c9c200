// tests/cli/campaign_test.cpp — `attncheck fuzz` campaigns and `attncheck report merge`
// (properties/campaign.hpp): shards merged against one run of the whole campaign, the failure
// corpus across runs and shard counts, a campaign stopped by SIGTERM, and the refusals.
#include <signal.h>

#include <fstream>

#include <chrono>
#include <set>
#include <thread>
#include <tuple>

#include <nlohmann/json.hpp>

#include "run_cli.hpp"

namespace {

using cli_test::Result;
using cli_test::run_cli;
using cli_test::slurp;
using cli_test::TempDir;

std::vector<std::string> operator+(std::vector<std::string> a, const std::vector<std::string>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
}

nlohmann::json read_json(const std::string& path) { return nlohmann::json::parse(slurp(path)); }

// What must be the same between the merged shards and one run: which property run it is (round,
// unit, subject, property, seed, budget) and what it found.
using RowKey = std::tuple<int, long, std::string, std::string, std::string, std::uint64_t, int, std::string, int, int, std::string>;
std::vector<RowKey> keys(const nlohmann::json& report) {
    std::vector<RowKey> out;
    for (const auto& r : report["results"])
        out.emplace_back(r.value("round", 0), r.value("unit", -1L), r["kind"], r["subject"], r["property"],
                         r["seed"].get<std::uint64_t>(), r["max_cases"].get<int>(), r["status"], r["cases"].get<int>(),
                         r.value("failed_at", 0), r.value("counterexample", std::string()));
    return out;
}

// A kernel that fails agreement at a tile edge (kernels/, the zoo's tile_edge_key_dropped) and
// passes causality and batch; incremental runs the optimized decoder around it.
const std::vector<std::string> kMutantRun = {"fuzz", "--kernel", "tile_edge_key_dropped", "--property",
                                             "agreement,causality,batch,incremental", "--cases", "30"};

TEST_CASE("fuzz --shard: 4 shards merged are one run of 4 rounds, with the same cases and verdicts", "[cli][campaign]") {
    const TempDir dir;
    const Result one = run_cli(dir, kMutantRun + std::vector<std::string>{"--seed", "5", "--rounds", "4", "--json", dir.file("one.json"),
                                                                          "--junit", dir.file("one.xml")});
    INFO(one.describe());
    REQUIRE(one.code == 1);  // agreement fails
    std::vector<std::string> merge = {"report", "merge"};
    for (int i = 0; i < 4; ++i) {
        const std::string json = dir.file("shard" + std::to_string(i) + ".json");
        const Result s = run_cli(dir, kMutantRun + std::vector<std::string>{"--seed", "5", "--shard", std::to_string(i) + "/4", "--json", json});
        INFO(s.describe());
        REQUIRE((s.code == 0 || s.code == 1));
        // Each shard runs its own quarter: 4 rounds of 4 property runs, 4 of them each.
        CHECK(read_json(json)["results"].size() == 4);
        merge.push_back(json);
    }
    const Result merged = run_cli(dir, merge + std::vector<std::string>{"--json", dir.file("merged.json"), "--junit", dir.file("merged.xml")});
    INFO(merged.describe());
    CHECK(merged.code == 1);
    CHECK_THAT(merged.out, Catch::Contains("agreement") && Catch::Contains("FAIL"));
    const nlohmann::json a = read_json(dir.file("one.json")), b = read_json(dir.file("merged.json"));
    REQUIRE(a["results"].size() == 16);
    CHECK(keys(a) == keys(b));
    CHECK_THAT(slurp(dir.file("merged.xml")), Catch::Contains("<failure"));
    // JUnit has one testcase per property and subject, however many rounds ran it.
    const auto testcases = [&](const std::string& xml) {
        std::size_t n = 0;
        for (std::size_t at = xml.find("<testcase"); at != std::string::npos; at = xml.find("<testcase", at + 1)) ++n;
        return n;
    };
    CHECK(testcases(slurp(dir.file("one.xml"))) == 4);
    CHECK(testcases(slurp(dir.file("merged.xml"))) == 4);
    // The rounds ran at distinct seeds, round 0 at the base seed.
    std::set<std::uint64_t> seeds;
    for (const auto& r : a["results"]) seeds.insert(r["seed"].get<std::uint64_t>());
    CHECK(seeds.size() == 4);
    CHECK(seeds.count(5) == 1);
    // Cases per second, per property run, in the report and the JSON.
    CHECK_THAT(one.out, Catch::Contains("cases per second"));
    for (const auto& t : a["campaign"]["throughput"]) CHECK(t["cases_per_s"].get<double>() > 0);
}

TEST_CASE("fuzz --corpus: a failure found once is replayed as the first case of the next run, on another shard count", "[cli][campaign]") {
    const TempDir dir;
    const std::string corpus = dir.file("corpus");
    const std::vector<std::string> run = {"fuzz", "--kernel", "tile_edge_key_dropped", "--property", "agreement", "--level", "kernel"};
    const Result first = run_cli(dir, run + std::vector<std::string>{"--seed", "11", "--cases", "100", "--corpus", corpus});
    INFO(first.describe());
    REQUIRE(first.code == 1);
    std::vector<std::string> entries;
    for (const auto& e : std::filesystem::directory_iterator(corpus)) entries.push_back(e.path().string());
    REQUIRE(entries.size() == 1);
    const nlohmann::json entry = read_json(entries[0]);
    CHECK(entry["attncheck_corpus"] == 1);
    CHECK(entry["property"] == "agreement");
    CHECK(entry["subject"] == "tile_edge_key_dropped");
    CHECK_FALSE(entry["reproduce"].get<std::string>().empty());

    // Another seed and 2 shards, each from a copy of the corpus (as machines would have): one of
    // them replays the entry, and it fails at once.
    int replayed_by = -1;
    for (int shard = 0; shard < 2; ++shard) {
        const std::string json = dir.file("next" + std::to_string(shard) + ".json");
        const std::string copy = dir.file("corpus" + std::to_string(shard));
        std::filesystem::copy(corpus, copy);
        const Result next = run_cli(dir, run + std::vector<std::string>{"--seed", "12345", "--cases", "100", "--corpus", copy,
                                                                        "--shard", std::to_string(shard) + "/2", "--json", json});
        INFO(next.describe());
        REQUIRE((next.code == 0 || next.code == 1));
        if (read_json(json)["campaign"]["corpus"]["replayed"] == 1) {
            CHECK(replayed_by == -1);
            replayed_by = shard;
            CHECK(next.code == 1);
            CHECK_THAT(next.out, Catch::Contains("still fails"));
        }
    }
    REQUIRE(replayed_by >= 0);
    const std::string next_json = dir.file("next" + std::to_string(replayed_by) + ".json");
    const nlohmann::json replay = read_json(next_json)["results"][0];
    CHECK(replay["round"] == -1);
    CHECK(replay["status"] == "FAIL");
    CHECK(replay["failed_at"] == 1);
    CHECK(replay["cases"] == 0);
    CHECK(read_json(next_json)["campaign"]["corpus"]["still_failing"] == 1);
    // No second entry for the bug the corpus already holds, where it was replayed.
    const std::string replayed_copy = dir.file("corpus" + std::to_string(replayed_by));
    CHECK(std::distance(std::filesystem::directory_iterator(replayed_copy), std::filesystem::directory_iterator()) == 1);

    // The same entry against a correct kernel passes: said fixed and kept, then pruned.
    nlohmann::json fixed = entry;
    fixed["subject"] = "reference";
    fixed["flag"] = "--kernel reference";
    std::filesystem::remove(entries[0]);
    std::ofstream(corpus + "/fixed.json") << fixed.dump();
    const std::vector<std::string> ref = {"fuzz", "--kernel", "reference", "--property", "agreement", "--level", "kernel",
                                          "--cases", "20", "--seed", "1", "--corpus", corpus};
    const Result kept = run_cli(dir, ref);
    INFO(kept.describe());
    CHECK(kept.code == 0);
    CHECK_THAT(kept.out, Catch::Contains("passes now (fixed); kept"));
    CHECK(std::filesystem::exists(corpus + "/fixed.json"));
    const Result pruned = run_cli(dir, ref + std::vector<std::string>{"--corpus-prune"});
    INFO(pruned.describe());
    CHECK(pruned.code == 0);
    CHECK_THAT(pruned.out, Catch::Contains("pruned"));
    CHECK_FALSE(std::filesystem::exists(corpus + "/fixed.json"));
}

TEST_CASE("fuzz --corpus: a corrupt or foreign file is refused with its reason, and the run goes on", "[cli][campaign]") {
    const TempDir dir;
    const std::string corpus = dir.file("corpus");
    std::filesystem::create_directories(corpus);
    std::ofstream(corpus + "/a_not_json.json") << "{ not json";
    std::ofstream(corpus + "/b_format.json") << R"({"attncheck_corpus": 7})";
    std::ofstream(corpus + "/c_foreign.json") << R"({"name": "something else"})";
    std::ofstream(corpus + "/d_no_subject.json") << R"({"attncheck_corpus": 1, "kind": "kernel", "property": "agreement"})";
    std::ofstream(corpus + "/e_bad_case.json")
        << R"({"attncheck_corpus": 1, "kind": "kernel", "subject": "reference", "property": "agreement", "seed": 1,
              "cases": 10, "failed_at": 1, "reproduce": "zz"})";
    std::ofstream(corpus + "/f_property.json")
        << R"({"attncheck_corpus": 1, "kind": "kernel", "subject": "reference", "property": "no_such", "seed": 1,
              "cases": 10, "failed_at": 1, "reproduce": ""})";
    std::ofstream(corpus + "/notes.txt") << "hello";
    const Result r = run_cli(dir, {"fuzz", "--kernel", "reference", "--property", "causality", "--level", "kernel", "--cases",
                                   "20", "--seed", "1", "--corpus", corpus, "--json", dir.file("r.json")});
    INFO(r.describe());
    CHECK(r.code == 0);
    CHECK_THAT(r.err, Catch::Contains("a_not_json.json refused: not JSON"));
    CHECK_THAT(r.err, Catch::Contains("b_format.json refused: corpus format 7, this attncheck reads format 1"));
    CHECK_THAT(r.err, Catch::Contains("c_foreign.json refused: not an attncheck corpus entry"));
    CHECK_THAT(r.err, Catch::Contains("d_no_subject.json refused: no \"subject\" field"));
    CHECK_THAT(r.err, Catch::Contains("e_bad_case.json refused: \"reproduce\" does not decode"));
    CHECK_THAT(r.err, Catch::Contains("f_property.json refused: \"property\" no_such is no property"));
    CHECK_THAT(r.err, Catch::Contains("notes.txt refused: not a corpus entry"));
    CHECK(read_json(dir.file("r.json"))["campaign"]["corpus"]["refused"].size() == 7);
    // A file where the directory should be is bad usage.
    std::ofstream(dir.file("plain")) << "x";
    const Result bad = run_cli(dir, {"fuzz", "--kernel", "reference", "--cases", "5", "--corpus", dir.file("plain")});
    CHECK(bad.code == 2);
    CHECK_THAT(bad.err, Catch::Contains("not a directory"));
}

TEST_CASE("fuzz --duration: SIGTERM stops a campaign with a usable checkpoint and report", "[cli][campaign]") {
    const TempDir dir;
    const std::string json = dir.file("campaign.json");
    std::vector<std::string> argv_s = {ATTNCHECK_CLI, "fuzz", "--kernel", "reference", "--level", "kernel", "--cases", "20",
                                       "--seed", "3", "--duration", "10m", "--checkpoint-every", "1s", "--json", json};
    std::vector<char*> argv;
    for (auto& a : argv_s) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    const std::string out = dir.file("out.txt");
    posix_spawn_file_actions_addopen(&actions, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&actions, 2, dir.file("err.txt").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    pid_t pid = 0;
    REQUIRE(posix_spawn(&pid, ATTNCHECK_CLI, &actions, nullptr, argv.data(), environ) == 0);
    posix_spawn_file_actions_destroy(&actions);
    // The first checkpoint: the campaign is running, nothing decided yet.
    nlohmann::json checkpoint;
    for (int i = 0; i < 600 && checkpoint.is_null(); ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        if (std::filesystem::exists(json)) checkpoint = read_json(json);
    }
    if (checkpoint.is_null()) ::kill(pid, SIGKILL);
    REQUIRE_FALSE(checkpoint.is_null());
    CHECK(checkpoint["passed"].is_null());
    CHECK(checkpoint["campaign"]["stopped_by"] == "running");
    CHECK_FALSE(checkpoint["results"].empty());
    REQUIRE(::kill(pid, SIGTERM) == 0);
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    INFO(slurp(out) << slurp(dir.file("err.txt")));
    REQUIRE(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
    CHECK_THAT(slurp(out), Catch::Contains("campaign stopped by SIGTERM") && Catch::Contains("all passed"));
    const nlohmann::json final_report = read_json(json);
    CHECK(final_report["passed"] == true);
    CHECK(final_report["campaign"]["interrupted"] == true);
    CHECK(final_report["results"].size() >= checkpoint["results"].size());
    // The report merges as the one shard of its campaign (interrupted: said, not failed).
    const Result merged = run_cli(dir, {"report", "merge", json});
    INFO(merged.describe());
    CHECK(merged.code == 0);
    CHECK_THAT(merged.out, Catch::Contains("did not finish: stopped by SIGTERM"));
}

TEST_CASE("campaign flags and report merge: bad values and mismatched shards are refused, naming the problem", "[cli][campaign]") {
    const TempDir dir;
    const std::vector<std::string> base = {"fuzz", "--kernel", "reference", "--cases", "5"};
    const std::vector<std::pair<std::vector<std::string>, std::string>> bad = {
        {{"--shard", "4/4"}, "--shard 4/4: expected I/N with 0 <= I < N"},
        {{"--shard", "x"}, "--shard x: expected I/N"},
        {{"--shard", "-1/4"}, "--shard -1/4: expected I/N"},
        {{"--duration", "1h30"}, "--duration 1h30: expected a duration"},
        {{"--duration", "0s"}, "--duration 0s: expected a duration"},
        {{"--duration", "5y"}, "--duration 5y: expected a duration"},
        {{"--rounds", "0"}, "--rounds 0: expected an integer"},
        {{"--checkpoint-every", "1m"}, "--checkpoint-every writes the --json report"},
        {{"--corpus-prune"}, "--corpus-prune needs --corpus DIR"},
    };
    for (const auto& [flags, says] : bad) {
        const Result r = run_cli(dir, base + flags);
        INFO(r.describe());
        CHECK(r.code == 2);
        CHECK_THAT(r.err, Catch::Contains(says));
    }
    const Result zoo = run_cli(dir, {"fuzz", "--mutants", "--rounds", "2"});
    CHECK(zoo.code == 2);
    CHECK_THAT(zoo.err, Catch::Contains("--mutants runs the zoo once"));

    const auto shard = [&](const std::string& name, const std::string& seed, const std::string& spec) {
        const std::string json = dir.file(name);
        const Result r = run_cli(dir, base + std::vector<std::string>{"--level", "kernel", "--property", "causality",
                                                                      "--seed", seed, "--shard", spec, "--json", json});
        INFO(r.describe());
        REQUIRE(r.code == 0);
        return json;
    };
    const std::string s0 = shard("s0.json", "1", "0/3"), s1 = shard("s1.json", "1", "1/3"), other = shard("o.json", "2", "2/3");
    const Result mismatch = run_cli(dir, {"report", "merge", s0, other});
    CHECK(mismatch.code == 2);
    CHECK_THAT(mismatch.err, Catch::Contains("is not of the campaign of"));
    const Result twice = run_cli(dir, {"report", "merge", s0, s0});
    CHECK(twice.code == 2);
    CHECK_THAT(twice.err, Catch::Contains("are both shard 0/3"));
    const Result missing = run_cli(dir, {"report", "merge", s0, s1});
    CHECK(missing.code == 1);
    CHECK_THAT(missing.out, Catch::Contains("shards missing: 2/3"));
    std::ofstream(dir.file("junk.json")) << R"({"hello": 1})";
    const Result junk = run_cli(dir, {"report", "merge", dir.file("junk.json")});
    CHECK(junk.code == 2);
    CHECK_THAT(junk.err, Catch::Contains("not an `attncheck fuzz --json` report"));
    const Result none = run_cli(dir, {"report", "merge"});
    CHECK(none.code == 2);
}

}  // namespace
