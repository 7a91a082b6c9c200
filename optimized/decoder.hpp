// optimized/decoder.hpp — the float32 OpenMP decoder with a key/value cache.
//
// Same semantics and model files as the reference (docs/spec/MODEL.md), two ways to run:
// teacher-forced (all positions in one parallel pass) and incremental (a Session holding a
// K/V cache per layer). Attention goes only through an attncheck_kernel_fn, so any kernel that
// follows attncheck/kernel_abi.h can run inside a real decoder.
//
// Dimension legend: V = vocab, d = d_model, h = heads, dk = d/h, f = d_ff, L = layers,
// N = max_len, T = tokens in a call, S = memory rows, B = sequences in a batch.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <type_traits>
#include <utility>
#include <vector>

#include "attncheck/kernel_abi.h"
#include "attncheck/kernel_abi_v2.h"
#include "attncheck/kernels.hpp"
#include "attncheck/model.hpp"

namespace attncheck::optimized {

struct PackedWeights;  // weights laid out for the matrix products, made once at load time

// std::allocator whose construct() without arguments default-initializes: a vector of floats
// sized by it is left unwritten rather than zeroed.
template <class T>
struct DefaultInitAllocator : std::allocator<T> {
    template <class U>
    struct rebind {
        using other = DefaultInitAllocator<U>;
    };
    DefaultInitAllocator() = default;
    template <class U>
    DefaultInitAllocator(const DefaultInitAllocator<U>&) noexcept {}
    template <class U>
    void construct(U* p) noexcept(std::is_nothrow_default_constructible_v<U>) {
        ::new (static_cast<void*>(p)) U;
    }
    template <class U, class... Args>
    void construct(U* p, Args&&... args) {
        ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
    }
};

// Teacher-forced logits [T, V], row-major. Not zeroed before the logits product writes every
// element: zeroing them (16 MB for `base` at T = 512, on one thread) made the prefill 1.017x as
// long on 1 thread and 1.029x on 2 (AMD EPYC Zen 3, in-process alternation, 12 and 16 pairs).
// A std::vector in every other respect; std::vector<float>(l.begin(), l.end()) copies one.
using Logits = std::vector<float, DefaultInitAllocator<float>>;

// An attention kernel and what the decoder may assume about it beyond kernel_abi.h. Nothing is
// assumed that is not declared here: the function pointer itself says nothing (a wrapper around
// the built-in kernel is as good as the built-in when it declares the same). A registry kernel's
// declaration is its entry's (kernels/registry.hpp: attention_kernel_of).
struct AttentionKernel {
    attncheck_kernel_fn fn = nullptr;
    // The kernel never reads a key or value row past the last one visible to the call's last
    // query row, so a causal call costs no more with kv_len = N than with kv_len = q_offset +
    // q_len, and rows past the visible ones may hold anything. A session then passes a layer's
    // whole cache [H, N, dk] in one call for all heads (kv_len N, q_offset pos). Without it,
    // one call per head on the exact incremental problem of KERNEL_ABI.md (kv_len = pos + n).
    // Grouped-query heads and sliding windows always get per-head calls (attention_policy.hpp).
    // A correct kernel sees the same visible keys either way; the built-in kernel gives the same
    // bits either way (tests/optimized/decoder_bitwise_test.cpp).
    bool reads_only_visible_keys = false;
    // A kernel of ABI version 2 (attncheck/kernel_abi_v2.h) instead of fn (which is then null):
    // every attention call, self and cross, in every way of running, is one version 2 call on
    // the decoder's own tensors, with grouped-query heads, the window and per-sequence positions
    // passed as such (attention_policy.hpp), and the sessions keep their K/V in a paged cache of
    // block_size-row blocks under a scrambled block table (block_size 0: one dense [hkv, N, dk]
    // cache per sequence, no block table).
    attncheck_kernel_v2_fn fn_v2 = nullptr;
    int block_size = 0;
};

// The built-in kernel, attncheck_optimized_kernel, which reads only visible keys: the decoder's
// default, and what the registry's "optimized" entry declares.
inline constexpr AttentionKernel kBuiltinAttentionKernel{.fn = attncheck_optimized_kernel,
                                                         .reads_only_visible_keys = true};

class Decoder {
public:
    // Validates the model (InputError) and packs its weights. The kernel is used for every
    // attention call (self and cross, prefill and steps), assuming of it only what it declares.
    // InputError for a null kernel (neither fn nor fn_v2, or both), or a negative block_size.
    // A kernel that declares nothing: Decoder(model, {.fn = f}).
    explicit Decoder(const Model& model, AttentionKernel kernel = kBuiltinAttentionKernel);
    ~Decoder();
    Decoder(Decoder&&) noexcept;
    Decoder& operator=(Decoder&&) noexcept;

