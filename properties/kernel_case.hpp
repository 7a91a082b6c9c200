// properties/kernel_case.hpp — one random attention problem, the buffers it is built into, and
// the generator. The problem is version 2's (attncheck_problem_v2), the suite's one problem type:
// a version 1 kernel is posed the ones version 1 can express (attncheck/abi_v1.hpp).
//
// A KernelCase is a logical problem (dtype, shapes, per-sequence lengths and positions, mask,
// window, scale, softcap, ALiBi, lse, input style, data seed) plus a Layout (how the logical
// tensors sit in memory: [B,H,T,D], [B,T,H,D], a view with gaps, varlen packed, paged). The
// logical inputs (KernelInputs) depend on the logical problem only, so a case and its
// transform into another layout hold the same numbers.
//
// build_case() puts a case into owning buffers (Built) and an attncheck_problem_v2 pointing into
// them. Every input element outside the logical problem (gaps, padding rows past Tk(b), unused
// cache blocks and rows) holds a poison value (NaN or Inf, the layout's choice), out and lse are
// prefilled with a recognisable NaN and surrounded by guard elements, and the read-back
// (Built::out_logical) gives the result in the oracle's logical order (b, h, i, c).
//
// Dimension legend: B = batch, Hq = q_heads, Hk = kv_heads, Tq(b) / Tk(b) = query rows / keys
// of sequence b, Dk = head_dim, Dv = value_dim.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include <rapidcheck.h>

#include "attncheck/declaration.hpp"
#include "attncheck/kernel_abi_v2.h"

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

// How the logical tensors are laid out in memory.
enum class LayoutKind {
    bhtd,    // contiguous [B, H, T, D] (k/v: [B, Hk, capacity, D])
    bthd,    // contiguous [B, T, H, D] (FlashAttention's layout)
    gapped,  // [B, H, T, D] with gaps between rows, heads and sequences (a view into a larger tensor)
    varlen,  // packed rows (cu_seqlens_q / cu_seqlens_k), [T, H, D] with a gap after each head
             // (or densely packed [H, T, D]: Layout::varlen_contiguous)
    paged,   // q/out as bhtd, k/v in blocks [num_blocks, block_size, Hk, D] through a block table
};
const char* to_string(LayoutKind l);

struct Layout {
    LayoutKind kind = LayoutKind::bhtd;
    int kv_capacity = 0;         // dense k/v rows per sequence (>= every Tk(b)); 0: the longest Tk
    int block_size = 16;         // paged
    int spare_blocks = 0;        // paged: blocks no sequence uses
    int table_slack = 0;         // paged: extra block-table entries per sequence (never read)
    std::uint32_t block_seed = 0;  // paged: the permutation of blocks in the cache
    bool blocks_bthd = true;     // paged k/v: [num_blocks, block_size, Hk, D] (else [.., Hk, block_size, D])
    // varlen: every tensor densely packed [H, total rows, D] and lse [H, total rows], what
    // layout=contiguous declares (else [total rows, H, D] with a gap after each head's row).
    bool varlen_contiguous = false;
};

// What fills the input elements outside the logical problem (gaps, padding, unused blocks):
// NaN, Inf, small integers, or large finite garbage (+-1024 k).
enum class Filler { nan, inf, finite, large };
const char* to_string(Filler f);

struct KernelCase {
    std::int32_t dtype = ATTNCHECK_DTYPE_F32;
    int batch = 1, q_heads = 1, kv_heads = 1, head_dim = 1, value_dim = 1;
    std::vector<int> q_lens, kv_lens, q_pos;  // per sequence: Tq(b), Tk(b), q_pos[b]
    OffsetMode mode = OffsetMode::prefill;    // how the positions were chosen (for the printout)
    bool causal = true;
    int window_left = -1, window_right = -1;
    float scale = 1.0f;
    std::string scale_kind = "1/sqrt(Dk)";
    float softcap = 0.0f;
    std::vector<float> alibi_slopes;  // empty: none
    std::vector<float> sinks;         // empty: none; else one logit per query head
    bool want_lse = false;
    InputStyle style = InputStyle::normal;
    std::uint32_t data_seed = 0;
    Layout layout;
    Filler filler = Filler::nan;
    // Keys inside Tk(b) that no row of the sequence sees (outside every row's window, or after
    // the last row when causal) hold large finite garbage instead of their values. Not NaN or Inf:
    // they are real keys of a real cache (the ones a sliding window has passed), which hold finite
    // values, and a correct kernel may read them and mask them additively (NaN + -inf is NaN).
    // NaN and Inf go where memory may really be uninitialised: the filler above.
    bool poison_invisible = false;

