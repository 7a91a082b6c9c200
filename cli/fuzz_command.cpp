// cli/fuzz_command.cpp — `attncheck fuzz`: hands its arguments to properties::fuzz_main.
//
// The fuzz driver owns its flags and its --help; this file only makes sure CLI11 lets them
// through untouched (prefix_command: everything after `fuzz` is "remaining", and no help flag
// of our own to intercept --help).
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.hpp"
#include "properties/fuzz.hpp"

namespace attncheck::cli {

Command add_fuzz_command(CLI::App& app) {
    CLI::App* sub = app.add_subcommand(
        "fuzz", "Property-test kernels and decoders (all arguments go to the fuzz driver; "
                "`attncheck fuzz --help` lists them)");
    sub->prefix_command();
    sub->set_help_flag();  // --help belongs to fuzz_main
    return {sub, [sub] { return properties::fuzz_main(sub->remaining()); }};
}

}  // namespace attncheck::cli
