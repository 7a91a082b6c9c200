// tests/cli/cli_test.cpp — the `attncheck` executable, run as a user runs it.
//
// Every test spawns the built binary (ATTNCHECK_CLI) with posix_spawn (run_cli.hpp), stdout and
// stderr sent to two files of a fresh temporary directory, and checks the exit code (0 ok, 1 a
// check failed, 2 bad input), where the message went, and what the files it wrote contain. Models are made
// with `attncheck init` itself, so the round trip init -> file -> logits is what is tested.
//
// To add an error-path case: append a row to the table of the "bad input" test case with the
// arguments and the words the message must contain; it is checked for exit code 2, a message
// on stderr prefixed "attncheck: error: ", and nothing on stdout.
//
// Dimension legend: T = tokens, V = vocab_size, d = d_model, S = memory rows.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "attncheck/model.hpp"
#include "attncheck/tolerance.hpp"
#include "reference/error_bound.hpp"
#include "run_cli.hpp"

namespace {

using namespace cli_test;
using attncheck::NpyArray;

// A model file made by `attncheck init` with extra flags.
std::string init_model_file(const TempDir& dir, const std::string& name,
                            const std::vector<std::string>& flags) {
    const std::string path = dir.file(name);
    std::vector<std::string> args = {"init", "--out", path};
    args.insert(args.end(), flags.begin(), flags.end());
    run_ok(dir, args);
    return path;
}

std::string join(const std::vector<int>& ids) {
    std::string s;
    for (int id : ids) {
        if (!s.empty()) s += ',';
        s += std::to_string(id);
    }
    return s;
}

std::vector<int> parse_ids(std::string line) {
    std::vector<int> ids;
    while (!line.empty() && (line.back() == '\n')) line.pop_back();
    std::stringstream ss(line);
    std::string item;
    while (std::getline(ss, item, ',')) ids.push_back(std::stoi(item));
    return ids;
}

// Logits [T, V] through `attncheck logits ... --out`, checked for shape and finiteness.
NpyArray logits_npy(const TempDir& dir, const std::string& model, const std::vector<int>& tokens,
                    std::size_t V, const std::vector<std::string>& flags) {
    const std::string out = dir.file("logits.npy");
    std::vector<std::string> args = {"logits", "--model", model, "--tokens", join(tokens), "--out", out};
    args.insert(args.end(), flags.begin(), flags.end());
    run_ok(dir, args);
    NpyArray a = attncheck::read_npy(out);
    REQUIRE(a.shape == std::vector<std::size_t>{tokens.size(), V});
    REQUIRE(a.data.size() == tokens.size() * V);
    for (std::size_t i = 0; i < a.data.size(); ++i) {
        INFO("logit [" << i / V << ", " << i % V << "] of " << model);
        REQUIRE(std::isfinite(a.data[i]));
    }
    return a;
}

// A memory m [S, d] with values in [-1, 1], deterministic in seed.
std::string write_memory(const TempDir& dir, const std::string& name, std::size_t S, std::size_t d,
                         std::uint32_t seed) {
    std::vector<float> m(S * d);
    std::uint32_t x = seed * 2654435761u + 1;
    for (float& v : m) {
        x = x * 1664525u + 1013904223u;  // LCG: any fixed stream of values will do
        v = float(double(x >> 8) / double(1u << 24) * 2.0 - 1.0);
    }
    const std::string path = dir.file(name);
    attncheck::write_npy(path, {S, d}, m);
    return path;
}

// ---------------------------------------------------------------------------------------------
// Tolerances.
// ---------------------------------------------------------------------------------------------

// Reference teacher-forced and incremental logits are both float64 results rounded once to
// float32; the float64 computations differ only in the order of a few sums (a prefix instead of
// the whole sequence), far below a float32 ulp, so after rounding they differ by at most one
// float32 ulp of an element. Two ulps of the output's scale leaves room for an element near a
// rounding boundary and for a small element whose ulp is finer than the scale's.
constexpr double kReferenceModesUlps = 2.0;

bool close_in_ulps(const std::vector<float>& a, const std::vector<float>& b, double ulps, std::string& why) {
    double scale = 0;
    for (float v : a) scale = std::max(scale, std::abs(double(v)));
    const double bound = ulps * attncheck::kEps32 * scale;
    for (std::size_t i = 0; i < a.size(); ++i) {
        const double diff = std::abs(double(a[i]) - double(b[i]));
        if (!(diff <= bound)) {
            std::ostringstream s;
            s.precision(9);
            s << "element [" << i << "]: " << a[i] << " vs " << b[i] << ", |diff| " << diff << " > bound " << bound;
            why = s.str();
            return false;
        }
    }
    return true;
}

// ---------------------------------------------------------------------------------------------
// Parsing `attncheck explain`.
// ---------------------------------------------------------------------------------------------

const std::string kBlocked = "\u00b7";  // the causal-mask marker
const std::string kPadding = "pad";     // the padding marker of --cross

struct ExplainRow {
    int query = -1, token = -1;
    std::vector<std::string> cells;  // one per key column: a number or a marker
    double sum = NAN;
};

// The rows of the matrix: lines "query token | cells... | sum" whose first field is a number.
std::vector<ExplainRow> parse_explain(const std::string& text) {
    std::vector<ExplainRow> rows;
    std::stringstream lines(text);
    std::string line;
    while (std::getline(lines, line)) {
        const auto bar1 = line.find('|');
        if (bar1 == std::string::npos) continue;
        const auto bar2 = line.find('|', bar1 + 1);
        if (bar2 == std::string::npos) continue;
        std::stringstream head(line.substr(0, bar1));
        ExplainRow row;
        if (!(head >> row.query >> row.token)) continue;  // the header lines
        std::stringstream cells(line.substr(bar1 + 1, bar2 - bar1 - 1));
        std::string cell;
        while (cells >> cell) row.cells.push_back(cell);
        std::stringstream tail(line.substr(bar2 + 1));
        tail >> row.sum;
        rows.push_back(std::move(row));
    }
    return rows;
}

bool is_number(const std::string& s, double& value) {
    char* end = nullptr;
    value = std::strtod(s.c_str(), &end);
    return !s.empty() && end == s.c_str() + s.size();
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// init and logits.
// ---------------------------------------------------------------------------------------------

TEST_CASE("init writes each preset and logits reads it back as finite [T, V]", "[cli][init][logits]") {
    TempDir dir;
    for (const std::string preset : {"tiny", "small", "base"}) {
        INFO("preset " << preset);
        const std::string model = init_model_file(dir, preset + ".safetensors", {"--preset", preset, "--seed", "3"});
        const attncheck::Model m = attncheck::load_model(model);
        REQUIRE(m.config == attncheck::preset_config(preset));
        const std::vector<int> tokens = {1, 2, 3, 0, 5};
        logits_npy(dir, model, tokens, std::size_t(m.config.vocab_size), {});
    }
}

TEST_CASE("init applies every override flag to the file's config", "[cli][init]") {
    TempDir dir;
    const std::string model = init_model_file(
        dir, "custom.safetensors",
        {"--preset", "tiny", "--vocab-size", "20", "--d-model", "12", "--n-heads", "3", "--d-ff", "10",
         "--n-layers", "3", "--max-len", "9", "--norm", "pre", "--cross-attention", "--positional", "learned",
         "--activation", "gelu_tanh", "--embed-scale", "1", "--tie-embeddings", "false", "--ln-eps", "1e-6"});
    attncheck::ModelConfig want;
    want.vocab_size = 20;
    want.d_model = 12;
    want.n_heads = 3;
    want.d_ff = 10;
    want.n_layers = 3;
    want.max_len = 9;
    want.norm = attncheck::Norm::pre;
    want.cross_attention = true;
    want.positional = attncheck::Positional::learned;
    want.activation = attncheck::Activation::gelu_tanh;
    want.embed_scale_sqrt_d = false;
    want.tie_embeddings = false;
    want.ln_eps = 1e-6;
    const attncheck::Model m = attncheck::load_model(model);
    CHECK(m.config == want);
    CHECK(m.tensors.count("lm_head.weight") == 1);
    CHECK(m.tensors.count("pos.weight") == 1);
    CHECK(m.tensors.count("final_norm.weight") == 1);

    // Each spelling of a boolean flag.
    const auto cross_of = [&](const std::vector<std::string>& flags) {
        return attncheck::load_model(init_model_file(dir, "b.safetensors", flags)).config.cross_attention;
    };
    CHECK(cross_of({"--cross-attention"}));
    CHECK(cross_of({"--cross-attention", "true"}));
    CHECK(cross_of({"--cross-attention=true"}));
    CHECK_FALSE(cross_of({"--cross-attention", "false"}));
    CHECK_FALSE(cross_of({"--cross-attention=false"}));
    CHECK_FALSE(cross_of({}));  // the tiny preset has none
}

TEST_CASE("init is deterministic in its seed", "[cli][init]") {
    TempDir dir;
    const std::string a = slurp(init_model_file(dir, "a.safetensors", {"--seed", "11"}));
    const std::string b = slurp(init_model_file(dir, "b.safetensors", {"--seed", "11"}));
    const std::string c = slurp(init_model_file(dir, "c.safetensors", {"--seed", "12"}));
    CHECK(a == b);
    CHECK(a != c);
}

TEST_CASE("logits without --out prints the shape and each position's argmax", "[cli][logits]") {
    TempDir dir;
    const std::string model = init_model_file(dir, "m.safetensors", {"--seed", "5"});
    const std::vector<int> tokens = {4, 8, 15, 16};
    const NpyArray logits = logits_npy(dir, model, tokens, 32, {});
    const Result r = run_ok(dir, {"logits", "--model", model, "--tokens", join(tokens)});
    INFO(r.out);
    CHECK(r.out.find("[4, 32]") != std::string::npos);
    // One line per position: "pos token argmax max ...", with the argmax of the .npy's row.
    std::stringstream lines(r.out);
    std::string line;
    std::size_t seen = 0;
    while (std::getline(lines, line)) {
        std::stringstream s(line);
        std::size_t pos = 0;
        int token = 0;
        std::size_t argmax = 0;
        if (!(s >> pos >> token >> argmax)) continue;
        REQUIRE(pos == seen);
        CHECK(token == tokens[pos]);
        const float* row = logits.data.data() + pos * 32;
        CHECK(argmax == std::size_t(std::max_element(row, row + 32) - row));
        ++seen;
    }
    CHECK(seen == tokens.size());
}

TEST_CASE("reference teacher-forced and incremental logits agree", "[cli][logits]") {
    TempDir dir;
    struct Variant {
        std::string name;
        std::vector<std::string> flags;
        bool cross;
    };
    const std::vector<Variant> variants = {
        {"post-norm", {"--seed", "1"}, false},
        {"pre-norm learned gelu untied", {"--seed", "2", "--norm", "pre", "--positional", "learned",
                                          "--activation", "gelu", "--tie-embeddings", "false"}, false},
        {"cross-attention", {"--seed", "3", "--cross-attention", "--n-heads", "4"}, true},
    };
    const std::vector<int> tokens = {3, 1, 4, 1, 5, 9, 2, 6};
    for (const Variant& v : variants) {
        INFO(v.name);
        const std::string model = init_model_file(dir, "m.safetensors", v.flags);
        std::vector<std::string> mem;
        if (v.cross) mem = {"--memory", write_memory(dir, "mem.npy", 5, 16, 7), "--memory-valid-len", "3"};
        std::vector<std::string> teacher = mem, incremental = mem;
        teacher.insert(teacher.end(), {"--mode", "teacher"});
        incremental.insert(incremental.end(), {"--mode", "incremental"});
        const NpyArray a = logits_npy(dir, model, tokens, 32, teacher);
        const NpyArray b = logits_npy(dir, model, tokens, 32, incremental);
        std::string why;
        CHECK(close_in_ulps(a.data, b.data, kReferenceModesUlps, why));
        INFO(why);
        // Not vacuous: the logits depend on the position (a decoder that ignored the prefix
        // would give the same row for the two 1s).
        CHECK(!std::equal(a.data.begin() + 1 * 32, a.data.begin() + 2 * 32, a.data.begin() + 3 * 32));
    }
}

TEST_CASE("optimized logits agree with the float64 oracle in both modes", "[cli][logits][optimized]") {
    TempDir dir;
    for (const bool cross : {false, true}) {
        INFO((cross ? "cross-attention" : "self-attention only"));
        const std::string model = init_model_file(
            dir, "m.safetensors",
            cross ? std::vector<std::string>{"--seed", "8", "--cross-attention", "--norm", "pre"}
                  : std::vector<std::string>{"--seed", "9", "--activation", "gelu_tanh"});
        std::vector<std::string> mem;
        std::optional<attncheck::Memory> memory;
        if (cross) {
            mem = {"--memory", write_memory(dir, "mem.npy", 6, 16, 1), "--memory-valid-len", "4"};
            memory = attncheck::Memory{6, 4, attncheck::read_npy(mem[1]).data};
        }
        const std::vector<int> tokens = {0, 31, 7, 7, 12, 30, 2};
        const auto with = [&](std::vector<std::string> flags) {
            flags.insert(flags.end(), mem.begin(), mem.end());
            return logits_npy(dir, model, tokens, 32, flags).data;
        };
        const std::vector<float> oracle32 = with({"--impl", "reference"});
        const std::vector<double> oracle(oracle32.begin(), oracle32.end());  // float64 rounded once
        // The bound of any correct float32 decoder, plus the half ulp the oracle lost when the
        // command wrote it as float32.
        std::vector<double> bound =
            attncheck::reference::DecoderBound(attncheck::load_model(model)).forward(tokens, memory).bound;
        for (std::size_t i = 0; i < bound.size(); ++i) bound[i] += 0x1p-24 * std::abs(oracle[i]);
        for (const std::string mode : {"teacher", "incremental"}) {
            INFO("optimized " << mode);
            const std::vector<float> candidate = with({"--impl", "optimized", "--mode", mode});
            const attncheck::Agreement agree = attncheck::check_against_bound(candidate, oracle, bound);
            INFO(agree.describe());
            CHECK(agree.ok);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// generate.
// ---------------------------------------------------------------------------------------------

TEST_CASE("generate prints the greedy continuation, one comma-separated line", "[cli][generate]") {
    TempDir dir;
    const std::string model = init_model_file(dir, "m.safetensors", {"--seed", "21"});
    const std::vector<int> prompt = {5, 6, 7};
    const int max_new = 6;
    const Result r = run_ok(dir, {"generate", "--model", model, "--prompt", join(prompt), "--max-new",
                                  std::to_string(max_new)});
    REQUIRE(std::count(r.out.begin(), r.out.end(), '\n') == 1);
    const std::vector<int> generated = parse_ids(r.out);
    REQUIRE(generated.size() == std::size_t(max_new));

    // Each new token is the argmax (lowest id on ties) of the reference logits of the sequence
    // so far: check it against `logits` of prompt + generated[0 .. max_new-2].
    std::vector<int> seq = prompt;
    seq.insert(seq.end(), generated.begin(), generated.end() - 1);
    const NpyArray logits = logits_npy(dir, model, seq, 32, {});
    for (int k = 0; k < max_new; ++k) {
        const float* row = logits.data.data() + (prompt.size() - 1 + std::size_t(k)) * 32;
        INFO("new token " << k);
        CHECK(generated[std::size_t(k)] == int(std::max_element(row, row + 32) - row));
    }

    const Result with_prompt = run_ok(dir, {"generate", "--model", model, "--prompt", join(prompt),
                                            "--max-new", std::to_string(max_new), "--with-prompt"});
    std::vector<int> full = prompt;
    full.insert(full.end(), generated.begin(), generated.end());
    CHECK(parse_ids(with_prompt.out) == full);

    const Result none = run_ok(dir, {"generate", "--model", model, "--prompt", "1", "--max-new", "0"});
    CHECK(none.out == "\n");
}

TEST_CASE("optimized generate follows the optimized logits", "[cli][generate][optimized]") {
    TempDir dir;
    const std::string model = init_model_file(dir, "m.safetensors", {"--seed", "22", "--norm", "pre"});
    const std::vector<int> prompt = {9, 1};
    const int max_new = 8;
    const Result r = run_ok(dir, {"generate", "--model", model, "--prompt", join(prompt), "--max-new",
                                  std::to_string(max_new), "--impl", "optimized"});
    const std::vector<int> generated = parse_ids(r.out);
    REQUIRE(generated.size() == std::size_t(max_new));
    std::vector<int> seq = prompt;
    seq.insert(seq.end(), generated.begin(), generated.end() - 1);
    const NpyArray logits = logits_npy(dir, model, seq, 32, {"--impl", "optimized"});
    // The K/V-cache path and the teacher-forced pass may round differently; where the top two
    // logits are closer than that, either choice is right, so only clear winners are checked.
    constexpr double kClearMarginUlps = 64.0;
    int checked = 0;
    for (int k = 0; k < max_new; ++k) {
        const float* row = logits.data.data() + (prompt.size() - 1 + std::size_t(k)) * 32;
        std::vector<float> sorted(row, row + 32);
        std::sort(sorted.begin(), sorted.end(), std::greater<>());
        if (double(sorted[0] - sorted[1]) <= kClearMarginUlps * attncheck::kEps32 * std::abs(double(sorted[0])))
            continue;
        ++checked;
        INFO("new token " << k);
        CHECK(generated[std::size_t(k)] == int(std::max_element(row, row + 32) - row));
    }
    CHECK(checked > 0);
}

// ---------------------------------------------------------------------------------------------
// explain.
// ---------------------------------------------------------------------------------------------

TEST_CASE("explain shows the causal mask exactly above the diagonal", "[cli][explain]") {
    TempDir dir;
    const std::string model = init_model_file(dir, "m.safetensors", {"--seed", "4", "--n-heads", "4"});
    const std::vector<int> tokens = {7, 3, 3, 30, 0, 12};
    for (int layer = 0; layer < 2; ++layer)
        for (int head = 0; head < 4; ++head) {
            INFO("layer " << layer << " head " << head);
            const Result r = run_ok(dir, {"explain", "--model", model, "--tokens", join(tokens), "--layer",
                                          std::to_string(layer), "--head", std::to_string(head)});
            INFO(r.out);
            CHECK(r.out.find("layer " + std::to_string(layer)) != std::string::npos);
            CHECK(r.out.find("head " + std::to_string(head)) != std::string::npos);
            CHECK(r.out.find("legend") != std::string::npos);
            const std::vector<ExplainRow> rows = parse_explain(r.out);
            REQUIRE(rows.size() == tokens.size());
            for (std::size_t i = 0; i < rows.size(); ++i) {
                CHECK(rows[i].query == int(i));
                CHECK(rows[i].token == tokens[i]);
                REQUIRE(rows[i].cells.size() == tokens.size());
                for (std::size_t j = 0; j < tokens.size(); ++j) {
                    INFO("row " << i << " column " << j << ": '" << rows[i].cells[j] << "'");
                    double p = 0;
                    if (j > i) {
                        CHECK(rows[i].cells[j] == kBlocked);
                    } else {
                        REQUIRE(is_number(rows[i].cells[j], p));
                        CHECK(p >= 0.0);
                        CHECK(p <= 1.0);
                    }
                }
                // Printed with 6 decimals: a sum of 1 within float64 rounding prints as 1.000000.
                CHECK(rows[i].sum == Approx(1.0).margin(1e-6));
            }
            CHECK(rows[0].cells[0] == "1.0000");  // the first query sees only itself
        }
}

TEST_CASE("explain --cross marks the padding rows of the memory", "[cli][explain]") {
    TempDir dir;
    const std::string model = init_model_file(dir, "m.safetensors", {"--seed", "6", "--cross-attention"});
    const std::string mem = write_memory(dir, "mem.npy", 5, 16, 3);
    const std::vector<int> tokens = {1, 2, 3};
    const Result r = run_ok(dir, {"explain", "--model", model, "--tokens", join(tokens), "--memory", mem,
                                  "--memory-valid-len", "2", "--cross", "--layer", "1", "--head", "1"});
    INFO(r.out);
    const std::vector<ExplainRow> rows = parse_explain(r.out);
    REQUIRE(rows.size() == tokens.size());
    for (const ExplainRow& row : rows) {
        REQUIRE(row.cells.size() == 5);
        for (std::size_t j = 0; j < 5; ++j) {
            double p = 0;
            if (j >= 2)
                CHECK(row.cells[j] == kPadding);
            else
                CHECK(is_number(row.cells[j], p));
        }
        CHECK(row.sum == Approx(1.0).margin(1e-6));
    }
}

// ---------------------------------------------------------------------------------------------
// Bad input: exit code 2, one clear message on stderr, nothing on stdout.
// ---------------------------------------------------------------------------------------------

TEST_CASE("every bad input exits 2 with a message naming the problem", "[cli][errors]") {
    TempDir dir;
    const std::string model = init_model_file(dir, "m.safetensors", {"--seed", "1"});  // tiny: V 32, d 16, N 32
    const std::string cross = init_model_file(dir, "x.safetensors", {"--seed", "1", "--cross-attention"});
    const std::string mem = write_memory(dir, "mem.npy", 4, 16, 1);
    const std::string narrow = write_memory(dir, "narrow.npy", 4, 8, 1);
    const std::string flat = dir.file("flat.npy");
    attncheck::write_npy(flat, {16}, std::vector<float>(16, 0.5f));
    const std::string garbage = dir.file("garbage.safetensors");
    std::ofstream(garbage) << "this is not a safetensors file at all";
    std::string too_many;
    for (int i = 0; i < 33; ++i) {
        if (i) too_many += ',';
        too_many += std::to_string(i % 32);
    }

    struct Case {
        std::vector<std::string> args;
        std::vector<std::string> words;  // each must appear in the message
    };
    const std::vector<Case> cases = {
        // usage
        {{}, {"subcommand"}},
        {{"frobnicate"}, {"frobnicate"}},
        {{"logits", "--model", model}, {"--tokens"}},
        {{"logits", "--model", model, "--tokens", "1", "--bogus"}, {"--bogus"}},
        {{"init"}, {"--out"}},
        // tokens
        {{"logits", "--model", model, "--tokens", "1,99,2"}, {"--tokens", "99"}},
        {{"logits", "--model", model, "--tokens", too_many}, {"--tokens", "max_len"}},
        {{"logits", "--model", model, "--tokens", ""}, {"--tokens", "empty"}},
        {{"logits", "--model", model, "--tokens", "1,a,3"}, {"--tokens", "'a'"}},
        {{"logits", "--model", model, "--tokens", "1,-2"}, {"--tokens", "negative"}},
        {{"logits", "--model", model, "--tokens", "1,,2"}, {"--tokens", "empty"}},
        {{"logits", "--model", model, "--tokens", "99999999999"}, {"--tokens", "int32"}},
        // files
        {{"logits", "--model", dir.file("missing.safetensors"), "--tokens", "1"}, {"missing.safetensors", "no such file"}},
        {{"logits", "--model", garbage, "--tokens", "1"}, {"garbage.safetensors"}},
        {{"logits", "--model", model, "--tokens", "1", "--out", dir.file("no/such/dir/l.npy")}, {"no/such/dir"}},
        {{"init", "--out", dir.file("no/such/dir/m.safetensors")}, {"no/such/dir"}},
        // memory
        {{"logits", "--model", cross, "--tokens", "1,2"}, {"--memory", "required"}},
        {{"logits", "--model", model, "--tokens", "1,2", "--memory", mem}, {"--memory", "no cross-attention"}},
        {{"logits", "--model", cross, "--tokens", "1,2", "--memory", narrow}, {"width 8", "d_model 16"}},
        {{"logits", "--model", cross, "--tokens", "1,2", "--memory", flat}, {"2-D", "[16]"}},
        {{"logits", "--model", cross, "--tokens", "1,2", "--memory", dir.file("nomem.npy")}, {"nomem.npy"}},
        {{"logits", "--model", cross, "--tokens", "1,2", "--memory", mem, "--memory-valid-len", "5"},
         {"--memory-valid-len", "[0, 4]"}},
        {{"logits", "--model", cross, "--tokens", "1,2", "--memory", mem, "--memory-valid-len", "-1"},
         {"--memory-valid-len", "[0, 4]"}},
        {{"logits", "--model", model, "--tokens", "1,2", "--memory-valid-len", "1"}, {"--memory-valid-len", "--memory"}},
        // enums and numbers
        {{"logits", "--model", model, "--tokens", "1", "--impl", "fast"}, {"--impl", "fast"}},
        {{"logits", "--model", model, "--tokens", "1", "--mode", "parallel"}, {"--mode", "parallel"}},
        {{"logits", "--model", model, "--tokens", "1", "--impl", "optimized", "--precision", "float32"},
         {"--precision"}},
        {{"init", "--out", dir.file("n.safetensors"), "--norm", "middle"}, {"--norm", "middle"}},
        {{"init", "--out", dir.file("n.safetensors"), "--preset", "huge"}, {"--preset", "huge"}},
        {{"init", "--out", dir.file("n.safetensors"), "--activation", "swish"}, {"--activation", "swish"}},
        {{"init", "--out", dir.file("n.safetensors"), "--positional", "rope"}, {"--positional", "rope"}},
        {{"init", "--out", dir.file("n.safetensors"), "--embed-scale", "2"}, {"--embed-scale"}},
        {{"init", "--out", dir.file("n.safetensors"), "--cross-attention", "maybe"}, {"--cross-attention", "maybe"}},
        {{"init", "--out", dir.file("n.safetensors"), "--tie-embeddings", "yes please"}, {"--tie-embeddings"}},
        {{"init", "--out", dir.file("n.safetensors"), "--d-model", "15"}, {"d_model", "15"}},
        {{"init", "--out", dir.file("n.safetensors"), "--vocab-size", "0"}, {"vocab_size"}},
        {{"init", "--out", dir.file("n.safetensors"), "--ln-eps", "0"}, {"ln_eps"}},
        {{"init", "--out", dir.file("n.safetensors"), "--d-model", "lots"}, {"--d-model", "lots"}},
        {{"init", "--out", dir.file("n.safetensors"), "--seed", "-1"}, {"--seed"}},
        {{"init", "--out", dir.file("n.safetensors"), "--vocab-size", "1000000", "--d-model", "100000"},
         {"parameters"}},
        // generate
        {{"generate", "--model", model, "--prompt", "1,2", "--max-new", "31"}, {"--prompt", "max_len"}},
        {{"generate", "--model", model, "--prompt", "1,2", "--max-new", "-1"}, {"--max-new", ">= 0"}},
        {{"generate", "--model", model, "--prompt", "1,2"}, {"--max-new"}},
        // explain
        {{"explain", "--model", model, "--tokens", "1,2", "--layer", "2"}, {"--layer", "0..1"}},
        {{"explain", "--model", model, "--tokens", "1,2", "--layer", "-1"}, {"--layer", "0..1"}},
        {{"explain", "--model", model, "--tokens", "1,2", "--head", "2"}, {"--head", "0..1"}},
        {{"explain", "--model", model, "--tokens", "1,2", "--cross"}, {"--cross", "no cross-attention"}},
    };
    for (const Case& c : cases) {
        std::string line;
        for (const auto& a : c.args) line += " '" + a + "'";
        const Result r = run_cli(dir, c.args);
        INFO("attncheck" << line << "\n" << r.describe());
        CHECK(r.code == 2);
        CHECK(r.err.rfind("attncheck: error: ", 0) == 0);
        CHECK(r.out.empty());
        for (const std::string& w : c.words) {
            INFO("expected the message to contain \"" << w << "\"");
            CHECK(r.err.find(w) != std::string::npos);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Help.
// ---------------------------------------------------------------------------------------------

TEST_CASE("--help of the tool and of each subcommand exits 0 and lists its options", "[cli][help]") {
    TempDir dir;
    struct HelpCase {
        std::vector<std::string> args;
        std::vector<std::string> words;
    };
    const std::vector<HelpCase> cases = {
        {{"--help"}, {"init", "logits", "generate", "explain", "fuzz", "Exit codes"}},
        {{"init", "--help"}, {"--out", "--preset", "--vocab-size", "--d-model", "--n-heads", "--d-ff", "--n-layers",
                              "--max-len", "--norm", "--cross-attention", "--positional", "--activation",
                              "--embed-scale", "--tie-embeddings", "--ln-eps", "--seed"}},
        {{"logits", "--help"}, {"--model", "--tokens", "--memory", "--memory-valid-len", "--impl", "--mode",
                                "--out", "float64"}},
        {{"generate", "--help"}, {"--model", "--prompt", "--max-new", "--impl", "new token ids"}},
        {{"explain", "--help"}, {"--model", "--tokens", "--layer", "--head", "--memory"}},
    };
    for (const HelpCase& c : cases) {
        const Result r = run_cli(dir, c.args);
        INFO(c.args[0] << " --help\n" << r.describe());
        CHECK(r.code == 0);
        for (const std::string& w : c.words) {
            INFO("expected \"" << w << "\"");
            CHECK(r.out.find(w) != std::string::npos);
        }
    }
    const Result version = run_cli(dir, {"--version"});
    CHECK(version.code == 0);
    CHECK(version.out.find("attncheck") != std::string::npos);
    // The code path that runs: "isa avx2+fma (kernels: portable; cpu: ...)".
    CHECK(version.out.find("\nisa ") != std::string::npos);
    CHECK(version.out.find("(kernels: ") != std::string::npos);
}

TEST_CASE("fuzz --help lists fuzz's own options, and an unknown fuzz flag is bad usage", "[cli][fuzz]") {
    TempDir dir;
    const Result help = run_cli(dir, {"fuzz", "--help"});
    INFO(help.describe());
    CHECK(help.code == 0);
    // fuzz's own help, not the tool's list of subcommands.
    CHECK(help.out.find("generate") == std::string::npos);
    for (const std::string w : {"--kernel", "--kernel-lib", "--symbol", "--timeout", "--property", "--level", "--cases",
                                "--seed", "--shrink-time", "--declare", "--empty-rows", "--head-dim", "--deterministic",
                                "--allow-unchecked", "--mutants", "--json", "--junit", "--progress", "--list",
                                "--verbose", "ATTNCHECK_SEED", "ATTNCHECK_PROPERTY", "Exit: 0"}) {
        INFO("expected \"" << w << "\"");
        CHECK(help.out.find(w) != std::string::npos);
    }
    // The worker's flags are not for people.
    CHECK(help.out.find("--worker") == std::string::npos);
    const Result bad = run_cli(dir, {"fuzz", "--no-such-fuzz-flag"});
    INFO(bad.describe());
    CHECK(bad.code == 2);
    CHECK(bad.err.find("--no-such-fuzz-flag") != std::string::npos);
    CHECK(bad.out.empty());
}
