// tests/cli/cli_explain_test.cpp — `attncheck explain`: the printed matrix parsed back, its causal
// mask exactly above the diagonal and the padding of a memory marked, every row summing to 1.
#include <cmath>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "cli_models.hpp"

using namespace cli_test;

namespace {

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
