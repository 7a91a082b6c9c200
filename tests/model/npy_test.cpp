// Tests of the .npy reader and writer: round trips, the header variants NumPy produces, and
// one check per class of malformed file.
#include "attncheck/error.hpp"
#include "attncheck/model.hpp"
#include "tests/model/model_test_util.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <iterator>
#include <random>

using namespace attncheck;
using Catch::Matchers::Contains;

namespace {

// A .npy file from its parts: version, header dict text (padded as given), raw data.
// The file is sized once and filled by position: growing it byte by byte with push_back/insert
// makes g++ 12 report a false -Wstringop-overflow inside std::vector at -march=znver3.
std::vector<std::uint8_t> npy_bytes(int major, const std::string& dict,
                                    const std::vector<std::uint8_t>& data) {
    const std::uint8_t magic[8] = {0x93, 'N', 'U', 'M', 'P', 'Y', std::uint8_t(major), 0};
    const std::size_t n = dict.size();
    const std::size_t len_bytes = major >= 2 ? 4 : 2;  // the header length, little-endian
    std::vector<std::uint8_t> out(sizeof magic + len_bytes + n + data.size());
    std::uint8_t* at = std::copy(std::begin(magic), std::end(magic), out.data());
    for (std::size_t i = 0; i < len_bytes; ++i) *at++ = std::uint8_t((n >> (8 * i)) & 0xff);
    at = std::copy(dict.begin(), dict.end(), at);
    std::copy(data.begin(), data.end(), at);
    return out;
}

template <class T>
std::vector<std::uint8_t> raw(const std::vector<T>& v) {
    std::vector<std::uint8_t> out(v.size() * sizeof(T));
    if (!v.empty()) std::memcpy(out.data(), v.data(), out.size());
    return out;
}

NpyArray parse(const std::vector<std::uint8_t>& bytes) {
    return parse_npy(bytes.data(), bytes.size(), "x.npy");
}

std::string dict(const std::string& descr, const std::string& fortran, const std::string& shape) {
    return "{'descr': '" + descr + "', 'fortran_order': " + fortran + ", 'shape': " + shape +
           ", }\n";
}

}  // namespace

TEST_CASE("npy: write/read round trip for every rank, including scalars and empty arrays",
          "[npy]") {
    const std::vector<std::vector<std::size_t>> shapes = {{}, {5}, {0}, {3, 4}, {2, 3, 4}, {1, 1, 1, 7}};
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> u(-10.0f, 10.0f);
    for (const auto& shape : shapes) {
        std::size_t n = 1;
        for (std::size_t s : shape) n *= s;
        std::vector<float> data(n);
        for (float& x : data) x = u(rng);
        testing::TempPath path(".npy");
        write_npy(path, shape, data);
        const auto bytes = testing::read_bytes(path);
        CHECK((bytes.size() - n * 4) % 64 == 0);  // NumPy's 64-byte aligned data
        const NpyArray back = read_npy(path);
        CHECK(back.shape == shape);
        CHECK(back.data == data);
    }
}

TEST_CASE("npy: write_npy refuses a shape that does not match the data", "[npy]") {
    testing::TempPath path(".npy");
    CHECK_THROWS_WITH(write_npy(path, {2, 3}, std::vector<float>(5)),
                      Contains("shape [2, 3] needs 6 values, got 5"));
}

