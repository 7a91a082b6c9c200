// model/npy.cpp — NumPy .npy arrays: how logits and cross-attention memory enter and leave
// the command line, so that anyone can read them with numpy.load.
//
// Format (numpy.lib.format): magic "\x93NUMPY", major and minor version bytes, the header
// length (uint16 LE for 1.0, uint32 LE for 2.0 and 3.0), then a Python dict literal such as
//   {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }
// padded with spaces and a newline, then the raw data. We parse the literal with a small
// recursive-descent reader of exactly that grammar rather than anything resembling eval, and
// check the shape's byte count against the data actually present before allocating.
#include "attncheck/error.hpp"
#include "attncheck/model.hpp"
#include "model/detail.hpp"
#include "model/limits.hpp"

#include <cmath>
#include <cstring>
#include <limits>
#include <string>

namespace attncheck {

namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr std::size_t kMagicLen = 6;

struct Header {
    std::string descr;
    bool fortran_order = false;
    std::vector<std::size_t> shape;
};

// The dict literal. Accepts what numpy writes and reasonable hand-written variants (either
// quote style, any whitespace, optional trailing commas); refuses anything else.
class HeaderParser {
public:
    HeaderParser(std::string text, std::string what) : s_(std::move(text)), what_(std::move(what)) {}

    Header parse() {
        Header h;
        bool have_descr = false, have_fortran = false, have_shape = false;
        expect('{');
        for (;;) {
            skip_space();
            if (peek() == '}') break;
            const std::string key = string_literal();
            expect(':');
            if (key == "descr") {
                if (have_descr) fail("key 'descr' appears twice");
                h.descr = string_literal();
                have_descr = true;
            } else if (key == "fortran_order") {
                if (have_fortran) fail("key 'fortran_order' appears twice");
                h.fortran_order = boolean();
                have_fortran = true;
            } else if (key == "shape") {
                if (have_shape) fail("key 'shape' appears twice");
                h.shape = tuple();
                have_shape = true;
            } else {
                fail("unexpected key '" + key + "' (expected descr, fortran_order, shape)");
            }
            skip_space();
            if (peek() == ',') {
                ++pos_;
                continue;
            }
            if (peek() != '}') fail("expected ',' or '}'");
        }
        ++pos_;  // '}'
        skip_space();
        if (pos_ != s_.size()) fail("unexpected text after the closing '}'");
        if (!have_descr) fail("missing key 'descr'");
        if (!have_fortran) fail("missing key 'fortran_order'");
        if (!have_shape) fail("missing key 'shape'");
        return h;
    }

private:
    [[noreturn]] void fail(const std::string& why) const {
        throw InputError(what_ + ": malformed .npy header at character " + std::to_string(pos_) +
                         ": " + why);
    }
    char peek() const { return pos_ < s_.size() ? s_[pos_] : '\0'; }
    void skip_space() {
        while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' ||
                                    s_[pos_] == '\r')) {
            ++pos_;
        }
    }
    void expect(char c) {
        skip_space();
        if (peek() != c) fail(std::string("expected '") + c + "'");
        ++pos_;
    }
    std::string string_literal() {
        skip_space();
        const char quote = peek();
        if (quote != '\'' && quote != '"') fail("expected a quoted string");
        const std::size_t start = ++pos_;
        while (pos_ < s_.size() && s_[pos_] != quote) {
            if (s_[pos_] == '\\') fail("escape sequences are not supported");
            ++pos_;
        }
        if (pos_ >= s_.size()) fail("unterminated string");
        return s_.substr(start, pos_++ - start);
    }
    bool boolean() {
        skip_space();
        if (s_.compare(pos_, 4, "True") == 0) {
            pos_ += 4;
            return true;
        }
        if (s_.compare(pos_, 5, "False") == 0) {
            pos_ += 5;
            return false;
        }
        fail("expected True or False");
    }
    std::size_t integer() {
        skip_space();
        if (peek() < '0' || peek() > '9') fail("expected a non-negative integer dimension");
        std::uint64_t v = 0;
        while (peek() >= '0' && peek() <= '9') {
            v = v * 10 + std::uint64_t(peek() - '0');
            // Any dimension above this cannot be backed by data of a size we accept.
            if (v > (std::uint64_t{1} << 48)) fail("dimension too large");
            ++pos_;
        }
        return std::size_t(v);
    }
    // "()", "(3,)", "(3, 4)", "(3, 4,)".
    std::vector<std::size_t> tuple() {
        expect('(');
        std::vector<std::size_t> dims;
        skip_space();
        if (peek() == ')') {
            ++pos_;
            return dims;
        }
        for (;;) {
            dims.push_back(integer());
            if (dims.size() > limits::kMaxRank) fail("shape has more than 8 dimensions");
            skip_space();
            if (peek() == ')') {
                ++pos_;
                break;
            }
            if (peek() != ',') fail("expected ',' or ')' in the shape");
            ++pos_;
            skip_space();
            if (peek() == ')') {
                ++pos_;
                break;
            }
        }
        // Python's "(3)" is the integer 3, not a tuple; numpy always writes "(3,)".
        return dims;
    }

    std::string s_;
    std::string what_;
    std::size_t pos_ = 0;
};

}  // namespace

