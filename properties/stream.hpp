// properties/stream.hpp — the seeded random stream every generated input is filled from.
//
// RapidCheck generates the *structure* of a case (shapes, offsets, padding, scale, style) and
// one 32-bit data seed; the tensors themselves are filled from this stream, seeded by that data
// seed. Why not draw every float through RapidCheck: a 64x16 tensor would be 1024 shrinkable
// values, printing and shrinking would drown in them, and the case would no longer be a short
// line a person can read. SplitMix64 and a hand-written Box-Muller keep the values identical on
// every platform and standard library (std::normal_distribution is not specified bit-exactly).
#pragma once

#include <cmath>
#include <cstdint>
#include <numbers>

namespace attncheck::properties {

class Stream {
public:
    explicit Stream(std::uint64_t seed) : state_(seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull) {}

    std::uint64_t next() {  // SplitMix64 (Steele, Lea, Flood 2014)
        std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return z ^ (z >> 31);
    }
    // Uniform in [0, 1) with 53 random bits.
    double uniform() { return double(next() >> 11) * 0x1.0p-53; }
    // Uniform integer in [lo, hi].
    int integer(int lo, int hi) { return lo + int(next() % std::uint64_t(hi - lo + 1)); }
    // Standard normal (Box-Muller; one value per call, the partner is dropped for simplicity).
    double normal() {
        const double u1 = 1.0 - uniform();  // (0, 1]: log never sees 0
        const double u2 = uniform();
        return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
    }

private:
    std::uint64_t state_;
};

}  // namespace attncheck::properties
