// Malformed model files: one TEST_CASE per class of defect, each checking that parse_model
// throws InputError and that the message names the problem (the tensor, the key, the offset).
// Each file is built from a valid model with exactly one thing wrong, so a check that passes
// for the wrong reason (an earlier, unrelated error) shows up as a message mismatch.
#include "attncheck/error.hpp"
#include "attncheck/model.hpp"
#include "tests/model/model_test_util.hpp"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

using namespace attncheck;
using Catch::Matchers::Contains;
using ojson = nlohmann::ordered_json;

namespace {

// One tensor of a hand-built file: any dtype or shape JSON, any bytes.
struct Item {
    std::string name;
    ojson dtype;
    ojson shape;
    std::vector<std::uint8_t> bytes;
};

std::vector<std::uint8_t> float_bytes(const std::vector<float>& v) {
    std::vector<std::uint8_t> out(v.size() * sizeof(float));
    if (!v.empty()) std::memcpy(out.data(), v.data(), out.size());
    return out;
}

// The valid model every case starts from, as a list of items in expected_tensors order.
const Model& base_model() {
    static const Model m = init_model(testing::distinct_sizes_config(), 42);
    return m;
}
std::vector<Item> base_items() {
    std::vector<Item> items;
    for (const TensorSpec& spec : expected_tensors(base_model().config)) {
        items.push_back({spec.name, "F32", spec.shape,
                         float_bytes(base_model().at(spec.name).data)});
    }
    return items;
}
ojson base_meta() {
    ojson meta = ojson::object();
    for (const auto& [k, v] : config_to_metadata(base_model().config)) meta[k] = v;
    return meta;
}

// Header with contiguous offsets for the items, and the concatenated data.
std::pair<ojson, std::vector<std::uint8_t>> assemble(const ojson& meta,
                                                     const std::vector<Item>& items) {
    ojson h = ojson::object();
    h["__metadata__"] = meta;
    std::vector<std::uint8_t> data;
    for (const Item& it : items) {
        h[it.name] = {{"dtype", it.dtype},
                      {"shape", it.shape},
                      {"data_offsets", {data.size(), data.size() + it.bytes.size()}}};
        data.insert(data.end(), it.bytes.begin(), it.bytes.end());
    }
    return {h, data};
}

Model parse(const std::vector<std::uint8_t>& bytes) {
    return parse_model(bytes.data(), bytes.size(), "m.safetensors");
}
Model parse(const ojson& header, const std::vector<std::uint8_t>& data) {
    return parse(testing::safetensors_bytes(header.dump(), data));
}
Model parse(const ojson& meta, const std::vector<Item>& items) {
    const auto [h, data] = assemble(meta, items);
    return parse(h, data);
}

Item& find(std::vector<Item>& items, const std::string& name) {
    for (Item& it : items) {
        if (it.name == name) return it;
    }
    FAIL("no item " << name);
    throw;
}

}  // namespace

TEST_CASE("malformed: the unmodified base file is valid", "[malformed]") {
    const Model m = parse(base_meta(), base_items());
    CHECK(m.config == base_model().config);
    CHECK(m.tensors.size() == base_model().tensors.size());
}

TEST_CASE("malformed: file shorter than the 8-byte header length", "[malformed]") {
    for (std::size_t n = 0; n < 8; ++n) {
        const std::vector<std::uint8_t> bytes(n, 0);
        INFO(n << " bytes");
        CHECK_THROWS_WITH(parse(bytes), Contains("m.safetensors") && Contains("too short") &&
                                            Contains(std::to_string(n) + " bytes"));
    }
}

TEST_CASE("malformed: header length past the end of the file", "[malformed]") {
    const std::string header = R"({"__metadata__": {}})";
    CHECK_THROWS_WITH(parse(testing::safetensors_bytes(header, {}, header.size() + 1)),
                      Contains("header length 21 runs past the end of the file (20 bytes"));
}

TEST_CASE("malformed: absurd header length (2^63)", "[malformed]") {
    CHECK_THROWS_WITH(parse(testing::safetensors_bytes("{}", {}, std::uint64_t{1} << 63)),
                      Contains("header length 9223372036854775808 is absurd"));
    CHECK_THROWS_WITH(parse(testing::safetensors_bytes("{}", {}, UINT64_MAX - 1)),
                      Contains("is absurd"));
}