NpyArray parse_npy(const std::uint8_t* data, std::size_t size, const std::string& what) {
    if (size < kMagicLen + 2 || std::memcmp(data, kMagic, kMagicLen) != 0) {
        throw InputError(what + ": not a .npy file (missing the \\x93NUMPY magic)");
    }
    const int major = data[6], minor = data[7];
    std::size_t prefix = 0;  // bytes before the header text
    std::uint64_t header_len = 0;
    if (major == 1 && minor == 0) {
        prefix = 10;
        if (size < prefix) throw InputError(what + ": .npy file truncated in its header length");
        header_len = std::uint64_t(data[8]) | std::uint64_t(data[9]) << 8;
    } else if ((major == 2 || major == 3) && minor == 0) {
        prefix = 12;
        if (size < prefix) throw InputError(what + ": .npy file truncated in its header length");
        for (int i = 11; i >= 8; --i) header_len = (header_len << 8) | data[i];
    } else {
        throw InputError(what + ": unsupported .npy version " + std::to_string(major) + "." +
                         std::to_string(minor) + " (expected 1.0, 2.0 or 3.0)");
    }
    if (header_len > limits::kMaxNpyHeaderBytes) {
        throw InputError(what + ": .npy header length " + std::to_string(header_len) +
                         " exceeds the limit " + std::to_string(limits::kMaxNpyHeaderBytes));
    }
    if (header_len > size - prefix) {
        throw InputError(what + ": .npy header length " + std::to_string(header_len) +
                         " runs past the end of the file (" + std::to_string(size - prefix) +
                         " bytes left)");
    }
    // Versions 1.0 and 2.0 are latin-1, 3.0 is UTF-8; the grammar we accept is ASCII anyway.
    const std::string text(reinterpret_cast<const char*>(data + prefix), std::size_t(header_len));
    const Header h = HeaderParser(text, what).parse();

    std::size_t itemsize = 0;
    if (h.descr == "<f4") itemsize = 4;
    else if (h.descr == "<f8") itemsize = 8;
    else {
        throw InputError(what + ": .npy dtype '" + h.descr +
                         "' is not supported (expected '<f4' float32 or '<f8' float64)");
    }
    if (h.fortran_order) {
        throw InputError(what + ": .npy array is in Fortran order; save it C-contiguous "
                                "(numpy.ascontiguousarray)");
    }
    std::size_t numel = 1;
    for (std::size_t dim : h.shape) {
        if (__builtin_mul_overflow(numel, dim, &numel)) {
            throw InputError(what + ": .npy shape " + detail::shape_string(h.shape) +
                             " has more elements than any file can hold");
        }
    }
    std::size_t nbytes = 0;
    const std::size_t available = size - prefix - std::size_t(header_len);
    if (__builtin_mul_overflow(numel, itemsize, &nbytes) || nbytes != available) {
        throw InputError(what + ": .npy shape " + detail::shape_string(h.shape) + " of '" +
                         h.descr + "' needs " +
                         (nbytes / itemsize == numel ? std::to_string(nbytes) : "too many") +
                         " data bytes, the file has " + std::to_string(available));
    }

    NpyArray out;
    out.shape = h.shape;
    out.data.resize(numel);
    const std::uint8_t* src = data + prefix + header_len;
    if (itemsize == 4) {
        if (numel) std::memcpy(out.data.data(), src, nbytes);  // src may be unaligned
    } else {
        for (std::size_t i = 0; i < numel; ++i) {
            double v = 0;
            std::memcpy(&v, src + i * 8, 8);
            // A finite double beyond float's range has no float value (the conversion is UB).
            if (std::isfinite(v) && std::fabs(v) > double(std::numeric_limits<float>::max())) {
                throw InputError(what + ": element " + std::to_string(i) + " (" +
                                 std::to_string(v) + ") does not fit in float32");
            }
            out.data[i] = static_cast<float>(v);
        }
    }
    return out;
}

NpyArray read_npy(const std::string& path) {
    const std::vector<std::uint8_t> bytes = detail::read_file_bytes(path);
    return parse_npy(bytes.data(), bytes.size(), path);
}

void write_npy(const std::string& path, const std::vector<std::size_t>& shape,
               const std::vector<float>& data) {
    std::size_t numel = 1;
    for (std::size_t dim : shape) {
        if (__builtin_mul_overflow(numel, dim, &numel)) {
            throw InputError("write_npy '" + path + "': shape overflows");
        }
    }
    if (numel != data.size()) {
        throw InputError("write_npy '" + path + "': shape " + detail::shape_string(shape) +
                         " needs " + std::to_string(numel) + " values, got " +
                         std::to_string(data.size()));
    }
    std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (";
    for (std::size_t i = 0; i < shape.size(); ++i) {
        dict += std::to_string(shape[i]);
        if (shape.size() == 1 || i + 1 < shape.size()) dict += shape.size() == 1 ? "," : ", ";
    }
    dict += "), }";
    // numpy pads with spaces and ends with '\n' so that the data starts 64-byte aligned.
    const std::size_t total = 10 + dict.size() + 1;
    dict.append((64 - total % 64) % 64, ' ');
    dict += '\n';
    if (dict.size() > 0xffff) throw InputError("write_npy '" + path + "': header too long");

    std::string bytes(kMagic, kMagicLen);
    bytes += char(1);
    bytes += char(0);
    bytes += char(dict.size() & 0xff);
    bytes += char(dict.size() >> 8);
    bytes += dict;
    bytes.append(reinterpret_cast<const char*>(data.data()), data.size() * sizeof(float));
    detail::write_file_bytes(path, bytes);
}

}  // namespace attncheck
