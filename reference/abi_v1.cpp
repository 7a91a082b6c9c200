// reference/abi_v1.cpp — a version 2 problem posed through version 1 of the ABI (abi_v1.hpp).
#include "attncheck/abi_v1.hpp"

#include <cstddef>
#include <cstdint>

#include "attncheck/problem.hpp"
#include "attncheck/problem_v2.hpp"

namespace attncheck {

namespace {

// Whether t is contiguous [B, H, rows, width]. The stride of an axis of extent 1 is never used,
// so it may be anything (a batch of one has no batch stride to speak of).
bool contiguous(const attncheck_tensor_v2& t, int B, int H, int rows, int width) {
    const std::int64_t expected[4] = {std::int64_t(H) * rows * width, std::int64_t(rows) * width, width, 1};
    const int extent[4] = {B, H, rows, width};
    for (int a = 0; a < 4; ++a)
        if (extent[a] > 1 && t.stride[a] != expected[a]) return false;
    return true;
}

}  // namespace

attncheck_problem v1_fields_of(const attncheck_problem_v2& p) {
    return make_problem({.batch = p.batch, .heads = p.q_heads, .q_len = p.q_len, .kv_len = p.kv_len,
                         .head_dim = p.head_dim, .value_dim = p.value_dim, .q_offset = p.batch > 0 ? p.q_pos[0] : 0,
                         .causal = p.causal != 0, .kv_valid_len = p.kv_lens, .scale = p.scale});
}

attncheck_problem_v2 v2_fields_of(const attncheck_problem& p, const std::int32_t* q_pos) {
    attncheck_problem_v2 v2{};
    v2.abi_version = ATTNCHECK_ABI_VERSION_2;
    v2.struct_size = sizeof(attncheck_problem_v2);
    v2.dtype = ATTNCHECK_DTYPE_F32;
    v2.batch = p.batch;
    v2.q_heads = v2.kv_heads = p.heads;
    v2.head_dim = p.head_dim;
    v2.value_dim = p.value_dim;
    v2.q_len = p.q_len;
    v2.kv_len = p.kv_len;
    v2.q_pos = q_pos;
    v2.kv_lens = p.kv_valid_len;
    v2.causal = p.causal;
    v2.window_left = v2.window_right = -1;
    v2.scale = p.scale;
    // Version 1's layout, contiguous [B, H, T, width]. Unsigned products: a problem whose sizes
    // do not fit (element_counts_fit) gets meaningless strides, never an overflow.
    const auto bhtd = [&](attncheck_tensor_v2& t, std::uint64_t rows, std::uint64_t width) {
        t.stride[3] = 1;
        t.stride[2] = std::int64_t(width);
        t.stride[1] = std::int64_t(rows * width);
        t.stride[0] = std::int64_t(std::uint64_t(std::uint32_t(p.heads)) * rows * width);
    };
    const auto u = [](std::int32_t x) { return std::uint64_t(std::uint32_t(x)); };
    bhtd(v2.q, u(p.q_len), u(p.head_dim));
    bhtd(v2.k, u(p.kv_len), u(p.head_dim));
    bhtd(v2.v, u(p.kv_len), u(p.value_dim));
    bhtd(v2.out, u(p.q_len), u(p.value_dim));
    return v2;
}

const char* beyond_v1_features(const attncheck_problem_v2& p) {
    if (p.dtype != ATTNCHECK_DTYPE_F32) return "a dtype other than float32";
    if (p.kv_heads != p.q_heads) return "kv_heads != q_heads (grouped-query heads)";
    if (p.cu_seqlens_q || p.cu_seqlens_k) return "a packed variable-length batch (cu_seqlens)";
    if (p.block_table) return "a paged KV cache";
    if (p.window_left >= 0 || p.window_right >= 0) return "a sliding window";
    if (p.softcap != 0.0f) return "softcap";
    if (p.alibi_slopes) return "ALiBi slopes";
    if (p.sinks) return "attention sinks";
    if (p.lse) return "an lse output";
    if (!p.q_pos) return "no q_pos";
    for (int b = 1; b < p.batch; ++b)
        if (p.q_pos[b] != p.q_pos[0]) return "q_pos differs between sequences (version 1 has one q_offset)";
    return nullptr;
}

std::string v1_call_of(const attncheck_problem_v2& p, V1Call& call) {
    if (p.struct_size < std::int32_t(sizeof(attncheck_problem_v2))) return "struct_size smaller than version 2's";
    if (const char* why = beyond_v1_features(p)) return why;
    const int B = p.batch, H = p.q_heads;
    if (!contiguous(p.q, B, H, p.q_len, p.head_dim)) return "q is not contiguous [B, H, Tq, Dk]";
    if (!contiguous(p.k, B, H, p.kv_len, p.head_dim)) return "k is not contiguous [B, H, Tk, Dk]";
    if (!contiguous(p.v, B, H, p.kv_len, p.value_dim)) return "v is not contiguous [B, H, Tk, Dv]";
    if (!contiguous(p.out, B, H, p.q_len, p.value_dim)) return "out is not contiguous [B, H, Tq, Dv]";

    call.problem = v1_fields_of(p);
    call.problem.abi_version = p.abi_version == ATTNCHECK_ABI_VERSION_2 ? ATTNCHECK_ABI_VERSION
                               : p.abi_version < ATTNCHECK_ABI_VERSION_2 ? 0
                                                                         : ATTNCHECK_ABI_VERSION + 1;
    call.q = static_cast<const float*>(p.q.data);
    call.k = static_cast<const float*>(p.k.data);
    call.v = static_cast<const float*>(p.v.data);
    call.out = static_cast<float*>(p.out.data);
    return {};
}

int v1_call(attncheck_kernel_fn fn, const attncheck_problem_v2& p) {
    V1Call call;
    if (!v1_call_of(p, call).empty()) return ATTNCHECK_UNSUPPORTED;
    return fn(&call.problem, call.q, call.k, call.v, call.out);
}

bool element_counts_fit(const attncheck_problem& p) {
    const unsigned __int128 bh = (unsigned __int128)p.batch * (unsigned __int128)p.heads;
    const unsigned __int128 limit = (unsigned __int128)INT64_MAX / 4;  // elements of 4 bytes
    for (const std::int32_t rows : {p.q_len, p.kv_len})
        for (const std::int32_t width : {p.head_dim, p.value_dim})
            if (bh * (unsigned __int128)rows * (unsigned __int128)width > limit) return false;
    return true;
}

}  // namespace attncheck
