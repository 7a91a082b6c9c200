// properties/declaration.cpp — parsing and checking a KernelDeclaration (attncheck/declaration.hpp).
#include "attncheck/declaration.hpp"

#include <algorithm>
#include <cctype>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <utility>

#include "attncheck/abi_v1.hpp"
#include "attncheck/problem_v2.hpp"

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
        } else if (key == "dtype") {
            dtype_f32 = dtype_f16 = dtype_bf16 = false;
            for (const std::string& t : split(value, ',')) {
                if (t == "f32") dtype_f32 = true;
                else if (t == "f16") dtype_f16 = true;
                else if (t == "bf16") dtype_bf16 = true;
                else bad(item, "unknown dtype '" + t + "' (known: f32, f16, bf16)");
            }
            if (!dtype_f32 && !dtype_f16 && !dtype_bf16) bad(item, "no dtype given");
        } else if (key == "gqa") {
            gqa = parse_yes_no(item, value);
        } else if (key == "layout") {
            if (value == "any") layout_any = true;
            else if (value == "contiguous") layout_any = false;
            else bad(item, "expected any or contiguous, got '" + value + "'");
        } else if (key == "positions") {
            positions_any = value != "bottom_right";
            positions_shared = value == "shared";
            if (value != "any" && value != "bottom_right" && value != "shared")
                bad(item, "expected any, bottom_right or shared, got '" + value + "'");
        } else if (key == "varlen") {
            varlen = parse_yes_no(item, value);
        } else if (key == "dense") {
            dense = parse_yes_no(item, value);
        } else if (key == "paged") {
            paged = parse_yes_no(item, value);
        } else if (key == "block_size") {
            block_sizes = parse_ranges(item, value);
        } else if (key == "window") {
            window = parse_yes_no(item, value);
        } else if (key == "softcap") {
            softcap = parse_yes_no(item, value);
        } else if (key == "alibi") {
            alibi = parse_yes_no(item, value);
        } else if (key == "lse") {
            lse = parse_yes_no(item, value);
        } else if (key == "sinks") {
            sinks = parse_yes_no(item, value);
        } else if (key == "rounds_probabilities") {
            rounds_probabilities = parse_yes_no(item, value);
        } else if (key == "tanh_ulps") {
            tanh_ulps = parse_positive(item, value);
        } else if (key == "backward") {
            backward_said = parse_yes_no(item, value) ? Said::yes : Said::no;
        } else if (key == "deterministic_backward") {
            deterministic_backward = parse_yes_no(item, value);
        } else if (key == "padding_values") {
            if (value == "any") padding_finite = false;
            else if (value == "finite") padding_finite = true;
            else bad(item, "expected any or finite, got '" + value + "'");
        } else {
            bad(item, "unknown key '" + key +
                          "' (known: head_dim, value_dim, max_kv_len, max_q_len, max_batch, max_heads, mask, padding, "
                          "empty_rows, deterministic, dtype, gqa, layout, positions, varlen, dense, paged, block_size, window, "
                          "softcap, alibi, lse, sinks, rounds_probabilities, tanh_ulps, padding_values, backward, "
                          "deterministic_backward)");
        }
    }
    // Contradictions between items, whatever their order.
    if (!dense && !varlen)
        bad("dense=no", "declared with varlen=no (a kernel that takes neither dense nor packed batches takes nothing)");
    if (!paged && !block_sizes.empty())
        bad("block_size=" + ranges_text(block_sizes), "block sizes declared with paged=no (a kernel without a paged cache has no block size)");
}

KernelDeclaration KernelDeclaration::parse(const std::string& text) {
    KernelDeclaration d;
    d.apply(text);
    return d;
}

