// properties/campaign_merge.cpp — `attncheck report merge` (properties/campaign.hpp): the --json
// reports of a campaign's shards read back, checked to belong to one campaign, and printed and
// written as the single run they add up to.
#include <algorithm>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <sstream>

#include "attncheck/error.hpp"
#include "properties/campaign.hpp"
#include "properties/fuzz_run.hpp"

namespace attncheck::properties {
namespace {

// One input file: its rows and, for a campaign's shard, which one it is.
struct Report {
    std::string file;
    nlohmann::json campaign;  // null outside a campaign
    std::vector<Row> rows;
    std::uint64_t seed = 0;
};

Report read_report(const std::string& file) {
    std::ifstream in(file);
    if (!in) throw InputError(file + ": cannot be read");
    std::stringstream text;
    text << in.rdbuf();
    const nlohmann::json j = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) throw InputError(file + ": not JSON");
    if (!j.is_object() || !j.contains("schema_version") || !j.contains("results") || !j["results"].is_array())
        throw InputError(file + ": not an `attncheck fuzz --json` report (no schema_version and results)");
    if (j["schema_version"] != kJsonSchemaVersion)
        throw InputError(file + ": schema_version " + j["schema_version"].dump() + ", this attncheck reads " +
                         std::to_string(kJsonSchemaVersion));
    if (j.contains("mutants")) throw InputError(file + ": a --mutants report: the zoo's kill table is not merged");
    Report r;
    r.file = file;
    r.seed = j.value("seed", std::uint64_t(0));
    if (j.contains("campaign") && j["campaign"].is_object()) r.campaign = j["campaign"];
    std::size_t i = 0;
    try {
        for (; i < j["results"].size(); ++i) r.rows.push_back(row_from_json(j["results"][i]));
    } catch (const nlohmann::json::exception& e) {
        throw InputError(file + ": results[" + std::to_string(i) + "]: " + e.what());
    }
    return r;
}

std::string shard_text(const nlohmann::json& c) {
    return std::to_string(c["shard"].value("index", 0)) + "/" + std::to_string(c["shard"].value("count", 1));
}

// The shards of one campaign (same base seed, shard count and rounds), none twice. Returns the
// shards missing from 0..N-1 as "I/N" and says on stdout which inputs did not finish.
std::vector<std::string> check_shards(const std::vector<Report>& reports) {
    const Report* first = nullptr;
    std::map<int, std::string> seen;
    std::vector<std::string> missing;
    for (const Report& r : reports) {
        if (r.campaign.is_null()) continue;
        const nlohmann::json& c = r.campaign;
        if (!c.contains("shard") || !c["shard"].is_object()) throw InputError(r.file + ": its campaign has no shard");
        if (!first) first = &r;
        const nlohmann::json& f = first->campaign;
        if (c.value("base_seed", std::uint64_t(0)) != f.value("base_seed", std::uint64_t(0)) ||
            c["shard"].value("count", 1) != f["shard"].value("count", 1) || c["rounds"] != f["rounds"])
            throw InputError(r.file + " (seed " + c["base_seed"].dump() + ", shard " + shard_text(c) + ", rounds " +
                             c["rounds"].dump() + ") is not of the campaign of " + first->file + " (seed " +
                             f["base_seed"].dump() + ", shard " + shard_text(f) + ", rounds " + f["rounds"].dump() + ")");
        const int index = c["shard"].value("index", 0);
        if (const auto [it, fresh] = seen.emplace(index, r.file); !fresh)
            throw InputError(r.file + " and " + it->second + " are both shard " + shard_text(c));
        if (!c.value("complete", false))
            std::cout << "note: " << r.file << " (shard " << shard_text(c) << ") did not finish: stopped by "
                      << c.value("stopped_by", std::string("?")) << "; its completed runs are merged\n";
    }
    if (first)
        for (int i = 0; i < first->campaign["shard"].value("count", 1); ++i)
            if (!seen.count(i)) missing.push_back(std::to_string(i) + "/" + std::to_string(first->campaign["shard"].value("count", 1)));
    return missing;
}

}  // namespace

int merge_reports(const std::vector<std::string>& files, const std::string& json, const std::string& junit) {
    if (files.empty()) throw InputError("report merge needs at least one --json report of attncheck fuzz");
    for (const auto& [flag, path] : {std::pair<std::string, std::string>{"--json", json}, {"--junit", junit}})
        if (!path.empty())
            if (const std::string why = unwritable(path); !why.empty()) throw InputError(flag + " " + path + ": " + why);
    std::vector<Report> reports;
    for (const std::string& f : files) reports.push_back(read_report(f));
    const std::vector<std::string> missing = check_shards(reports);

    // The rows in the order one run of the whole campaign makes them: corpus replays, then by
    // campaign-wide unit; rows from outside a campaign after them, in the order given.
    std::vector<Row> rows;
    for (const Report& r : reports) rows.insert(rows.end(), r.rows.begin(), r.rows.end());
    std::stable_sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) {
        const auto key = [](const Row& r) { return r.round < 0 ? -1L : r.unit < 0 ? std::numeric_limits<long>::max() : r.unit; };
        return key(a) < key(b);
    });

    std::cout << "attncheck report merge: " << files.size() << " report" << (files.size() == 1 ? "" : "s") << ", "
              << rows.size() << " property runs\n\n";
    const std::vector<Row> table = aggregate_rows(rows);
    int code = report_rows(FuzzOptions{}, table, first_failures(rows));
    print_throughput(std::cout, table);
    if (!missing.empty()) {
        std::cout << "shards missing:";
        for (const std::string& m : missing) std::cout << " " << m;
        std::cout << " (their runs are not checked)\n";
        code = 1;
    }
    long cases = 0;
    double seconds = 0;
    for (const Row& r : rows) {
        cases += r.result.cases;
        seconds += r.result.seconds;
    }
    std::cout << (code == 0 ? "all passed" : "FAILED") << ": " << rows.size() << " property runs, " << cases
              << " cases (merged from " << files.size() << " report" << (files.size() == 1 ? "" : "s") << ")\n";

    const std::uint64_t seed = reports.front().campaign.is_null() ? reports.front().seed
                                                                   : reports.front().campaign.value("base_seed", std::uint64_t(0));
    int written = code;
    if (!json.empty()) {
        nlohmann::json j;
        j["schema_version"] = kJsonSchemaVersion;
        j["seed"] = seed;
        j["merged_from"] = files;
        j["shards_missing"] = missing;
        j["results"] = nlohmann::json::array();
        for (const Row& r : rows) j["results"].push_back(to_json(r));
        j["throughput"] = throughput_json(table);
        j["seconds"] = seconds;
        j["passed"] = code == 0;
        if (!write_file(json, j.dump(2) + "\n")) {
            std::cerr << "attncheck report merge: --json " << json << ": cannot write\n";
            if (written == 0) written = 2;
        }
    }
    if (!junit.empty() && !write_file(junit, junit_xml(table, seed, seconds))) {
        std::cerr << "attncheck report merge: --junit " << junit << ": cannot write\n";
        if (written == 0) written = 2;
    }
    return written;
}

}  // namespace attncheck::properties