    // Whether the layout needs every sequence to have the same Tq (the dense layouts do).
    bool dense() const { return layout.kind != LayoutKind::varlen; }
    int max_q_len() const;
    int max_kv_len() const;
    // Key j is visible to row i of sequence b (the ABI's rule, as visible_v2()).
    bool visible(int b, int i, int j) const;
};

std::string describe(const KernelCase& c);
void showValue(const KernelCase& c, std::ostream& os);

// The logical inputs, values exactly representable in the case's dtype:
//   q: for each b, [Hq, Tq(b), Dk]; k: for each b, [Hk, Tk(b), Dk]; v: for each b, [Hk, Tk(b), Dv].
struct KernelInputs {
    std::vector<float> q, k, v;
    std::vector<std::size_t> q_first, k_first, v_first;  // B + 1 offsets of each sequence
    float& q_at(int b, int h, int i, int c, const KernelCase& cs);
    float& k_at(int b, int h, int j, int c, const KernelCase& cs);
    float& v_at(int b, int h, int j, int c, const KernelCase& cs);
    float q_at(int b, int h, int i, int c, const KernelCase& cs) const;
    float k_at(int b, int h, int j, int c, const KernelCase& cs) const;
    float v_at(int b, int h, int j, int c, const KernelCase& cs) const;
};
// Sized for the case and zero-filled.
KernelInputs empty_inputs(const KernelCase& c);
// Deterministic in the logical problem (its data_seed and style), whatever the layout.
KernelInputs fill_inputs(const KernelCase& c);

// A buffer whose last byte is followed by an inaccessible page (mmap + mprotect PROT_NONE): a
// read past its end faults at once. data() is aligned to the element size only.
class GuardPageBuffer {
public:
    GuardPageBuffer() = default;
    explicit GuardPageBuffer(std::size_t bytes);
    GuardPageBuffer(GuardPageBuffer&& o) noexcept;
    GuardPageBuffer& operator=(GuardPageBuffer&& o) noexcept;
    GuardPageBuffer(const GuardPageBuffer&) = delete;
    GuardPageBuffer& operator=(const GuardPageBuffer&) = delete;
    ~GuardPageBuffer();
    unsigned char* data() { return data_; }
    std::size_t size() const { return bytes_; }

private:
    void* map_ = nullptr;
    std::size_t map_bytes_ = 0, bytes_ = 0;
    unsigned char* data_ = nullptr;
};

struct BuildOptions {
    // q, k, v end against a guard page: an over-read faults. Meant for the isolated worker, where
    // the fault is reported as a crash of the case; in-process it ends the process.
    bool guard_page_inputs = false;
    // out and lse prefilled with zeros instead of the "never written" NaN (a kernel must not
    // read its outputs: the determinism property compares the two).
    bool zero_outputs = false;
};

// A case in memory. problem points into the members: keep the Built alive (moving it is fine,
// the buffers stay where they are).
struct Built {
    attncheck_problem_v2 problem{};
    std::int32_t dtype = ATTNCHECK_DTYPE_F32;
    // q, k, v as the kernel sees them, and copies to detect a change.
    std::vector<unsigned char> q_bytes, k_bytes, v_bytes;
    GuardPageBuffer q_page, k_page, v_page;
    std::vector<unsigned char> q_before, k_before, v_before;
    // out: guard + span + guard, in elements of the dtype; lse: the same in float32.
    std::vector<unsigned char> out_bytes;
    std::vector<char> out_mask;  // per element of out_bytes: 1 where the problem addresses out
    std::size_t out_guard = 0, out_span = 0;
    std::vector<float> lse_buffer;
    std::vector<char> lse_mask;
    std::size_t lse_guard = 0, lse_span = 0;
    std::vector<std::int32_t> kv_lens, cu_q, cu_k, q_pos, block_table;
    std::vector<float> alibi, sinks;
    // Logical (b, h, i) rows in oracle order: first_row[b] + h * Tq(b) + i.
    std::vector<std::size_t> first_row;
    std::vector<int> q_lens;