    const ModelConfig& config() const;
    attncheck_kernel_fn kernel() const { return kernel_.fn; }
    const AttentionKernel& attention_kernel() const { return kernel_; }
    // For a kernel whose convention is NaN on a row with no visible key (PyTorch's; the ABI's is
    // 0): the decoder sets such rows to 0 after every call, as a framework's wrapper of that
    // kernel does, so the rest of the decoder sees the ABI's convention. Off by default.
    void set_zero_empty_rows(bool on) { zero_empty_rows_ = on; }
    bool zero_empty_rows() const { return zero_empty_rows_; }
    // For a version 2 kernel that takes no kv_lens on a dense cache (it declares padding=no):
    // every call gets kv_len = the sequence's keys, a batch one call per sequence, as a
    // framework's wrapper of such a kernel does. Off by default.
    void set_exact_kv_len(bool on) { exact_kv_len_ = on; }
    bool exact_kv_len() const { return exact_kv_len_; }

    // Teacher-forced logits [T, V]. InputError for bad tokens or memory (check_tokens,
    // check_memory). A kernel that returns nonzero raises KernelError.
    Logits forward(const std::vector<int>& tokens, const std::optional<Memory>& memory = std::nullopt) const;

    // A batch of sequences of different lengths in one call (padded internally, padding-aware
    // through kv_valid_len): result[b] is logits [T_b, V]. memories is empty or one per sequence.
    std::vector<Logits> forward_batch(
        const std::vector<std::vector<int>>& tokens,
        const std::vector<std::optional<Memory>>& memories = {}) const;

    // Greedy generation with the K/V cache: max_new new token ids (argmax, lowest id on ties).
    // InputError when prompt.size() + max_new > N.
    std::vector<int> generate(const std::vector<int>& prompt, int max_new,
                              const std::optional<Memory>& memory = std::nullopt) const;

    const PackedWeights& packed() const { return *packed_; }

private:
    std::unique_ptr<PackedWeights> packed_;
    AttentionKernel kernel_;
    bool zero_empty_rows_ = false;
    bool exact_kv_len_ = false;
};

// A kernel returned nonzero ("unsupported") inside a decoder call.
struct KernelError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// Incremental evaluation of one sequence with a K/V cache per layer (self-attention K/V appended
// per token; cross-attention K/V computed once from the memory). All buffers are sized for N
// positions (with attn_window w, for the rolling cache of w+1) at construction: step() allocates
// nothing.
class Session {
public:
    Session(const Decoder& decoder, const std::optional<Memory>& memory = std::nullopt);
    ~Session();
    Session(Session&&) noexcept;

    // Positions fed so far (the next token goes to position pos()).
    int pos() const;
    // Feeds tokens at positions pos() .. pos()+n-1 in chunks of at most chunk tokens (0: one
    // chunk) and returns their logits [n, V]. InputError when it would pass N.
    std::vector<float> prefill(const std::vector<int>& tokens, int chunk = 0);
    // Feeds one token; returns its logits [V], valid until the next call. Allocates nothing.
    std::span<const float> step(int token);
    // Forget everything (pos() = 0); the memory stays.
    void reset();
    // Back to an earlier position (0 <= new_pos <= pos()): the cache keeps positions < new_pos.
    // With attn_window w the cache is rolling (the last w+1 keys per layer): InputError when the
    // keys the row at new_pos sees (from new_pos - w) have already left it.
    void truncate(int new_pos);

private:
    struct State;
    std::unique_ptr<State> s_;
};

// Incremental evaluation of B sequences at once: each step feeds one token to each active
// sequence (sequences may be at different positions: the attention call pads with kv_valid_len).
class BatchSession {
public:
    BatchSession(const Decoder& decoder, int batch,
                 const std::vector<std::optional<Memory>>& memories = {});
    ~BatchSession();
    int batch() const;
    int pos(int b) const;
    // Prefill sequence b with its own prompt; returns logits [n, V].
    std::vector<float> prefill(int b, const std::vector<int>& tokens);
    // One token per sequence (tokens.size() == batch); returns logits [B, V], valid until the
    // next call.
    std::span<const float> step(const std::vector<int>& tokens);
    void reset();

private:
    struct State;
    std::unique_ptr<State> s_;
};

}  // namespace attncheck::optimized
