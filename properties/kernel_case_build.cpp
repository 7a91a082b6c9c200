// properties/kernel_case_build.cpp — a case in memory (build_case): the layouts' strides, the
// poison in every element outside the logical problem, out and lse between guards, the guard page
// of no_oob_read, and the read-back in the oracle's logical order (Built).
#include "properties/kernel_case.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <numeric>
#include <ostream>
#include <sstream>
#include <stdexcept>
#include <utility>

#include "attncheck/problem_shape_v2.hpp"
#include "attncheck/problem_v2.hpp"
#include "properties/stream.hpp"

namespace attncheck::properties {

// ---- the guard page ---------------------------------------------------------------------------

GuardPageBuffer::GuardPageBuffer(std::size_t bytes) : bytes_(bytes) {
    const std::size_t page = std::size_t(sysconf(_SC_PAGESIZE));
    const std::size_t body = (bytes + page - 1) / page * page;
    map_bytes_ = body + page;
    map_ = mmap(nullptr, map_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (map_ == MAP_FAILED) {
        map_ = nullptr;
        throw std::runtime_error("GuardPageBuffer: mmap of " + std::to_string(map_bytes_) + " bytes failed");
    }
    unsigned char* base = static_cast<unsigned char*>(map_);
    if (mprotect(base + body, page, PROT_NONE) != 0) {
        munmap(map_, map_bytes_);
        map_ = nullptr;
        throw std::runtime_error("GuardPageBuffer: mprotect of the guard page failed");
    }
    data_ = base + body - bytes;  // the last byte is the one before the guard page
}

GuardPageBuffer::GuardPageBuffer(GuardPageBuffer&& o) noexcept
    : map_(std::exchange(o.map_, nullptr)), map_bytes_(std::exchange(o.map_bytes_, 0)),
      bytes_(std::exchange(o.bytes_, 0)), data_(std::exchange(o.data_, nullptr)) {}

GuardPageBuffer& GuardPageBuffer::operator=(GuardPageBuffer&& o) noexcept {
    if (this != &o) {
        if (map_) munmap(map_, map_bytes_);
        map_ = std::exchange(o.map_, nullptr);
        map_bytes_ = std::exchange(o.map_bytes_, 0);
        bytes_ = std::exchange(o.bytes_, 0);
        data_ = std::exchange(o.data_, nullptr);
    }
    return *this;
}

GuardPageBuffer::~GuardPageBuffer() {
    if (map_) munmap(map_, map_bytes_);
}

// ---- building -----------------------------------------------------------------------------------

namespace {

// Bit patterns no conversion produces: "never written" in out, and the guards around it.
constexpr std::uint32_t kUnwritten32 = 0x7FC0BEEFu, kCanary32 = 0x7FE5A5A5u;
constexpr std::uint16_t kUnwrittenF16 = 0x7D5Bu, kCanaryF16 = 0x7C5Au;
constexpr std::uint16_t kUnwrittenBF16 = 0x7F9Bu, kCanaryBF16 = 0x7F8Au;

std::uint32_t unwritten_bits(std::int32_t dtype) {
    return dtype == ATTNCHECK_DTYPE_F16 ? kUnwrittenF16 : dtype == ATTNCHECK_DTYPE_BF16 ? kUnwrittenBF16 : kUnwritten32;
}
std::uint32_t canary_bits(std::int32_t dtype) {
    return dtype == ATTNCHECK_DTYPE_F16 ? kCanaryF16 : dtype == ATTNCHECK_DTYPE_BF16 ? kCanaryBF16 : kCanary32;
}

std::uint32_t raw(std::int32_t dtype, const unsigned char* data, std::size_t i) {
    if (dtype == ATTNCHECK_DTYPE_F32) {
        std::uint32_t u;
        std::memcpy(&u, data + 4 * i, 4);
        return u;
    }
    std::uint16_t u;
    std::memcpy(&u, data + 2 * i, 2);
    return u;
}
void set_raw(std::int32_t dtype, unsigned char* data, std::size_t i, std::uint32_t u) {
    if (dtype == ATTNCHECK_DTYPE_F32) {
        std::memcpy(data + 4 * i, &u, 4);
    } else {
        const std::uint16_t h = std::uint16_t(u);
        std::memcpy(data + 2 * i, &h, 2);
    }
}

// Strides of a tensor of `heads` x `rows` x `width` per outer index, in a dense layout.
void dense_strides(LayoutKind kind, std::int64_t heads, std::int64_t rows, std::int64_t width, std::int64_t* s) {
    switch (kind) {
        case LayoutKind::bthd:
            s[3] = 1, s[1] = width, s[2] = heads * width, s[0] = rows * heads * width;
            break;
        case LayoutKind::gapped: {
            // Gaps of 3 elements after each row, 5 after each head, 7 after each sequence.
            s[3] = 1, s[2] = width + 3, s[1] = rows * s[2] + 5, s[0] = heads * s[1] + 7;
            break;
        }
        default:  // bhtd (and paged q/out)
            s[3] = 1, s[2] = width, s[1] = rows * width, s[0] = heads * rows * width;
    }
}

// Varlen: [total rows, heads, width] with a gap of one element after each head's row; or, for a
// kernel that declares layout=contiguous, densely packed [heads, total rows, width] (the outer
// stride is not read for a varlen tensor).
void varlen_strides(bool contiguous, std::int64_t heads, std::int64_t rows, std::int64_t width, std::int64_t* s) {
    if (contiguous) s[0] = 0, s[3] = 1, s[2] = width, s[1] = rows * width;
    else s[0] = 0, s[3] = 1, s[1] = width + 1, s[2] = heads * (width + 1);
}

float filler_value(Filler f, Stream& rng) {
    switch (f) {
        case Filler::nan: return std::numeric_limits<float>::quiet_NaN();
        case Filler::inf: return std::numeric_limits<float>::infinity();
        case Filler::finite: return float(rng.integer(-8, 8));
        case Filler::large: return float(1024 * rng.integer(1, 8) * (rng.integer(0, 1) ? 1 : -1));
    }
    return 0.0f;
}

// Allocates an input of `span` elements, filled with the filler.
void prepare_input(std::int32_t dtype, std::size_t span, Filler f, Stream& rng, bool guard_page,
                   std::vector<unsigned char>& bytes, GuardPageBuffer& page, unsigned char*& data) {
    const std::size_t n = std::max<std::size_t>(span, 1) * dtype_size(dtype);
    if (guard_page) {
        page = GuardPageBuffer(n);
        data = page.data();
    } else {
        bytes.assign(n, 0);
        data = bytes.data();
    }
    for (std::size_t i = 0; i < std::max<std::size_t>(span, 1); ++i) store_element(dtype, data, std::int64_t(i), filler_value(f, rng));
}

// The largest offset + 1 a tensor addresses, over an index space given as a visitor.
template <class Visit>
std::size_t span_of(Visit visit) {
    std::int64_t hi = -1;
    visit([&](std::int64_t off) { hi = std::max(hi, off); });
    return std::size_t(hi + 1);
}

}  // namespace

Built build_case(const KernelCase& c, const KernelInputs& in, const BuildOptions& options) {
    Built r;
    r.dtype = c.dtype;
    r.q_lens = c.q_lens;
    const int B = c.batch;
    const std::size_t Bz = std::size_t(B);
    r.problem = make_problem_v2({.dtype = c.dtype, .batch = B, .q_heads = c.q_heads, .kv_heads = c.kv_heads,
                                 .head_dim = c.head_dim, .value_dim = c.value_dim, .causal = c.causal,
                                 .window_left = c.window_left, .window_right = c.window_right, .scale = c.scale,
                                 .softcap = c.softcap});
    attncheck_problem_v2& p = r.problem;
    const int max_q = std::max(1, c.max_q_len()), max_k = std::max(1, c.max_kv_len());
    const LayoutKind kind = c.layout.kind;

    r.q_pos.assign(c.q_pos.begin(), c.q_pos.end());
    p.q_pos = r.q_pos.data();
    if (!c.sinks.empty()) {
        r.sinks = c.sinks;
        p.sinks = r.sinks.data();
    }
    if (!c.alibi_slopes.empty()) {
        r.alibi = c.alibi_slopes;
        p.alibi_slopes = r.alibi.data();
    }

    // Query side: q, out, lse.
    const bool varlen = kind == LayoutKind::varlen;
    if (varlen) {
        r.cu_q.assign(Bz + 1, 0);
        r.cu_k.assign(Bz + 1, 0);
        for (std::size_t b = 0; b < Bz; ++b) {
            r.cu_q[b + 1] = r.cu_q[b] + c.q_lens[b];
            r.cu_k[b + 1] = r.cu_k[b] + c.kv_lens[b];
        }
        p.cu_seqlens_q = r.cu_q.data();
        p.cu_seqlens_k = r.cu_k.data();
        p.q_len = max_q;
        p.kv_len = max_k;
        const bool packed = c.layout.varlen_contiguous;
        const std::int64_t q_rows = r.cu_q[Bz], k_rows = r.cu_k[Bz];
        varlen_strides(packed, c.q_heads, q_rows, c.head_dim, p.q.stride);
        varlen_strides(packed, c.q_heads, q_rows, c.value_dim, p.out.stride);
        varlen_strides(packed, c.kv_heads, k_rows, c.head_dim, p.k.stride);
        varlen_strides(packed, c.kv_heads, k_rows, c.value_dim, p.v.stride);
        if (packed) p.lse_stride[0] = 0, p.lse_stride[1] = q_rows, p.lse_stride[2] = 1;
        else p.lse_stride[0] = 0, p.lse_stride[1] = 1, p.lse_stride[2] = c.q_heads;
    } else {
        p.q_len = c.q_lens[0];
        const LayoutKind qkind = kind == LayoutKind::paged ? LayoutKind::bhtd : kind;
        dense_strides(qkind, c.q_heads, p.q_len, c.head_dim, p.q.stride);
        dense_strides(qkind, c.q_heads, p.q_len, c.value_dim, p.out.stride);
        const std::int64_t H = c.q_heads, T = p.q_len;
        switch (qkind) {
            case LayoutKind::bthd: p.lse_stride[0] = T * H, p.lse_stride[1] = 1, p.lse_stride[2] = H; break;
            case LayoutKind::gapped: p.lse_stride[0] = H * (T + 2) + 3, p.lse_stride[1] = T + 2, p.lse_stride[2] = 1; break;
            default: p.lse_stride[0] = H * T, p.lse_stride[1] = T, p.lse_stride[2] = 1;
        }
    }

    // Key side.
    std::vector<std::vector<int>> blocks_of(Bz);  // paged: the blocks of each sequence, in order
    if (kind == LayoutKind::paged) {
        const int bs = std::max(1, c.layout.block_size);
        int used = 0, widest = 1;
        for (std::size_t b = 0; b < Bz; ++b) {
            const int n = (c.kv_lens[b] + bs - 1) / bs;
            used += n;
            widest = std::max(widest, n);
        }
        const int num_blocks = std::max(1, used + c.layout.spare_blocks);
        std::vector<int> order(static_cast<std::size_t>(num_blocks));
        std::iota(order.begin(), order.end(), 0);
        Stream shuffle(c.layout.block_seed);
        for (std::size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[std::size_t(shuffle.integer(0, int(i) - 1))]);
        const int stride = widest + c.layout.table_slack;
        r.block_table.assign(Bz * std::size_t(stride), 0);
        // Entries past a sequence's blocks are never read: they name a spare block (poisoned)
        // when there is one, so a kernel that reads past its blocks reads poison.
        const int spare = used < num_blocks ? order[std::size_t(used)] : order[0];
        int next = 0;
        for (std::size_t b = 0; b < Bz; ++b) {
            const int n = (c.kv_lens[b] + bs - 1) / bs;
            for (int e = 0; e < stride; ++e) {
                const int blk = e < n ? order[std::size_t(next++)] : spare;
                r.block_table[b * std::size_t(stride) + std::size_t(e)] = blk;
                if (e < n) blocks_of[b].push_back(blk);
            }
        }
        p.block_table = r.block_table.data();
        p.block_table_stride = stride;
        p.block_size = bs;
        p.num_blocks = num_blocks;
        p.kv_len = max_k;
        r.kv_lens.assign(c.kv_lens.begin(), c.kv_lens.end());
        p.kv_lens = r.kv_lens.data();
        const auto block_strides = [&](std::int64_t width, std::int64_t* s) {
            const std::int64_t Hk = c.kv_heads;
            if (c.layout.blocks_bthd) s[3] = 1, s[1] = width, s[2] = Hk * width, s[0] = bs * Hk * width;
            else s[3] = 1, s[2] = width, s[1] = bs * width, s[0] = Hk * bs * width;
        };
        block_strides(c.head_dim, p.k.stride);
        block_strides(c.value_dim, p.v.stride);
    } else if (!varlen) {
        const int capacity = std::max({1, c.layout.kv_capacity, c.max_kv_len()});
        p.kv_len = capacity;
        if (std::any_of(c.kv_lens.begin(), c.kv_lens.end(), [&](int n) { return n != capacity; })) {
            r.kv_lens.assign(c.kv_lens.begin(), c.kv_lens.end());
            p.kv_lens = r.kv_lens.data();
        }
        dense_strides(kind, c.kv_heads, capacity, c.head_dim, p.k.stride);
        dense_strides(kind, c.kv_heads, capacity, c.value_dim, p.v.stride);
    }

    // Spans: the largest offset each tensor can address (padding rows and unused blocks
    // included, they are part of the tensor the kernel is given).
    const auto q_span = [&](const attncheck_tensor_v2& t, int width) {
        return span_of([&](auto f) {
            for (int b = 0; b < B; ++b)
                for (int h = 0; h < c.q_heads; ++h)
                    for (int i = 0; i < c.q_lens[std::size_t(b)]; ++i) f(q_offset_v2(p, t, b, h, i, width - 1));
        });
    };
    const auto kv_span = [&](const attncheck_tensor_v2& t, int width) {
        const std::int64_t last = width - 1;
        if (kind == LayoutKind::paged)
            return std::size_t(std::int64_t(p.num_blocks - 1) * t.stride[0] + (c.kv_heads - 1) * t.stride[1] +
                               (p.block_size - 1) * t.stride[2] + last * t.stride[3] + 1);
        if (varlen)
            return std::size_t(std::max<std::int64_t>(0, std::int64_t(r.cu_k[Bz]) - 1) * t.stride[2] +
                               (c.kv_heads - 1) * t.stride[1] + last * t.stride[3] + 1);
        return std::size_t(std::int64_t(B - 1) * t.stride[0] + (c.kv_heads - 1) * t.stride[1] +
                           (p.kv_len - 1) * t.stride[2] + last * t.stride[3] + 1);
    };

    Stream filler_rng(c.data_seed ^ 0x5EEDu);
    unsigned char *qd = nullptr, *kd = nullptr, *vd = nullptr;
    prepare_input(c.dtype, q_span(p.q, c.head_dim), c.filler, filler_rng, options.guard_page_inputs, r.q_bytes, r.q_page, qd);
    prepare_input(c.dtype, kv_span(p.k, c.head_dim), c.filler, filler_rng, options.guard_page_inputs, r.k_bytes, r.k_page, kd);
    prepare_input(c.dtype, kv_span(p.v, c.value_dim), c.filler, filler_rng, options.guard_page_inputs, r.v_bytes, r.v_page, vd);
    p.q.data = qd;
    p.k.data = kd;
    p.v.data = vd;

    for (int b = 0; b < B; ++b) {
        for (int h = 0; h < c.q_heads; ++h)
            for (int i = 0; i < c.q_lens[std::size_t(b)]; ++i)
                for (int col = 0; col < c.head_dim; ++col)
                    store_element(c.dtype, qd, q_offset_v2(p, p.q, b, h, i, col), in.q_at(b, h, i, col, c));
        const int Tk = c.kv_lens[std::size_t(b)];
        std::vector<char> seen(std::size_t(Tk), 0);
        if (c.poison_invisible)
            for (int i = 0; i < c.q_lens[std::size_t(b)]; ++i)
                for (int j = 0; j < Tk; ++j) seen[std::size_t(j)] |= c.visible(b, i, j) ? 1 : 0;
        // Garbage for the keys no row sees: +-1024 k (k = 1..8), exact in every dtype, far from
        // the data (a leaked weight shows), yet finite in float16 and q.k finite in float32. Its
        // own stream: the filler's draws are the same with and without it.
        Stream garbage_rng(c.data_seed ^ 0x6A3B5u ^ std::uint32_t(b));
        const auto garbage = [&] { return filler_value(Filler::large, garbage_rng); };
        for (int h = 0; h < c.kv_heads; ++h)
            for (int j = 0; j < Tk; ++j) {
                const bool hide = c.poison_invisible && !seen[std::size_t(j)];
                for (int col = 0; col < c.head_dim; ++col)
                    store_element(c.dtype, kd, kv_offset_v2(p, p.k, b, h, j, col), hide ? garbage() : in.k_at(b, h, j, col, c));
                for (int col = 0; col < c.value_dim; ++col)
                    store_element(c.dtype, vd, kv_offset_v2(p, p.v, b, h, j, col), hide ? garbage() : in.v_at(b, h, j, col, c));
            }
    }
    const std::size_t es = dtype_size(c.dtype);
    r.q_before.assign(qd, qd + std::max<std::size_t>(q_span(p.q, c.head_dim), 1) * es);
    r.k_before.assign(kd, kd + std::max<std::size_t>(kv_span(p.k, c.head_dim), 1) * es);
    r.v_before.assign(vd, vd + std::max<std::size_t>(kv_span(p.v, c.value_dim), 1) * es);

    // out: guards as long as out's span (at least 64 elements) either side; gaps stay canary.
    r.out_span = q_span(p.out, c.value_dim);
    r.out_guard = std::max<std::size_t>(64, r.out_span);
    const std::size_t out_n = 2 * r.out_guard + r.out_span;
    r.out_bytes.assign(out_n * es, 0);
    r.out_mask.assign(out_n, 0);
    unsigned char* od = r.out_bytes.data() + r.out_guard * es;
    p.out.data = od;
    for (int b = 0; b < B; ++b)
        for (int h = 0; h < c.q_heads; ++h)
            for (int i = 0; i < c.q_lens[std::size_t(b)]; ++i)
                for (int col = 0; col < c.value_dim; ++col)
                    r.out_mask[r.out_guard + std::size_t(q_offset_v2(p, p.out, b, h, i, col))] = 1;
    if (c.want_lse) {
        r.lse_span = span_of([&](auto f) {
            for (int b = 0; b < B; ++b)
                for (int h = 0; h < c.q_heads; ++h)
                    for (int i = 0; i < c.q_lens[std::size_t(b)]; ++i) f(lse_offset_v2(p, b, h, i));
        });
        r.lse_guard = std::max<std::size_t>(64, r.lse_span);
        r.lse_buffer.assign(2 * r.lse_guard + r.lse_span, 0.0f);
        r.lse_mask.assign(r.lse_buffer.size(), 0);
        p.lse = r.lse_buffer.data() + r.lse_guard;
        for (int b = 0; b < B; ++b)
            for (int h = 0; h < c.q_heads; ++h)
                for (int i = 0; i < c.q_lens[std::size_t(b)]; ++i)
                    r.lse_mask[r.lse_guard + std::size_t(lse_offset_v2(p, b, h, i))] = 1;
    }
    r.reset_outputs();
    if (options.zero_outputs) {
        for (std::size_t i = 0; i < r.out_mask.size(); ++i)
            if (r.out_mask[i]) set_raw(c.dtype, r.out_bytes.data(), i, 0);
        for (std::size_t i = 0; i < r.lse_mask.size(); ++i)
            if (r.lse_mask[i]) r.lse_buffer[i] = 0.0f;
    }

    r.first_row.assign(Bz + 1, 0);
    for (std::size_t b = 0; b < Bz; ++b) r.first_row[b + 1] = r.first_row[b] + std::size_t(c.q_heads) * std::size_t(c.q_lens[b]);
    return r;
}

void Built::reset_outputs() {
    for (std::size_t i = 0; i < out_mask.size(); ++i)
        set_raw(dtype, out_bytes.data(), i, out_mask[i] ? unwritten_bits(dtype) : canary_bits(dtype));
    for (std::size_t i = 0; i < lse_mask.size(); ++i)
        lse_buffer[i] = std::bit_cast<float>(lse_mask[i] ? kUnwritten32 : kCanary32);
}

std::vector<float> Built::out_logical() const {
    const attncheck_problem_v2& p = problem;
    std::vector<float> out(rows() * std::size_t(p.value_dim));
    for (int b = 0; b < p.batch; ++b)
        for (int h = 0; h < p.q_heads; ++h)
            for (int i = 0; i < q_lens[std::size_t(b)]; ++i) {
                const std::size_t row = first_row[std::size_t(b)] + std::size_t(h) * std::size_t(q_lens[std::size_t(b)]) + std::size_t(i);
                for (int col = 0; col < p.value_dim; ++col)
                    out[row * std::size_t(p.value_dim) + std::size_t(col)] = load_element(dtype, p.out.data, q_offset_v2(p, p.out, b, h, i, col));
            }
    return out;
}

std::vector<float> Built::lse_logical() const {
    const attncheck_problem_v2& p = problem;
    if (!p.lse) return {};
    std::vector<float> lse(rows());
    for (int b = 0; b < p.batch; ++b)
        for (int h = 0; h < p.q_heads; ++h)
            for (int i = 0; i < q_lens[std::size_t(b)]; ++i)
                lse[first_row[std::size_t(b)] + std::size_t(h) * std::size_t(q_lens[std::size_t(b)]) + std::size_t(i)] =
                    p.lse[lse_offset_v2(p, b, h, i)];
    return lse;
}

namespace {

std::string elements(std::size_t n) { return std::to_string(n) + (n == 1 ? " element" : " elements"); }

std::string where(const char* name, std::size_t i, std::size_t guard, std::size_t span) {
    if (i < guard) return "at " + elements(guard - i) + " before " + name;
    if (i >= guard + span) return "at " + elements(i - guard - span + 1) + " past the end of " + name;
    return "at " + std::string(name) + "[" + std::to_string(i - guard) + "], a gap between the elements of " + name +
           " (its strides skip it)";
}

// "[a,b,c" (no closing bracket), appended piece by piece: "[" + std::string trips g++ 12's
// false -Wrestrict once inlined.
std::string open_index(std::initializer_list<std::size_t> xs) {
    std::string e = "[";
    for (const std::size_t x : xs) {
        if (e.size() > 1) e += ',';
        e += std::to_string(x);
    }
    return e;
}

std::string fmt_bits(float x) {
    std::ostringstream s;
    s.precision(9);
    s << x;
    return s.str();
}

}  // namespace

std::string Built::element(std::size_t row, int c) const {
    std::size_t b = 0;
    while (b + 1 < first_row.size() && first_row[b + 1] <= row) ++b;
    const std::size_t in_b = row - first_row[b], Tq = std::size_t(std::max(1, q_lens[b]));
    return open_index({b, in_b / Tq, in_b % Tq, std::size_t(c)}) + "]";
}


GuardedTensor::GuardedTensor(std::int32_t dtype, std::size_t span, const std::vector<std::int64_t>& written)
    : dtype_(dtype), dtype_size_(dtype_size(dtype)), guard_(std::max<std::size_t>(64, span)), span_(span) {
    const std::size_t n = 2 * guard_ + span_;
    bytes_.assign(n * dtype_size_, 0);
    mask_.assign(n, 0);
    for (const std::int64_t off : written) mask_[guard_ + std::size_t(off)] = 1;
    reset();
}

void GuardedTensor::reset(bool zeros) {
    for (std::size_t i = 0; i < mask_.size(); ++i)
        set_raw(dtype_, bytes_.data(), i, mask_[i] ? (zeros ? 0u : unwritten_bits(dtype_)) : canary_bits(dtype_));
}

float GuardedTensor::at(std::int64_t offset) const {
    return load_element(dtype_, bytes_.data(), std::int64_t(guard_) + offset);
}

bool GuardedTensor::unwritten(std::int64_t offset) const {
    return raw(dtype_, bytes_.data(), guard_ + std::size_t(offset)) == unwritten_bits(dtype_);
}

std::string GuardedTensor::write_outside(const char* name) const {
    for (std::size_t i = 0; i < mask_.size(); ++i)
        if (!mask_[i] && raw(dtype_, bytes_.data(), i) != canary_bits(dtype_))
            return "wrote " + fmt_bits(load_element(dtype_, bytes_.data(), std::int64_t(i))) + " " + where(name, i, guard_, span_);
    return {};
}

std::string Built::write_outside() const {
    for (std::size_t i = 0; i < out_mask.size(); ++i)
        if (!out_mask[i] && raw(dtype, out_bytes.data(), i) != canary_bits(dtype))
            return "wrote " + fmt_bits(load_element(dtype, out_bytes.data(), std::int64_t(i))) + " " +
                   where("out", i, out_guard, out_span);
    for (std::size_t i = 0; i < lse_mask.size(); ++i)
        if (!lse_mask[i] && std::bit_cast<std::uint32_t>(lse_buffer[i]) != kCanary32)
            return "wrote " + fmt_bits(lse_buffer[i]) + " " + where("lse", i, lse_guard, lse_span);
    return {};
}

std::string Built::unwritten() const {
    const attncheck_problem_v2& p = problem;
    for (int b = 0; b < p.batch; ++b)
        for (int h = 0; h < p.q_heads; ++h)
            for (int i = 0; i < q_lens[std::size_t(b)]; ++i) {
                const std::string e = open_index({std::size_t(b), std::size_t(h), std::size_t(i)});
                for (int col = 0; col < p.value_dim; ++col)
                    if (raw(dtype, static_cast<const unsigned char*>(p.out.data), std::size_t(q_offset_v2(p, p.out, b, h, i, col))) ==
                        unwritten_bits(dtype))
                        return "out" + e + "," + std::to_string(col) + "] [b,h,i,c] was never written";
                if (p.lse && std::bit_cast<std::uint32_t>(p.lse[lse_offset_v2(p, b, h, i)]) == kUnwritten32)
                    return "lse" + e + "] [b,h,i] was never written";
            }
    return {};
}

std::string Built::input_change() const {
    const std::size_t es = dtype_size(dtype);
    const struct { const char* name; const void* now; const std::vector<unsigned char>& before; } inputs[] = {
        {"q", problem.q.data, q_before}, {"k", problem.k.data, k_before}, {"v", problem.v.data, v_before}};
    for (const auto& t : inputs)
        for (std::size_t i = 0; i < t.before.size() / es; ++i)
            if (std::memcmp(static_cast<const unsigned char*>(t.now) + i * es, t.before.data() + i * es, es) != 0)
                return std::string(t.name) + " element " + std::to_string(i) + " (buffer offset) changed from " +
                       fmt_bits(load_element(dtype, t.before.data(), std::int64_t(i))) + " to " +
                       fmt_bits(load_element(dtype, t.now, std::int64_t(i)));
    return {};
}

}  // namespace attncheck::properties