TEST_CASE("npy: header variants NumPy and hand-written files use", "[npy]") {
    const std::vector<float> v = {1.5f, -2.0f, 3.25f};
    // Versions 2.0 and 3.0 differ only in the 4-byte header length.
    for (int major : {1, 2, 3}) {
        INFO("version " << major);
        const NpyArray a = parse(npy_bytes(major, dict("<f4", "False", "(3,)"), raw(v)));
        CHECK(a.shape == std::vector<std::size_t>{3});
        CHECK(a.data == v);
    }
    // Double quotes, other key order, no trailing comma, extra spaces.
    const NpyArray b = parse(npy_bytes(
        1, "{ \"shape\" : ( 1 , 3 ) , \"fortran_order\":False,\"descr\":\"<f4\"}", raw(v)));
    CHECK(b.shape == std::vector<std::size_t>{1, 3});
    // '<f8' is converted to float.
    const NpyArray c = parse(npy_bytes(1, dict("<f8", "False", "(3,)"),
                                       raw(std::vector<double>{1.5, -2.0, 0.1})));
    CHECK(c.data == std::vector<float>{1.5f, -2.0f, 0.1f});
    // Scalar: shape ().
    const NpyArray s = parse(npy_bytes(1, dict("<f4", "False", "()"), raw(std::vector<float>{7})));
    CHECK(s.shape.empty());
    CHECK(s.data == std::vector<float>{7});
    // Unaligned data (header of odd length).
    const NpyArray d = parse(npy_bytes(1, dict("<f4", "False", "(3,)") + " ", raw(v)));
    CHECK(d.data == v);
}

TEST_CASE("npy malformed: bad magic, version, truncation", "[npy][malformed]") {
    const auto good = npy_bytes(1, dict("<f4", "False", "(2,)"), raw(std::vector<float>{1, 2}));
    auto bad = good;
    bad[1] = 'n';
    CHECK_THROWS_WITH(parse(bad), Contains("x.npy") && Contains("not a .npy file"));
    bad = good;
    bad[6] = 4;
    CHECK_THROWS_WITH(parse(bad), Contains("unsupported .npy version 4.0"));
    bad = good;
    bad[7] = 1;
    CHECK_THROWS_WITH(parse(bad), Contains("unsupported .npy version 1.1"));
    for (std::size_t n = 0; n < good.size(); ++n) {
        INFO("truncated to " << n);
        const std::vector<std::uint8_t> cut(good.begin(), good.begin() + std::ptrdiff_t(n));
        CHECK_THROWS_AS(parse(cut), InputError);
    }
    const std::vector<std::uint8_t> v2_short = {0x93, 'N', 'U', 'M', 'P', 'Y', 2, 0, 10, 0};
    CHECK_THROWS_WITH(parse(v2_short), Contains("truncated in its header length"));
}

TEST_CASE("npy malformed: header length past the end or absurd", "[npy][malformed]") {
    auto bytes = npy_bytes(1, dict("<f4", "False", "(2,)"), {});
    bytes[8] = 0xff;
    bytes[9] = 0x7f;
    CHECK_THROWS_WITH(parse(bytes), Contains("header length 32767 runs past the end"));
    auto v2 = npy_bytes(2, dict("<f4", "False", "(2,)"), {});
    v2[11] = 0x40;
    CHECK_THROWS_WITH(parse(v2), Contains("exceeds the limit"));
}

TEST_CASE("npy malformed: header dictionary syntax", "[npy][malformed]") {
    const std::vector<std::pair<std::string, std::string>> cases = {
        {"", "expected '{'"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,)", "expected ',' or '}'"},
        {"{'descr': '<f4, 'fortran_order': False, 'shape': (2,)}", "expected ',' or '}'"},
        {"{'descr' '<f4', 'fortran_order': False, 'shape': (2,)}", "expected ':'"},
        {"{'descr': '<f4', 'fortran_order': false, 'shape': (2,)}", "expected True or False"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': [2]}", "expected '('"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,}", "expected a non-negative"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (-2,)}", "expected a non-negative"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (2 3)}", "expected ',' or ')'"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': 1}", "unexpected key 'x'"},
        {"{'descr': '<f4', 'fortran_order': False}", "missing key 'shape'"},
        {"{'fortran_order': False, 'shape': (2,)}", "missing key 'descr'"},
        {"{'descr': '<f4', 'shape': (2,)}", "missing key 'fortran_order'"},
        {"{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2,)}", "twice"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,)} x", "after the closing"},
        {"{'descr': '<f\\x34', 'fortran_order': False, 'shape': (2,)}", "escape"},
        {"{'descr': '<f4", "unterminated string"},
        {"{descr: '<f4'}", "expected a quoted string"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,)}",
         "dimension too large"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,1)}",
         "more than 8 dimensions"},
    };
    for (const auto& [text, why] : cases) {
        INFO("header " << text);
        CHECK_THROWS_WITH(parse(npy_bytes(1, text, raw(std::vector<float>{1, 2}))),
                          Contains("malformed .npy header") && Contains(why));
    }
}