    std::size_t rows() const { return first_row.back(); }
    // The logical row of (b, h, i).
    std::size_t row_of(int b, int h, int i) const {
        return first_row[std::size_t(b)] + std::size_t(h) * std::size_t(q_lens[std::size_t(b)]) + std::size_t(i);
    }
    // out in logical order [rows, Dv] (as float), and lse [rows] (empty when lse was not asked).
    std::vector<float> out_logical() const;
    std::vector<float> lse_logical() const;
    // "" or the first element written outside out / lse (gaps and guards included).
    std::string write_outside() const;
    // "" or the first element of out (or lse) the kernel left unwritten.
    std::string unwritten() const;
    // "" or the first input element the call changed.
    std::string input_change() const;
    // Sets out and lse back to their prefill (for a second call into the same buffers).
    void reset_outputs();
    // "(b,h,i,c)" of logical row r, column c.
    std::string element(std::size_t row, int c) const;
};

Built build_case(const KernelCase& c, const KernelInputs& in, const BuildOptions& options = {});

// A tensor the kernel writes besides out (the backward's dq, dk, dv), between guards as out is:
// the elements it must write (`written`, offsets from element 0 of the view) prefilled with the
// "never written" NaN, every other element (guards, gaps) with a canary.
class GuardedTensor {
public:
    GuardedTensor() = default;
    GuardedTensor(std::int32_t dtype, std::size_t span, const std::vector<std::int64_t>& written);
    void* data() { return bytes_.data() + guard_ * dtype_size_; }  // element 0 of the view
    // Prefills again: the written elements with the "never written" NaN, or with zeros.
    void reset(bool zeros = false);
    float at(std::int64_t offset) const;
    bool unwritten(std::int64_t offset) const;
    // "" or "wrote x at ... of <name>", the first element written outside the marked ones.
    std::string write_outside(const char* name) const;

private:
    std::int32_t dtype_ = 0;
    std::size_t dtype_size_ = 4, guard_ = 0, span_ = 0;
    std::vector<unsigned char> bytes_;
    std::vector<char> mask_;
};

// ---- transforms for the metamorphic properties: the same logical problem, differently posed ---

// The same problem in another layout (a dense layout needs every Tq(b) equal; the caller checks).
KernelCase with_layout(KernelCase c, LayoutKind kind);
// A paged cache with another block permutation, spare blocks and table slack.
KernelCase with_pages(KernelCase c, int block_size, std::uint32_t block_seed, int spare_blocks, int table_slack);
// A dense cache of `capacity` rows per sequence (>= every Tk(b)).
KernelCase with_capacity(KernelCase c, int capacity);
// GQA as MHA: kv_heads = q_heads, query head h's K/V the original's kv head of h.
void replicate_kv_heads(KernelCase& c, KernelInputs& in);
// Sequence b alone (a batch of one), and its inputs.
KernelCase sequence_alone(const KernelCase& c, int b);
KernelInputs sequence_inputs(const KernelCase& c, const KernelInputs& in, int b);
// Rows [from, to) of sequence b as their own bottom-right call: Tq = to - from, q_pos = q_pos[b]
// + from, keys 0 .. min(Tk(b), q_pos[b] + to) (causal: every key those rows see). Used to split
// a prefill into chunks and decode steps.
KernelCase rows_alone(const KernelCase& c, int b, int from, int to);
KernelInputs rows_inputs(const KernelCase& c, const KernelInputs& in, int b, int from, int to);

// What a property needs of its cases; the generator builds them so, it never filters.
struct CaseOptions {
    bool need_gqa = false;      // kv_heads < q_heads
    bool need_paged = false;    // paged layout
    bool need_varlen = false;   // varlen layout, B >= 2
    bool need_dense = false;    // a dense layout (every Tq(b) equal)
    bool need_lse = false;      // lse asked for
    bool need_causal_future = false;  // causal, some row with a key after it
    bool need_empty = false;    // some row with no visible key
    bool need_prefill = false;  // causal bottom-right prefill of a single sequence (split_agreement)
    bool need_invisible = false;  // some key inside Tk(b) seen by no row (window or causal horizon)
    bool need_softcap = false;
    int min_batch = 1;
    int large_percent = 15;     // the large tier: lengths next to tile sizes, wider heads
    bool backward = false;      // a backward case: lse asked for (the backward reads it), no paged layout
    int max_kv = 0;             // the longest Tk (0: the generator's own limits: 64, 260 large, 520 for a large decode step)
};

// Cases within what the kernel declares; a property that needs a feature the kernel does not
// declare keeps it (the kernel refuses, the run reports the property "not checked").
rc::Gen<KernelCase> gen_kernel_case(const CaseOptions& options, const KernelDeclaration& declaration);

}  // namespace attncheck::properties
