// properties/fuzz_report.hpp — what `attncheck fuzz` prints and writes about its results: the
// table (property x subject), the failures with their replay lines, the notes, the mutant zoo's
// kill table, and the --json (schema_version 2) and --junit files.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "properties/runner.hpp"

namespace attncheck::properties {

// --json's layout (documented in docs/cli.md). 1 is the unversioned layout from before
// "schema_version" (without "case", "counterexample_values", "shrink_*", "replay_env" and
// "capped_from").
inline constexpr int kJsonSchemaVersion = 2;

// What a row's subject is: a kernel at kernel level, a decoder, a mutant of the zoo, or one of
// the zoo's correct base kernels (the controls a kill is measured against).
enum class RowKind { kernel, decoder, mutant, control };
const char* to_string(RowKind kind);
// The kind named by to_string(kind); `otherwise` for any other text.
RowKind row_kind_from_string(const std::string& text, RowKind otherwise);

// One line of the results: a property run against a subject.
struct Row {
    Row() = default;
    Row(RowKind kind_, std::string subject_, std::string replay_flag_, RunParams params_, PropertyResult result_ = {})
        : kind(kind_), subject(std::move(subject_)), replay_flag(std::move(replay_flag_)), params(std::move(params_)),
          result(std::move(result_)) {}
    RowKind kind = RowKind::kernel;
    std::string subject;      // kernel name, or decoder name
    std::string replay_flag;  // what selects the subject on the command line
    RunParams params;
    PropertyResult result;
    bool library = false;     // a --kernel-lib kernel: check_kernel() on it replays the row too
    int capped_from = 0;      // > 0: the default budget this decoder-level run was capped from
    // Campaigns (properties/campaign.hpp): the round (its seed is params.seed; -1: a corpus
    // replay) and the property run's index in the whole campaign (-1 outside one), which orders
    // the rows of merged shards as one run would have.
    int round = 0;
    long unit = -1;
    std::string corpus_entry;  // a corpus replay: the entry's file name
};

// "pass 300", "FAIL @17", "NOT CHECKED (4/40 supported)", ...
std::string cell(const PropertyResult& r);
std::string seconds_text(double s);

// The table of the rows of one kind: a line per property, a column per subject.
void print_table(std::ostream& os, const std::vector<Row>& rows, RowKind kind, const std::string& title);
// Prints one failed row. `seen` maps a counterexample already printed to where it was, so that
// several properties failing on the same shrunk case print it once.
void print_failure(std::ostream& os, const Row& r, std::map<std::string, std::string>& seen);
// Every row that neither passed nor was skipped, through print_failure.
void print_failures(std::ostream& os, const std::vector<Row>& rows);
// The properties skipped after a kernel crashed or hung, on one line.
void print_skipped(std::ostream& os, const std::vector<Row>& rows);
// The warnings and notes of the rows, and the decoder-level budgets that were capped.
void print_notes(std::ostream& os, const std::vector<Row>& rows);
// --verbose: the input spread of every row.
void print_spread(std::ostream& os, const std::vector<Row>& rows);

// One row as a --json "results" object, and back (the worker's result file).
nlohmann::json to_json(const Row& r);
PropertyResult from_json(const nlohmann::json& j);
// A whole row back from its --json object (attncheck report merge). Throws nlohmann's
// exceptions on fields of the wrong type.
Row row_from_json(const nlohmann::json& j);
std::string junit_xml(const std::vector<Row>& rows, std::uint64_t seed, double seconds);

// The mutant zoo's kill table: a mutant's first kill (the failed row with the smallest case
// index; nullptr: it survived) and its other kills as "property@case ...".
struct MutantVerdict {
    const Row* first = nullptr;
    std::string also;
};
MutantVerdict mutant_verdict(const std::vector<Row>& rows);
void print_mutant_header(std::ostream& os, std::uint64_t seed, int cases);
void print_mutant_line(std::ostream& os, const std::string& mutant, const MutantVerdict& v);
nlohmann::json mutant_json(const std::string& mutant, const std::string& bug, const MutantVerdict& v);
// "N of M mutants killed; median cases to the first kill: X"; returns the median.
double print_mutant_summary(std::ostream& os, std::vector<int> kill_cases, std::size_t mutants);

// A --json/--junit path that cannot be written: why ("" when it can be). Found before the run
// rather than after minutes of it; a file that does not exist yet is created and removed again.
std::string unwritable(const std::string& path);
// Writes text to path; false (errno set) when any part of it could not be written.
bool write_file(const std::string& path, const std::string& text);

}  // namespace attncheck::properties
