// reference/problem_v2.cpp — problem_v2_error(), make_problem_v2() and describe_v2()
// (attncheck/problem_v2.hpp).
#include "attncheck/problem_shape_v2.hpp"
#include "attncheck/problem_v2.hpp"

#include <cmath>
#include <sstream>

// The suite's checks (-inf masks, NaN propagation, exact zeros) need IEEE arithmetic. CMakeLists.txt
// refuses -ffast-math and its relatives in the build's flags; this stops them from anywhere else
// (every program of the suite links this file).
#if defined(__FAST_MATH__) || (defined(__FINITE_MATH_ONLY__) && __FINITE_MATH_ONLY__)
#error "attncheck must not be compiled with -ffast-math, -Ofast or -ffinite-math-only"
#endif

namespace attncheck {

const char* dtype_name(std::int32_t dtype) {
    switch (dtype) {
    case ATTNCHECK_DTYPE_F32: return "f32";
    case ATTNCHECK_DTYPE_F16: return "f16";
    case ATTNCHECK_DTYPE_BF16: return "bf16";
    default: return "dtype?";
    }
}

namespace {

std::string str(std::int64_t v) { return std::to_string(v); }

// Prefix sums [0] = 0, non-decreasing, each step <= max_len; "" or the complaint.
std::string prefix_sum_error(const char* name, const std::int32_t* cu, int batch, int max_len) {
    if (cu[0] != 0) return std::string(name) + "[0] = " + str(cu[0]) + ", must be 0";
    for (int b = 0; b < batch; ++b) {
        const std::int64_t n = std::int64_t(cu[b + 1]) - cu[b];
        if (n < 0) return std::string(name) + " decreases at " + str(b + 1);
        if (n > max_len)
            return std::string(name) + ": sequence " + str(b) + " has " + str(n) + " rows, more than the maximum " +
                   str(max_len);
    }
    return {};
}

std::string tensor_error(const char* name, const attncheck_tensor_v2& t) {
    if (!t.data) return std::string(name) + ".data is null";
    for (int d = 0; d < 4; ++d)
        if (t.stride[d] < 0) return std::string(name) + ".stride[" + str(d) + "] = " + str(t.stride[d]) + " is negative";
    return {};
}

}  // namespace

std::string problem_v2_error(const attncheck_problem_v2& p) {
    if (p.abi_version != ATTNCHECK_ABI_VERSION_2) return "abi_version " + str(p.abi_version) + " is not 2";
    if (p.struct_size < std::int32_t(sizeof(attncheck_problem_v2)))
        return "struct_size " + str(p.struct_size) + " is smaller than this header's " + str(sizeof(attncheck_problem_v2));
    if (p.dtype != ATTNCHECK_DTYPE_F32 && p.dtype != ATTNCHECK_DTYPE_F16 && p.dtype != ATTNCHECK_DTYPE_BF16)
        return "dtype " + str(p.dtype) + " is none of f32 (0), f16 (1), bf16 (2)";
    const struct { const char* name; std::int32_t v; } sizes[] = {
        {"batch", p.batch}, {"q_heads", p.q_heads}, {"kv_heads", p.kv_heads}, {"head_dim", p.head_dim},
        {"value_dim", p.value_dim}, {"q_len", p.q_len}, {"kv_len", p.kv_len}};
    for (const auto& s : sizes)
        if (s.v < 1) return std::string(s.name) + " = " + str(s.v) + ", must be >= 1";
    if (p.q_heads % p.kv_heads != 0)
        return "kv_heads " + str(p.kv_heads) + " does not divide q_heads " + str(p.q_heads);
    if (!p.q_pos) return "q_pos is null (it must give B positions)";
    if (p.cu_seqlens_k && p.kv_lens) return "both cu_seqlens_k and kv_lens are given (varlen keys take their counts from cu_seqlens_k)";
    if (p.cu_seqlens_k && p.block_table) return "both cu_seqlens_k and block_table are given";
    if (p.cu_seqlens_q)
        if (auto e = prefix_sum_error("cu_seqlens_q", p.cu_seqlens_q, p.batch, p.q_len); !e.empty()) return e;
    if (p.cu_seqlens_k)
        if (auto e = prefix_sum_error("cu_seqlens_k", p.cu_seqlens_k, p.batch, p.kv_len); !e.empty()) return e;
    for (int b = 0; b < p.batch; ++b) {
        if (p.kv_lens && (p.kv_lens[b] < 0 || p.kv_lens[b] > p.kv_len))
            return "kv_lens[" + str(b) + "] = " + str(p.kv_lens[b]) + " is outside [0, kv_len = " + str(p.kv_len) + "]";
        if (p.q_pos[b] < 0) return "q_pos[" + str(b) + "] = " + str(p.q_pos[b]) + " is negative";
    }
    if (p.causal != 0 && p.causal != 1) return "causal = " + str(p.causal) + ", must be 0 or 1";
    if (p.window_left < -1) return "window_left = " + str(p.window_left) + ", must be >= -1";
    if (p.window_right < -1) return "window_right = " + str(p.window_right) + ", must be >= -1";
    if (p.causal && p.window_right != -1) return "window_right = " + str(p.window_right) + " with causal (must be -1)";
    if (!std::isfinite(p.scale)) return "scale is not finite";
    if (!(p.softcap >= 0) || !std::isfinite(p.softcap)) return "softcap must be finite and >= 0";
    if (p.alibi_slopes)
        for (int h = 0; h < p.q_heads; ++h)
            if (!std::isfinite(p.alibi_slopes[h])) return "alibi_slopes[" + str(h) + "] is not finite";
    if (p.sinks)
        for (int h = 0; h < p.q_heads; ++h)
            if (!std::isfinite(p.sinks[h])) return "sinks[" + str(h) + "] is not finite";
    if (p.block_table) {
        if (p.block_size < 1) return "block_size = " + str(p.block_size) + ", must be >= 1";
        if (p.num_blocks < 1) return "num_blocks = " + str(p.num_blocks) + ", must be >= 1";
        if (p.block_table_stride < 1) return "block_table_stride = " + str(p.block_table_stride) + ", must be >= 1";
        for (int b = 0; b < p.batch; ++b) {
            const std::int64_t need = (std::int64_t(kv_len_of(p, b)) + p.block_size - 1) / p.block_size;
            if (need > p.block_table_stride)
                return "sequence " + str(b) + " has " + str(kv_len_of(p, b)) + " keys: " + str(need) +
                       " blocks of " + str(p.block_size) + ", more than block_table_stride " + str(p.block_table_stride);
            for (std::int64_t e = 0; e < need; ++e) {
                const std::int32_t blk = p.block_table[b * std::int64_t(p.block_table_stride) + e];
                if (blk < 0 || blk >= p.num_blocks)
                    return "block_table[" + str(b) + "][" + str(e) + "] = " + str(blk) + " is outside [0, num_blocks = " +
                           str(p.num_blocks) + ")";
            }
        }
    }
    if (auto e = tensor_error("q", p.q); !e.empty()) return e;
    if (auto e = tensor_error("k", p.k); !e.empty()) return e;
    if (auto e = tensor_error("v", p.v); !e.empty()) return e;
    if (auto e = tensor_error("out", p.out); !e.empty()) return e;
    if (p.lse)
        for (int d = 0; d < 3; ++d)
            if (p.lse_stride[d] < 0) return "lse_stride[" + str(d) + "] is negative";
    return {};
}

attncheck_problem_v2 make_problem_v2(const ProblemShapeV2& s) {
    attncheck_problem_v2 p{};
    p.abi_version = ATTNCHECK_ABI_VERSION_2;
    p.struct_size = std::int32_t(sizeof(attncheck_problem_v2));
    p.dtype = s.dtype;
    p.batch = s.batch, p.q_heads = s.q_heads, p.kv_heads = s.kv_heads;
    p.head_dim = s.head_dim, p.value_dim = s.value_dim;
    p.causal = s.causal ? 1 : 0;
    p.window_left = s.window_left, p.window_right = s.window_right;
    p.scale = s.scale, p.softcap = s.softcap;
    return p;
}

std::string grads_v2_error(const attncheck_problem_v2& p, const attncheck_grads_v2& g) {
    if (auto e = problem_v2_error(p); !e.empty()) return e;
    if (!p.lse) return "lse is null (a backward call reads the forward's lse)";
    if (p.block_table) return "a block_table is given (a backward call takes dense or varlen k and v)";
    if (g.struct_size < std::int32_t(sizeof(attncheck_grads_v2)))
        return "grads struct_size " + str(g.struct_size) + " is smaller than this header's " + str(sizeof(attncheck_grads_v2));
    if (auto e = tensor_error("dout", g.dout); !e.empty()) return e;
    if (auto e = tensor_error("dq", g.dq); !e.empty()) return e;
    if (auto e = tensor_error("dk", g.dk); !e.empty()) return e;
    if (auto e = tensor_error("dv", g.dv); !e.empty()) return e;
    if (p.sinks && !g.dsinks) return "dsinks is null (a call with sinks writes their gradient)";
    return {};
}

std::string describe_v2(const attncheck_problem_v2& p) {
    std::ostringstream os;
    os << "dtype=" << dtype_name(p.dtype) << " B=" << p.batch << " Hq=" << p.q_heads << " Hk=" << p.kv_heads
       << " Tq=" << p.q_len << " Tk=" << p.kv_len << " Dk=" << p.head_dim << " Dv=" << p.value_dim;
    const auto list = [&](const char* name, const std::int32_t* v, int n) {
        if (!v) return;
        os << ' ' << name << "=[";
        for (int i = 0; i < n; ++i) os << (i ? "," : "") << v[i];
        os << ']';
    };
    list("q_pos", p.q_pos, p.batch);
    list("kv_lens", p.kv_lens, p.batch);
    list("cu_seqlens_q", p.cu_seqlens_q, p.batch + 1);
    list("cu_seqlens_k", p.cu_seqlens_k, p.batch + 1);
    os << (p.causal ? " causal" : " non-causal");
    if (p.window_left >= 0 || p.window_right >= 0) os << " window=(" << p.window_left << "," << p.window_right << ")";
    os << " scale=" << p.scale;
    if (p.softcap > 0) os << " softcap=" << p.softcap;
    if (p.alibi_slopes) {
        os << " alibi=[";
        for (int h = 0; h < p.q_heads; ++h) os << (h ? "," : "") << p.alibi_slopes[h];
        os << ']';
    }
    if (p.sinks) {
        os << " sinks=[";
        for (int h = 0; h < p.q_heads; ++h) os << (h ? "," : "") << p.sinks[h];
        os << ']';
    }
    if (p.block_table) os << " paged(block_size=" << p.block_size << " num_blocks=" << p.num_blocks << ")";
    const auto strides = [&](const char* name, const attncheck_tensor_v2& t) {
        os << ' ' << name << "_strides=(" << t.stride[0] << ',' << t.stride[1] << ',' << t.stride[2] << ','
           << t.stride[3] << ')';
    };
    strides("q", p.q);
    strides("k", p.k);
    strides("v", p.v);
    strides("out", p.out);
    if (p.lse) os << " lse";
    return os.str();
}

}  // namespace attncheck
