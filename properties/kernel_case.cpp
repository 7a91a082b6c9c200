// properties/kernel_case.cpp — the cases: their names and printout, the logical inputs and the
// transforms. Building a case into buffers (layouts, poison, guards) and reading the result back
// is kernel_case_build.cpp; the generator is kernel_case_gen.cpp.
#include "properties/kernel_case.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <numeric>
#include <ostream>
#include <sstream>
#include <stdexcept>
#include <utility>

#include "attncheck/problem_v2.hpp"
#include "properties/stream.hpp"

namespace attncheck::properties {

const char* to_string(InputStyle s) {
    switch (s) {
        case InputStyle::normal: return "normal";
        case InputStyle::large: return "large";
        case InputStyle::ties: return "ties";
        case InputStyle::small_int: return "small_int";
    }
    return "?";
}

const char* to_string(OffsetMode m) {
    switch (m) {
        case OffsetMode::prefill: return "prefill";
        case OffsetMode::decode: return "decode";
        case OffsetMode::chunk: return "chunk";
        case OffsetMode::general: return "general";
    }
    return "?";
}

const char* to_string(LayoutKind l) {
    switch (l) {
        case LayoutKind::bhtd: return "bhtd";
        case LayoutKind::bthd: return "bthd";
        case LayoutKind::gapped: return "gapped";
        case LayoutKind::varlen: return "varlen";
        case LayoutKind::paged: return "paged";
    }
    return "?";
}

const char* to_string(Filler f) {
    switch (f) {
        case Filler::nan: return "nan";
        case Filler::inf: return "inf";
        case Filler::finite: return "finite";
        case Filler::large: return "large finite garbage";
    }
    return "?";
}

int KernelCase::max_q_len() const { return q_lens.empty() ? 0 : *std::max_element(q_lens.begin(), q_lens.end()); }
int KernelCase::max_kv_len() const { return kv_lens.empty() ? 0 : *std::max_element(kv_lens.begin(), kv_lens.end()); }

bool KernelCase::visible(int b, int i, int j) const {
    if (j < 0 || j >= kv_lens[std::size_t(b)]) return false;
    const std::int64_t a = std::int64_t(q_pos[std::size_t(b)]) + i;
    if (causal && j > a) return false;
    if (window_left >= 0 && j < a - window_left) return false;
    if (!causal && window_right >= 0 && j > a + window_right) return false;
    return true;
}

namespace {

template <class T>
std::string list(const std::vector<T>& v) {
    std::ostringstream s;
    s.precision(6);
    s << "[";
    for (std::size_t i = 0; i < v.size(); ++i) s << (i ? "," : "") << v[i];
    s << "]";
    return s.str();
}

}  // namespace

std::string describe(const KernelCase& c) {
    std::ostringstream s;
    s.precision(9);
    s << "dtype=" << dtype_name(c.dtype) << " B=" << c.batch << " Hq=" << c.q_heads << " Hk=" << c.kv_heads
      << " Dk=" << c.head_dim << " Dv=" << c.value_dim << " Tq=" << list(c.q_lens) << " Tk=" << list(c.kv_lens)
      << " q_pos=" << list(c.q_pos) << " (" << to_string(c.mode) << ") causal=" << (c.causal ? 1 : 0);
    if (c.window_left >= 0 || c.window_right >= 0) s << " window=(" << c.window_left << "," << c.window_right << ")";
    s << " scale=" << c.scale << " (" << c.scale_kind << ")";
    if (c.softcap > 0) s << " softcap=" << c.softcap;
    if (!c.alibi_slopes.empty()) s << " alibi=" << list(c.alibi_slopes);
    if (!c.sinks.empty()) s << " sinks=" << list(c.sinks);
    if (c.want_lse) s << " lse";
    s << " style=" << to_string(c.style) << " data_seed=" << c.data_seed << " layout=" << to_string(c.layout.kind);
    if (c.layout.kind == LayoutKind::paged)
        s << "(block_size=" << c.layout.block_size << " spare=" << c.layout.spare_blocks
          << " slack=" << c.layout.table_slack << " block_seed=" << c.layout.block_seed
          << (c.layout.blocks_bthd ? " [blk,row,h,d]" : " [blk,h,row,d]") << ")";
    else if (c.layout.kind != LayoutKind::varlen)
        s << "(kv_capacity=" << c.layout.kv_capacity << ")";
    else if (c.layout.varlen_contiguous)
        s << "(contiguous [H,T,D])";
    s << " filler=" << to_string(c.filler);
    if (c.poison_invisible) s << " poison_invisible";
    return s.str();
}

void showValue(const KernelCase& c, std::ostream& os) { os << describe(c); }

// ---- logical inputs ---------------------------------------------------------------------------

namespace {

std::vector<std::size_t> firsts(const KernelCase& c, const std::vector<int>& lens, int heads, int width) {
    std::vector<std::size_t> f(std::size_t(c.batch) + 1, 0);
    for (int b = 0; b < c.batch; ++b)
        f[std::size_t(b) + 1] = f[std::size_t(b)] + std::size_t(heads) * std::size_t(lens[std::size_t(b)]) * std::size_t(width);
    return f;
}

std::size_t at(const std::vector<std::size_t>& first, int b, int h, int rows, int t, int width, int c) {
    return first[std::size_t(b)] + (std::size_t(h) * std::size_t(rows) + std::size_t(t)) * std::size_t(width) + std::size_t(c);
}

}  // namespace

float& KernelInputs::q_at(int b, int h, int i, int c, const KernelCase& cs) {
    return q[at(q_first, b, h, cs.q_lens[std::size_t(b)], i, cs.head_dim, c)];
}
float& KernelInputs::k_at(int b, int h, int j, int c, const KernelCase& cs) {
    return k[at(k_first, b, h, cs.kv_lens[std::size_t(b)], j, cs.head_dim, c)];
}
float& KernelInputs::v_at(int b, int h, int j, int c, const KernelCase& cs) {
    return v[at(v_first, b, h, cs.kv_lens[std::size_t(b)], j, cs.value_dim, c)];
}
float KernelInputs::q_at(int b, int h, int i, int c, const KernelCase& cs) const {
    return q[at(q_first, b, h, cs.q_lens[std::size_t(b)], i, cs.head_dim, c)];
}
float KernelInputs::k_at(int b, int h, int j, int c, const KernelCase& cs) const {
    return k[at(k_first, b, h, cs.kv_lens[std::size_t(b)], j, cs.head_dim, c)];
}
float KernelInputs::v_at(int b, int h, int j, int c, const KernelCase& cs) const {
    return v[at(v_first, b, h, cs.kv_lens[std::size_t(b)], j, cs.value_dim, c)];
}

KernelInputs empty_inputs(const KernelCase& c) {
    KernelInputs in;
    in.q_first = firsts(c, c.q_lens, c.q_heads, c.head_dim);
    in.k_first = firsts(c, c.kv_lens, c.kv_heads, c.head_dim);
    in.v_first = firsts(c, c.kv_lens, c.kv_heads, c.value_dim);
    in.q.assign(in.q_first.back(), 0.0f);
    in.k.assign(in.k_first.back(), 0.0f);
    in.v.assign(in.v_first.back(), 0.0f);
    return in;
}

KernelInputs fill_inputs(const KernelCase& c) {
    KernelInputs in = empty_inputs(c);
    Stream rng(c.data_seed);
    const auto rounded = [&](double x) { return round_to(c.dtype, float(x)); };
    switch (c.style) {
        case InputStyle::normal:
            for (float& x : in.q) x = rounded(rng.normal());
            for (float& x : in.k) x = rounded(rng.normal());
            for (float& x : in.v) x = rounded(rng.normal());
            break;
        case InputStyle::large: {
            // As v1's large style (kernel_case.cpp): integer q, k and a power-of-two scale give
            // exact scores around 1e3, past exp's overflow without the max subtraction. The
            // integers stay within 256, exact in f16 and bf16 too.
            const double s = std::abs(double(c.scale)), dk = double(c.head_dim);
            const double cap = std::min(256.0, std::floor(std::sqrt(double(1 << 24) / dk)) - 1);
            const int a = int(std::clamp(std::round(std::sqrt(3e3 / (s * std::sqrt(dk)))), 1.0, cap));
            for (float& x : in.q) x = float(rng.integer(-a, a));
            for (float& x : in.k) x = float(rng.integer(-a, a));
            for (float& x : in.v) x = rounded(rng.normal());
            break;
        }
        case InputStyle::ties: {
            // Every key row of a (b, kv head) is one of a pool of 1-3 rows: exactly equal scores.
            for (float& x : in.q) x = rounded(rng.normal());
            for (int b = 0; b < c.batch; ++b)
                for (int h = 0; h < c.kv_heads; ++h) {
                    const int pool = rng.integer(1, 3);
                    std::vector<float> rows(std::size_t(pool) * std::size_t(c.head_dim));
                    for (float& x : rows) x = rounded(rng.normal());
                    for (int j = 0; j < c.kv_lens[std::size_t(b)]; ++j) {
                        const int pick = rng.integer(0, pool - 1);
                        for (int col = 0; col < c.head_dim; ++col)
                            in.k_at(b, h, j, col, c) = rows[std::size_t(pick) * std::size_t(c.head_dim) + std::size_t(col)];
                    }
                }
            for (float& x : in.v) x = rounded(rng.normal());
            break;
        }
        case InputStyle::small_int:
            for (float& x : in.q) x = float(rng.integer(-2, 2));
            for (float& x : in.k) x = float(rng.integer(-2, 2));
            for (float& x : in.v) x = float(rng.integer(-2, 2));
            break;
    }
    return in;
}

// ---- transforms ---------------------------------------------------------------------------------

KernelCase with_layout(KernelCase c, LayoutKind kind) {
    c.layout.kind = kind;
    return c;
}

KernelCase with_pages(KernelCase c, int block_size, std::uint32_t block_seed, int spare_blocks, int table_slack) {
    c.layout.kind = LayoutKind::paged;
    c.layout.block_size = block_size;
    c.layout.block_seed = block_seed;
    c.layout.spare_blocks = spare_blocks;
    c.layout.table_slack = table_slack;
    return c;
}

KernelCase with_capacity(KernelCase c, int capacity) {
    c.layout.kv_capacity = capacity;
    return c;
}

void replicate_kv_heads(KernelCase& c, KernelInputs& in) {
    KernelCase mha = c;
    mha.kv_heads = c.q_heads;
    KernelInputs out = empty_inputs(mha);
    out.q = in.q;
    const int group = c.q_heads / c.kv_heads;
    for (int b = 0; b < c.batch; ++b)
        for (int h = 0; h < c.q_heads; ++h)
            for (int j = 0; j < c.kv_lens[std::size_t(b)]; ++j) {
                for (int col = 0; col < c.head_dim; ++col) out.k_at(b, h, j, col, mha) = in.k_at(b, h / group, j, col, c);
                for (int col = 0; col < c.value_dim; ++col) out.v_at(b, h, j, col, mha) = in.v_at(b, h / group, j, col, c);
            }
    c = std::move(mha);
    in = std::move(out);
}

KernelCase sequence_alone(const KernelCase& c, int b) {
    KernelCase s = c;
    const std::size_t bz = std::size_t(b);
    s.batch = 1;
    s.q_lens = {c.q_lens[bz]};
    s.kv_lens = {c.kv_lens[bz]};
    s.q_pos = {c.q_pos[bz]};
    return s;
}

KernelInputs sequence_inputs(const KernelCase& c, const KernelInputs& in, int b) {
    const KernelCase s = sequence_alone(c, b);
    KernelInputs r = empty_inputs(s);
    const std::size_t bz = std::size_t(b);
    std::copy(in.q.begin() + std::ptrdiff_t(in.q_first[bz]), in.q.begin() + std::ptrdiff_t(in.q_first[bz + 1]), r.q.begin());
    std::copy(in.k.begin() + std::ptrdiff_t(in.k_first[bz]), in.k.begin() + std::ptrdiff_t(in.k_first[bz + 1]), r.k.begin());
    std::copy(in.v.begin() + std::ptrdiff_t(in.v_first[bz]), in.v.begin() + std::ptrdiff_t(in.v_first[bz + 1]), r.v.begin());
    return r;
}

KernelCase rows_alone(const KernelCase& c, int b, int from, int to) {
    KernelCase s = sequence_alone(c, b);
    s.q_lens = {to - from};
    s.q_pos = {c.q_pos[std::size_t(b)] + from};
    if (c.causal) s.kv_lens = {std::min(c.kv_lens[std::size_t(b)], s.q_pos[0] + s.q_lens[0])};
    s.mode = to - from == 1 ? OffsetMode::decode : OffsetMode::chunk;
    return s;
}

KernelInputs rows_inputs(const KernelCase& c, const KernelInputs& in, int b, int from, int to) {
    const KernelCase s = rows_alone(c, b, from, to);
    KernelInputs r = empty_inputs(s);
    for (int h = 0; h < c.q_heads; ++h)
        for (int i = from; i < to; ++i)
            for (int col = 0; col < c.head_dim; ++col) r.q_at(0, h, i - from, col, s) = in.q_at(b, h, i, col, c);
    for (int h = 0; h < c.kv_heads; ++h)
        for (int j = 0; j < s.kv_lens[0]; ++j) {
            for (int col = 0; col < c.head_dim; ++col) r.k_at(0, h, j, col, s) = in.k_at(b, h, j, col, c);
            for (int col = 0; col < c.value_dim; ++col) r.v_at(0, h, j, col, s) = in.v_at(b, h, j, col, c);
        }
    return r;
}

}  // namespace attncheck::properties
