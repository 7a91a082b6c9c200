// model/file_io.cpp — whole-file reads and writes whose errors name the path.
//
// Only regular files are read: a FIFO or a device such as /dev/zero would never end, and the
// size read is the size the parsers are given, so they never allocate beyond it.
#include "attncheck/error.hpp"
#include "model/detail.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <system_error>

namespace attncheck::detail {

namespace {
struct FileCloser {
    void operator()(std::FILE* f) const { std::fclose(f); }
};
using File = std::unique_ptr<std::FILE, FileCloser>;
}  // namespace

std::vector<std::uint8_t> read_file_bytes(const std::string& path) {
    namespace fs = std::filesystem;
    std::error_code ec;
    const fs::file_status st = fs::status(path, ec);
    if (ec || !fs::exists(st)) {
        throw InputError("cannot read '" + path + "': no such file");
    }
    if (fs::is_directory(st)) throw InputError("cannot read '" + path + "': is a directory");
    if (!fs::is_regular_file(st)) {
        throw InputError("cannot read '" + path + "': not a regular file");
    }
    File f(std::fopen(path.c_str(), "rb"));
    if (!f) {
        throw InputError("cannot read '" + path + "': " + std::strerror(errno));
    }
    std::vector<std::uint8_t> bytes;
    std::uint8_t chunk[1 << 16];
    for (;;) {
        const std::size_t n = std::fread(chunk, 1, sizeof chunk, f.get());
        bytes.insert(bytes.end(), chunk, chunk + n);
        if (n < sizeof chunk) break;
    }
    if (std::ferror(f.get())) {
        throw InputError("cannot read '" + path + "': read error");
    }
    return bytes;
}

void write_file_bytes(const std::string& path, const std::string& bytes) {
    File f(std::fopen(path.c_str(), "wb"));
    if (!f) {
        throw InputError("cannot write '" + path + "': " + std::strerror(errno));
    }
    const std::size_t n = std::fwrite(bytes.data(), 1, bytes.size(), f.get());
    const bool ok = n == bytes.size() && std::fflush(f.get()) == 0;
    if (std::fclose(f.release()) != 0 || !ok) {
        throw InputError("cannot write '" + path + "': write error (disk full?)");
    }
}

}  // namespace attncheck::detail
