// properties/corpus.cpp — the failure corpus of `attncheck fuzz --corpus DIR`
// (properties/campaign.hpp): one small JSON file per shrunk counterexample, read back and checked
// field by field, so that a corrupt or foreign file is refused with its reason and never run.
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "attncheck/error.hpp"
#include "properties/campaign.hpp"
#include "properties/property_runs.hpp"

namespace attncheck::properties {
namespace {

namespace fs = std::filesystem;

// Larger than any entry attncheck writes (a shrunk case and its message are a few KiB).
constexpr std::uintmax_t kMaxEntryBytes = 1 << 20;

// 64-bit FNV-1a: a stable name for a counterexample across runs and machines.
std::uint64_t fnv1a(const std::string& text) {
    std::uint64_t h = 14695981039346656037ull;
    for (const unsigned char c : text) h = (h ^ c) * 1099511628211ull;
    return h;
}

// A subject as a file name part: letters, digits, '_', '-' and '.'; anything else '_'.
std::string file_part(const std::string& text) {
    std::string out;
    for (const char c : text) out += std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.' ? c : '_';
    return out.substr(0, 80);
}

template <class T>
T field(const nlohmann::json& j, const char* name, const char* type) {
    if (!j.contains(name)) throw InputError(std::string("no \"") + name + "\" field");
    try {
        return j.at(name).get<T>();
    } catch (const nlohmann::json::exception&) {
        throw InputError(std::string("\"") + name + "\" is not " + type);
    }
}

}  // namespace

CorpusEntry parse_corpus_entry(const std::string& file, const std::string& text) {
    const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) throw InputError("not JSON");
    if (!j.is_object() || !j.contains("attncheck_corpus"))
        throw InputError("not an attncheck corpus entry (no \"attncheck_corpus\" field)");
    const nlohmann::json& version = j["attncheck_corpus"];
    if (!version.is_number_integer() || version.get<long long>() != kCorpusFormat)
        throw InputError("corpus format " + version.dump() + ", this attncheck reads format " +
                         std::to_string(kCorpusFormat));
    CorpusEntry e;
    e.file = file;
    const std::string kind = field<std::string>(j, "kind", "a string");
    e.kind = row_kind_from_string(kind, RowKind::mutant);
    if (e.kind != RowKind::kernel && e.kind != RowKind::decoder)
        throw InputError("\"kind\" is \"" + kind + "\", expected \"kernel\" or \"decoder\"");
    e.subject = field<std::string>(j, "subject", "a string");
    if (e.subject.empty()) throw InputError("\"subject\" is empty");
    e.property = canonical_property_name(field<std::string>(j, "property", "a string"));
    if (!is_property(e.property)) throw InputError("\"property\" " + e.property + " is no property of this attncheck");
    e.flag = j.value("flag", "");
    e.seed = field<std::uint64_t>(j, "seed", "a non-negative integer");
    e.cases = field<int>(j, "cases", "an integer");
    if (e.cases < 1 || e.cases > 100000000) throw InputError("\"cases\" " + std::to_string(e.cases) + " is out of [1, 100000000]");
    e.failed_at = field<int>(j, "failed_at", "an integer");
    if (e.failed_at < 0 || e.failed_at > e.cases + 1) throw InputError("\"failed_at\" is out of [0, cases + 1]");
    e.reproduce = field<std::string>(j, "reproduce", "a string");
    if (!e.reproduce.empty())
        if (const std::string why = reproduce_problem(e.reproduce); !why.empty())
            throw InputError("\"reproduce\" does not decode: " + why);
    e.message = j.value("message", "");
    return e;
}

std::string corpus_entry_text(const Row& r) {
    const nlohmann::json j = {
        {"attncheck_corpus", kCorpusFormat},
        {"kind", to_string(r.kind)},
        {"subject", r.subject},
        {"property", r.result.property},
        {"flag", r.replay_flag},
        {"seed", r.params.seed},
        {"cases", r.params.cases},
        {"failed_at", r.result.failed_at},
        {"reproduce", r.result.reproduce},
        {"counterexample", r.result.counterexample},
        {"message", r.result.message},
        {"replay", replay_command(r.replay_flag, r.result.property, r.params)},
        {"found_by", "attncheck 0.1.0"},
    };
    return j.dump(2) + "\n";
}

std::string corpus_file_name(const Row& r) {
    const std::string key = std::string(to_string(r.kind)) + "\n" + r.subject + "\n" + r.result.property + "\n" +
                            (r.result.reproduce.empty() ? std::to_string(r.params.seed) + "/" + std::to_string(r.params.cases)
                                                        : r.result.reproduce);
    std::ostringstream hash;
    hash << std::hex << fnv1a(key);
    return std::string(to_string(r.kind)) + "-" + file_part(r.subject) + "-" + r.result.property + "-" + hash.str() + ".json";
}

int corpus_shard(const std::string& file, int shard_count) {
    return int(fnv1a(file) % std::uint64_t(shard_count > 0 ? shard_count : 1));
}

CorpusLoad load_corpus(const std::string& dir) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (!fs::is_directory(dir, ec)) throw InputError("--corpus " + dir + ": not a directory, and cannot be made one");
    if (::access(dir.c_str(), W_OK | X_OK) != 0)
        throw InputError("--corpus " + dir + ": cannot write there: " + std::strerror(errno));
    CorpusLoad out;
    std::vector<fs::path> files;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) files.push_back(it->path());
    if (ec) throw InputError("--corpus " + dir + ": cannot read it: " + ec.message());
    std::sort(files.begin(), files.end());
    for (const fs::path& p : files) {
        const std::string name = p.filename().string();
        if (name.empty() || name[0] == '.') continue;
        try {
            if (!fs::is_regular_file(p)) throw InputError("not a regular file");
            if (p.extension() != ".json") throw InputError("not a corpus entry (entries are *.json files)");
            if (fs::file_size(p) > kMaxEntryBytes) throw InputError("larger than 1 MiB: not an entry attncheck wrote");
            std::ifstream in(p, std::ios::binary);
            std::stringstream text;
            text << in.rdbuf();
            if (!in) throw InputError("cannot be read");
            out.entries.push_back(parse_corpus_entry(name, text.str()));
        } catch (const InputError& e) {
            out.refused.emplace_back(name, e.what());
        } catch (const fs::filesystem_error& e) {
            out.refused.emplace_back(name, e.code().message());
        }
    }
    return out;
}

}  // namespace attncheck::properties