TEST_CASE("malformed: header is not valid JSON", "[malformed]") {
    for (const char* bad : {"", "{", "{\"a\": }", "{\"__metadata__\": {\"x\": \"\\q\"}}",
                            "{} extra", "{'single': 'quotes'}", "\xff\xfe"}) {
        INFO("header " << bad);
        CHECK_THROWS_WITH(parse(testing::safetensors_bytes(bad, {})),
                          Contains("not valid JSON") && Contains("at line"));
    }
}

TEST_CASE("malformed: header JSON is not an object", "[malformed]") {
    CHECK_THROWS_WITH(parse(testing::safetensors_bytes("[1, 2]", {})),
                      Contains("header is a JSON array, expected an object"));
    CHECK_THROWS_WITH(parse(testing::safetensors_bytes("\"x\"", {})),
                      Contains("header is a JSON string"));
    CHECK_THROWS_WITH(parse(testing::safetensors_bytes("12", {})),
                      Contains("header is a JSON number"));
}

TEST_CASE("malformed: deeply nested JSON", "[malformed]") {
    const std::string deep = "{\"a\": " + std::string(100000, '[') + std::string(100000, ']') + "}";
    CHECK_THROWS_WITH(parse(testing::safetensors_bytes(deep, {})), Contains("nested deeper"));
}

TEST_CASE("malformed: a key twice in one object", "[malformed]") {
    const auto [h, data] = assemble(base_meta(), base_items());
    std::string text = h.dump();
    // Insert a second "d_model" into the metadata object.
    text.insert(text.find("\"d_model\""), "\"d_model\":\"16\",");
    CHECK_THROWS_WITH(parse(testing::safetensors_bytes(text, data)),
                      Contains("key 'd_model' twice"));
}

TEST_CASE("malformed: missing __metadata__", "[malformed]") {
    auto [h, data] = assemble(base_meta(), base_items());
    h.erase("__metadata__");
    CHECK_THROWS_WITH(parse(h, data), Contains("no __metadata__"));
}

TEST_CASE("malformed: __metadata__ is not an object", "[malformed]") {
    auto [h, data] = assemble(base_meta(), base_items());
    h["__metadata__"] = ojson::array({"format"});
    CHECK_THROWS_WITH(parse(h, data), Contains("__metadata__ is a JSON array"));
    h["__metadata__"] = "attncheck-decoder-1";
    CHECK_THROWS_WITH(parse(h, data), Contains("__metadata__ is a JSON string"));
}

TEST_CASE("malformed: non-string metadata value", "[malformed]") {
    ojson meta = base_meta();
    meta["d_model"] = 8;
    CHECK_THROWS_WITH(parse(meta, base_items()),
                      Contains("__metadata__ key 'd_model' is a JSON number (8)") &&
                          Contains("must be a string"));
    meta = base_meta();
    meta["cross_attention"] = false;
    CHECK_THROWS_WITH(parse(meta, base_items()),
                      Contains("'cross_attention' is a JSON boolean"));
    meta = base_meta();
    meta["norm"] = nullptr;
    CHECK_THROWS_WITH(parse(meta, base_items()), Contains("'norm' is a JSON null"));
}

TEST_CASE("malformed: bad metadata values, each kind", "[malformed]") {
    const std::vector<std::pair<std::string, std::string>> cases = {
        {"format", "safetensors"}, {"vocab_size", "12x"},   {"d_model", "-3"},
        {"n_heads", "0"},          {"d_ff", "1e3"},          {"n_layers", "99999999999"},
        {"max_len", ""},           {"norm", "postln"},       {"cross_attention", "1"},
        {"positional", "rotary"},  {"activation", "swish"},  {"embed_scale", "sqrt"},
        {"tie_embeddings", "no"},  {"ln_eps", "nan"},        {"ln_eps", "-1e-5"}};
    for (const auto& [key, value] : cases) {
        INFO(key << " = " << value);
        ojson meta = base_meta();
        meta[key] = value;
        CHECK_THROWS_WITH(parse(meta, base_items()),
                          Contains("m.safetensors") && Contains("'" + key + "' = \"" + value));
    }
    ojson meta = base_meta();
    meta.erase("ln_eps");
    CHECK_THROWS_WITH(parse(meta, base_items()), Contains("missing key 'ln_eps'"));
    meta = base_meta();
    meta["dmodel"] = "8";
    CHECK_THROWS_WITH(parse(meta, base_items()), Contains("unknown key 'dmodel'"));
    // Well-formed values that break a config rule.
    meta = base_meta();
    meta["n_heads"] = "3";
    CHECK_THROWS_WITH(parse(meta, base_items()), Contains("not divisible by n_heads = 3"));
}

