// tests/reference/independent_numpy_test.cpp — the oracle checked by a second, independent oracle.
//
// The float64 reference decoder is what every other result in the suite is measured against, so
// its own correctness cannot be established by comparing it with anything built from it. This
// test compares it with tests/independent/decoder_numpy.py, a float64 NumPy implementation
// written from MODEL.md alone, that reads the model through its own safetensors parser (so the
// file format written by save_model is checked too). Every one of the 96 configurations is run.
//
// All cases go to one Python process (the script's --batch). The script's logits come back through a .npy file read by read_npy, which rounds them to
// float32: that rounding is at most 2^-24 of a logit, 16 times below the bound.
//
// Dimension legend: V, d, T, S as in MODEL.md.
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "attncheck/model.hpp"
#include "reference/decoder.hpp"
#include "variants.hpp"

namespace {

using namespace attncheck;
namespace fs = std::filesystem;

// Two float64 implementations of the same formulas differ only by rounding (~1e-15) and by
// summation order; 1e-6 of the largest logit is far above that and far below the O(1) effect
// of any semantic difference (a missing scale, a wrong LayerNorm variance, a swapped wiring).
// It is also above read_npy's float32 rounding of the script's output (6e-8 relative).
constexpr double kIndependentRelBound = 1e-6;

const char* const kPython = "/usr/bin/python3";

std::string script_path() { return std::string(ATTNCHECK_SOURCE_DIR) + "/tests/independent/decoder_numpy.py"; }

bool python_has_numpy() {
    const std::string cmd = std::string(kPython) + " -c \"import numpy\" > /dev/null 2>&1";
    return std::system(cmd.c_str()) == 0;
}

std::string slurp(const fs::path& p) {
    std::ifstream in(p);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
}

// A scratch directory removed when the test ends, whatever the outcome.
struct ScratchDir {
    fs::path path;
    ScratchDir() {
        path = fs::temp_directory_path() /
               ("attncheck_independent_" + std::to_string(std::random_device{}()));
        fs::create_directories(path);
    }
    ~ScratchDir() {
        std::error_code ec;
        fs::remove_all(path, ec);
    }
};

// One case written for the script: its model, tokens and memory files, and the line of the
// batch list that names them.
struct Written {
    std::vector<int> tokens;
    std::optional<Memory> memory;
    fs::path out_file;
    std::string line;  // MODEL \t TOKENS \t OUT [\t MEMORY \t VALID_LEN]
};

Written write_case(const ScratchDir& dir, int index, test::VariantCase& v) {
    const ModelConfig& c = v.config;
    Written w{v.tokens(c.max_len), v.memory(5, 3), dir.path / ("logits_" + std::to_string(index) + ".npy"), {}};
    // 5 memory rows, 3 real: the script must mask the padding too.
    const fs::path model_file = dir.path / ("model_" + std::to_string(index) + ".safetensors");
    save_model(v.model, model_file.string());
    // g++ 12 warns falsely (-Wrestrict) on chains of std::string operator+; a stream is clearer anyway.
    std::ostringstream line;
    line << model_file.string() << '\t';
    for (std::size_t i = 0; i < w.tokens.size(); ++i) line << (i ? "," : "") << w.tokens[i];
    line << '\t' << w.out_file.string();
    if (w.memory) {
        const fs::path memory_file = dir.path / ("memory_" + std::to_string(index) + ".npy");
        write_npy(memory_file.string(), {std::size_t(w.memory->rows), std::size_t(c.d_model)}, w.memory->data);
        line << '\t' << memory_file.string() << '\t' << w.memory->valid_len;
    }
    w.line = line.str();
    return w;
}

// The reference against the script's logits on one case; returns the worst error relative to
// max|logit|.
double compare_with_numpy(const Written& w, test::VariantCase& v) {
    INFO(v.describe());
    const NpyArray theirs = read_npy(w.out_file.string());  // [T, V]
    const xt::xtensor<double, 2> ours = reference::Decoder<double>(v.model).forward(w.tokens, w.memory);  // [T, V]
    REQUIRE(theirs.shape == std::vector<std::size_t>{ours.shape(0), ours.shape(1)});
    const double scale = xt::amax(xt::abs(ours))();
    std::size_t worst_i = 0;
    double worst_here = -1;
    for (std::size_t i = 0; i < ours.size(); ++i) {
        const double err = std::abs(double(theirs.data[i]) - ours.flat(i));
        if (!(err <= worst_here)) worst_here = err, worst_i = i;  // NaN counts as worst
    }
    const std::size_t V = ours.shape(1);
    INFO("worst logit [" << worst_i / V << ", " << worst_i % V << "]: reference " << ours.flat(worst_i)
                         << ", numpy " << theirs.data[worst_i] << ", |error| " << worst_here
                         << " > " << kIndependentRelBound << " * max|logit| " << scale);
    CHECK(worst_here <= kIndependentRelBound * scale);
    return worst_here / scale;
}

}  // namespace

// The worst reference-vs-NumPy error, as a fraction of max|logit|, over n variant cases
// (test id `id`, the index's config from `config`), printed; skipped with a warning without NumPy.
template <class Config>
void compare_variants(std::uint64_t id, int n, Config config, const char* which) {
    if (!python_has_numpy()) {
        WARN(kPython << " cannot import numpy: the independent-implementation check is skipped");
        SUCCEED();
        return;
    }
    REQUIRE(fs::exists(script_path()));
    ScratchDir dir;
    std::vector<test::VariantCase> cases;
    std::vector<Written> written;
    std::ofstream list(dir.path / "cases.txt");
    for (int index = 0; index < n; ++index) {
        cases.emplace_back(id, index, config(index));
        written.push_back(write_case(dir, index, cases.back()));
        list << written.back().line << '\n';
    }
    list.close();
    // One Python process for every case (each start with NumPy costs about 0.2 s).
    const fs::path log_file = dir.path / "log.txt";
    const std::string cmd = std::string(kPython) + " '" + script_path() + "' --batch '" +
                            (dir.path / "cases.txt").string() + "' > '" + log_file.string() + "' 2>&1";
    const int rc = std::system(cmd.c_str());
    INFO("command: " << cmd << "\noutput: " << slurp(log_file));
    REQUIRE(rc == 0);
    double worst = 0;
    for (int index = 0; index < n; ++index)
        worst = std::max(worst, compare_with_numpy(written[std::size_t(index)], cases[std::size_t(index)]));
    WARN("worst reference-vs-numpy error over " << n << " " << which << ": " << worst << " x max|logit|");
}

TEST_CASE("reference<double> agrees with the independent NumPy decoder on every configuration",
          "[reference][independent]") {
    compare_variants(31, test::kNumVariants, [](int index) { return test::variant(index); }, "variants");
}

TEST_CASE("reference<double> agrees with the independent NumPy decoder with GQA, windows and rope",
          "[reference][independent][v2]") {
    compare_variants(32, test::kNumVariantsV2, [](int index) { return test::variant_v2(index); },
                     "version 2 variants");
}
