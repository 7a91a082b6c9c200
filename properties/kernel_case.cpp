// properties/kernel_case.cpp — the KernelCase generator and the seeded input fill.
#include "properties/kernel_case.hpp"

#include <algorithm>
#include <cmath>
#include <ostream>
#include <sstream>

#include "properties/pick.hpp"
#include "properties/stream.hpp"
#include "reference/attention.hpp"

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

attncheck_problem KernelCase::problem() const {
    return make_problem({.batch = batch, .heads = heads, .q_len = q_len, .kv_len = kv_len,
                         .head_dim = head_dim, .value_dim = value_dim, .q_offset = q_offset,
                         .causal = causal,
                         .kv_valid_len = kv_valid_len.empty() ? nullptr : kv_valid_len.data(),
                         .scale = scale});
}

bool KernelCase::visible(int b, int i, int j) const {
    return reference::key_visible(i, j, q_offset, causal, valid_len(b));
}

std::string describe(const KernelCase& c) {
    std::ostringstream s;
    s.precision(9);
    s << "B=" << c.batch << " H=" << c.heads << " Tq=" << c.q_len << " Tk=" << c.kv_len
      << " Dk=" << c.head_dim << " Dv=" << c.value_dim << " q_offset=" << c.q_offset << " ("
      << to_string(c.mode) << ") causal=" << (c.causal ? 1 : 0) << " kv_valid_len=";
    if (c.kv_valid_len.empty()) {
        s << "null";
    } else {
        s << "[";
        for (std::size_t b = 0; b < c.kv_valid_len.size(); ++b) s << (b ? "," : "") << c.kv_valid_len[b];
        s << "]";
    }
    s << " scale=" << c.scale << " (" << c.scale_kind << ") style=" << to_string(c.style)
      << " data_seed=" << c.data_seed;
    return s.str();
}

void showValue(const KernelCase& c, std::ostream& os) { os << describe(c); }

std::string index4(std::size_t flat, int d0, int d1, int d2, int d3) {
    const std::size_t c = flat % std::size_t(d3);
    const std::size_t i = flat / std::size_t(d3) % std::size_t(d2);
    const std::size_t h = flat / (std::size_t(d3) * std::size_t(d2)) % std::size_t(d1);
    const std::size_t b = flat / (std::size_t(d3) * std::size_t(d2) * std::size_t(d1));
    (void)d0;
    std::ostringstream s;
    s << "[" << b << "," << h << "," << i << "," << c << "]";
    return s.str();
}

