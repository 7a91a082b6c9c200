// model/positions.cpp — the sinusoidal position table (model/positions.hpp).
#include "model/positions.hpp"

#include <cmath>

namespace attncheck {

std::vector<double> sinusoidal_positions(std::size_t n, std::size_t d) {
    std::vector<double> pos(n * d, 0.0);  // [n, d]
    for (std::size_t p = 0; p < n; ++p)
        for (std::size_t even = 0; even < d; even += 2) {  // even = 2i
            const double angle = double(p) / std::pow(10000.0, double(even) / double(d));
            pos[p * d + even] = std::sin(angle);
            if (even + 1 < d) pos[p * d + even + 1] = std::cos(angle);
        }
    return pos;
}

}  // namespace attncheck
