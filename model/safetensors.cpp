// model/safetensors.cpp — the model file: safetensors (8-byte little-endian header length, a
// JSON header, raw little-endian float32 data), with the config in __metadata__ (MODEL.md).
//
// parse_model is written for hostile bytes (the fuzz harness feeds it arbitrary input): every
// length and offset is checked against the buffer before it is used, products are computed
// with overflow checks, and nothing is allocated before the bytes it describes are known to be
// present, so the largest allocation is bounded by the input size.
#include "attncheck/error.hpp"
#include "attncheck/model.hpp"
#include "model/detail.hpp"
#include "model/limits.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <bit>
#include <cstring>
#include <set>
#include <string>
#include <vector>

namespace attncheck {

static_assert(std::endian::native == std::endian::little,
              "safetensors and .npy data are little-endian; a big-endian host needs byte swaps");

namespace {

using json = nlohmann::json;

struct Entry {
    std::string name;
    std::vector<std::size_t> shape;
    std::size_t numel = 0;
    std::uint64_t begin = 0, end = 0;  // byte offsets into the data buffer
};

// JSON header -> json, refusing absurd nesting and duplicate keys (nlohmann would keep the
// last of two equal keys silently, hiding e.g. a second, conflicting `d_model`).
json parse_header(const char* text, std::size_t size, const std::string& what) {
    std::vector<std::set<std::string>> open_objects;
    const json::parser_callback_t cb = [&](int depth, json::parse_event_t event, json& parsed) {
        switch (event) {
            case json::parse_event_t::object_start:
            case json::parse_event_t::array_start:
                if (depth >= limits::kMaxJsonDepth) {
                    throw InputError(what + ": JSON header nested deeper than " +
                                     std::to_string(limits::kMaxJsonDepth) + " levels");
                }
                if (event == json::parse_event_t::object_start) open_objects.emplace_back();
                break;
            case json::parse_event_t::object_end:
                if (!open_objects.empty()) open_objects.pop_back();
                break;
            case json::parse_event_t::key:
                if (!open_objects.empty() && parsed.is_string() &&
                    !open_objects.back().insert(parsed.get<std::string>()).second) {
                    throw InputError(what + ": JSON header has the key '" +
                                     parsed.get<std::string>() + "' twice in one object");
                }
                break;
            default: break;
        }
        return true;
    };
    try {
        return json::parse(text, text + size, cb);
    } catch (const json::exception& e) {
        throw InputError(what + ": header is not valid JSON: " + e.what());
    }
}

const char* type_name(const json& j) { return j.type_name(); }

// An entry's shape, into `out`; returns its element count. InputError when it is not a list of
// non-negative integers, has too high a rank, or holds more bytes than a size_t counts.
std::size_t parse_shape(const json& shape, const std::string& where, std::vector<std::size_t>& out) {
    if (!shape.is_array()) {
        throw InputError(where + ": shape is a JSON " + type_name(shape) + ", expected a list");
    }
    if (shape.size() > limits::kMaxRank) {
        throw InputError(where + ": shape has rank " + std::to_string(shape.size()) +
                         ", more than " + std::to_string(limits::kMaxRank));
    }
    std::size_t numel = 1;
    bool overflow = false;
    for (std::size_t i = 0; i < shape.size(); ++i) {
        const json& s = shape[i];
        if (!s.is_number_unsigned()) {
            throw InputError(where + ": shape entry " + std::to_string(i) + " (" + s.dump() +
                             ") is not a non-negative integer");
        }
        const std::uint64_t v = s.get<std::uint64_t>();
        out.push_back(std::size_t(v));
        overflow = overflow || __builtin_mul_overflow(numel, std::size_t(v), &numel);
    }
    std::size_t nbytes = 0;
    if (overflow || __builtin_mul_overflow(numel, sizeof(float), &nbytes)) {
        throw InputError(where + ": shape " + detail::shape_string(out) +
                         " has more elements than any file can hold");
    }
    return numel;
}

Entry parse_entry(const std::string& name, const json& j, std::uint64_t data_size,
                  const std::string& what) {
    const std::string where = what + ": tensor '" + name + "'";
    if (!j.is_object()) {
        throw InputError(where + ": entry is a JSON " + type_name(j) +
                         ", expected an object {dtype, shape, data_offsets}");
    }
    for (const auto& [key, value] : j.items()) {
        (void)value;
        if (key != "dtype" && key != "shape" && key != "data_offsets") {
            throw InputError(where + ": unexpected field '" + key +
                             "' (expected exactly dtype, shape, data_offsets)");
        }
    }
    for (const char* key : {"dtype", "shape", "data_offsets"}) {
        if (!j.contains(key)) throw InputError(where + ": missing field '" + key + "'");
    }

    const json& dtype = j["dtype"];
    if (!dtype.is_string()) {
        throw InputError(where + ": dtype is a JSON " + type_name(dtype) + ", expected \"F32\"");
    }
    if (dtype.get<std::string>() != "F32") {
        throw InputError(where + ": dtype '" + dtype.get<std::string>() +
                         "' is not supported (attncheck models are F32)");
    }

    Entry e;
    e.name = name;
    e.numel = parse_shape(j["shape"], where, e.shape);
    const std::size_t nbytes = e.numel * sizeof(float);  // no overflow: parse_shape checked

    const json& off = j["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() ||
        !off[1].is_number_unsigned()) {
        throw InputError(where + ": data_offsets " + off.dump() +
                         " is not a list of two non-negative integers [begin, end]");
    }
    e.begin = off[0].get<std::uint64_t>();
    e.end = off[1].get<std::uint64_t>();
    if (e.begin > e.end) {
        throw InputError(where + ": data_offsets [" + std::to_string(e.begin) + ", " +
                         std::to_string(e.end) + "] has begin > end");
    }
    if (e.end > data_size) {
        throw InputError(where + ": data_offsets [" + std::to_string(e.begin) + ", " +
                         std::to_string(e.end) + "] run past the end of the data (" +
                         std::to_string(data_size) + " bytes)");
    }
    if (e.end - e.begin != nbytes) {
        throw InputError(where + ": data_offsets [" + std::to_string(e.begin) + ", " +
                         std::to_string(e.end) + "] span " + std::to_string(e.end - e.begin) +
                         " bytes, but shape " + detail::shape_string(e.shape) + " of F32 needs " +
                         std::to_string(nbytes));
    }
    return e;
}

// The config, from the header's __metadata__ (an object of strings).
ModelConfig header_config(const json& header, const std::string& what) {
    const auto meta_it = header.find("__metadata__");
    if (meta_it == header.end()) {
        throw InputError(what + ": header has no __metadata__ (the model config lives there)");
    }
    if (!meta_it->is_object()) {
        throw InputError(what + ": __metadata__ is a JSON " + std::string(type_name(*meta_it)) +
                         ", expected an object of strings");
    }
    std::map<std::string, std::string> meta;
    for (const auto& [key, value] : meta_it->items()) {
        if (!value.is_string()) {
            throw InputError(what + ": __metadata__ key '" + key + "' is a JSON " +
                             type_name(value) + " (" + value.dump() +
                             "); every metadata value must be a string");
        }
        meta[key] = value.get<std::string>();
    }
    try {
        return config_from_metadata(meta);
    } catch (const InputError& e) {
        throw InputError(what + ": " + e.what());
    }
}

// The safetensors spec requires the tensors to tile the data buffer exactly, without overlaps
// and without holes.
void check_tiling(const std::vector<Entry>& entries, std::uint64_t data_size, const std::string& what) {
    std::vector<const Entry*> by_offset;
    for (const Entry& e : entries) by_offset.push_back(&e);
    std::sort(by_offset.begin(), by_offset.end(), [](const Entry* a, const Entry* b) {
        return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
    });
    std::uint64_t covered = 0;  // bytes [0, covered) are owned by a tensor
    const Entry* prev = nullptr;
    for (const Entry* e : by_offset) {
        if (e->begin < covered) {
            throw InputError(what + ": tensors '" + prev->name + "' and '" + e->name +
                             "' overlap (bytes [" + std::to_string(e->begin) + ", " +
                             std::to_string(std::min(covered, e->end)) + "))");
        }
        if (e->begin > covered) {
            throw InputError(what + ": hole in the data buffer: bytes [" +
                             std::to_string(covered) + ", " + std::to_string(e->begin) +
                             ") belong to no tensor (before '" + e->name + "')");
        }
        covered = e->end;
        prev = e;
    }
    if (covered != data_size) {
        throw InputError(what + ": " + std::to_string(data_size - covered) +
                         " trailing bytes after the last tensor (data buffer is " +
                         std::to_string(data_size) + " bytes, tensors cover " +
                         std::to_string(covered) + ")");
    }
}

}  // namespace

Model parse_model(const std::uint8_t* data, std::size_t size, const std::string& what) {
    if (size < 8) {
        throw InputError(what + ": file is " + std::to_string(size) +
                         " bytes, too short for the 8-byte safetensors header length");
    }
    std::uint64_t header_len = 0;
    for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | data[i];
    const std::uint64_t rest = size - 8;
    if (header_len > limits::kMaxSafetensorsHeaderBytes) {
        throw InputError(what + ": header length " + std::to_string(header_len) +
                         " is absurd (limit " +
                         std::to_string(limits::kMaxSafetensorsHeaderBytes) + " bytes)");
    }
    if (header_len > rest) {
        throw InputError(what + ": header length " + std::to_string(header_len) +
                         " runs past the end of the file (" + std::to_string(rest) +
                         " bytes after the length)");
    }
    const char* header_text = reinterpret_cast<const char*>(data + 8);
    const std::uint8_t* buffer = data + 8 + header_len;  // the data buffer
    const std::uint64_t data_size = rest - header_len;

    const json header = parse_header(header_text, std::size_t(header_len), what);
    if (!header.is_object()) {
        throw InputError(what + ": header is a JSON " + std::string(type_name(header)) +
                         ", expected an object");
    }

    const ModelConfig config = header_config(header, what);

    // Tensor entries, then their placement in the data buffer.
    std::vector<Entry> entries;
    for (const auto& [name, value] : header.items()) {
        if (name == "__metadata__") continue;
        entries.push_back(parse_entry(name, value, data_size, what));
    }
    check_tiling(entries, data_size, what);

    std::map<std::string, std::vector<std::size_t>> shapes;
    for (const Entry& e : entries) shapes[e.name] = e.shape;
    detail::check_tensor_set(config, shapes, what);

    Model m;
    m.config = config;
    for (const Entry& e : entries) {
        Tensor t;
        t.shape = e.shape;
        t.data.resize(e.numel);
        // The buffer may start at any byte (the header length need not be a multiple of 4).
        if (e.numel) std::memcpy(t.data.data(), buffer + e.begin, e.numel * sizeof(float));
        m.tensors.emplace(e.name, std::move(t));
    }
    try {
        m.validate();
    } catch (const InputError& e) {
        // Model::validate says "model: ..."; name the file instead.
        std::string msg = e.what();
        if (msg.rfind("model: ", 0) == 0) msg.erase(0, 7);
        throw InputError(what + ": " + msg);
    }
    return m;
}

Model load_model(const std::string& path) {
    const std::vector<std::uint8_t> bytes = detail::read_file_bytes(path);
    return parse_model(bytes.data(), bytes.size(), path);
}

void save_model(const Model& m, const std::string& path) {
    m.validate();
    nlohmann::ordered_json header;
    nlohmann::ordered_json meta = nlohmann::ordered_json::object();
    for (const auto& [k, v] : config_to_metadata(m.config)) meta[k] = v;
    header["__metadata__"] = meta;
    std::uint64_t offset = 0;
    const std::vector<TensorSpec> specs = expected_tensors(m.config);
    for (const TensorSpec& spec : specs) {
        const std::uint64_t nbytes = m.at(spec.name).data.size() * sizeof(float);
        header[spec.name] = {{"dtype", "F32"},
                             {"shape", spec.shape},
                             {"data_offsets", {offset, offset + nbytes}}};
        offset += nbytes;
    }
    std::string text = header.dump();
    // Pad with spaces so that the data starts 8-byte aligned, as the reference
    // implementation does (the 8-byte length prefix keeps the alignment).
    text.append((8 - text.size() % 8) % 8, ' ');

    std::string bytes;
    bytes.reserve(8 + text.size() + offset);
    const std::uint64_t len = text.size();
    for (int i = 0; i < 8; ++i) bytes.push_back(char((len >> (8 * i)) & 0xff));
    bytes += text;
    for (const TensorSpec& spec : specs) {
        const Tensor& t = m.at(spec.name);
        bytes.append(reinterpret_cast<const char*>(t.data.data()), t.data.size() * sizeof(float));
    }
    detail::write_file_bytes(path, bytes);
}

}  // namespace attncheck