TEST_CASE("npy malformed: unsupported dtype or Fortran order", "[npy][malformed]") {
    for (const char* descr : {">f4", "<i4", "<f2", "|u1", "float32", "<c8"}) {
        INFO("descr " << descr);
        CHECK_THROWS_WITH(parse(npy_bytes(1, dict(descr, "False", "(2,)"), raw(std::vector<float>{1, 2}))),
                          Contains(std::string("dtype '") + descr + "' is not supported"));
    }
    CHECK_THROWS_WITH(parse(npy_bytes(1, dict("<f4", "True", "(2,)"), raw(std::vector<float>{1, 2}))),
                      Contains("Fortran order"));
}

TEST_CASE("npy malformed: data size does not match the shape", "[npy][malformed]") {
    CHECK_THROWS_WITH(parse(npy_bytes(1, dict("<f4", "False", "(3,)"), raw(std::vector<float>{1, 2}))),
                      Contains("shape [3] of '<f4' needs 12 data bytes, the file has 8"));
    CHECK_THROWS_WITH(parse(npy_bytes(1, dict("<f4", "False", "(1,)"), raw(std::vector<float>{1, 2}))),
                      Contains("needs 4 data bytes, the file has 8"));
    CHECK_THROWS_WITH(parse(npy_bytes(1, dict("<f8", "False", "(2,)"), raw(std::vector<float>{1, 2}))),
                      Contains("needs 16 data bytes, the file has 8"));
    // A huge shape must be refused from the sizes alone, before any allocation.
    CHECK_THROWS_WITH(parse(npy_bytes(1, dict("<f4", "False", "(281474976710656, 281474976710656)"), {})),
                      Contains("more elements than any file can hold"));
    CHECK_THROWS_WITH(parse(npy_bytes(1, dict("<f4", "False", "(281474976710656, 16384)"), {})),
                      Contains("needs too many data bytes"));
    CHECK_THROWS_WITH(parse(npy_bytes(1, dict("<f4", "False", "(1000000000, 1000)"), {})),
                      Contains("the file has 0"));
}

TEST_CASE("npy malformed: float64 value out of float32 range", "[npy][malformed]") {
    CHECK_THROWS_WITH(parse(npy_bytes(1, dict("<f8", "False", "(2,)"), raw(std::vector<double>{1.0, 1e300}))),
                      Contains("element 1") && Contains("does not fit in float32"));
}

TEST_CASE("npy: read_npy names the path of a missing file", "[npy]") {
    CHECK_THROWS_WITH(read_npy("/nonexistent/x.npy"), Contains("/nonexistent/x.npy"));
}

TEST_CASE("npy: random corruption is refused cleanly", "[npy][robustness]") {
    const auto good = npy_bytes(1, dict("<f4", "False", "(2, 3)"), raw(std::vector<float>(6, 1.0f)));
    std::mt19937_64 rng(7);
    for (int trial = 0; trial < 3000; ++trial) {
        auto bytes = good;
        for (int k = 0; k < 3; ++k) bytes[rng() % bytes.size()] = std::uint8_t(rng());
        try {
            const NpyArray a = parse(bytes);
            std::size_t n = 1;
            for (std::size_t s : a.shape) n *= s;
            CHECK(n == a.data.size());
        } catch (const InputError&) {
        }
    }
}