void KernelDeclaration::limit_to_abi_v1() {
    abi_v1 = true;
    dtype_f32 = true, dtype_f16 = dtype_bf16 = false;
    gqa = false;
    layout_any = false;
    positions_any = true, positions_shared = true;
    varlen = paged = false, dense = true;
    block_sizes.clear();
    window = softcap = alibi = lse = sinks = false;
    rounds_probabilities = false;
    padding_finite = true;
    backward = false;  // version 1 has no backward entry point
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
    if (abi_v1) {  // the rest are version 1's limits
        std::string s;
        for (const auto& i : items) s += (s.empty() ? "" : "; ") + i;
        return s;
    }
    if (!dtype_f32 || !dtype_f16 || !dtype_bf16) {
        std::string list;
        for (const auto& [on, name] : {std::pair{dtype_f32, "f32"}, std::pair{dtype_f16, "f16"}, std::pair{dtype_bf16, "bf16"}})
            if (on) {
                if (!list.empty()) list += ',';
                list += name;
            }
        items.push_back("dtype=" + list);
    }
    if (!gqa) items.push_back("gqa=no");
    if (!layout_any) items.push_back("layout=contiguous");
    if (!positions_any) items.push_back("positions=bottom_right");
    if (positions_shared) items.push_back("positions=shared");
    if (!varlen) items.push_back("varlen=no");
    if (!dense) items.push_back("dense=no");
    if (!paged) items.push_back("paged=no");
    if (!block_sizes.empty()) items.push_back("block_size=" + ranges_text(block_sizes));
    if (!window) items.push_back("window=no");
    if (!softcap) items.push_back("softcap=no");
    if (!alibi) items.push_back("alibi=no");
    if (!lse) items.push_back("lse=no");
    if (sinks) items.push_back("sinks=yes");
    if (rounds_probabilities) items.push_back("rounds_probabilities=yes");
    if (tanh_ulps != kDefaultTanhUlps) items.push_back("tanh_ulps=" + std::to_string(tanh_ulps));
    if (padding_finite) items.push_back("padding_values=finite");
    if (backward_said != Said::unsaid) items.push_back(backward_said == Said::yes ? "backward=yes" : "backward=no");
    if (!deterministic_backward) items.push_back("deterministic_backward=no");
    std::string s;
    for (const auto& i : items) s += (s.empty() ? "" : "; ") + i;
    return s;
}

bool KernelDeclaration::allows_head_dim(int d) const { return in(head_dims, d); }

bool KernelDeclaration::allows_dtype(std::int32_t dtype) const {
    return (dtype == ATTNCHECK_DTYPE_F32 && dtype_f32) || (dtype == ATTNCHECK_DTYPE_F16 && dtype_f16) ||
           (dtype == ATTNCHECK_DTYPE_BF16 && dtype_bf16);
}

bool KernelDeclaration::allows_block_size(int block_size) const { return in(block_sizes, block_size); }

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