TEST_CASE("malformed: missing tensor", "[malformed]") {
    std::vector<Item> items = base_items();
    std::erase_if(items, [](const Item& it) { return it.name == "layers.1.norm_ffn.bias"; });
    CHECK_THROWS_WITH(parse(base_meta(), items),
                      Contains("missing tensor 'layers.1.norm_ffn.bias' (shape [8])"));
    // Learned positions declared in metadata, but no pos.weight in the file.
    ojson meta = base_meta();
    meta["positional"] = "learned";
    CHECK_THROWS_WITH(parse(meta, base_items()), Contains("missing tensor 'pos.weight'"));
}

TEST_CASE("malformed: extra tensor", "[malformed]") {
    std::vector<Item> items = base_items();
    items.push_back({"layers.2.ffn.fc1.weight", "F32", {12, 8}, float_bytes(std::vector<float>(96))});
    CHECK_THROWS_WITH(parse(base_meta(), items),
                      Contains("unexpected tensor 'layers.2.ffn.fc1.weight'"));
    // An untied head in a file whose metadata says tied.
    items = base_items();
    items.push_back({"lm_head.weight", "F32", {11, 8}, float_bytes(std::vector<float>(88))});
    CHECK_THROWS_WITH(parse(base_meta(), items), Contains("unexpected tensor 'lm_head.weight'"));
}

TEST_CASE("malformed: wrong dtype", "[malformed]") {
    std::vector<Item> items = base_items();
    find(items, "layers.0.self_attn.k.bias").dtype = "F16";
    CHECK_THROWS_WITH(parse(base_meta(), items),
                      Contains("tensor 'layers.0.self_attn.k.bias': dtype 'F16' is not supported"));
    find(items, "layers.0.self_attn.k.bias").dtype = 32;
    CHECK_THROWS_WITH(parse(base_meta(), items),
                      Contains("'layers.0.self_attn.k.bias': dtype is a JSON number"));
}

TEST_CASE("malformed: wrong shape", "[malformed]") {
    std::vector<Item> items = base_items();
    Item& fc1 = find(items, "layers.1.ffn.fc1.weight");
    fc1.shape = {12, 7};
    fc1.bytes.resize(12 * 7 * 4);
    CHECK_THROWS_WITH(parse(base_meta(), items),
                      Contains("tensor 'layers.1.ffn.fc1.weight': shape [12, 7], expected [12, 8]"));
    // Transposed: same element count, wrong layout.
    fc1.shape = {8, 12};
    fc1.bytes.resize(96 * 4);
    CHECK_THROWS_WITH(parse(base_meta(), items),
                      Contains("'layers.1.ffn.fc1.weight': shape [8, 12], expected [12, 8]"));
}

TEST_CASE("malformed: wrong rank", "[malformed]") {
    std::vector<Item> items = base_items();
    find(items, "embed.weight").shape = {88};
    CHECK_THROWS_WITH(parse(base_meta(), items),
                      Contains("'embed.weight': shape [88], expected [11, 8] (rank 1, expected rank 2)"));
    find(items, "embed.weight").shape = {1, 11, 8};
    CHECK_THROWS_WITH(parse(base_meta(), items), Contains("(rank 3, expected rank 2)"));
}

TEST_CASE("malformed: ill-typed shape", "[malformed]") {
    auto [h, data] = assemble(base_meta(), base_items());
    h["embed.weight"]["shape"] = {11, -8};
    CHECK_THROWS_WITH(parse(h, data),
                      Contains("'embed.weight': shape entry 1 (-8) is not a non-negative integer"));
    h["embed.weight"]["shape"] = {11.0, 8};
    CHECK_THROWS_WITH(parse(h, data), Contains("shape entry 0 (11.0)"));
    h["embed.weight"]["shape"] = "11x8";
    CHECK_THROWS_WITH(parse(h, data), Contains("'embed.weight': shape is a JSON string"));
    h["embed.weight"]["shape"] = ojson::array({1, 1, 1, 1, 1, 1, 1, 1, 88});
    CHECK_THROWS_WITH(parse(h, data), Contains("rank 9"));
    // Product overflows 64 bits: must not wrap around to a small, "matching" byte count.
    h["embed.weight"]["shape"] = {std::uint64_t{1} << 32, std::uint64_t{1} << 32, 88};
    CHECK_THROWS_WITH(parse(h, data), Contains("'embed.weight'") && Contains("more elements"));
    h["embed.weight"]["shape"] = {std::uint64_t{1} << 62, 88};
    CHECK_THROWS_WITH(parse(h, data), Contains("more elements"));
}

