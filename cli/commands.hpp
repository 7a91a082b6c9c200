// cli/commands.hpp — the subcommands of `attncheck`, one file each, registered by main.cpp.
//
// Each add_*_command() adds its CLI11 subcommand (options, help text) to the app and returns the
// function that runs it once the command line has parsed. A runner returns the process exit code
// (0 success, 1 a check failed) and reports bad input by throwing attncheck::InputError, which
// main() turns into exit code 2 and a message on stderr. The one exception is `fuzz`, whose run
// finds usage errors of its own (an unknown kernel, a selection that runs nothing): it prints
// every usage error it finds as "attncheck fuzz: ..." and returns 2. `bench` returns 1 when a
// kernel disagrees with the reference or refuses a shape (its message on stderr), or when its
// verdict fails.
#pragma once

#include <functional>

#include <CLI/CLI.hpp>

namespace attncheck::cli {

struct Command {
    CLI::App* app = nullptr;     // the subcommand; *app is true when it was given
    std::function<int()> run;    // runs it with the parsed options
};

Command add_init_command(CLI::App& app);
Command add_logits_command(CLI::App& app);
Command add_generate_command(CLI::App& app);
Command add_explain_command(CLI::App& app);
Command add_fuzz_command(CLI::App& app);
Command add_bench_command(CLI::App& app);
Command add_report_command(CLI::App& app);
Command add_train_command(CLI::App& app);

// `attncheck bench` re-executes the process with GOMP_SPINCOUNT=10000 (cli/bench_command.cpp says
// why) before anything else runs, unless the caller chose an OpenMP wait policy; any other
// command returns at once.
void reexec_for_bench(int argc, char** argv);

}  // namespace attncheck::cli
