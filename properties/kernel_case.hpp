// properties/kernel_case.hpp — one random attention problem, and the generator that builds it.
//
// A KernelCase is the structure of a problem (shapes, q_offset, causal, padding, scale, input
// style) plus a data seed; fill_inputs() turns the seed into q, k, v through the seeded Stream,
// so a case prints as one readable line and replays identically anywhere.
//
// Dimension legend: B = batch, H = heads, Tq = q_len, Tk = kv_len, Dk = head_dim, Dv = value_dim.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include <rapidcheck.h>

#include "attncheck/declaration.hpp"
#include "attncheck/kernel_abi.h"
#include "attncheck/problem.hpp"

namespace attncheck::properties {

// How q, k, v are filled. Each style is there to break a particular kind of kernel:
enum class InputStyle {
    normal,     // N(0, 1): the ordinary case, catches wrong formulas
    large,      // |scale * q.k| around 1e3: exp overflows without the max subtraction
    ties,       // keys drawn from a pool of 1-3 rows: identical scores, argmax-ish shortcuts
    small_int,  // integers in [-2, 2]: exact dot products, so errors are not hidden by rounding
};
const char* to_string(InputStyle s);

// Where the query rows sit in the key sequence (KERNEL_ABI.md): how q_offset was chosen.
enum class OffsetMode {
    prefill,  // q_offset = 0, Tq = Tk
    decode,   // Tq = 1, q_offset = Tk - 1 (a KV-cache step)
    chunk,    // chunked prefill: q_offset + Tq = Tk
    general,  // any q_offset >= 0 and Tq (rows may see every key, or leave trailing keys unseen)
};
const char* to_string(OffsetMode m);

struct KernelCase {
    int batch = 1, heads = 1, q_len = 1, kv_len = 1, head_dim = 1, value_dim = 1;  // B H Tq Tk Dk Dv
    int q_offset = 0;
    bool causal = true;
    OffsetMode mode = OffsetMode::prefill;
    std::vector<std::int32_t> kv_valid_len;  // [B], or empty: no padding (kv_valid_len = null)
    float scale = 1.0f;
    std::string scale_kind = "1/sqrt(Dk)";  // how scale was chosen, for the printout
    InputStyle style = InputStyle::normal;
    std::uint32_t data_seed = 0;

    // The ABI problem. It points into kv_valid_len: keep the case alive while using it.
    attncheck_problem problem() const;
    // Keys visible to row i of sequence b (the ABI's rule; reference::key_visible()).
    bool visible(int b, int i, int j) const;
    int valid_len(int b) const { return kv_valid_len.empty() ? kv_len : kv_valid_len[std::size_t(b)]; }
    std::size_t q_size() const { return std::size_t(batch) * heads * q_len * head_dim; }
    std::size_t k_size() const { return std::size_t(batch) * heads * kv_len * head_dim; }
    std::size_t v_size() const { return std::size_t(batch) * heads * kv_len * value_dim; }
    std::size_t out_size() const { return std::size_t(batch) * heads * q_len * value_dim; }
};

// One line: every field a person needs to rebuild the case by hand.
std::string describe(const KernelCase& c);
// RapidCheck prints counterexamples through showValue (found by ADL).
void showValue(const KernelCase& c, std::ostream& os);

// "[b,h,i,c]" for a flat index into a [d0, d1, d2, d3] row-major tensor.
std::string index4(std::size_t flat, int d0, int d1, int d2, int d3);

struct KernelInputs {
    std::vector<float> q;  // [B, H, Tq, Dk]
    std::vector<float> k;  // [B, H, Tk, Dk]
    std::vector<float> v;  // [B, H, Tk, Dv]
};
// Deterministic in the case (its data_seed and style).
KernelInputs fill_inputs(const KernelCase& c);

// What a property needs of its cases; the generator builds them so, it never filters.
struct CaseOptions {
    bool need_future = false;   // causal, with at least one key in the future of row 0
    bool need_padding = false;  // kv_valid_len given, some sequence with padded keys
    bool need_empty = false;    // some sequence with kv_valid_len = 0 (rows with no visible key)
    int min_batch = 1;          // batch independence needs B >= 2
    int max_kv = 64;            // the small tier's longest key sequence: keeps most cases fast
    // The large tier (a minority of cases, from case 1): the shapes where fast kernels break.
    // Key lengths at and beside multiples of the usual tile sizes (63, 64, 65, 127, ..., 513),
    // long decode contexts past the usual split-K chunk (512), head_dim / value_dim 16..128
    // (the widths that get SIMD fast paths) and odd ones between (their remainder loops),
    // q_len up to 128 (query blocks, micro-blocks of a few rows and their remainders).
    int large_percent = 15;     // 0: never
    int large_max_kv = 600;     // the large tier's longest key sequence
};

rc::Gen<KernelCase> gen_kernel_case(const CaseOptions& options = {});
// Cases within what the kernel declares (fit to its widths, sizes and mask; see declaration.hpp).
rc::Gen<KernelCase> gen_kernel_case(const CaseOptions& options, const KernelDeclaration& declaration);

}  // namespace attncheck::properties
