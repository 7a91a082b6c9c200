// cli/report_command.cpp — `attncheck report merge FILE... [--json OUT] [--junit OUT]`: the
// --json reports of a campaign's shards (attncheck fuzz --shard I/N) as one table and one
// verdict (properties/campaign.hpp, merge_reports).
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.hpp"
#include "properties/campaign.hpp"

namespace attncheck::cli {
namespace {

struct ReportArgs {
    std::vector<std::string> files;
    std::string json, junit;
};

}  // namespace

Command add_report_command(CLI::App& app) {
    auto a = std::make_shared<ReportArgs>();
    CLI::App* sub = app.add_subcommand("report", "Work with the --json reports of attncheck fuzz");
    sub->require_subcommand(1);
    CLI::App* merge = sub->add_subcommand(
        "merge", "Merge the --json reports of a campaign's shards (fuzz --shard I/N) into one table and one verdict");
    merge->add_option("files", a->files, "The reports (attncheck fuzz --json), one per shard")->required()->type_name("FILE...");
    merge->add_option("--json", a->json, "Write the merged results as JSON (the rows of fuzz --json, in one run's order)")
        ->type_name("FILE");
    merge->add_option("--junit", a->junit, "Write the merged results as JUnit XML (one testcase per property and subject)")
        ->type_name("FILE");
    merge->footer(
        "The shards must come from one campaign (the same --seed, shard count and --rounds), each once; a missing "
        "shard fails the verdict. Exit: 0 all passed, 1 a property failed or was not checked, or a shard is missing, "
        "2 bad input (a file that is not a report, shards of different campaigns).");
    return {sub, [a] { return properties::merge_reports(a->files, a->json, a->junit); }};
}

}  // namespace attncheck::cli