TEST_CASE("malformed: tensor entry not an object, missing or extra field", "[malformed]") {
    auto [h, data] = assemble(base_meta(), base_items());
    ojson bad = h;
    bad["embed.weight"] = ojson::array({"F32"});
    CHECK_THROWS_WITH(parse(bad, data), Contains("'embed.weight': entry is a JSON array"));
    bad = h;
    bad["embed.weight"].erase("dtype");
    CHECK_THROWS_WITH(parse(bad, data), Contains("'embed.weight': missing field 'dtype'"));
    bad = h;
    bad["embed.weight"]["offsets"] = {0, 4};
    CHECK_THROWS_WITH(parse(bad, data), Contains("'embed.weight': unexpected field 'offsets'"));
}

TEST_CASE("malformed: data offsets past the end of the data", "[malformed]") {
    auto [h, data] = assemble(base_meta(), base_items());
    const std::uint64_t n = data.size();
    // The base model is post-LN and tied: layers.1.norm_ffn.bias is the last tensor.
    auto& off = h["layers.1.norm_ffn.bias"]["data_offsets"];
    off = {n - 28, n + 4};
    CHECK_THROWS_WITH(parse(h, data),
                      Contains("'layers.1.norm_ffn.bias': data_offsets [" + std::to_string(n - 28) +
                               ", " + std::to_string(n + 4) + "] run past the end of the data (" +
                               std::to_string(n) + " bytes)"));
    off = {UINT64_MAX - 31, UINT64_MAX};
    CHECK_THROWS_WITH(parse(h, data), Contains("run past the end"));
}

TEST_CASE("malformed: data offsets length does not match the shape", "[malformed]") {
    auto [h, data] = assemble(base_meta(), base_items());
    h["layers.0.ffn.fc2.bias"]["data_offsets"][1] =
        h["layers.0.ffn.fc2.bias"]["data_offsets"][1].get<std::uint64_t>() - 4;
    CHECK_THROWS_WITH(parse(h, data), Contains("'layers.0.ffn.fc2.bias'") &&
                                          Contains("span 28 bytes, but shape [8] of F32 needs 32"));
}

TEST_CASE("malformed: data offsets ill-typed or reversed", "[malformed]") {
    auto [h, data] = assemble(base_meta(), base_items());
    for (const ojson& bad : {ojson::array({0}), ojson::array({0, 4, 8}), ojson::array({-4, 0}),
                             ojson::array({"0", "4"}), ojson(nullptr), ojson::array({0.0, 4.0})}) {
        INFO("data_offsets " << bad.dump());
        ojson hh = h;
        hh["embed.weight"]["data_offsets"] = bad;
        CHECK_THROWS_WITH(parse(hh, data),
                          Contains("'embed.weight': data_offsets") &&
                              Contains("is not a list of two non-negative integers"));
    }
    h["embed.weight"]["data_offsets"] = {352, 0};
    CHECK_THROWS_WITH(parse(h, data), Contains("[352, 0] has begin > end"));
}

TEST_CASE("malformed: overlapping tensors", "[malformed]") {
    auto [h, data] = assemble(base_meta(), base_items());
    // q.bias reads the last 32 bytes of q.weight: same size, shifted into its neighbour.
    const std::uint64_t qw_end = h["layers.0.self_attn.q.weight"]["data_offsets"][1];
    h["layers.0.self_attn.q.bias"]["data_offsets"] = {qw_end - 32, qw_end};
    CHECK_THROWS_WITH(parse(h, data), Contains("tensors 'layers.0.self_attn.q.weight' and "
                                               "'layers.0.self_attn.q.bias' overlap"));
    // Two tensors aliasing the very same bytes.
    auto [h2, data2] = assemble(base_meta(), base_items());
    h2["layers.1.norm_self.bias"]["data_offsets"] = h2["layers.1.norm_self.weight"]["data_offsets"];
    CHECK_THROWS_WITH(parse(h2, data2), Contains("overlap"));
}

