// properties/refusals.cpp — the properties of what a kernel must refuse: a version it does not
// know (abi_version), a problem outside its declaration (refuses_undeclared) and a malformed one
// (refuses_malformed). Each poses one such problem per case and expects a nonzero return, with
// nothing written outside out and lse.
#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "attncheck/abi_v1.hpp"
#include "attncheck/problem_shape_v2.hpp"
#include "attncheck/problem_v2.hpp"
#include "properties/calls.hpp"

namespace attncheck::properties {
namespace {

// Zeroed anonymous memory of `bytes` bytes. The OS maps its pages on first touch (a read maps the
// shared zero page): a buffer of any size costs nothing until it is written. data() is null when
// the mapping failed.
class LazyZeros {
public:
    explicit LazyZeros(std::size_t bytes) : bytes_(std::max<std::size_t>(bytes, 1)) {
        void* m = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (m != MAP_FAILED) data_ = static_cast<unsigned char*>(m);
    }
    ~LazyZeros() {
        if (data_) munmap(data_, bytes_);
    }
    LazyZeros(const LazyZeros&) = delete;
    LazyZeros& operator=(const LazyZeros&) = delete;
    unsigned char* data() const { return data_; }

private:
    std::size_t bytes_;
    unsigned char* data_ = nullptr;
};

constexpr unsigned char kGuardByte = 0xA5;
constexpr std::size_t kLazyGuard = std::size_t(1) << 22;  // the longest guard, bytes each side

struct LazyCall {
    std::string reason;  // why the problem is outside the declaration ("" : it is not, no call)
    int rc = 0;
    std::string write_outside;
};

// A size limit broken (kv_len = max_kv_len + 1 for max_kv_len = 1000000) is sent without filling
// the problem: q, k, v and out are LazyZeros the suite never writes, contiguous [B,H,T,D] in the
// case's dtype, out between guard regions (as long as out, 256 bytes to 4 MiB). A kernel that
// refuses at once costs nothing; one that accepts computes on zeros in valid memory. nullopt when
// the memory could not be mapped.
std::optional<LazyCall> call_lazily(const KernelUnderTest& kernel, const KernelCase& u) {
    const std::int64_t B = u.batch, Hq = u.q_heads, Hk = u.kv_heads, Tq = u.q_lens[0], Tk = u.max_kv_len();
    const std::int64_t Dk = u.head_dim, Dv = u.value_dim;
    const std::size_t es = dtype_size(u.dtype);
    const LazyZeros q(std::size_t(B * Hq * Tq * Dk) * es), k(std::size_t(B * Hk * Tk * Dk) * es),
        v(std::size_t(B * Hk * Tk * Dv) * es);
    const std::size_t out_bytes = std::size_t(B * Hq * Tq * Dv) * es;
    const std::size_t guard = std::clamp<std::size_t>(out_bytes, 256, kLazyGuard);
    const LazyZeros out(guard + out_bytes + guard);
    if (!q.data() || !k.data() || !v.data() || !out.data()) return std::nullopt;
    std::memset(out.data(), kGuardByte, guard);
    std::memset(out.data() + guard + out_bytes, kGuardByte, guard);
    std::vector<std::int32_t> q_pos(u.q_pos.begin(), u.q_pos.end());
    q_pos.resize(std::size_t(B), q_pos.empty() ? 0 : q_pos[0]);
    attncheck_problem_v2 p = make_problem_v2({.dtype = u.dtype, .batch = u.batch, .q_heads = u.q_heads,
                                              .kv_heads = u.kv_heads, .head_dim = u.head_dim,
                                              .value_dim = u.value_dim, .causal = u.causal, .scale = u.scale});
    p.q_len = std::int32_t(Tq), p.kv_len = std::int32_t(Tk);
    p.q_pos = q_pos.data();
    const auto dense = [](void* data, std::int64_t H, std::int64_t T, std::int64_t D) {
        return attncheck_tensor_v2{data, {H * T * D, T * D, D, 1}};
    };
    p.q = dense(q.data(), Hq, Tq, Dk);
    p.k = dense(k.data(), Hk, Tk, Dk);
    p.v = dense(v.data(), Hk, Tk, Dv);
    p.out = dense(out.data() + guard, Hq, Tq, Dv);
    LazyCall r;
    r.reason = kernel.declaration.unsupported_reason(p);
    if (r.reason.empty()) return r;
    r.rc = invoke(kernel, p);
    for (std::size_t i = 0; i < guard && r.write_outside.empty(); ++i) {
        if (out.data()[guard - 1 - i] != kGuardByte)
            r.write_outside = "wrote byte " + std::to_string(i + 1) + " before out";
        else if (out.data()[guard + out_bytes + i] != kGuardByte)
            r.write_outside = "wrote byte " + std::to_string(i + 1) + " past the end of out (" + std::to_string(out_bytes) +
                              " bytes)";
    }
    return r;
}

}  // namespace

Verdict abi_version(const KernelUnderTest& kernel, const KernelCase& c) {
    const KernelInputs in = fill_inputs(c);
    for (const std::int32_t version : {ATTNCHECK_ABI_VERSION_2 + 1, ATTNCHECK_ABI_VERSION}) {
        Built b = build_case(c, in);
        b.problem.abi_version = version;
        const int rc = invoke(kernel, b.problem);
        // What the kernel was given: a version 1 kernel sees the version through v1_call_of().
        std::string given = "abi_version " + std::to_string(version);
        if (V1Call v1; !kernel.fn_v2 && v1_call_of(b.problem, v1).empty())
            given = "abi_version " + std::to_string(v1.problem.abi_version) + " (in its version 1 problem)";
        if (const std::string w = b.write_outside(); !w.empty())
            return Verdict::fail("refusing " + given + ", kernel " + w);
        if (rc == 0)
            return Verdict::fail("kernel accepted " + given + " (returned 0): a kernel must refuse a version it does not know");
    }
    return Verdict::pass();
}

// One problem just outside what the kernel declares (a width, a size, the mask, padding, and for
// a version 2 kernel every feature it does not declare; a different one per case, so that every
// restriction is exercised); the kernel must refuse it. Vacuous for a kernel that declares no
// restriction. A size limit (max_kv_len, max_q_len, max_batch, max_heads) is broken on an
// otherwise minimal problem (every other length 1) sent through call_lazily: probing
// max_kv_len=1000000 costs no more than max_kv_len=64.
Verdict refuses_undeclared(const KernelUnderTest& kernel, const KernelCase& c) {
    const KernelDeclaration& d = kernel.declaration;
    struct Break {
        bool lazily;
        std::function<void(KernelCase&)> apply;
    };
    std::vector<Break> breaks;
    const auto add = [&](std::function<void(KernelCase&)> f) { breaks.push_back({false, std::move(f)}); };
    const auto first_outside = [](int from, auto allowed) {
        for (int w = from + 1; w < from + 4096; ++w)
            if (!allowed(w)) return w;
        for (int w = from - 1; w >= 1; --w)
            if (!allowed(w)) return w;
        return 0;
    };
    if (const int w = first_outside(c.head_dim, [&](int x) { return d.allows_head_dim(x); }); w > 0)
        add([w, &d](KernelCase& u) {
            u.head_dim = w;
            if (d.value_dim_same) u.value_dim = w;
        });
    if (const int w = first_outside(c.value_dim, [&](int x) { return d.allows_value_dim(x, c.head_dim); }); w > 0)
        add([w](KernelCase& u) { u.value_dim = w; });
    // The size breaks: one sequence, one head, one row and one key but for the limit broken; the
    // dtype, widths, mask and scale stay.
    const auto minimal = [](KernelCase& u) {
        u.batch = 1, u.q_heads = u.kv_heads = 1;
        u.q_lens = {1}, u.kv_lens = {1}, u.q_pos = {0};
        u.mode = OffsetMode::general;
        u.layout = Layout{};
        u.window_left = u.window_right = -1;
        u.softcap = 0.0f;
        u.alibi_slopes.clear();
        u.sinks.clear();
        u.want_lse = false;
    };
    if (d.max_kv_len) breaks.push_back({true, [&d, minimal](KernelCase& u) {
                                            minimal(u);
                                            u.kv_lens = {d.max_kv_len + 1}, u.q_pos = {d.max_kv_len};
                                            u.mode = OffsetMode::decode;
                                        }});
    if (d.max_q_len) breaks.push_back({true, [&d, minimal](KernelCase& u) {
                                           minimal(u);
                                           u.q_lens = {d.max_q_len + 1};
                                       }});
    if (d.max_batch) breaks.push_back({true, [&d, minimal](KernelCase& u) {
                                           minimal(u);
                                           u.batch = d.max_batch + 1;
                                           u.q_lens.assign(std::size_t(u.batch), 1), u.kv_lens.assign(std::size_t(u.batch), 1);
                                           u.q_pos.assign(std::size_t(u.batch), 0);
                                       }});
    if (d.max_heads) breaks.push_back({true, [&d, minimal](KernelCase& u) {
                                           minimal(u);
                                           u.q_heads = u.kv_heads = d.max_heads + 1;
                                       }});
    if (!d.causal) add([](KernelCase& u) { u.causal = true, u.window_right = -1; });
    if (!d.non_causal) add([](KernelCase& u) { u.causal = false; });
    if (!d.padding) add([](KernelCase& u) {
        if (!u.dense() || u.layout.kind == LayoutKind::paged) {
            one_q_len(u);
            u = with_layout(u, LayoutKind::bhtd);
        }
        u.layout.kv_capacity = u.max_kv_len() + 1;
    });
    // A version 1 kernel's limits are the ABI's (the adapter refuses such a problem before the
    // kernel sees it): only what it declares itself is posed.
    if (!d.abi_v1) {
        if (!d.allows_dtype(ATTNCHECK_DTYPE_F32)) add([](KernelCase& u) { u.dtype = ATTNCHECK_DTYPE_F32; });
        if (!d.allows_dtype(ATTNCHECK_DTYPE_F16)) add([](KernelCase& u) { u.dtype = ATTNCHECK_DTYPE_F16; });
        if (!d.allows_dtype(ATTNCHECK_DTYPE_BF16)) add([](KernelCase& u) { u.dtype = ATTNCHECK_DTYPE_BF16; });
        if (!d.gqa && (!d.max_heads || d.max_heads >= 2)) add([](KernelCase& u) { u.kv_heads = 1, u.q_heads = 2; });
        if (!d.layout_any && c.dense()) add([](KernelCase& u) { u.layout.kind = LayoutKind::gapped; });
        if (!d.layout_any && !c.dense()) add([](KernelCase& u) { u.layout.varlen_contiguous = false; });
        if (!d.varlen) add([](KernelCase& u) { u.layout.kind = LayoutKind::varlen; });
        if (!d.dense) add([](KernelCase& u) {
            one_q_len(u);
            u = with_layout(u, LayoutKind::bhtd);
        });
        if (!d.paged) add([](KernelCase& u) { u.layout.kind = LayoutKind::paged, u.layout.block_size = 4; });
        if (!d.window) add([](KernelCase& u) { u.window_left = 1; });
        if (!d.softcap) add([](KernelCase& u) { u.softcap = 5.0f; });
        if (!d.alibi) add([](KernelCase& u) { u.alibi_slopes.assign(std::size_t(u.q_heads), 0.5f); });
        if (!d.lse) add([](KernelCase& u) { u.want_lse = true; });
        if (!d.positions_any) add([](KernelCase& u) { u.q_pos[0] += 1; });
        if (d.positions_shared && c.batch > 1) add([](KernelCase& u) { u.q_pos[1] = u.q_pos[0] + 1; });
    }
    if (breaks.empty()) return Verdict::pass();
    const Break& broken = breaks[c.data_seed % breaks.size()];
    KernelCase u = c;
    broken.apply(u);
    const auto refused = [&](const std::string& reason, int rc, const std::string& write_outside) {
        if (!write_outside.empty())
            return Verdict::fail("on a problem outside its declaration (" + reason + "), kernel " + write_outside);
        if (rc == 0)
            return Verdict::fail("the kernel accepted (returned 0) a problem outside its declaration: " + reason +
                                 "; a kernel refuses (returns nonzero) what it does not declare, or declares it (" +
                                 d.to_string() + ")");
        return Verdict::pass();
    };
    if (broken.lazily) {
        const std::optional<LazyCall> r = call_lazily(kernel, u);
        if (!r) return Verdict::pass_with_note("a problem outside the declaration was not sent: its memory could not be mapped");
        return r->reason.empty() ? Verdict::pass() : refused(r->reason, r->rc, r->write_outside);
    }
    if (u.layout.kind == LayoutKind::varlen || u.layout.kind == LayoutKind::paged) u.layout.kv_capacity = 0;
    if (u.dense()) one_q_len(u);
    if (!u.alibi_slopes.empty()) u.alibi_slopes.resize(std::size_t(u.q_heads), 0.5f);
    if (!u.sinks.empty()) u.sinks.resize(std::size_t(u.q_heads), 0.5f);
    const KernelInputs in = fill_inputs(u);
    Built built = build_case(u, in);
    const std::string reason = d.unsupported_reason(built.problem);
    if (reason.empty()) return Verdict::pass();  // this case could not be moved outside the declaration
    const int rc = invoke(kernel, built.problem);
    return refused(reason, rc, built.write_outside());
}

// A malformed problem (problem_v2_error() names it) must not crash the suite. The kernel should
// refuse it; one that accepts it gets a note, not a failure: the ABI promises the kernel a
// well-formed problem, and production kernels (FlashAttention's paged path among them) do not
// re-validate block tables for speed. The buffers are sized so that even a kernel that reads
// the bad index stays inside them (a spare K/V head, a spare block).
Verdict refuses_malformed(const KernelUnderTest& kernel, const KernelCase& c0) {
    KernelCase c = c0;
    const int which = int(c.data_seed % 3);
    std::string what;
    if (which == 0) {
        // kv_heads not dividing q_heads: Hq = 3, Hk = 2, with room for 3 K/V heads.
        c.q_heads = 3, c.kv_heads = 3;
        if (!c.alibi_slopes.empty()) c.alibi_slopes.assign(3, 0.5f);
        if (!c.sinks.empty()) c.sinks.assign(3, 0.5f);
    } else if (which == 1) {
        c.layout.kind = LayoutKind::paged;
        c.layout.spare_blocks = std::max(1, c.layout.spare_blocks);
        c.layout.kv_capacity = 0;
        one_q_len(c);
        if (c.max_kv_len() == 0) c.kv_lens[0] = 1, c.q_pos[0] = 0;
    }
    const KernelInputs in = fill_inputs(c);
    Built built = build_case(c, in);
    attncheck_problem_v2& p = built.problem;
    if (which == 0) {
        p.kv_heads = 2;
        what = "kv_heads 2 does not divide q_heads 3";
    } else if (which == 1) {
        // The last block is the one the table now names but num_blocks excludes.
        int seq = 0;
        while (kv_len_of(p, seq) == 0) ++seq;
        const std::int32_t last = p.num_blocks - 1;
        for (auto& e : built.block_table)
            if (e == last) e = 0;
        built.block_table[std::size_t(seq) * std::size_t(p.block_table_stride)] = last;
        p.num_blocks = last;
        what = "block_table[" + std::to_string(seq) + "][0] = " + std::to_string(last) + " is outside [0, num_blocks = " +
               std::to_string(last) + ")";
    } else {
        built.q_pos[0] = -1;
        what = "q_pos[0] = -1";
    }
    if (problem_v2_error(p).empty()) return Verdict::pass();  // the case could not be made malformed
    const int rc = invoke(kernel, p);
    if (const std::string w = built.write_outside(); !w.empty())
        return Verdict::fail("on a malformed problem (" + what + "), kernel " + w);
    if (rc == 0) return Verdict::pass_with_note("accepted a malformed problem (returned 0): " + what);
    return Verdict::pass();
}

}  // namespace attncheck::properties