KernelInputs fill_inputs(const KernelCase& c) {
    Stream rng(c.data_seed);
    KernelInputs in;
    in.q.resize(c.q_size());
    in.k.resize(c.k_size());
    in.v.resize(c.v_size());
    switch (c.style) {
        case InputStyle::normal:
            for (float& x : in.q) x = float(rng.normal());
            for (float& x : in.k) x = float(rng.normal());
            for (float& x : in.v) x = float(rng.normal());
            break;
        case InputStyle::large: {
            // Scaled scores around 1e3, far past exp's float32 overflow at 88.7: a kernel without
            // the row-max subtraction turns them into inf/inf = NaN. q and k are integers in
            // [-a, a] (|q.k| < 2^24) and the scale a power of two, so every score is exact in
            // any order of summation: the check is then about the softmax alone. (Inexact
            // scores of this size are legitimate too, and NUMERICS.md v2's bound grows with
            // them; exact ones keep this style's failures about what it is for.)
            const double s = std::abs(double(c.scale));
            const double dk = double(c.head_dim);
            const double cap = std::floor(std::sqrt(double(1 << 24) / dk)) - 1;
            const int a = int(std::clamp(std::round(std::sqrt(3e3 / (s * std::sqrt(dk)))), 1.0, cap));
            for (float& x : in.q) x = float(rng.integer(-a, a));
            for (float& x : in.k) x = float(rng.integer(-a, a));
            for (float& x : in.v) x = float(rng.normal());
            break;
        }
        case InputStyle::ties: {
            // Every key row of a (b, h) is one of a pool of 1-3 rows: many scores are exactly
            // equal, so a kernel that picks "the" maximum, or breaks ties by position, shows it.
            for (float& x : in.q) x = float(rng.normal());
            const std::size_t rows = std::size_t(c.batch) * c.heads, Tk = std::size_t(c.kv_len),
                              Dk = std::size_t(c.head_dim);
            for (std::size_t bh = 0; bh < rows; ++bh) {
                const int pool = rng.integer(1, 3);
                std::vector<float> rowsv(std::size_t(pool) * Dk);
                for (float& x : rowsv) x = float(rng.normal());
                for (std::size_t j = 0; j < Tk; ++j) {
                    const std::size_t pick = std::size_t(rng.integer(0, pool - 1));
                    std::copy_n(rowsv.begin() + std::ptrdiff_t(pick * Dk), Dk,
                                in.k.begin() + std::ptrdiff_t((bh * Tk + j) * Dk));
                }
            }
            for (float& x : in.v) x = float(rng.normal());
            break;
        }
        case InputStyle::small_int:
            // Exact products and sums: a kernel's result is then close to exact, so a wrong
            // weight cannot hide inside the rounding noise.
            for (float& x : in.q) x = float(rng.integer(-2, 2));
            for (float& x : in.k) x = float(rng.integer(-2, 2));
            for (float& x : in.v) x = float(rng.integer(-2, 2));
            break;
    }
    return in;
}

