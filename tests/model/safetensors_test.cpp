// Tests of save_model / load_model on good files: exact round trips for every option, the
// written layout (what other tools rely on), and interoperability with NumPy.
#include "attncheck/error.hpp"
#include "attncheck/model.hpp"
#include "tests/model/model_test_util.hpp"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>

using namespace attncheck;
using Catch::Matchers::Contains;

namespace {

using testing::option_configs;

void check_bitwise_equal(const Model& a, const Model& b) {
    REQUIRE(a.config == b.config);
    REQUIRE(a.tensors.size() == b.tensors.size());
    for (const auto& [name, t] : a.tensors) {
        INFO("tensor " << name);
        const Tensor& u = b.at(name);
        REQUIRE(t.shape == u.shape);
        REQUIRE(t.data.size() == u.data.size());
        CHECK(std::memcmp(t.data.data(), u.data.data(), t.data.size() * sizeof(float)) == 0);
    }
}

}  // namespace

TEST_CASE("save/load round trip is bitwise for every option combination", "[safetensors]") {
    std::uint64_t seed = 1;
    for (const ModelConfig& c : option_configs()) {
        INFO("norm " << to_string(c.norm) << " cross " << c.cross_attention << " pos "
                     << to_string(c.positional) << " act " << to_string(c.activation) << " tied "
                     << c.tie_embeddings << " sqrt_d " << c.embed_scale_sqrt_d);
        const Model m = init_model(c, seed++);
        REQUIRE(m.tensors.size() == expected_tensors(c).size());
        testing::TempPath path(".safetensors");
        save_model(m, path);
        check_bitwise_equal(m, load_model(path));
    }
}

TEST_CASE("round trip keeps special float values that are finite", "[safetensors]") {
    Model m = init_model(testing::distinct_sizes_config(), 7);
    auto& e = m.tensors.at("embed.weight").data;
    e[0] = -0.0f;
    e[1] = 1e-45f;  // the smallest subnormal
    e[2] = 3.4028235e38f;
    testing::TempPath path(".safetensors");
    save_model(m, path);
    const Model back = load_model(path);
    check_bitwise_equal(m, back);
    CHECK(std::signbit(back.at("embed.weight").data[0]));
}

TEST_CASE("save_model writes the layout of the safetensors reference", "[safetensors]") {
    ModelConfig c = testing::distinct_sizes_config();
    c.cross_attention = true;
    c.tie_embeddings = false;
    const Model m = init_model(c, 3);
    const testing::SafetensorsParts p = testing::saved_parts(m);
    // 8-byte prefix + header is a multiple of 8, padded with spaces: the data is aligned.
    CHECK(p.header.size() % 8 == 0);
    const std::size_t last = p.header.find_last_not_of(' ');
    CHECK(p.header[last] == '}');
    CHECK(p.header.size() - last - 1 < 8);

    const nlohmann::ordered_json h = nlohmann::ordered_json::parse(p.header);
    CHECK(h.begin().key() == "__metadata__");
    std::map<std::string, std::string> meta;
    for (const auto& [k, v] : h["__metadata__"].items()) meta[k] = v.get<std::string>();
    CHECK(config_from_metadata(meta) == c);
    // Tensors in expected_tensors order, contiguous from offset 0.
    std::uint64_t offset = 0;
    auto it = std::next(h.begin());
    for (const TensorSpec& spec : expected_tensors(c)) {
        REQUIRE(it != h.end());
        CHECK(it.key() == spec.name);
        CHECK((*it)["dtype"] == "F32");
        CHECK((*it)["shape"].get<std::vector<std::size_t>>() == spec.shape);
        CHECK((*it)["data_offsets"][0].get<std::uint64_t>() == offset);
        offset = (*it)["data_offsets"][1].get<std::uint64_t>();
        ++it;
    }
    CHECK(it == h.end());
    CHECK(offset == p.data.size());
}

TEST_CASE("data at an unaligned offset loads correctly", "[safetensors]") {
    // One extra space makes the header length odd, so every float sits at an odd address.
    const Model m = init_model(testing::distinct_sizes_config(), 5);
    testing::SafetensorsParts p = testing::saved_parts(m);
    p.header += ' ';
    const auto bytes = testing::safetensors_bytes(p.header, p.data);
    check_bitwise_equal(m, parse_model(bytes.data(), bytes.size()));
}