TEST_CASE("malformed: a hole in the data buffer", "[malformed]") {
    auto [h, data] = assemble(base_meta(), base_items());
    // Insert 4 unowned bytes after embed.weight: shift every later tensor by 4.
    const std::uint64_t embed_end = h["embed.weight"]["data_offsets"][1];
    for (auto& [name, e] : h.items()) {
        if (name == "__metadata__" || name == "embed.weight") continue;
        e["data_offsets"][0] = e["data_offsets"][0].get<std::uint64_t>() + 4;
        e["data_offsets"][1] = e["data_offsets"][1].get<std::uint64_t>() + 4;
    }
    data.insert(data.begin() + std::ptrdiff_t(embed_end), 4, 0);
    CHECK_THROWS_WITH(parse(h, data), Contains("hole in the data buffer: bytes [" +
                                               std::to_string(embed_end) + ", " +
                                               std::to_string(embed_end + 4) + ")"));
    // A hole at the very start.
    auto [h2, data2] = assemble(base_meta(), base_items());
    for (auto& [name, e] : h2.items()) {
        if (name == "__metadata__") continue;
        e["data_offsets"][0] = e["data_offsets"][0].get<std::uint64_t>() + 8;
        e["data_offsets"][1] = e["data_offsets"][1].get<std::uint64_t>() + 8;
    }
    data2.insert(data2.begin(), 8, 0);
    CHECK_THROWS_WITH(parse(h2, data2), Contains("hole in the data buffer: bytes [0, 8)"));
}

TEST_CASE("malformed: trailing garbage after the last tensor", "[malformed]") {
    auto [h, data] = assemble(base_meta(), base_items());
    data.insert(data.end(), {'j', 'u', 'n', 'k'});
    CHECK_THROWS_WITH(parse(h, data), Contains("4 trailing bytes after the last tensor"));
}

TEST_CASE("malformed: non-finite weight", "[malformed]") {
    const float bad_values[] = {std::numeric_limits<float>::quiet_NaN(),
                                std::numeric_limits<float>::infinity(),
                                -std::numeric_limits<float>::infinity()};
    for (float bad : bad_values) {
        INFO("value " << bad);
        std::vector<Item> items = base_items();
        Item& q = find(items, "layers.1.self_attn.q.weight");
        std::memcpy(q.bytes.data() + 4 * 13, &bad, 4);  // element 13 = row 1, column 5
        CHECK_THROWS_WITH(parse(base_meta(), items),
                          Contains("tensor 'layers.1.self_attn.q.weight' has a non-finite value") &&
                              Contains("at index 13 (row 1, column 5)"));
    }
    std::vector<Item> items = base_items();
    const float nan = std::numeric_limits<float>::quiet_NaN();
    std::memcpy(find(items, "layers.0.norm_ffn.bias").bytes.data() + 4 * 7, &nan, 4);
    CHECK_THROWS_WITH(parse(base_meta(), items),
                      Contains("'layers.0.norm_ffn.bias' has a non-finite value (nan) at index 7"));
}

// Not a class of its own but the guarantee behind all of them: whatever the bytes, the
// parser returns a valid model or throws InputError; it never crashes or reads out of bounds
// (this test is meant to be run under -DATTNCHECK_SANITIZE=ON as well).
TEST_CASE("malformed: every truncation and random byte corruption is refused cleanly",
          "[malformed][robustness]") {
    const auto [h, data] = assemble(base_meta(), base_items());
    const std::vector<std::uint8_t> good = testing::safetensors_bytes(h.dump(), data);
    for (std::size_t n = 0; n < good.size(); ++n) {
        // Copy into an exactly-sized buffer so that ASan sees any read past the end.
        const std::vector<std::uint8_t> cut(good.begin(), good.begin() + std::ptrdiff_t(n));
        INFO("truncated to " << n << " bytes");
        CHECK_THROWS_AS(parse(cut), InputError);
    }
    std::mt19937_64 rng(20240501);  // fixed: the same corruptions on every run
    int accepted = 0;
    for (int trial = 0; trial < 3000; ++trial) {
        std::vector<std::uint8_t> bytes = good;
        const int flips = 1 + int(rng() % 4);
        // Mostly the header (where the structure is), sometimes the length or the data.
        const std::size_t header_end = 8 + h.dump().size();
        for (int k = 0; k < flips; ++k) {
            const std::size_t pos = rng() % 4 == 0 ? rng() % bytes.size() : rng() % header_end;
            bytes[pos] = std::uint8_t(rng());
        }
        INFO("trial " << trial);
        try {
            const Model m = parse(bytes);
            CHECK_NOTHROW(m.validate());
            ++accepted;
        } catch (const InputError&) {
        }
    }
    INFO("accepted " << accepted << " of 3000 corrupted files");
    CHECK(accepted < 3000);
}
