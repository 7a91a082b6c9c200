// properties/declaration.cpp — parsing and checking a KernelDeclaration (attncheck/declaration.hpp).
#include "attncheck/declaration.hpp"

#include <algorithm>
#include <cctype>
#include <limits>
#include <sstream>
#include <stdexcept>

namespace attncheck {
namespace {

std::string trim(const std::string& s) {
    std::string r;
    for (const char c : s)
        if (!std::isspace(static_cast<unsigned char>(c))) r += c;
    return r;
}

std::vector<std::string> split(const std::string& s, char sep) {
    std::vector<std::string> out;
    std::string part;
    std::istringstream in(s);
    while (std::getline(in, part, sep)) out.push_back(part);
    return out;
}

[[noreturn]] void bad(const std::string& item, const std::string& why) {
    throw std::invalid_argument("declaration item '" + item + "': " + why);
}

int parse_positive(const std::string& item, const std::string& text) {
    if (text.empty() || text.size() > 9 || !std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; }))
        bad(item, "'" + text + "' is not a positive integer");
    const int v = std::stoi(text);
    if (v < 1) bad(item, "'" + text + "' is not a positive integer");
    return v;
}

std::vector<KernelDeclaration::Range> parse_ranges(const std::string& item, const std::string& text) {
    std::vector<KernelDeclaration::Range> out;
    for (const std::string& part : split(text, ',')) {
        const std::size_t dots = part.find("..");
        KernelDeclaration::Range r;
        if (dots == std::string::npos) {
            r.lo = r.hi = parse_positive(item, part);
        } else {
            r.lo = parse_positive(item, part.substr(0, dots));
            r.hi = parse_positive(item, part.substr(dots + 2));
            if (r.hi < r.lo) bad(item, "range " + part + " is empty");
        }
        out.push_back(r);
    }
    if (out.empty()) bad(item, "no width given");
    return out;
}

bool parse_yes_no(const std::string& item, const std::string& text) {
    if (text == "yes") return true;
    if (text == "no") return false;
    bad(item, "expected yes or no, got '" + text + "'");
}

bool in(const std::vector<KernelDeclaration::Range>& ranges, int v) {
    return ranges.empty() ||
           std::any_of(ranges.begin(), ranges.end(), [v](const KernelDeclaration::Range& r) { return v >= r.lo && v <= r.hi; });
}

std::string ranges_text(const std::vector<KernelDeclaration::Range>& ranges) {
    std::string s;
    for (const auto& r : ranges) {
        if (!s.empty()) s += ",";
        s += r.lo == r.hi ? std::to_string(r.lo) : std::to_string(r.lo) + ".." + std::to_string(r.hi);
    }
    return s;
}

}  // namespace

bool KernelDeclaration::is_default() const { return to_string().empty(); }

void KernelDeclaration::apply(const std::string& text) {
    for (const std::string& raw : split(text, ';')) {
        const std::string item = trim(raw);
        if (item.empty()) continue;
        const std::size_t eq = item.find('=');
        if (eq == std::string::npos) bad(item, "expected key=value");
        const std::string key = item.substr(0, eq), value = item.substr(eq + 1);
        if (key == "head_dim") {
            head_dims = parse_ranges(item, value);
        } else if (key == "value_dim") {
            value_dim_same = value == "same";
            value_dims = value_dim_same ? std::vector<Range>{} : parse_ranges(item, value);
        } else if (key == "max_kv_len") {
            max_kv_len = parse_positive(item, value);
        } else if (key == "max_q_len") {
            max_q_len = parse_positive(item, value);
        } else if (key == "max_batch") {
            max_batch = parse_positive(item, value);
        } else if (key == "max_heads") {
            max_heads = parse_positive(item, value);
        } else if (key == "mask") {
            if (value == "any") causal = non_causal = true;
            else if (value == "causal") causal = true, non_causal = false;
            else if (value == "none") causal = false, non_causal = true;
            else bad(item, "expected any, causal or none, got '" + value + "'");
        } else if (key == "padding") {
            padding = parse_yes_no(item, value);
        } else if (key == "empty_rows") {
            if (value == "zero") empty_rows_nan = false;
            else if (value == "nan") empty_rows_nan = true;
            else bad(item, "expected zero or nan, got '" + value + "'");
        } else if (key == "deterministic") {
            deterministic = parse_yes_no(item, value);
        } else {
            bad(item, "unknown key '" + key +
                          "' (known: head_dim, value_dim, max_kv_len, max_q_len, max_batch, max_heads, mask, padding, "
                          "empty_rows, deterministic)");
        }
    }
}

KernelDeclaration KernelDeclaration::parse(const std::string& text) {
    KernelDeclaration d;
    d.apply(text);
    return d;
}

std::string KernelDeclaration::to_string() const {
    std::vector<std::string> items;
    if (!head_dims.empty()) items.push_back("head_dim=" + ranges_text(head_dims));
    if (value_dim_same) items.push_back("value_dim=same");
    else if (!value_dims.empty()) items.push_back("value_dim=" + ranges_text(value_dims));
    if (max_kv_len) items.push_back("max_kv_len=" + std::to_string(max_kv_len));
    if (max_q_len) items.push_back("max_q_len=" + std::to_string(max_q_len));
    if (max_batch) items.push_back("max_batch=" + std::to_string(max_batch));
    if (max_heads) items.push_back("max_heads=" + std::to_string(max_heads));
    if (!causal || !non_causal) items.push_back(causal ? "mask=causal" : "mask=none");
    if (!padding) items.push_back("padding=no");
    if (empty_rows_nan) items.push_back("empty_rows=nan");
    if (!deterministic) items.push_back("deterministic=no");
    std::string s;
    for (const auto& i : items) s += (s.empty() ? "" : "; ") + i;
    return s;
}

bool KernelDeclaration::allows_head_dim(int d) const { return in(head_dims, d); }

bool KernelDeclaration::allows_value_dim(int value_dim, int head_dim) const {
    return value_dim_same ? value_dim == head_dim : in(value_dims, value_dim);
}

std::string KernelDeclaration::unsupported_reason(const attncheck_problem& p) const {
    if (!allows_head_dim(p.head_dim))
        return "head_dim " + std::to_string(p.head_dim) + " is not declared (head_dim=" + ranges_text(head_dims) + ")";
    if (!allows_value_dim(p.value_dim, p.head_dim))
        return "value_dim " + std::to_string(p.value_dim) + " is not declared (value_dim=" +
               (value_dim_same ? std::string("same") : ranges_text(value_dims)) + ")";
    if (max_kv_len && p.kv_len > max_kv_len)
        return "kv_len " + std::to_string(p.kv_len) + " > max_kv_len=" + std::to_string(max_kv_len);
    if (max_q_len && p.q_len > max_q_len)
        return "q_len " + std::to_string(p.q_len) + " > max_q_len=" + std::to_string(max_q_len);
    if (max_batch && p.batch > max_batch)
        return "batch " + std::to_string(p.batch) + " > max_batch=" + std::to_string(max_batch);
    if (max_heads && p.heads > max_heads)
        return "heads " + std::to_string(p.heads) + " > max_heads=" + std::to_string(max_heads);
    if (p.causal && !causal) return "a causal problem, declared mask=none";
    if (!p.causal && !non_causal) return "a non-causal problem, declared mask=causal";
    if (p.kv_valid_len && !padding) return "kv_valid_len given, declared padding=no";
    return {};
}

}  // namespace attncheck