namespace attncheck {
namespace {

// Whether t's strides are those of a densely packed [outer, heads, rows, cols] tensor (the outer
// stride is not read for a varlen tensor, so it is not compared then).
bool packed(const attncheck_tensor_v2& t, std::int64_t heads, std::int64_t rows, std::int64_t cols, bool outer_read) {
    return t.stride[3] == 1 && t.stride[2] == cols && t.stride[1] == rows * cols &&
           (!outer_read || t.stride[0] == heads * rows * cols);
}

// Whether every tensor of p is densely packed [B,H,T,D] (varlen: [H, total rows, D]; paged k/v:
// [num_blocks, Hk, block_size, D]), lse [B,H,T] included.
bool contiguous_layout(const attncheck_problem_v2& p) {
    const bool varlen_q = p.cu_seqlens_q != nullptr;
    const std::int64_t q_rows = varlen_q ? p.cu_seqlens_q[p.batch] : p.q_len;
    std::int64_t k_rows = p.kv_len;
    if (p.block_table) k_rows = p.block_size;
    else if (p.cu_seqlens_k) k_rows = p.cu_seqlens_k[p.batch];
    const bool k_outer = p.cu_seqlens_k == nullptr;
    if (!packed(p.q, p.q_heads, q_rows, p.head_dim, !varlen_q) || !packed(p.out, p.q_heads, q_rows, p.value_dim, !varlen_q) ||
        !packed(p.k, p.kv_heads, k_rows, p.head_dim, k_outer) || !packed(p.v, p.kv_heads, k_rows, p.value_dim, k_outer))
        return false;
    if (p.lse && !(p.lse_stride[2] == 1 && p.lse_stride[1] == q_rows && (varlen_q || p.lse_stride[0] == p.q_heads * q_rows)))
        return false;
    return true;
}

}  // namespace

std::string KernelDeclaration::unsupported_reason(const attncheck_problem_v2& p) const {
    if (abi_v1) {
        V1Call call;
        if (const std::string why = v1_call_of(p, call); !why.empty()) return "version 1 of the ABI cannot pose it: " + why;
    }
    if (!allows_dtype(p.dtype))
        return std::string("dtype ") + dtype_name(p.dtype) + " is not declared (" + to_string() + ")";
    if (!allows_head_dim(p.head_dim))
        return "head_dim " + std::to_string(p.head_dim) + " is not declared (head_dim=" + ranges_text(head_dims) + ")";
    if (!allows_value_dim(p.value_dim, p.head_dim))
        return "value_dim " + std::to_string(p.value_dim) + " is not declared (value_dim=" +
               (value_dim_same ? std::string("same") : ranges_text(value_dims)) + ")";
    int longest_q = 0, longest_k = 0;
    for (int b = 0; b < p.batch; ++b) {
        longest_q = std::max(longest_q, q_len_of(p, b));
        longest_k = std::max(longest_k, kv_len_of(p, b));
    }
    if (max_kv_len && longest_k > max_kv_len)
        return "a sequence of " + std::to_string(longest_k) + " keys > max_kv_len=" + std::to_string(max_kv_len);
    if (max_q_len && longest_q > max_q_len)
        return "a sequence of " + std::to_string(longest_q) + " query rows > max_q_len=" + std::to_string(max_q_len);
    if (max_batch && p.batch > max_batch)
        return "batch " + std::to_string(p.batch) + " > max_batch=" + std::to_string(max_batch);
    if (max_heads && p.q_heads > max_heads)
        return "q_heads " + std::to_string(p.q_heads) + " > max_heads=" + std::to_string(max_heads);
    if (p.causal && !causal) return "a causal problem, declared mask=none";
    if (!p.causal && !non_causal) return "a non-causal problem, declared mask=causal";
    if (p.kv_lens && !p.block_table && !padding) return "kv_lens given for a dense cache, declared padding=no";
    if (p.kv_heads != p.q_heads && !gqa)
        return "kv_heads " + std::to_string(p.kv_heads) + " < q_heads " + std::to_string(p.q_heads) + ", declared gqa=no";
    if (!layout_any && !contiguous_layout(p)) return "strides other than contiguous [B,H,T,D], declared layout=contiguous";
    if (!positions_any)
        for (int b = 0; b < p.batch; ++b)
            if (p.q_pos[b] != kv_len_of(p, b) - q_len_of(p, b))
                return "q_pos[" + std::to_string(b) + "] = " + std::to_string(p.q_pos[b]) + " is not Tk - Tq = " +
                       std::to_string(kv_len_of(p, b) - q_len_of(p, b)) + ", declared positions=bottom_right";
    if (positions_shared)
        for (int b = 1; b < p.batch; ++b)
            if (p.q_pos[b] != p.q_pos[0])
                return "q_pos[" + std::to_string(b) + "] = " + std::to_string(p.q_pos[b]) + " differs from q_pos[0] = " +
                       std::to_string(p.q_pos[0]) + ", declared positions=shared";
    if ((p.cu_seqlens_q || p.cu_seqlens_k) && !varlen) return "a packed variable-length batch, declared varlen=no";
    if (!p.cu_seqlens_q && !dense) return "dense query rows (no cu_seqlens_q), declared dense=no";
    if (p.block_table && !paged) return "a paged KV cache, declared paged=no";
    if (p.block_table && !allows_block_size(p.block_size))
        return "block_size " + std::to_string(p.block_size) + " is not declared (block_size=" + ranges_text(block_sizes) + ")";
    if ((p.window_left >= 0 || p.window_right >= 0) && !window) return "a sliding window, declared window=no";
    if (p.softcap > 0 && !softcap) return "softcap given, declared softcap=no";
    if (p.alibi_slopes && !alibi) return "ALiBi slopes given, declared alibi=no";
    if (p.sinks && !sinks) return "attention sinks given, not declared (sinks=yes)";
    if (p.lse && !lse) return "lse asked for, declared lse=no";
    return {};
}

}  // namespace attncheck
