// properties/fuzz_report.cpp — the reports of `attncheck fuzz` (properties/fuzz_report.hpp): the
// table, failures and replay lines, notes, the mutant kill table, --json and --junit.
#include "properties/fuzz_report.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <sstream>

#include "attncheck/isa.hpp"
#include "properties/property_runs.hpp"

namespace attncheck::properties {
namespace {

// The line that replays a --kernel-lib row in a test binary calling check_kernel() on the same
// kernel (CheckOptions::from_environment reads these; ATTNCHECK_CASES sets both budgets).
std::string check_kernel_replay(const Row& r) {
    return "ATTNCHECK_SEED=" + std::to_string(r.params.seed) + " ATTNCHECK_CASES=" + std::to_string(r.params.cases) +
           " ATTNCHECK_PROPERTY=" + r.result.property + " <test binary>";
}

// "B=1 H=2 q_offset=0 (decode) kv_valid_len=[3,1] ..." (kernel_case.cpp, decoder_case.cpp's
// describe()) as a JSON object: numbers, lists and booleans typed; a parenthesised word after a
// field is kept as FIELD_note ("q_offset_note": "decode").
nlohmann::json shape_fields(const std::string& text) {
    nlohmann::json j = nlohmann::json::object();
    std::stringstream words(text);
    std::string last;
    for (std::string w; words >> w;) {
        while (!w.empty() && w.back() == ';') w.pop_back();
        if (w.size() > 2 && w.front() == '(' && w.back() == ')') {
            if (!last.empty()) j[last + "_note"] = w.substr(1, w.size() - 2);
            continue;
        }
        const auto eq = w.find('=');
        if (eq == std::string::npos || eq == 0) continue;
        const std::string key = w.substr(0, eq), v = w.substr(eq + 1);
        last = key;
        const nlohmann::json parsed = nlohmann::json::parse(v, nullptr, /*allow_exceptions=*/false);
        j[key] = parsed.is_discarded() ? nlohmann::json(v) : parsed;
    }
    return j;
}

std::string xml_escape(const std::string& text) {
    std::string out;
    for (const char c : text) {
        switch (c) {
            case '&': out += "&amp;"; break;
            case '<': out += "&lt;"; break;
            case '>': out += "&gt;"; break;
            case '"': out += "&quot;"; break;
            case '\'': out += "&apos;"; break;
            default:
                // XML 1.0 allows no control characters but tab and newline (a kernel's message
                // may quote anything).
                if (static_cast<unsigned char>(c) < 0x20 && c != '\n' && c != '\t') out += "?";
                else out += c;
        }
    }
    return out;
}

// A JUnit <testsuite> per subject: "kernel NAME", "decoder optimized[NAME]".
std::string suite_name(const Row& r) { return std::string(to_string(r.kind)) + " " + r.subject; }

}  // namespace

const char* to_string(RowKind kind) {
    switch (kind) {
        case RowKind::kernel: return "kernel";
        case RowKind::decoder: return "decoder";
        case RowKind::mutant: return "mutant";
        case RowKind::control: return "control";
    }
    return "?";
}

RowKind row_kind_from_string(const std::string& text, RowKind otherwise) {
    for (const RowKind k : {RowKind::kernel, RowKind::decoder, RowKind::mutant, RowKind::control})
        if (text == to_string(k)) return k;
    return otherwise;
}

std::string cell(const PropertyResult& r) {
    std::ostringstream s;
    switch (r.status) {
        case Status::pass:
            s << "pass " << r.cases - r.vacuous;
            if (r.unsupported) s << " (" << r.unsupported << " unsup)";
            if (r.vacuous) s << " (" << r.vacuous << " n/a)";
            break;
        case Status::fail: s << "FAIL @" << r.failed_at; break;
        case Status::not_checked: s << "NOT CHECKED (" << r.cases - r.unsupported << "/" << r.cases << " supported)"; break;
        case Status::error: s << "ERROR"; break;
        case Status::skipped: s << "skipped"; break;
        case Status::not_applicable: s << "not applicable"; break;
    }
    return s.str();
}

void print_table(std::ostream& os, const std::vector<Row>& rows, RowKind kind, const std::string& title) {
    std::vector<std::string> subjects, props;
    std::map<std::pair<std::string, std::string>, const Row*> at;
    for (const Row& r : rows) {
        if (r.kind != kind) continue;
        if (std::find(subjects.begin(), subjects.end(), r.subject) == subjects.end()) subjects.push_back(r.subject);
        if (std::find(props.begin(), props.end(), r.result.property) == props.end()) props.push_back(r.result.property);
        at[{r.result.property, r.subject}] = &r;
    }
    if (subjects.empty()) return;
    // The registration order (a version 1 kernel, first in a run, has no row of its own for lse).
    std::stable_sort(props.begin(), props.end(),
                     [](const std::string& a, const std::string& b) { return property_rank(a) < property_rank(b); });
    std::size_t w0 = title.size();
    for (const auto& p : props) w0 = std::max(w0, p.size());
    std::vector<std::size_t> w;
    for (const auto& s : subjects) w.push_back(std::max<std::size_t>(s.size(), 18));
    os << std::left << std::setw(int(w0)) << title;
    for (std::size_t i = 0; i < subjects.size(); ++i) os << "  " << std::setw(int(w[i])) << subjects[i];
    os << "\n";
    for (const auto& p : props) {
        os << std::setw(int(w0)) << p;
        for (std::size_t i = 0; i < subjects.size(); ++i) {
            const auto it = at.find({p, subjects[i]});
            os << "  " << std::setw(int(w[i])) << (it == at.end() ? std::string("-") : cell(it->second->result));
        }
        os << "\n";
    }
    os << "\n";
}

std::string seconds_text(double s) {
    std::ostringstream t;
    t << std::fixed << std::setprecision(1) << s;
    return t.str();
}

void print_failure(std::ostream& os, const Row& r, std::map<std::string, std::string>& seen) {
    const PropertyResult& p = r.result;
    os << p.property << " " << to_string(p.status) << " on " << to_string(r.kind) << " " << r.subject;
    if (p.status == Status::fail) os << " at case " << p.failed_at << (p.counterexample.empty() ? "" : " (shrunk below)");
    os << "\n";
    if (!p.counterexample.empty()) {
        const std::string where = p.property + " on " + to_string(r.kind) + " " + r.subject;
        const auto [it, first] = seen.emplace(p.counterexample, where);
        if (first) os << p.counterexample;
        else os << "  case: the same as for " << it->second << " above\n";
        if (p.shrink_stopped)
            os << "  (shrinking stopped after " << seconds_text(p.shrink_seconds)
               << " s: the smallest failing case found by then; --shrink-time for more)\n";
    }
    os << "  " << p.message << "\n";
    os << "  replay: " << replay_command(r.replay_flag, p.property, r.params) << "\n";
    if (r.library) os << "  replay in a test that calls check_kernel() on this kernel: " << check_kernel_replay(r) << "\n";
    // A float result, and so a verdict near the bound, depends on the code path that ran it.
    os << "  ran on: " << isa_line() << "\n\n";
}

void print_skipped(std::ostream& os, const std::vector<Row>& rows) {
    std::string names, why;
    int n = 0;
    for (const Row& r : rows) {
        if (r.result.status != Status::skipped) continue;
        names += (n++ ? ", " : "") + r.result.property;
        why = r.result.message;
    }
    if (n) os << "skipped " << n << " " << (n == 1 ? "property" : "properties") << " (" << why << "): " << names << "\n\n";
}

void print_failures(std::ostream& os, const std::vector<Row>& rows) {
    std::map<std::string, std::string> seen;
    for (const Row& r : rows)
        if (r.result.status != Status::pass && r.result.status != Status::skipped &&
            r.result.status != Status::not_applicable)
            print_failure(os, r, seen);
}

void print_notes(std::ostream& os, const std::vector<Row>& rows) {
    std::vector<std::string> capped;
    for (const Row& r : rows) {
        if (!r.result.warning.empty())
            os << "warning: " << r.subject << " / " << r.result.property << ": " << r.result.warning << "\n";
        if (r.result.notes)
            os << "note: " << r.subject << " / " << r.result.property << ": " << r.result.notes
               << " case(s): " << r.result.note << "\n";
        if (r.capped_from && std::find(capped.begin(), capped.end(), r.subject) == capped.end()) {
            capped.push_back(r.subject);
            os << "note: " << r.subject << ": decoder-level properties ran " << r.params.cases << " cases each, not "
               << r.capped_from << ": the kernel already failed at kernel level (--cases N runs them in full)\n";
        }
    }
}

void print_spread(std::ostream& os, const std::vector<Row>& rows) {
    for (const Row& r : rows) {
        os << to_string(r.kind) << " " << r.subject << " / " << r.result.property << " spread:";
        for (const auto& [tags, n] : r.result.spread) os << " {" << tags << "}:" << n;
        os << "\n";
    }
}

MutantVerdict mutant_verdict(const std::vector<Row>& rows) {
    MutantVerdict v;
    for (const Row& r : rows)
        if (r.result.status == Status::fail && (!v.first || r.result.failed_at < v.first->result.failed_at)) v.first = &r;
    for (const Row& r : rows)
        if (r.result.status == Status::fail && &r != v.first)
            v.also += (v.also.empty() ? "" : " ") + r.result.property + "@" + std::to_string(r.result.failed_at);
    return v;
}

void print_mutant_header(std::ostream& os, std::uint64_t seed, int cases) {
    os << "mutant zoo (seed " << seed << ", up to " << cases << " cases per property)\n";
    os << std::left << std::setw(30) << "mutant" << std::setw(12) << "verdict" << std::setw(20) << "first killed by"
       << std::setw(8) << "cases" << "also killed by\n";
}

void print_mutant_line(std::ostream& os, const std::string& mutant, const MutantVerdict& v) {
    os << std::setw(30) << mutant << std::setw(12) << (v.first ? "killed" : "SURVIVED") << std::setw(20)
       << (v.first ? v.first->result.property : "-") << std::setw(8)
       << (v.first ? std::to_string(v.first->result.failed_at) : "-") << v.also << "\n";
}

nlohmann::json mutant_json(const std::string& mutant, const std::string& bug, const MutantVerdict& v) {
    nlohmann::json j = {{"mutant", mutant}, {"bug", bug}, {"killed", v.first != nullptr}};
    if (v.first) {
        j["by"] = v.first->result.property;
        j["after_cases"] = v.first->result.failed_at;
        j["also"] = v.also;
        j["message"] = v.first->result.message;
        j["counterexample"] = v.first->result.counterexample;
    }
    return j;
}

double print_mutant_summary(std::ostream& os, std::vector<int> kill_cases, std::size_t mutants) {
    std::sort(kill_cases.begin(), kill_cases.end());
    const std::size_t n = kill_cases.size();
    const double median = n == 0 ? 0 : n % 2 ? kill_cases[n / 2] : 0.5 * (kill_cases[n / 2 - 1] + kill_cases[n / 2]);
    os << "\n" << n << " of " << mutants << " mutants killed; median cases to the first kill: " << median << "\n";
    return median;
}

nlohmann::json to_json(const Row& r) {
    const PropertyResult& p = r.result;
    nlohmann::json j = {{"kind", to_string(r.kind)},         {"subject", r.subject},         {"property", p.property},
                        {"status", to_string(p.status)}, {"cases", p.cases},     {"unsupported", p.unsupported},
                        {"vacuous", p.vacuous},
                        {"notes", p.notes},       {"seconds", p.seconds},         {"seed", r.params.seed},
                        {"max_cases", r.params.cases}};
    if (!p.note.empty()) j["note"] = p.note;
    if (!p.warning.empty()) j["warning"] = p.warning;
    if (r.capped_from) j["capped_from"] = r.capped_from;
    if (!r.replay_flag.empty()) j["flag"] = r.replay_flag;
    if (r.library) j["library"] = true;
    if (r.unit >= 0 || r.round != 0) j["round"] = r.round;
    if (r.unit >= 0) j["unit"] = r.unit;
    if (!r.corpus_entry.empty()) j["corpus_entry"] = r.corpus_entry;
    if (!p.reproduce.empty()) j["reproduce"] = p.reproduce;
    if (!p.vacuous_reason.empty()) j["vacuous_reason"] = p.vacuous_reason;
    if (p.status != Status::pass) {
        j["failed_at"] = p.failed_at;
        j["message"] = p.message;
        j["counterexample"] = p.counterexample;
        j["replay"] = replay_command(r.replay_flag, p.property, r.params);
        if (r.library) j["replay_env"] = check_kernel_replay(r);
    }
    if (!p.counterexample_values.empty()) {
        nlohmann::json values = nlohmann::json::object();
        for (const auto& [label, value] : p.counterexample_values) {
            values[label] = value;
            if (label == "case") j["case"] = shape_fields(value);
        }
        j["counterexample_values"] = values;
        j["shrink_seconds"] = p.shrink_seconds;
        j["shrink_stopped"] = p.shrink_stopped;
    }
    if (!p.spread.empty()) j["spread"] = p.spread;
    return j;
}

PropertyResult from_json(const nlohmann::json& j) {
    PropertyResult p;
    p.property = j.value("property", "");
    const std::string st = j.value("status", "ERROR");
    p.status = st == "pass"          ? Status::pass
               : st == "FAIL"        ? Status::fail
               : st == "not checked" ? Status::not_checked
               : st == "skipped"     ? Status::skipped
               : st == "not applicable" ? Status::not_applicable
                                     : Status::error;
    p.warning = j.value("warning", "");
    p.cases = j.value("cases", 0);
    p.unsupported = j.value("unsupported", 0);
    p.vacuous = j.value("vacuous", 0);
    p.vacuous_reason = j.value("vacuous_reason", "");
    p.notes = j.value("notes", 0);
    p.note = j.value("note", "");
    p.failed_at = j.value("failed_at", 0);
    p.message = j.value("message", "");
    p.counterexample = j.value("counterexample", "");
    p.seconds = j.value("seconds", 0.0);
    p.shrink_seconds = j.value("shrink_seconds", 0.0);
    p.shrink_stopped = j.value("shrink_stopped", false);
    p.reproduce = j.value("reproduce", "");
    // The worker writes the object in the order the generators drew the values; nlohmann's
    // object sorts keys, so the labels' order in the text version is the one to trust.
    if (j.contains("counterexample_values") && j["counterexample_values"].is_object()) {
        std::stringstream lines(p.counterexample);
        for (std::string line; std::getline(lines, line);) {
            const auto eq = line.find(" = ");
            if (eq == std::string::npos) continue;
            const std::string label = line.substr(line.find_first_not_of(' '), eq - line.find_first_not_of(' '));
            p.counterexample_values.emplace_back(label, j["counterexample_values"].value(label, ""));
        }
    }
    if (j.contains("spread") && j["spread"].is_object())
        for (const auto& [tags, n] : j["spread"].items()) p.spread[tags] = n.get<int>();
    return p;
}

Row row_from_json(const nlohmann::json& j) {
    Row r;
    r.kind = row_kind_from_string(j.value("kind", ""), RowKind::kernel);
    r.subject = j.value("subject", "");
    r.replay_flag = j.value("flag", "");
    r.params.seed = j.value("seed", std::uint64_t(0));
    r.params.cases = j.value("max_cases", 0);
    r.result = from_json(j);
    r.library = j.value("library", false);
    r.capped_from = j.value("capped_from", 0);
    r.round = j.value("round", 0);
    r.unit = j.value("unit", -1L);
    r.corpus_entry = j.value("corpus_entry", "");
    return r;
}

// JUnit XML: a <testsuite> per subject ("kernel NAME", "decoder optimized[NAME]"), a <testcase>
// per property; FAIL and "not checked" are <failure>, ERROR is <error>, skipped is <skipped>.
std::string junit_xml(const std::vector<Row>& rows, std::uint64_t seed, double seconds) {
    std::vector<std::string> suites;
    for (const Row& r : rows) {
        const std::string name = suite_name(r);
        if (std::find(suites.begin(), suites.end(), name) == suites.end()) suites.push_back(name);
    }
    int failures = 0, errors = 0, skipped = 0;
    for (const Row& r : rows) {
        failures += r.result.status == Status::fail || r.result.status == Status::not_checked;
        errors += r.result.status == Status::error;
        skipped += r.result.status == Status::skipped || r.result.status == Status::not_applicable;
    }
    std::ostringstream x;
    x << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      << "<testsuites name=\"attncheck fuzz\" tests=\"" << rows.size() << "\" failures=\"" << failures
      << "\" errors=\"" << errors << "\" skipped=\"" << skipped << "\" time=\"" << seconds << "\">\n";
    for (const std::string& suite : suites) {
        int n = 0, f = 0, e = 0, sk = 0;
        double t = 0;
        for (const Row& r : rows) {
            if (suite_name(r) != suite) continue;
            ++n;
            f += r.result.status == Status::fail || r.result.status == Status::not_checked;
            e += r.result.status == Status::error;
            sk += r.result.status == Status::skipped || r.result.status == Status::not_applicable;
            t += r.result.seconds;
        }
        x << "  <testsuite name=\"" << xml_escape(suite) << "\" tests=\"" << n << "\" failures=\"" << f
          << "\" errors=\"" << e << "\" skipped=\"" << sk << "\" time=\"" << t << "\">\n"
          << "    <properties><property name=\"seed\" value=\"" << seed << "\"/>"
          << "<property name=\"isa\" value=\"" << xml_escape(isa_line()) << "\"/></properties>\n";
        for (const Row& r : rows) {
            if (suite_name(r) != suite) continue;
            const PropertyResult& p = r.result;
            x << "    <testcase classname=\"" << xml_escape(std::string("attncheck.") + to_string(r.kind) + "." + r.subject) << "\" name=\""
              << xml_escape(p.property) << "\" time=\"" << p.seconds << "\"";
            if (p.status == Status::pass) {
                x << "/>\n";
                continue;
            }
            x << ">\n";
            const std::string first_line = p.message.substr(0, p.message.find('\n'));
            std::string body = p.counterexample + p.message + "\nreplay: " + replay_command(r.replay_flag, p.property, r.params) + "\n";
            if (r.library) body += "replay in a test that calls check_kernel(): " + check_kernel_replay(r) + "\n";
            if (p.status == Status::skipped || p.status == Status::not_applicable)
                x << "      <skipped message=\"" << xml_escape(first_line) << "\"/>\n";
            else
                x << "      <" << (p.status == Status::error ? "error" : "failure") << " type=\"" << to_string(p.status)
                  << "\" message=\"" << xml_escape(first_line) << "\">" << xml_escape(body) << "</"
                  << (p.status == Status::error ? "error" : "failure") << ">\n";
            x << "    </testcase>\n";
        }
        x << "  </testsuite>\n";
    }
    x << "</testsuites>\n";
    return x.str();
}

// A --json/--junit path that cannot be written is bad usage, found before the run rather than
// after minutes of it. A file that does not exist yet is created and removed again.
std::string unwritable(const std::string& path) {
    struct stat st{};
    if (::stat(path.c_str(), &st) == 0) {
        if (S_ISDIR(st.st_mode)) return "is a directory";
        if (::access(path.c_str(), W_OK) != 0) return std::string("cannot write: ") + std::strerror(errno);
        return "";
    }
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) return std::string("cannot create: ") + std::strerror(errno);
    ::close(fd);
    ::unlink(path.c_str());
    return "";
}

bool write_file(const std::string& path, const std::string& text) {
    std::ofstream f(path);
    f << text;
    f.close();
    return !f.fail();
}

}  // namespace attncheck::properties
