// model/positions.hpp — the sinusoidal position table of MODEL.md §decoder 1, shared by the
// reference decoder (in its scalar T) and the optimized decoder (in float32).
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

}  // namespace attncheck
