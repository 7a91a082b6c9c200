// model/limits.hpp — the size limits every model must respect, in one place.
//
// A model's sizes come from untrusted places (a file's metadata, a command-line flag, a fuzzer).
// These caps make sure none of them can drive a giant allocation or an int overflow in the
// decoders, which index with int: every dimension fits comfortably in an int, and every
// product the decoders form (V*d, N*d, f*d, total parameters) stays below kMaxParameters.
// They are far above anything this project runs (the `base` preset has ~25M parameters).
#pragma once

#include <cstddef>
#include <cstdint>

namespace attncheck::limits {

// Any single dimension: V, d, f, N (2^20 covers every vocabulary in use today).
inline constexpr std::int64_t kMaxDimension = std::int64_t{1} << 20;
// L: no decoder we test is anywhere near this deep.
inline constexpr std::int64_t kMaxLayers = 1024;
// Total float32 parameters (1 GiB of weights), and also the cap on any one table the decoders
// build from the config alone (the N x d positional table).
inline constexpr std::uint64_t kMaxParameters = std::uint64_t{1} << 28;

// safetensors JSON header: the Hugging Face reference implementation refuses headers over
// 100 MB for the same reason; ours are a few kB.
inline constexpr std::uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;
// Nesting depth of that JSON: ours is 3; a deep [[[[... is only ever an attack on the parser.
inline constexpr int kMaxJsonDepth = 16;
// .npy header (NumPy itself refuses headers over 10000 bytes by default).
inline constexpr std::uint64_t kMaxNpyHeaderBytes = 65536;
// Rank of a .npy array or a safetensors tensor.
inline constexpr std::size_t kMaxRank = 8;

}  // namespace attncheck::limits
