// tests/cli/run_cli.hpp — running the built `attncheck` (ATTNCHECK_CLI) as a child process in a
// fresh temporary directory, for the tests of the command line (cli_test.cpp, fuzz_test.cpp).
#pragma once

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

extern char** environ;

namespace cli_test {

namespace fs = std::filesystem;

// A fresh directory under $TMPDIR (or /tmp), removed with everything in it at scope exit.
struct TempDir {
    fs::path path;
    TempDir() {
        std::string tmpl = (fs::temp_directory_path() / "attncheck_cli_XXXXXX").string();
        std::vector<char> buf(tmpl.begin(), tmpl.end());
        buf.push_back('\0');
        REQUIRE(::mkdtemp(buf.data()) != nullptr);
        path = buf.data();
    }
    ~TempDir() {
        std::error_code ec;
        fs::remove_all(path, ec);
    }
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
    std::string file(const std::string& name) const { return (path / name).string(); }
};

struct Result {
    int code = -1;  // exit status; 128 + signal when killed by one
    std::string out, err;
    std::string describe() const {  // for failure messages
        return "exit " + std::to_string(code) + "\n--- stdout ---\n" + out + "--- stderr ---\n" + err;
    }
};

inline std::string slurp(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Runs `attncheck args...` with stdout and stderr captured in files of dir. `env` entries
// ("NAME=value") replace or add to this process's environment; "NAME" alone removes NAME.
// RC_PARAMS, which CI sets for the test binaries' own RapidCheck runs, is not passed on unless
// `env` sets it: attncheck fuzz reads it, and a test's expectations are for the tool's defaults.
inline Result run_cli(const TempDir& dir, const std::vector<std::string>& args,
                      const std::vector<std::string>& env = {}) {
    const std::string out_path = dir.file(".stdout"), err_path = dir.file(".stderr");
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&actions, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    std::vector<std::string> argv_s = {ATTNCHECK_CLI};
    argv_s.insert(argv_s.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : argv_s) argv.push_back(a.data());
    argv.push_back(nullptr);
    const auto name_of = [](const std::string& entry) { return entry.substr(0, entry.find('=')); };
    std::vector<std::string> env_s;
    for (char** e = environ; e && *e; ++e) {
        bool replaced = name_of(*e) == "RC_PARAMS";
        for (const std::string& x : env) replaced |= name_of(x) == name_of(*e);
        if (!replaced) env_s.push_back(*e);
    }
    for (const std::string& x : env)
        if (x.find('=') != std::string::npos) env_s.push_back(x);
    std::vector<char*> envp;
    for (auto& e : env_s) envp.push_back(e.data());
    envp.push_back(nullptr);
    pid_t pid = 0;
    const int rc = posix_spawn(&pid, ATTNCHECK_CLI, &actions, nullptr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&actions);
    REQUIRE(rc == 0);
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    Result r;
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    r.out = slurp(out_path);
    r.err = slurp(err_path);
    return r;
}

// Runs and requires exit code 0.
inline Result run_ok(const TempDir& dir, const std::vector<std::string>& args,
                     const std::vector<std::string>& env = {}) {
    Result r = run_cli(dir, args, env);
    INFO(r.describe());
    REQUIRE(r.code == 0);
    return r;
}

}  // namespace cli_test
