// properties/campaign.hpp — `attncheck fuzz` campaigns: many rounds of the same selection, each
// at its own seed, optionally bounded in time, split over machines, and a failure corpus that
// replays every counterexample found before on every later run (docs/cli.md "Campaigns").
//
// A campaign walks property runs ("units") in a fixed order: round 0's runs in the order a plain
// run makes them, then round 1's, ... Round r runs at seed_of_round(S, r) (round 0 at S itself,
// so a one-round campaign is the plain run). Unit u belongs to shard u mod N: N shards with the
// same seed and --rounds R each walk the N*R rounds of the whole campaign and run their own
// units, so together they run exactly the units of one run with --rounds N*R, and `attncheck
// report merge` of their --json files gives that run's rows in that run's order.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "properties/fuzz.hpp"
#include "properties/fuzz_report.hpp"
#include "properties/kernel_properties.hpp"

namespace attncheck::properties {

// The seed of round r of a campaign with base seed S: S for round 0, a well-mixed function of
// (S, r) after it, below 2^62 (a JSON reader keeps it exact).
std::uint64_t seed_of_round(std::uint64_t base, long round);

// The campaign: the corpus replayed first (its entries shared out between the shards), then the
// rounds until --rounds, --duration or SIGINT/SIGTERM ends it. Prints the table of the whole
// campaign, cases per second per property run, the failures, and writes --json (also as a
// checkpoint every --checkpoint-every) and --junit. Returns the exit code (as run_fuzz).
int run_campaign(const FuzzOptions& o, std::uint64_t seed, const std::vector<KernelUnderTest>& kernels,
                 bool reference_decoder, nlohmann::json& json_out);

// One row per (kind, subject, property) of rows: cases, unsupported, vacuous, notes and seconds
// summed; the status the worst of them (a failure, with its details, the first one found).
std::vector<Row> aggregate_rows(const std::vector<Row>& rows);
// The rows whose failures are printed: the first of each (kind, subject, property) that neither
// passed nor was not applicable, in row order (a corpus replay first; the later rounds' failures
// of the same run stay in --json).
std::vector<Row> first_failures(const std::vector<Row>& rows);
// Cases per second per aggregated row, as --json "campaign.throughput" and a printed table.
nlohmann::json throughput_json(const std::vector<Row>& table);
void print_throughput(std::ostream& os, const std::vector<Row>& table);

// `attncheck report merge FILE...`: the --json files of a campaign's shards (or of any fuzz
// runs) as one table and one verdict; --json and --junit of the merged rows when the paths are
// not empty. 0 all passed, 1 something failed, was not checked, or shards are missing; throws
// InputError for a file that is not an `attncheck fuzz --json` report or shards that do not
// belong to one campaign.
int merge_reports(const std::vector<std::string>& files, const std::string& json, const std::string& junit);

// ---- the failure corpus (properties/corpus.cpp) ----

// The entry format's version ("attncheck_corpus" in every entry; docs/cli.md "The corpus").
inline constexpr int kCorpusFormat = 1;

// A counterexample saved in the corpus: what to run again and where it was found.
struct CorpusEntry {
    std::string file;  // the file name in the corpus directory
    RowKind kind = RowKind::kernel;
    std::string subject, property, flag;
    std::uint64_t seed = 0;
    int cases = 0;
    int failed_at = 0;
    std::string reproduce;  // "" (a crash or hang): replayed from the seed, up to failed_at
    std::string message;
};

// The entry in a file's text; throws InputError saying why it is not one (not JSON, another
// format, a field missing or of the wrong type, a case that does not decode).
CorpusEntry parse_corpus_entry(const std::string& file, const std::string& text);
// The entry of a failed row, as the file's JSON text, and the file name it is saved under (the
// kind, subject and property, and a hash of the case).
std::string corpus_entry_text(const Row& r);
std::string corpus_file_name(const Row& r);

// The shard that replays an entry: a hash of its file name mod N, so that an entry another shard
// saves while this one starts moves no other entry to another shard.
int corpus_shard(const std::string& file, int shard_count);

struct CorpusLoad {
    std::vector<CorpusEntry> entries;                          // by file name
    std::vector<std::pair<std::string, std::string>> refused;  // file, why
};
// Every *.json file of dir (created when missing); any other file but a dot file is refused.
// Throws InputError when dir cannot be created or read.
CorpusLoad load_corpus(const std::string& dir);

}  // namespace attncheck::properties
