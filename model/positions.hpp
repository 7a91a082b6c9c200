// model/positions.hpp — the sinusoidal position table of MODEL.md §decoder 1 and the rotary
// angles of MODEL.md "Version 2 additions" (positional = rope), shared by the reference decoder
// (in its scalar T) and the optimized decoder (in float32).
#pragma once

#include <cstddef>
#include <vector>

namespace attncheck {

// Rows 0 .. n-1 of the sinusoidal table, row-major [n, d]:
//   pos[p, 2i] = sin(p / 10000^(2i/d)),  pos[p, 2i+1] = cos(p / 10000^(2i/d)).
// Computed in double; a caller rounds each entry to its own scalar once, so that a float
// decoder does not add its own error in the angles to the baseline. For odd d the last column
// is a sine with no cosine partner.                                          -> pos [n, d]
std::vector<double> sinusoidal_positions(std::size_t n, std::size_t d);


// The rotary angles of positions 0 .. n-1 for a head of width dk (even), base theta:
//   a(p, i) = p * theta^(-2i/dk) for i < dk/2,  cos [n, dk/2] and sin [n, dk/2] of a.
// Computed in double like the sinusoidal table; a caller rounds each entry to its scalar once.
// Query and key element i is paired with element i + dk/2 (the GPT-NeoX/Llama pairing):
//   (x_i, x_{i+dk/2}) -> (x_i cos a - x_{i+dk/2} sin a, x_i sin a + x_{i+dk/2} cos a).
struct RopeTable {
    std::size_t rows = 0, half = 0;  // n, dk/2
    std::vector<double> cos, sin;    // [n, dk/2]
};
RopeTable rope_table(std::size_t n, std::size_t dk, double theta);

}  // namespace attncheck