namespace {

// Values at and beside the edges where blocked code changes path: multiples of the usual tile
// widths (16-lane vectors, 64-key tiles, 512-key split-K chunks) and one either side (the
// remainder loop, a tile of one). Not the built-in kernel's constants: any kernel's.
std::vector<int> edges_up_to(int lo, int hi, std::initializer_list<int> centres) {
    std::vector<int> out;
    for (const int c : centres)
        for (const int v : {c - 1, c, c + 1})
            if (v >= lo && v <= hi && std::find(out.begin(), out.end(), v) == out.end()) out.push_back(v);
    if (out.empty()) out.push_back(lo);
    return out;
}

// A length in [lo, hi]: an edge value, or anything in between (the edges are there to be hit,
// the range so that a kernel tuned to the edges alone is still checked between them).
// At full size from case 1 (RapidCheck scales ranges by the case size, which would keep the
// first cases of the large tier short).
rc::Gen<int> edgy_length(int lo, int hi, std::initializer_list<int> centres) {
    return rc::gen::resize(100, rc::gen::weightedOneOf<int>({{3, rc::gen::elementOf(edges_up_to(lo, hi, centres))},
                                                             {2, rc::gen::inRange(lo, hi + 1)}}));
}

// The offset mode, q_len and q_offset for Tk keys (the rules of OffsetMode), q_len up to max_q
// outside prefill.
void place_queries(KernelCase& c, const CaseOptions& o, int max_q, bool large) {
    using namespace rc;
    const int Tk = c.kv_len;
    switch (c.mode) {
        case OffsetMode::prefill:
            c.q_offset = 0;
            c.q_len = Tk;
            break;
        case OffsetMode::decode:
            c.q_len = 1;
            c.q_offset = Tk - 1;
            break;
        case OffsetMode::chunk: {
            // need_future: row 0 (position Tk - Tq) must have a key after it, so Tq >= 2.
            const int lo = o.need_future ? 2 : 1, hi = std::min(Tk, max_q);
            c.q_len = large ? *edgy_length(lo, hi, {6, 12, 16, 64, 128}).as("q_len")
                            : *gen::inRange(lo, hi + 1).as("q_len");
            c.q_offset = Tk - c.q_len;
            break;
        }
        case OffsetMode::general:
            c.q_offset = o.need_future ? *gen::inRange(0, Tk - 1).as("q_offset")
                                       : *gen::inRange(0, Tk + 4).as("q_offset");
            c.q_len = large ? *edgy_length(1, max_q, {6, 12, 16, 64, 128}).as("q_len")
                            : *gen::inRange(1, std::min(Tk + 5, max_q + 1)).as("q_len");
            break;
    }
}

OffsetMode pick_mode(const CaseOptions& o);

// Mostly short sequences (fast, and most bugs show there), sometimes up to max_kv so that
// small tiles (8, 16, 32 keys) are crossed.
void small_shape(KernelCase& c, const CaseOptions& o) {
    using namespace rc;
    const int min_b = std::max(1, o.min_batch);
    c.batch = min_b > 1 ? *gen::inRange(min_b, min_b + 3).as("batch")
                        : pick<int>({{6, 1}, {3, 2}, {1, 3}}, "batch");
    c.heads = pick<int>({{5, 1}, {3, 2}, {2, 3}}, "heads");
    const int lo_kv = o.need_future ? 2 : 1;
    const int max_kv = std::max(lo_kv, o.max_kv);
    c.kv_len = *gen::weightedOneOf<int>({{4, gen::inRange(lo_kv, std::min(9, max_kv) + 1)},
                                         {3, gen::inRange(lo_kv, std::min(33, max_kv) + 1)},
                                         {2, gen::inRange(lo_kv, max_kv + 1)}})
                    .as("kv_len");
    c.head_dim = *gen::weightedOneOf<int>({{1, gen::just(1)},
                                           {4, gen::inRange(1, 9)},
                                           {2, gen::inRange(1, 33)}})
                      .as("head_dim");
    c.value_dim = *gen::weightedOneOf<int>({{2, gen::just(c.head_dim)}, {2, gen::inRange(1, 17)}})
                       .as("value_dim");
    c.causal = o.need_future ? true : pick<bool>({{3, true}, {1, false}}, "causal");
    c.mode = pick_mode(o);
    place_queries(c, o, c.kv_len + 4, false);
}

// The large tier (CaseOptions::large_percent): one or two sequences and heads (the cost is in
// the lengths), key lengths at tile and chunk edges, widths with SIMD fast paths and odd ones.
void large_shape(KernelCase& c, const CaseOptions& o) {
    using namespace rc;
    // Longest prefill: Tq = Tk, so the reference's Tq x Tk work stays affordable.
    constexpr int kLargeMaxPrefill = 160;
    // Longest query block outside prefill.
    constexpr int kLargeMaxQ = 130;
    const int min_b = std::max(1, o.min_batch);
    c.batch = min_b > 1 ? *gen::inRange(min_b, min_b + 2).as("batch")
                        : pick<int>({{3, 1}, {1, 2}}, "batch");
    c.heads = pick<int>({{3, 1}, {1, 2}}, "heads");
    const auto width = [](const char* label) {
        return *gen::resize(100, gen::weightedOneOf<int>({{4, gen::element(16, 32, 48, 64, 80, 96, 128)},
                                                          {2, gen::elementOf(edges_up_to(1, 129, {16, 32, 48, 64, 80, 96, 128}))},
                                                          {2, gen::inRange(1, 130)}}))
                    .as(label);
    };
    c.head_dim = width("head_dim");
    c.value_dim = pick<bool>({{1, true}, {1, false}}, "value_dim = head_dim") ? c.head_dim : width("value_dim");
    c.causal = o.need_future ? true : pick<bool>({{3, true}, {1, false}}, "causal");
    c.mode = pick_mode(o);
    const int lo_kv = o.need_future ? 2 : 1;
    const int max_kv = std::max(lo_kv, o.large_max_kv);
    const int hi = c.mode == OffsetMode::prefill ? std::min(max_kv, kLargeMaxPrefill) : max_kv;
    // Edges, or anything, or among the longest allowed (they cross the most tiles and, past 512,
    // the usual split-K chunk of a decode step).
    const int longest_from = std::max(lo_kv, hi - hi / 6);
    c.kv_len = *gen::resize(100, gen::weightedOneOf<int>({{5, edgy_length(lo_kv, hi, {64, 128, 192, 256, 384, 512})},
                                                          {1, gen::inRange(longest_from, hi + 1)}}))
                    .as("kv_len");
    place_queries(c, o, kLargeMaxQ, true);
}

OffsetMode pick_mode(const CaseOptions& o) {
    return o.need_future
               ? pick<OffsetMode>({{1, OffsetMode::prefill}, {1, OffsetMode::chunk}, {1, OffsetMode::general}}, "mode")
               : pick<OffsetMode>({{1, OffsetMode::prefill}, {1, OffsetMode::decode}, {1, OffsetMode::chunk},
                                   {1, OffsetMode::general}},
                                  "mode");
}

rc::Gen<KernelCase> gen_case_in_tier(const CaseOptions& o, const KernelDeclaration& d, bool large);

// The declared widths, at most 2048 of them (a kernel that declares more is offered a sample).
std::vector<int> declared_widths(const std::vector<KernelDeclaration::Range>& ranges) {
    std::vector<int> out;
    for (const auto& r : ranges)
        for (int v = r.lo; v <= r.hi && out.size() < 2048; ++v) out.push_back(v);
    return out;
}

// Brings a drawn shape within the declaration: widths redrawn from the declared ones, sizes
// clamped, the mask as declared. A property whose cases cannot be supported (it needs padding
// from a kernel that declares padding=no) keeps what it needs, but is not run on such a kernel:
// not_applicable() (kernel_properties.hpp) says why, and the run reports it "not applicable".
void fit_shape(KernelCase& c, const CaseOptions& o, const KernelDeclaration& d) {
    using namespace rc;
    if (d.max_batch) c.batch = std::max(std::min(c.batch, d.max_batch), std::min(o.min_batch, c.batch));
    if (d.max_heads) c.heads = std::min(c.heads, d.max_heads);
    if (!d.head_dims.empty() && !d.allows_head_dim(c.head_dim))
        c.head_dim = *gen::elementOf(declared_widths(d.head_dims)).as("declared head_dim");
    if (d.value_dim_same) {
        c.value_dim = c.head_dim;
    } else if (!d.value_dims.empty() && !d.allows_value_dim(c.value_dim, c.head_dim)) {
        c.value_dim = *gen::elementOf(declared_widths(d.value_dims)).as("declared value_dim");
    }
    if (!o.need_future) {
        if (!d.causal) c.causal = false;
        if (!d.non_causal) c.causal = true;
    }
    if (d.max_q_len && c.q_len > d.max_q_len) {
        c.q_len = d.max_q_len;
        if (c.mode == OffsetMode::prefill) c.mode = OffsetMode::chunk;
        if (c.mode == OffsetMode::chunk) c.q_offset = c.kv_len - c.q_len;
    }
}

}  // namespace

