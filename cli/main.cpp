// cli/main.cpp — the `attncheck` executable: subcommands, and the one place errors become exit
// codes.
//
//   0  success
//   1  a check failed (fuzz found a counterexample; bench: a wrong kernel, or a failed verdict)
//   2  bad input or usage: the message goes to stderr as "attncheck: error: ..."
//
// Every subcommand reports bad input by throwing attncheck::InputError; CLI11 throws its own
// parse errors; the decoders may throw optimized::KernelError or run out of memory. All of them
// are caught here, so the tool never aborts with an uncaught exception whatever it is given.
#include <cstdio>
#include <exception>
#include <iostream>
#include <new>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "attncheck/error.hpp"
#include "attncheck/isa.hpp"
#include "cli/commands.hpp"
#include "optimized/decoder.hpp"
#include "optimized/simd_targets.hpp"

namespace {

constexpr int kExitOk = 0;
constexpr int kExitBadInput = 2;

int fail(const std::string& message) {
    std::cerr << "attncheck: error: " << message << "\n";
    return kExitBadInput;
}

int run(int argc, char** argv) {
    CLI::App app{"attncheck: verification and property testing of masked (causal) multi-head "
                 "attention in transformer decoders",
                 "attncheck"};
    // The version names the code path too: verdicts near a bound and every timing depend on it.
    app.set_version_flag("--version", "attncheck 0.1.0\n" + attncheck::isa_line());
    app.require_subcommand(1);
    app.footer("Exit codes: 0 success, 1 a check failed, 2 bad input or usage "
               "(message on stderr).\nRun `attncheck COMMAND --help` for a command's options.");
    const std::vector<attncheck::cli::Command> commands = {
        attncheck::cli::add_init_command(app),     attncheck::cli::add_logits_command(app),
        attncheck::cli::add_generate_command(app), attncheck::cli::add_explain_command(app),
        attncheck::cli::add_fuzz_command(app),     attncheck::cli::add_bench_command(app),
        attncheck::cli::add_report_command(app),   attncheck::cli::add_train_command(app),
    };
    try {
        app.parse(argc, argv);
    } catch (const CLI::Success& e) {  // --help, --version
        return app.exit(e, std::cout, std::cerr);
    } catch (const CLI::ParseError& e) {
        // CLI11 reports a misspelt command as "A subcommand is required"; name it instead.
        if (app.get_subcommands().empty() && argc >= 2 && argv[1][0] != '-')
            return fail(std::string("unknown command '") + argv[1] +
                        "' (expected init, logits, generate, explain, fuzz, bench, report or train; run `attncheck --help`)");
        std::string where = "attncheck";
        for (const CLI::App* sub : app.get_subcommands()) where += " " + sub->get_name();
        return fail(std::string(e.what()) + "\n(run `" + where + " --help` for usage)");
    }
    for (const auto& command : commands)
        if (command.app->parsed()) return command.run();
    return fail("no command given (run `attncheck --help`)");  // require_subcommand makes this unreachable
}

}  // namespace

int main(int argc, char** argv) {
    // A path forced with ATTNCHECK_ISA that this CPU cannot run (or a misspelt one) stops every
    // command: a verdict or a timing must never come silently from another path than the one asked for.
    if (const std::string& error = attncheck::optimized::isa_choice().error; !error.empty()) return fail(error);
    attncheck::cli::reexec_for_bench(argc, argv);
    try {
        return run(argc, argv);
    } catch (const attncheck::InputError& e) {
        return fail(e.what());
    } catch (const attncheck::optimized::KernelError& e) {
        return fail(std::string("the attention kernel refused the problem: ") + e.what());
    } catch (const std::bad_alloc&) {
        return fail("out of memory (the model or the input is too large for this machine)");
    } catch (const std::exception& e) {
        return fail(std::string("internal error: ") + e.what());
    } catch (...) {
        return fail("internal error: unknown exception");
    }
}