TEST_CASE("load_model names the path of a missing, directory or unreadable file",
          "[safetensors]") {
    CHECK_THROWS_AS(load_model("/nonexistent/dir/model.safetensors"), InputError);
    CHECK_THROWS_WITH(load_model("/nonexistent/dir/model.safetensors"),
                      Contains("/nonexistent/dir/model.safetensors") && Contains("no such file"));
    testing::TempPath dir("-dir");
    std::filesystem::create_directory(dir.str());
    CHECK_THROWS_WITH(load_model(dir), Contains(dir.str()) && Contains("directory"));
    CHECK_THROWS_WITH(load_model("/dev/null"), Contains("/dev/null"));
    // The file's path prefixes parse errors too.
    testing::TempPath empty(".safetensors");
    testing::write_bytes(empty, {});
    CHECK_THROWS_WITH(load_model(empty), Contains(empty.str()) && Contains("too short"));
}

TEST_CASE("save_model refuses an inconsistent model and an unwritable path", "[safetensors]") {
    Model m = init_model(testing::distinct_sizes_config(), 1);
    testing::TempPath path(".safetensors");
    Model missing = m;
    missing.tensors.erase("layers.1.ffn.fc2.bias");
    CHECK_THROWS_WITH(save_model(missing, path), Contains("missing tensor 'layers.1.ffn.fc2.bias'"));
    Model short_data = m;
    short_data.tensors.at("embed.weight").data.pop_back();
    CHECK_THROWS_WITH(save_model(short_data, path), Contains("'embed.weight' has 87 values"));
    CHECK_THROWS_WITH(save_model(m, "/nonexistent/dir/x.safetensors"),
                      Contains("/nonexistent/dir/x.safetensors"));
}

TEST_CASE("Model::at and lm_head", "[safetensors]") {
    ModelConfig c = testing::distinct_sizes_config();
    const Model tied = init_model(c, 1);
    CHECK(&tied.lm_head() == &tied.at("embed.weight"));
    CHECK_THROWS_WITH(tied.at("lm_head.weight"), Contains("no tensor 'lm_head.weight'"));
    c.tie_embeddings = false;
    const Model untied = init_model(c, 1);
    CHECK(&untied.lm_head() == &untied.at("lm_head.weight"));
}

// NumPy reads what we write and we read what NumPy writes. The script parses the safetensors
// file the way the safetensors Python package does (length, JSON, frombuffer), since that
// package is not installed here.
TEST_CASE("NumPy reads our safetensors and .npy files, we read its .npy", "[safetensors][python]") {
    if (std::system("/usr/bin/python3 -c 'import numpy' >/dev/null 2>&1") != 0) {
        WARN("skipped: /usr/bin/python3 with numpy is not available");
        return;
    }
    ModelConfig c = testing::distinct_sizes_config();
    c.positional = Positional::learned;
    const Model m = init_model(c, 11);
    testing::TempPath model_path(".safetensors"), out_path(".npy"), in_path(".npy"),
        script(".py");
    save_model(m, model_path);
    write_npy(in_path, {7, 8}, m.at("pos.weight").data);
    {
        std::ofstream py(script.str());
        py << "import json, struct, sys, numpy as np\n"
              "raw = open(sys.argv[1], 'rb').read()\n"
              "(n,) = struct.unpack('<Q', raw[:8])\n"
              "h = json.loads(raw[8:8 + n])\n"
              "assert h['__metadata__']['d_model'] == '8'\n"
              "e = h['pos.weight']\n"
              "b, end = e['data_offsets']\n"
              "pos = np.frombuffer(raw[8 + n + b:8 + n + end], dtype='<f4').reshape(e['shape'])\n"
              "ours = np.load(sys.argv[2])\n"
              "assert ours.dtype == np.float32 and ours.shape == (7, 8)\n"
              "assert np.array_equal(ours, pos)\n"
              "np.save(sys.argv[3], (pos.astype(np.float64) * 2.0))\n";
    }
    const std::string cmd = "/usr/bin/python3 " + script.str() + " " + model_path.str() + " " +
                            in_path.str() + " " + out_path.str();
    REQUIRE(std::system(cmd.c_str()) == 0);
    const NpyArray back = read_npy(out_path);  // '<f8' from numpy, converted
    REQUIRE(back.shape == std::vector<std::size_t>{7, 8});
    const auto& pos = m.at("pos.weight").data;
    for (std::size_t i = 0; i < pos.size(); ++i) CHECK(back.data[i] == pos[i] * 2.0f);
}