rc::Gen<KernelCase> gen_kernel_case(const CaseOptions& o) { return gen_kernel_case(o, KernelDeclaration{}); }

rc::Gen<KernelCase> gen_kernel_case(const CaseOptions& o_in, const KernelDeclaration& d) {
    CaseOptions o = o_in;
    if (d.max_kv_len) {
        o.max_kv = std::min(o.max_kv, d.max_kv_len);
        o.large_max_kv = std::min(o.large_max_kv, d.max_kv_len);
    }
    // The tier first, then the case within it (mapcat): shrinking tries the small tier, and when
    // the bug needs a long sequence it keeps the large tier and shrinks the case within it (with
    // the tier a value inside one exec, every later value of the case was redrawn whenever the
    // tier was tried, and the large-tier values hardly shrank).
    const int percent = std::clamp(o.large_percent, 0, 100);
    const rc::Gen<bool> tier = rc::gen::map(rc::gen::resize(100, rc::gen::inRange(0, 100)),
                                            [percent](int r) { return r >= 100 - percent; });
    return rc::gen::mapcat(tier, [o, d](bool large) { return gen_case_in_tier(o, d, large); });
}

namespace {
rc::Gen<KernelCase> gen_case_in_tier(const CaseOptions& o, const KernelDeclaration& d, bool large) {
    return rc::gen::exec([o, d, large] {
        using namespace rc;
        KernelCase c;
        if (large)
            large_shape(c, o);
        else
            small_shape(c, o);
        fit_shape(c, o, d);
        const int Tk = c.kv_len;

        const bool padded = o.need_padding || o.need_empty ||
                            (d.padding && pick<bool>({{3, false}, {2, true}}, "padded"));
        if (padded) {
            c.kv_valid_len.resize(std::size_t(c.batch));
            for (auto& n : c.kv_valid_len)
                n = *gen::weightedOneOf<int>({{1, gen::just(0)}, {1, gen::just(Tk)}, {3, gen::inRange(0, Tk + 1)}})
                         .as("kv_valid_len[b]");
            if (o.need_padding && std::all_of(c.kv_valid_len.begin(), c.kv_valid_len.end(),
                                              [&](int n) { return n == Tk; }))
                c.kv_valid_len[0] = *gen::inRange(0, Tk).as("kv_valid_len[0] < Tk");
            if (o.need_empty) c.kv_valid_len[std::size_t(*gen::inRange(0, c.batch).as("empty b"))] = 0;
        }

        c.style = pick<InputStyle>({{4, InputStyle::normal}, {2, InputStyle::large}, {2, InputStyle::ties},
                                    {2, InputStyle::small_int}},
                                   "style");
        const float standard = 1.0f / std::sqrt(float(c.head_dim));
        if (c.style == InputStyle::large) {
            // Large scores come with a power-of-two scale and integer q, k (see fill_inputs):
            // every score is then exact in any summation order.
            const int e = *gen::inRange(-4, 3).as("log2 |scale|");
            const bool negative = pick<bool>({{4, false}, {1, true}}, "scale < 0");
            c.scale = std::ldexp(negative ? -1.0f : 1.0f, e);
            c.scale_kind = "power of two: exact scores";
            c.data_seed = *gen::arbitrary<std::uint32_t>().as("data_seed");
            return c;
        }
        // A large scale (16) only with integer inputs, as in the large style (see fill_inputs).
        const int scale_pick = c.style == InputStyle::small_int
                                   ? pick<int>({{5, 0}, {1, 1}, {1, 2}, {1, 3}, {2, 4}, {2, 5}}, "scale kind")
                                   : pick<int>({{5, 0}, {1, 1}, {1, 2}, {1, 3}, {2, 5}}, "scale kind");
        switch (scale_pick) {
            case 0: c.scale = standard; c.scale_kind = "1/sqrt(Dk)"; break;
            case 1: c.scale = 0.0f; c.scale_kind = "zero: uniform weights"; break;
            case 2: c.scale = 1.0f; c.scale_kind = "one"; break;
            case 3: c.scale = -standard; c.scale_kind = "negative"; break;
            case 4: c.scale = 16.0f; c.scale_kind = "large"; break;
            default: {
                // |scale| up to 4, and for Dk > 32 (the large tier) up to 4 sqrt(32 / Dk): the
                // scores' spread (|scale| sqrt(Dk) for N(0, 1) inputs) then stays within the
                // small tier's; wider scores are the large style's job.
                const int cap = c.head_dim > 32 ? int(400.0 * std::sqrt(32.0 / c.head_dim)) : 400;
                c.scale = float(*gen::inRange(-cap, cap + 1).as("scale*100")) / 100.0f;
                c.scale_kind = "random";
                break;
            }
        }
        c.data_seed = *gen::arbitrary<std::uint32_t>().as("data_seed");
        return c;
    });
}

}  // namespace

}  // namespace attncheck::properties
