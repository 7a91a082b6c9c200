// properties/kernel_case_gen.cpp — the case generator (gen_kernel_case): cases
// within what a kernel declares, shaped by what a property needs (CaseOptions).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <utility>
#include <vector>

#include <rapidcheck.h>

#include "properties/kernel_case.hpp"
#include "properties/pick.hpp"

namespace attncheck::properties {

namespace {

// Lengths next to powers of two and the usual tile sizes (16, 32, 64-key tiles, 96-key tiles).
const std::vector<int>& tile_edges() {
    static const std::vector<int> edges = {15, 16, 17, 31, 32, 33, 63, 64, 65, 95, 96, 97, 127, 128, 129, 191, 192, 193, 255, 256, 257};
    return edges;
}

int clamp_to(int v, int lo, int hi) { return std::max(lo, std::min(v, hi)); }

// A key length in [lo, hi]: small ones mostly, tile edges in the large tier.
int draw_kv_len(int lo, int hi, bool large, const char* label) {
    using namespace rc;
    if (hi <= lo) return lo;
    if (large) {
        std::vector<int> edges;
        for (const int e : tile_edges())
            if (e >= lo && e <= hi) edges.push_back(e);
        if (edges.empty()) edges.push_back(hi);
        return *gen::resize(100, gen::weightedOneOf<int>({{3, gen::elementOf(edges)}, {1, gen::inRange(lo, hi + 1)}})).as(label);
    }
    return *gen::weightedOneOf<int>({{4, gen::inRange(lo, std::min(hi, 9) + 1)},
                                     {3, gen::inRange(lo, std::min(hi, 33) + 1)},
                                     {1, gen::inRange(lo, hi + 1)}})
                .as(label);
}

std::vector<int> widths_of(const std::vector<KernelDeclaration::Range>& ranges) {
    std::vector<int> out;
    for (const auto& r : ranges)
        for (int v = r.lo; v <= r.hi && out.size() < 2048; ++v) out.push_back(v);
    return out;
}

int draw_width(bool large, const char* label) {
    using namespace rc;
    if (large)
        // The SIMD widths, their neighbours (a vector loop's remainder) and anything.
        return *gen::resize(100, gen::weightedOneOf<int>({{3, gen::element(16, 32, 64, 80, 96, 128)},
                                                          {2, gen::element(15, 17, 31, 33, 63, 65, 79, 81, 95, 97, 127, 129)},
                                                          {1, gen::inRange(1, 130)}}))
                    .as(label);
    return *gen::weightedOneOf<int>({{1, gen::just(1)}, {4, gen::inRange(1, 9)}, {2, gen::inRange(1, 33)}}).as(label);
}

KernelCase draw_case(const CaseOptions& o, const KernelDeclaration& d, bool large) {
    using namespace rc;
    KernelCase c;

    // dtype, among the declared ones.
    std::vector<std::pair<int, std::int32_t>> dtypes;
    if (d.dtype_f32) dtypes.push_back({2, ATTNCHECK_DTYPE_F32});
    if (d.dtype_f16) dtypes.push_back({1, ATTNCHECK_DTYPE_F16});
    if (d.dtype_bf16) dtypes.push_back({1, ATTNCHECK_DTYPE_BF16});
    c.dtype = pick_in(dtypes, "dtype");

    // Layout kind.
    std::vector<LayoutKind> kinds;
    if (o.need_paged) kinds = {LayoutKind::paged};
    else if (o.need_varlen || !d.dense) kinds = {LayoutKind::varlen};
    else {
        kinds.push_back(LayoutKind::bhtd);
        if (d.layout_any) kinds.insert(kinds.end(), {LayoutKind::bthd, LayoutKind::gapped});
        if (!o.need_dense && d.varlen) kinds.push_back(LayoutKind::varlen);
        if (!o.need_dense && d.paged && !o.backward) kinds.push_back(LayoutKind::paged);
    }
    c.layout.kind = kinds[std::size_t(*gen::resize(100, gen::inRange<int>(0, int(kinds.size()))).as("layout"))];
    const bool dense = c.dense();

    // Batch and heads.
    const int min_b = std::max(o.need_varlen ? 2 : 1, o.min_batch);
    c.batch = std::max(min_b, large ? pick<int>({{3, 1}, {1, 2}}, "batch") : pick<int>({{5, 1}, {3, 2}, {2, 3}}, "batch"));
    if (d.max_batch) c.batch = std::max(min_b, std::min(c.batch, d.max_batch));
    c.kv_heads = pick<int>({{3, 1}, {2, 2}}, "kv_heads");
    int group = 1;
    if (o.need_gqa) group = pick<int>({{2, 2}, {1, 3}, {1, 4}}, "group");
    else if (d.gqa) group = pick<int>({{2, 1}, {2, 2}, {1, 3}, {1, 4}}, "group");
    c.q_heads = c.kv_heads * group;
    if (d.max_heads && c.q_heads > d.max_heads) {
        c.kv_heads = 1;
        c.q_heads = o.need_gqa ? std::max(2, std::min(group, d.max_heads)) : std::min(group, d.max_heads);
    }

    // Widths.
    c.head_dim = draw_width(large, "head_dim");
    if (!d.allows_head_dim(c.head_dim)) c.head_dim = *gen::elementOf(widths_of(d.head_dims)).as("declared head_dim");
    c.value_dim = pick<bool>({{1, true}, {1, false}}, "value_dim = head_dim") ? c.head_dim : draw_width(large, "value_dim");
    if (d.value_dim_same) c.value_dim = c.head_dim;
    else if (!d.allows_value_dim(c.value_dim, c.head_dim)) c.value_dim = *gen::elementOf(widths_of(d.value_dims)).as("declared value_dim");

    // Mask.
    if (o.need_causal_future || o.need_prefill) c.causal = true;
    else if (!d.causal) c.causal = false;
    else if (!d.non_causal) c.causal = true;
    else c.causal = pick<bool>({{3, true}, {1, false}}, "causal");

    // Lengths and positions.
    // The longest Tk: the generator's own limit for the tier, within the property's and the kernel's.
    const auto kv_cap = [&](int own) {
        return clamp_to(d.max_kv_len ? d.max_kv_len : 1 << 30, 1, std::min(own, o.max_kv ? o.max_kv : 1 << 30));
    };
    const int own_kv = std::min(large ? 260 : 64, o.max_kv ? o.max_kv : 1 << 30);
    const int hi_kv = kv_cap(large ? 260 : 64);
    const int hi_q = clamp_to(d.max_q_len ? d.max_q_len : 1 << 30, 1, std::min(large ? 160 : 64, own_kv));
    // One query row at most (max_q_len=1): a key after the row is one past its position in the
    // cache, q_pos[b] < Tk(b) - 1 (needs positions=any; not_applicable() says so otherwise).
    const bool decode_future = o.need_causal_future && hi_q < 2;
    std::vector<std::pair<int, OffsetMode>> modes = {{1, OffsetMode::prefill}, {1, OffsetMode::decode}, {1, OffsetMode::chunk}};
    if (d.positions_any || o.need_empty) modes.push_back({1, OffsetMode::general});
    if (o.need_prefill) modes = {{1, OffsetMode::prefill}};
    else if (o.need_empty) modes = {{1, OffsetMode::general}};
    else if (decode_future) modes = {{1, OffsetMode::general}};
    else if (o.need_causal_future) modes = {{1, OffsetMode::prefill}, {1, OffsetMode::chunk}};
    else if (o.need_invisible) modes = {{1, OffsetMode::decode}, {1, OffsetMode::chunk}};
    c.mode = pick_in(modes, "mode");
    if (o.need_prefill) c.batch = 1;
    // A decode step of the large tier may have a long context, past a decode kernel's split-K
    // chunk (512 keys); the other modes keep to 260 keys (their cost grows with Tq * Tk).
    const int kv_limit = large && c.mode == OffsetMode::decode ? kv_cap(520) : hi_kv;
    const std::size_t Bz = std::size_t(c.batch);
    c.q_lens.assign(Bz, 1);
    c.kv_lens.assign(Bz, 1);
    c.q_pos.assign(Bz, 0);
    const int lo_kv = o.need_causal_future || o.need_invisible ? 2 : 1;
    // A dense layout has one Tq for every sequence; a dense cache without declared padding one Tk.
    const bool one_tk = dense && c.layout.kind != LayoutKind::paged && !d.padding;
    // Half the long decode steps: a context longer than the other modes', beside 512 mostly.
    const auto draw_tk = [&](const char* label) {
        if (kv_limit > hi_kv && pick<bool>({{1, false}, {1, true}}, "long context")) {
            std::vector<int> near;
            for (const int e : {511, 512, 513})
                if (e > hi_kv && e <= kv_limit) near.push_back(e);
            if (!near.empty() && pick<bool>({{1, true}, {1, false}}, "beside 512"))
                return *gen::resize(100, gen::elementOf(near)).as(label);
            return *gen::resize(100, gen::inRange(hi_kv + 1, kv_limit + 1)).as(label);
        }
        return draw_kv_len(lo_kv, std::max(lo_kv, hi_kv), large, label);
    };
    const int common_tk = draw_tk("Tk");
    const int common_tq = dense ? clamp_to(draw_kv_len(1, hi_q, large, "Tq"), 1, std::min(hi_q, hi_kv)) : 1;
    for (std::size_t b = 0; b < Bz; ++b) {
        int Tk = one_tk || b == 0 ? common_tk : draw_tk("Tk(b)");
        switch (c.mode) {
            case OffsetMode::prefill:
                if (dense) Tk = std::min(common_tq, hi_kv), Tk = std::max(Tk, lo_kv);
                Tk = std::min(Tk, hi_q);
                c.q_lens[b] = Tk, c.q_pos[b] = 0;
                break;
            case OffsetMode::decode:
                c.q_lens[b] = 1, c.q_pos[b] = Tk - 1;
                break;
            case OffsetMode::chunk: {
                int Tq = dense ? common_tq : *gen::inRange(1, std::min(Tk, hi_q) + 1).as("Tq(b)");
                if (o.need_causal_future) Tq = std::max(Tq, 2);
                Tk = std::max(Tk, Tq + (o.need_invisible ? 1 : 0));
                c.q_lens[b] = Tq, c.q_pos[b] = Tk - Tq;
                break;
            }
            case OffsetMode::general:
                if (decode_future) {  // Tk >= lo_kv = 2: a decode row with keys after it
                    c.q_lens[b] = 1, c.q_pos[b] = *gen::inRange(0, Tk - 1).as("q_pos(b) < Tk(b) - 1");
                    break;
                }
                c.q_lens[b] = dense ? common_tq : *gen::inRange(1, hi_q + 1).as("Tq(b)");
                c.q_pos[b] = *gen::inRange(0, Tk + 5).as("q_pos(b)");
                if (d.padding || !dense || c.layout.kind == LayoutKind::paged)
                    if (pick<bool>({{4, false}, {1, true}}, "Tk(b) = 0")) Tk = 0;
                break;
        }
        c.kv_lens[b] = Tk;
    }
    if (one_tk) {
        // Every sequence then has the longest Tk (prefill and chunk may have raised one).
        const int tk = c.max_kv_len();
        for (std::size_t b = 0; b < Bz; ++b) {
            if (c.mode != OffsetMode::general) c.q_pos[b] += tk - c.kv_lens[b];
            c.kv_lens[b] = tk;
        }
    }
    if (o.need_empty) c.kv_lens[std::size_t(*gen::inRange(0, c.batch).as("empty b"))] = 0;
    // One position for the batch: the largest drawn, so the sequence it was drawn for keeps what
    // the property needs (a key after a row, a key no row sees) and the others see all their keys.
    if (d.positions_shared) {
        const int shared = *std::max_element(c.q_pos.begin(), c.q_pos.end());
        std::fill(c.q_pos.begin(), c.q_pos.end(), shared);
    }

    // Window.
    const bool want_window = d.window && (o.need_invisible ? pick<int>({{1, 0}, {3, 1}}, "window") == 1
                                                           : pick<int>({{3, 0}, {1, 1}}, "window") == 1);
    if (want_window) {
        const int mk = std::max(1, c.max_kv_len());
        c.window_left = o.need_invisible ? *gen::inRange(0, 4).as("window_left")
                                         : *gen::weightedOneOf<int>({{2, gen::inRange(0, std::min(mk, 8) + 1)},
                                                                     {1, gen::inRange(-1, mk + 1)}})
                                                .as("window_left");
        if (!c.causal) c.window_right = *gen::inRange(-1, std::min(mk, 8) + 1).as("window_right");
    }

    // Scores: style, scale, softcap, ALiBi.
    c.style = pick<InputStyle>({{4, InputStyle::normal}, {2, InputStyle::large}, {2, InputStyle::ties}, {2, InputStyle::small_int}},
                               "style");
    const float standard = 1.0f / std::sqrt(float(c.head_dim));
    if (c.style == InputStyle::large) {
        c.scale = std::ldexp(pick<bool>({{4, false}, {1, true}}, "scale < 0") ? -1.0f : 1.0f, *gen::inRange(-4, 3).as("log2 |scale|"));
        c.scale_kind = "power of two: exact scores";
    } else {
        switch (pick<int>({{5, 0}, {1, 1}, {1, 2}, {1, 3}, {2, 4}}, "scale kind")) {
            case 0: c.scale = standard, c.scale_kind = "1/sqrt(Dk)"; break;
            case 1: c.scale = 0.0f, c.scale_kind = "zero: uniform weights"; break;
            case 2: c.scale = 1.0f, c.scale_kind = "one"; break;
            case 3: c.scale = -standard, c.scale_kind = "negative"; break;
            default: {
                const int cap = c.head_dim > 32 ? int(400.0 * std::sqrt(32.0 / c.head_dim)) : 400;
                c.scale = float(*gen::inRange(-cap, cap + 1).as("scale*100")) / 100.0f;
                c.scale_kind = "random";
            }
        }
    }
    if (d.softcap && (o.need_softcap || pick<int>({{4, 0}, {1, 1}}, "softcap") == 1))
        c.softcap = *gen::element(1.0f, 5.0f, 20.0f, 50.0f).as("softcap");
    else if (o.need_softcap)
        c.softcap = 5.0f;
    if (d.alibi && pick<int>({{4, 0}, {1, 1}}, "alibi") == 1) {
        c.alibi_slopes.resize(std::size_t(c.q_heads));
        for (int h = 0; h < c.q_heads; ++h) c.alibi_slopes[std::size_t(h)] = std::exp2(-8.0f * float(h + 1) / float(c.q_heads));
    }
    // Sinks: small logits, or one that takes most of a row's weight (a kernel that drops the sink
    // from the denominator or from lse is far off then); multiples of 1/8, exact in every dtype.
    if (d.sinks && pick<int>({{2, 0}, {1, 1}}, "sinks") == 1) {
        c.sinks.resize(std::size_t(c.q_heads));
        for (float& s : c.sinks) s = float(*gen::resize(100, gen::inRange(-40, 81)).as("sink*8")) / 8.0f;
    }
    c.want_lse = o.need_lse || o.backward || (d.lse && pick<bool>({{1, false}, {1, true}}, "lse"));

    // Layout details.
    if (c.layout.kind == LayoutKind::paged) {
        // Any block size the ABI allows: powers of two (what most caches use) and others (vLLM's
        // and FlashAttention's block sizes need not be powers of two), so that a kernel that
        // finds a key's row with a mask, j & (block_size - 1), is wrong on some case.
        std::vector<int> sizes = {1, 2, 3, 4, 5, 7, 8, 12, 16, 24, 32, 48};
        if (!d.block_sizes.empty()) sizes = widths_of(d.block_sizes);
        c.layout.block_size = *gen::elementOf(sizes).as("block_size");
        c.layout.spare_blocks = *gen::inRange(0, 4).as("spare_blocks");
        c.layout.table_slack = *gen::inRange(0, 3).as("table_slack");
        c.layout.block_seed = *gen::arbitrary<std::uint32_t>().as("block_seed");
        c.layout.blocks_bthd = d.layout_any && pick<bool>({{1, true}, {1, false}}, "blocks [blk,row,h,d]");
    } else if (c.layout.kind == LayoutKind::varlen) {
        c.layout.varlen_contiguous = !d.layout_any;
    } else if (dense && d.padding) {
        c.layout.kv_capacity = c.max_kv_len() + pick<int>({{3, 0}, {1, 1}, {1, 7}}, "kv_capacity extra");
    }
    c.filler = d.padding_finite ? Filler::finite : pick<Filler>({{3, Filler::nan}, {1, Filler::inf}}, "filler");
    c.data_seed = *gen::arbitrary<std::uint32_t>().as("data_seed");
    return c;
}

}  // namespace

rc::Gen<KernelCase> gen_kernel_case(const CaseOptions& o, const KernelDeclaration& d) {
    const int percent = std::clamp(o.large_percent, 0, 100);
    const rc::Gen<bool> tier =
        rc::gen::map(rc::gen::resize(100, rc::gen::inRange(0, 100)), [percent](int r) { return r >= 100 - percent; });
    return rc::gen::mapcat(tier, [o, d](bool large) { return rc::gen::exec([o, d, large] { return draw_case(o, d, large); }); });
}

}  // namespace attncheck::properties
