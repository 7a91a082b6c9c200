// properties/kernel_properties.cpp — the kernel-level properties: their checks, and the table
// kernel_properties() (at the bottom) that registers them.
//
// Quick start for adding a kernel property
//   1. Write the check, in the section "the properties" below:
//          Verdict my_property(const KernelUnderTest& kernel, const KernelCase& c)
//      c is one generated case (shapes, q_offset, mask, padding, scale, input style and data
//      seed: properties/kernel_case.hpp). first_call(kernel, c) gives its inputs q, k, v, its
//      attncheck_problem and the kernel's answer; call the kernel again only through
//      call_kernel() (below), which guards out and hands the kernel copies of the inputs.
//      agree() compares an output with the float64 oracle within the bounds of
//      attncheck/tolerance.hpp.
//   2. Register it: add {"my_property", "what it checks, in one line", {options}, my_property}
//      to the table in kernel_properties(). The options (CaseOptions, kernel_case.hpp) make the
//      generator build the cases the check needs, e.g. {.need_padding = true}; it never filters.
//      The name must differ from every decoder property's (one --property flag selects either).
//      Add its row to the table of docs/properties.md.
//   3. Return a Verdict (properties/verdict.hpp) for the case: Verdict::pass(), or
//      Verdict::fail(message) with a message that names the element and both values
//      ("out[0,1,2,3] [b,h,i,c]: candidate ..., float64 oracle ..."), or unsupported(rc) when
//      the kernel refused the case (a refusal is not a failure), or Verdict::pass_with_note()
//      for a pass worth counting. RapidCheck shrinks a failing case; the report names the case
//      by its fields (describe() in kernel_case.cpp: "B=2 H=3 Tq=4 Tk=4 Dk=5 ...").
//   4. Run it: `attncheck fuzz --property my_property` (every built-in kernel; --kernel NAME for
//      one, --seed S --cases N to replay), and `attncheck fuzz --mutants` to see it kill mutants.
//
// Every kernel call goes through call_kernel(): fresh copies of the inputs (a kernel that
// writes to them cannot spoil the next call), and out placed between two guard regions and
// pre-filled with a NaN pattern, so that an out-of-bounds write lands in a guard (not in our
// heap) and an element the kernel never wrote is recognisable.
#include "properties/kernel_properties.hpp"

#include <omp.h>
#include <sys/mman.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <optional>
#include <sstream>

#include "attncheck/tolerance.hpp"
#include "properties/stream.hpp"
#include "reference/attention.hpp"
#include "reference/error_bound.hpp"

namespace attncheck::properties {
namespace {

// Bit patterns no arithmetic produces (a computed NaN is 0x7FC00000 or 0xFFC00000).
constexpr std::uint32_t kUnwritten = 0x7FC0BEEFu;  // out before the call: "never written"
constexpr std::uint32_t kCanary = 0x7FE5A5A5u;     // the guard regions around out
constexpr std::uint32_t kOtherFill = 0x00000000u;  // a second fill, for the determinism check

float from_bits(std::uint32_t u) { return std::bit_cast<float>(u); }
std::uint32_t bits(float f) { return std::bit_cast<std::uint32_t>(f); }

std::string fmt(double x) {
    std::ostringstream s;
    s.precision(9);
    s << x;
    return s.str();
}

struct Call {
    int rc = 0;
    std::vector<float> out;       // [B, H, Tq, Dv] as the kernel left it (empty rows: see below)
    std::string guard_violation;  // "" when the guards are intact
    std::string input_change;     // "" when q, k, v are bitwise unchanged
    // A kernel that declares empty_rows=nan: its rows with no visible key are checked to be all
    // NaN (convention_violation says where not) and then set to 0 in out, so that every other
    // property reads them by the ABI's convention and still checks the rest of out.
    std::string convention_violation;
};

// The rows of sequence b with no visible key: all of them when kv_valid_len[b] = 0 (key 0 is
// visible to every row otherwise, causal or not, since q_offset >= 0).
bool row_is_empty(const attncheck_problem& p, int b) { return p.kv_valid_len && p.kv_valid_len[b] == 0; }

void read_nan_convention(const attncheck_problem& p, Call& r) {
    const std::size_t per_b = std::size_t(p.heads) * p.q_len * p.value_dim;
    for (int b = 0; b < p.batch; ++b) {
        if (!row_is_empty(p, b)) continue;
        for (std::size_t at = std::size_t(b) * per_b; at < std::size_t(b + 1) * per_b; ++at) {
            if (bits(r.out[at]) == kUnwritten && r.convention_violation.empty())
                r.convention_violation = "out" + index4(at, p.batch, p.heads, p.q_len, p.value_dim) +
                                         " [b,h,i,c], in a row with no visible key, was never written (it still holds "
                                         "the NaN the suite filled out with; empty_rows=nan asks the kernel to write NaN)";
            if (!std::isnan(r.out[at]) && r.convention_violation.empty())
                r.convention_violation = "out" + index4(at, p.batch, p.heads, p.q_len, p.value_dim) + " [b,h,i,c] is " +
                                         fmt(r.out[at]) + " in a row with no visible key (kv_valid_len[" +
                                         std::to_string(b) + "] = 0), but the kernel declares empty_rows=nan";
            r.out[at] = 0.0f;
        }
    }
}

std::string first_change(const char* name, const std::vector<float>& before,
                         const std::vector<float>& after, int d0, int d1, int d2, int d3) {
    for (std::size_t i = 0; i < before.size(); ++i)
        if (bits(before[i]) != bits(after[i]))
            return std::string(name) + index4(i, d0, d1, d2, d3) + " changed from " + fmt(before[i]) +
                   " to " + fmt(after[i]);
    return {};
}

// The first float of the guard regions [out - guard, out) and [out + out_n, out + out_n + guard)
// that is not the canary any more, described; "" when both are intact.
std::string guard_violation(const float* out, std::size_t out_n, std::size_t guard) {
    for (std::size_t i = 0; i < guard; ++i)
        if (bits(out[-std::ptrdiff_t(i + 1)]) != kCanary)
            return "wrote " + fmt(out[-std::ptrdiff_t(i + 1)]) + " at out[-" + std::to_string(i + 1) + "] (" +
                   std::to_string(i + 1) + " floats before out)";
    for (std::size_t i = 0; i < guard; ++i)
        if (bits(out[out_n + i]) != kCanary)
            return "wrote " + fmt(out[out_n + i]) + " at out[" + std::to_string(out_n + i) + "] (" +
                   std::to_string(i + 1) + " floats past the end of out, which has " + std::to_string(out_n) + ")";
    return {};
}

Call call_kernel(const KernelUnderTest& kernel, const attncheck_problem& p, const KernelInputs& in,
                 std::size_t out_n, std::uint32_t fill = kUnwritten) {
    // Guards as long as out itself (at least 64 floats): an off-by-one row or a whole extra
    // (b, h) block both land inside them.
    const std::size_t guard = std::max<std::size_t>(64, out_n);
    std::vector<float> buffer(guard + out_n + guard, from_bits(kCanary));
    std::fill_n(buffer.begin() + std::ptrdiff_t(guard), out_n, from_bits(fill));
    KernelInputs copy = in;
    Call r;
    r.rc = kernel.fn(&p, copy.q.data(), copy.k.data(), copy.v.data(), buffer.data() + guard);
    r.out.assign(buffer.begin() + std::ptrdiff_t(guard), buffer.begin() + std::ptrdiff_t(guard + out_n));
    r.guard_violation = guard_violation(buffer.data() + guard, out_n, guard);
    const int B = p.batch, H = p.heads;
    r.input_change = first_change("q", in.q, copy.q, B, H, p.q_len, p.head_dim);
    if (r.input_change.empty()) r.input_change = first_change("k", in.k, copy.k, B, H, p.kv_len, p.head_dim);
    if (r.input_change.empty()) r.input_change = first_change("v", in.v, copy.v, B, H, p.kv_len, p.value_dim);
    if (r.rc == 0 && kernel.declaration.empty_rows_nan) read_nan_convention(p, r);
    return r;
}

// Zeroed anonymous memory of `floats` floats. The OS maps its pages on first touch (a read maps
// the shared zero page): a buffer of any size costs nothing until it is written. data() is null
// when the mapping failed.
class LazyZeros {
public:
    explicit LazyZeros(std::size_t floats) : bytes_(std::max<std::size_t>(floats, 1) * sizeof(float)) {
        void* m = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (m != MAP_FAILED) data_ = static_cast<float*>(m);
    }
    ~LazyZeros() {
        if (data_) munmap(data_, bytes_);
    }
    LazyZeros(const LazyZeros&) = delete;
    LazyZeros& operator=(const LazyZeros&) = delete;
    float* data() const { return data_; }

private:
    std::size_t bytes_;
    float* data_ = nullptr;
};

// The longest guard region of call_kernel_lazily (floats, each side).
constexpr std::size_t kLazyGuard = std::size_t(1) << 20;

// The kernel's call on a problem that may be huge (a size limit broken: kv_len = max_kv_len + 1
// for max_kv_len = 1000000), made without filling it: q, k, v and out are LazyZeros the suite
// never writes, out between guard regions of canaries as in call_kernel (as long as out, at
// least 64 and at most kLazyGuard floats). A kernel that refuses at once costs nothing; one that
// accepts computes on zeros in valid memory. Only rc and guard_violation are set (out is not
// read); nullopt when the memory could not be mapped.
std::optional<Call> call_kernel_lazily(const KernelUnderTest& kernel, const attncheck_problem& p) {
    const std::size_t bh = std::size_t(p.batch) * std::size_t(p.heads);
    const std::size_t out_n = bh * std::size_t(p.q_len) * std::size_t(p.value_dim);
    const std::size_t guard = std::clamp<std::size_t>(out_n, 64, kLazyGuard);
    const LazyZeros q(bh * std::size_t(p.q_len) * std::size_t(p.head_dim));
    const LazyZeros k(bh * std::size_t(p.kv_len) * std::size_t(p.head_dim));
    const LazyZeros v(bh * std::size_t(p.kv_len) * std::size_t(p.value_dim));
    const LazyZeros buffer(guard + out_n + guard);
    if (!q.data() || !k.data() || !v.data() || !buffer.data()) return std::nullopt;
    float* const out = buffer.data() + guard;
    std::fill_n(buffer.data(), guard, from_bits(kCanary));
    std::fill_n(out + out_n, guard, from_bits(kCanary));
    Call r;
    r.rc = kernel.fn(&p, q.data(), k.data(), v.data(), out);
    r.guard_violation = guard_violation(out, out_n, guard);
    return r;
}

Verdict unsupported(int rc) {
    return Verdict::unsupported("kernel returned " + std::to_string(rc) + " (unsupported)");
}

// A case's inputs and problem, and the kernel's call on them: how most properties begin.
struct FirstCall {
    KernelInputs in;
    attncheck_problem p;
    Call call;
};

FirstCall first_call(const KernelUnderTest& kernel, const KernelCase& c) {
    FirstCall f{fill_inputs(c), c.problem(), {}};
    f.call = call_kernel(kernel, f.p, f.in, c.out_size());
    return f;
}

// Candidate against the float64 reference, each element within its bound for any correct
// float32 evaluation (NUMERICS.md version 2, reference/error_bound.hpp).
Verdict agree(const char* what, const std::vector<float>& out, const attncheck_problem& p,
              const reference::BoundedOutput& oracle) {
    const Agreement a = check_against_bound(out, oracle.value, oracle.bound);
    if (a.ok) return Verdict::pass();
    return Verdict::fail(std::string(what) + index4(a.worst_index, p.batch, p.heads, p.q_len, p.value_dim) +
                         " [b,h,i,c]: " + a.describe());
}

Verdict agree(const char* what, const std::vector<float>& out, const attncheck_problem& p,
              const KernelInputs& in) {
    return agree(what, out, p, reference::attention_bounded(p, in.q.data(), in.k.data(), in.v.data()));
}

// The first element where two outputs differ bitwise among rows selected by keep(b, h, i).
template <class Keep>
std::string first_bitwise_difference(const std::vector<float>& a, const std::vector<float>& b,
                                     const KernelCase& c, int Dv, Keep keep) {
    for (int bb = 0; bb < c.batch; ++bb)
        for (int h = 0; h < c.heads; ++h)
            for (int i = 0; i < c.q_len; ++i) {
                if (!keep(bb, h, i)) continue;
                for (int col = 0; col < Dv; ++col) {
                    const std::size_t at = ((std::size_t(bb) * c.heads + h) * c.q_len + i) * Dv + col;
                    if (bits(a[at]) != bits(b[at]))
                        return "out[" + std::to_string(bb) + "," + std::to_string(h) + "," + std::to_string(i) +
                               "," + std::to_string(col) + "] was " + fmt(a[at]) + ", now " + fmt(b[at]);
                }
            }
    return {};
}

// Rows selected by keep(b, h, i) of out against the oracle (the other rows are not compared):
// how a kernel that declares deterministic=no is held to a comparison that is bitwise for the
// others (its result may move between calls, but only within the bound).
template <class Keep>
Verdict agree_rows(const char* what, std::vector<float> out, const attncheck_problem& p,
                   const reference::BoundedOutput& oracle, Keep keep) {
    const std::size_t Dv = std::size_t(p.value_dim);
    for (int b = 0; b < p.batch; ++b)
        for (int h = 0; h < p.heads; ++h)
            for (int i = 0; i < p.q_len; ++i) {
                if (keep(b, h, i)) continue;
                const std::size_t row = ((std::size_t(b) * p.heads + h) * p.q_len + i) * Dv;
                for (std::size_t col = 0; col < Dv; ++col) out[row + col] = float(oracle.value[row + col]);
            }
    return agree(what, out, p, oracle);
}

// Replaces k and v rows j of sequence b (every head) where replace(b, j) with fresh values.
// The magnitude mixes ordinary and large values: a kernel that lets such keys leak shows it
// plainly, and one that computes their scores before masking must still not overflow to NaN.
template <class Replace>
KernelInputs perturb_keys(const KernelCase& c, const KernelInputs& in, std::uint64_t salt, Replace replace) {
    KernelInputs r = in;
    Stream rng(c.data_seed ^ (salt * 0xD1B54A32D192ED03ull));
    const std::size_t Tk = std::size_t(c.kv_len), Dk = std::size_t(c.head_dim), Dv = std::size_t(c.value_dim);
    for (int b = 0; b < c.batch; ++b)
        for (int h = 0; h < c.heads; ++h)
            for (std::size_t j = 0; j < Tk; ++j) {
                if (!replace(b, int(j))) continue;
                const double mag = rng.integer(0, 3) == 0 ? 50.0 : 2.0;
                const std::size_t bh = std::size_t(b) * c.heads + h;
                for (std::size_t x = 0; x < Dk; ++x) r.k[(bh * Tk + j) * Dk + x] = float(mag * rng.normal());
                for (std::size_t x = 0; x < Dv; ++x) r.v[(bh * Tk + j) * Dv + x] = float(mag * rng.normal());
            }
    return r;
}

int visible_count(const KernelCase& c, int b, int i) {
    int n = 0;
    for (int j = 0; j < c.kv_len; ++j) n += c.visible(b, i, j) ? 1 : 0;
    return n;
}

// ---- the properties ---------------------------------------------------------------------

Verdict agreement(const KernelUnderTest& kernel, const KernelCase& c) {
    const auto [in, p, r] = first_call(kernel, c);
    if (r.rc != 0) return unsupported(r.rc);
    return agree("out", r.out, p, in);
}

Verdict causality(const KernelUnderTest& kernel, const KernelCase& c) {
    const auto [in, p, base] = first_call(kernel, c);
    if (base.rc != 0) return unsupported(base.rc);
    // Pivot rows r: keys j > q_offset + r are replaced; rows 0..r must not move a bit. Row 0,
    // the last row that has a future, and a few between (each pivot is one kernel call).
    const int last = std::min(c.q_len - 1, c.kv_len - 2 - c.q_offset);  // q_offset + r + 1 < Tk
    std::vector<int> pivots;
    const int count = std::min(last + 1, 6);
    for (int t = 0; t < count; ++t) pivots.push_back(count == 1 ? 0 : int(std::int64_t(last) * t / (count - 1)));
    pivots.erase(std::unique(pivots.begin(), pivots.end()), pivots.end());
    std::optional<reference::BoundedOutput> oracle;  // for a kernel that declares deterministic=no
    for (const int r : pivots) {
        const int horizon = c.q_offset + r;  // the last key row r may see
        const KernelInputs moved =
            perturb_keys(c, in, std::uint64_t(r) + 1, [&](int, int j) { return j > horizon; });
        const Call after = call_kernel(kernel, p, moved, c.out_size());
        if (after.rc != 0) return unsupported(after.rc);
        if (!kernel.declaration.deterministic) {
            // Rows <= r see none of the replaced keys: their oracle is the original one.
            if (!oracle) oracle = reference::attention_bounded(p, in.q.data(), in.k.data(), in.v.data());
            const Verdict v = agree_rows("(deterministic=no: compared within the bound, not bitwise) out", after.out, p,
                                         *oracle, [&](int, int, int i) { return i <= r; });
            if (v.failed())
                return Verdict::fail("after replacing the keys/values j > q_offset + " + std::to_string(r) + " = " +
                                     std::to_string(horizon) + " (the future of rows <= " + std::to_string(r) + "), " +
                                     v.message);
            continue;
        }
        const std::string diff = first_bitwise_difference(base.out, after.out, c, c.value_dim,
                                                          [&](int, int, int i) { return i <= r; });
        if (!diff.empty())
            return Verdict::fail("row i <= " + std::to_string(r) + " changed when the keys/values j > q_offset + " +
                                 std::to_string(r) + " = " + std::to_string(horizon) +
                                 " (its future) were replaced: " + diff);
    }
    return Verdict::pass();
}

Verdict row_sums(const KernelUnderTest& kernel, const KernelCase& c) {
    KernelInputs in = fill_inputs(c);
    std::fill(in.v.begin(), in.v.end(), 1.0f);  // out[i, :] = sum_j p_ij: the row sums
    const attncheck_problem p = c.problem();
    const Call r = call_kernel(kernel, p, in, c.out_size());
    if (r.rc != 0) return unsupported(r.rc);
    const reference::BoundedOutput sums = reference::attention_bounded(p, in.q.data(), in.k.data(), in.v.data());
    const Agreement a = check_against_bound(r.out, sums.value, sums.bound);
    if (a.ok) return Verdict::pass();
    const std::size_t i = a.worst_index / std::size_t(c.value_dim) % std::size_t(c.q_len);
    const int b = int(a.worst_index / (std::size_t(c.value_dim) * c.q_len * c.heads));
    return Verdict::fail("with all-ones values out" + index4(a.worst_index, c.batch, c.heads, c.q_len, c.value_dim) +
                         " [b,h,i,c] is the row's probability sum (row sees " +
                         std::to_string(visible_count(c, b, int(i))) + " keys): " + a.describe());
}

// The value width of the calls that read the probabilities through identity values: Tk itself
// when the declaration allows it (one call, v = the identity [Tk, Tk]), else the widest declared
// width below Tk (value_dim=same: the case's head_dim), else the case's own (declared) width.
int identity_width(const KernelDeclaration& d, const KernelCase& c) {
    for (int w = c.kv_len; w >= 1; --w)
        if (d.allows_value_dim(w, c.head_dim)) return w;
    return c.value_dim;  // within the declaration (fit_shape), and wider than Tk
}

Verdict probabilities(const KernelUnderTest& kernel, const KernelCase& c0) {
    // v = identity [Tk, Tk]: out[i, j] = p_ij. When the kernel does not declare value_dim = Tk,
    // the matrix is read in ceil(Tk / Dv) calls of a declared width Dv: call m has
    // v[j, col] = 1 iff j = m Dv + col, so its out[i, col] is p_{i, m Dv + col}.
    const int Tk = c0.kv_len;
    KernelCase one = c0;  // the case of each call
    one.value_dim = identity_width(kernel.declaration, c0);
    const int Dv = one.value_dim, calls = (Tk + Dv - 1) / Dv;
    KernelCase c = c0;  // the assembled matrix [B, H, Tq, Tk]
    c.value_dim = Tk;
    KernelInputs in = fill_inputs(c0);
    std::vector<float> out(c.out_size());
    reference::BoundedOutput oracle{std::vector<double>(c.out_size()), std::vector<double>(c.out_size())};
    const std::size_t rows = std::size_t(c.batch) * c.heads * c.q_len;
    for (int m = 0; m < calls; ++m) {
        in.v.assign(one.v_size(), 0.0f);
        for (std::size_t bh = 0; bh < std::size_t(c.batch) * c.heads; ++bh)
            for (int col = 0; col < Dv && m * Dv + col < Tk; ++col)
                in.v[(bh * std::size_t(Tk) + std::size_t(m * Dv + col)) * std::size_t(Dv) + std::size_t(col)] = 1.0f;
        const attncheck_problem pm = one.problem();
        const Call r = call_kernel(kernel, pm, in, one.out_size());
        if (r.rc != 0) return unsupported(r.rc);
        const reference::BoundedOutput part = reference::attention_bounded(pm, in.q.data(), in.k.data(), in.v.data());
        for (std::size_t row = 0; row < rows; ++row)
            for (int col = 0; col < Dv && m * Dv + col < Tk; ++col) {
                const std::size_t from = row * std::size_t(Dv) + std::size_t(col),
                                  to = row * std::size_t(Tk) + std::size_t(m * Dv + col);
                out[to] = r.out[from];
                oracle.value[to] = part.value[from];
                oracle.bound[to] = part.bound[from];
            }
    }
    const attncheck_problem p = c.problem();
    for (int b = 0; b < c.batch; ++b)
        for (int h = 0; h < c.heads; ++h)
            for (int i = 0; i < c.q_len; ++i) {
                const std::size_t row = ((std::size_t(b) * c.heads + h) * c.q_len + i) * c.kv_len;
                const std::string at = "p[" + std::to_string(b) + "," + std::to_string(h) + "," + std::to_string(i) + ",";
                double sum = 0;
                for (int j = 0; j < c.kv_len; ++j) {
                    const float x = out[row + j];
                    if (!c.visible(b, i, j) && x != 0.0f)
                        return Verdict::fail(at + std::to_string(j) + "] (read through identity values) is " + fmt(x) +
                                             " but key " + std::to_string(j) + " is masked for this row: must be exactly 0");
                    if (!(x >= 0.0f && x <= 1.0f))
                        return Verdict::fail(at + std::to_string(j) + "] (read through identity values) is " + fmt(x) +
                                             ", outside [0, 1]");
                    sum += x;
                }
                // Each p_ij is within its bound, so the sum is within the bounds' sum.
                const int n = visible_count(c, b, i);
                double bound = 0;
                for (int j = 0; j < c.kv_len; ++j) bound += oracle.bound[row + std::size_t(j)];
                if (n > 0 && !(std::abs(sum - 1.0) <= bound))
                    return Verdict::fail(at + ":] sums to " + fmt(sum) + ", expected 1 within " + fmt(bound) +
                                         ", the sum of its elements' bounds (" + std::to_string(n) + " visible keys)");
            }
    return agree("p (read through identity values) ", out, p, oracle);
}

Verdict empty_rows(const KernelUnderTest& kernel, const KernelCase& c) {
    const Call r = first_call(kernel, c).call;
    if (r.rc != 0) return unsupported(r.rc);
    if (kernel.declaration.empty_rows_nan)
        return r.convention_violation.empty() ? Verdict::pass() : Verdict::fail(r.convention_violation);
    for (int b = 0; b < c.batch; ++b) {
        if (c.valid_len(b) != 0) continue;  // kv_valid_len[b] = 0: no row of b sees any key
        const std::size_t n = std::size_t(c.heads) * c.q_len * c.value_dim, first = std::size_t(b) * n;
        for (std::size_t at = first; at < first + n; ++at)
            if (r.out[at] != 0.0f)
                return Verdict::fail("out" + index4(at, c.batch, c.heads, c.q_len, c.value_dim) +
                                     " [b,h,i,c] is " + fmt(r.out[at]) + " for a row with no visible key (kv_valid_len[" +
                                     std::to_string(b) + "] = 0): must be exactly 0, never NaN (the ABI's convention; a kernel that "
                                     "returns NaN there by design declares empty_rows=nan)");
    }
    return Verdict::pass();
}

Verdict padding(const KernelUnderTest& kernel, const KernelCase& c) {
    const auto [in, p, base] = first_call(kernel, c);
    if (base.rc != 0) return unsupported(base.rc);
    const KernelInputs moved = perturb_keys(c, in, 0xA11, [&](int b, int j) { return j >= c.valid_len(b); });
    const Call after = call_kernel(kernel, p, moved, c.out_size());
    if (after.rc != 0) return unsupported(after.rc);
    if (!kernel.declaration.deterministic) {
        const reference::BoundedOutput oracle = reference::attention_bounded(p, in.q.data(), in.k.data(), in.v.data());
        if (Verdict v = agree("out", base.out, p, oracle); v.failed()) return v;
        return agree("(deterministic=no: compared within the bound, not bitwise) after replacing the padded "
                     "keys/values (j >= kv_valid_len[b]), out",
                     after.out, p, oracle);
    }
    const std::string diff =
        first_bitwise_difference(base.out, after.out, c, c.value_dim, [](int, int, int) { return true; });
    if (!diff.empty()) return Verdict::fail("replacing the padded keys/values (j >= kv_valid_len[b]) changed " + diff);
    return agree("out", base.out, p, in);
}

Verdict batch(const KernelUnderTest& kernel, const KernelCase& c) {
    const auto [in, p, whole] = first_call(kernel, c);
    if (whole.rc != 0) return unsupported(whole.rc);
    bool bitwise = true;
    for (int b = 0; b < c.batch; ++b) {
        KernelCase one = c;
        one.batch = 1;
        if (!c.kv_valid_len.empty()) one.kv_valid_len = {c.kv_valid_len[std::size_t(b)]};
        auto slice = [b](const std::vector<float>& x, std::size_t per) {
            return std::vector<float>(x.begin() + std::ptrdiff_t(b * per), x.begin() + std::ptrdiff_t((b + 1) * per));
        };
        const KernelInputs alone_in{slice(in.q, one.q_size()), slice(in.k, one.k_size()), slice(in.v, one.v_size())};
        const attncheck_problem one_p = one.problem();
        const Call alone = call_kernel(kernel, one_p, alone_in, one.out_size());
        if (alone.rc != 0) return unsupported(alone.rc);
        const std::vector<float> inside = slice(whole.out, one.out_size());
        const std::string diff =
            first_bitwise_difference(alone.out, inside, one, one.value_dim, [](int, int, int) { return true; });
        if (diff.empty()) continue;
        bitwise = false;
        if (kernel.bitwise_batch)
            return Verdict::fail("sequence " + std::to_string(b) + " alone vs inside the batch (as [0,...]): " + diff);
        for (const auto* v : {&alone.out, &inside}) {
            Verdict a = agree(v == &inside ? "inside the batch, out" : "alone, out", *v, one_p, alone_in);
            if (a.failed()) return Verdict::fail("sequence " + std::to_string(b) + " " + a.message);
        }
    }
    return bitwise ? Verdict::pass() : Verdict::pass_with_note("a sequence alone and inside the batch differ (within tolerance)");
}

Verdict determinism(const KernelUnderTest& kernel, const KernelCase& c) {
    const auto [in, p, first] = first_call(kernel, c);
    if (first.rc != 0) return unsupported(first.rc);
    // Again with out pre-filled differently (a kernel must not read its output), and once on a
    // single thread (NUMERICS.md: no dependence on the thread count for a deterministic kernel).
    const Call second = call_kernel(kernel, p, in, c.out_size(), kOtherFill);
    const int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    const Call third = call_kernel(kernel, p, in, c.out_size());
    omp_set_num_threads(threads);
    const auto all = [](int, int, int) { return true; };
    if (second.rc != 0 || third.rc != 0)
        return Verdict::fail("the same call returned " + std::to_string(first.rc) + ", then " +
                             std::to_string(second.rc) + ", then " + std::to_string(third.rc));
    if (!kernel.declaration.deterministic) {
        // Declared deterministic=no: each call must still be right, only not bitwise repeatable.
        const reference::BoundedOutput oracle = reference::attention_bounded(p, in.q.data(), in.k.data(), in.v.data());
        for (const Call* call : {&first, &second, &third})
            if (Verdict v = agree(call == &first ? "first call, out" : call == &second ? "second call, out"
                                                                                     : "single-thread call, out",
                                  call->out, p, oracle);
                v.failed())
                return v;
        return Verdict::pass();
    }
    const char* declared = " (the kernel declares deterministic=yes, the default; one that is not by design "
                           "declares deterministic=no)";
    std::string diff = first_bitwise_difference(first.out, second.out, c, c.value_dim, all);
    if (!diff.empty())
        return Verdict::fail("the same call twice (out pre-filled with NaN, then with 0): " + diff + declared);
    diff = first_bitwise_difference(first.out, third.out, c, c.value_dim, all);
    if (!diff.empty())
        return Verdict::fail("the same call on " + std::to_string(threads) + " threads, then on 1: " + diff + declared);
    return Verdict::pass();
}

Verdict no_oob_write(const KernelUnderTest& kernel, const KernelCase& c) {
    const Call r = first_call(kernel, c).call;
    if (!r.guard_violation.empty()) return Verdict::fail("kernel " + r.guard_violation);
    if (r.rc != 0) return unsupported(r.rc);
    for (std::size_t at = 0; at < r.out.size(); ++at)
        if (bits(r.out[at]) == kUnwritten)
            return Verdict::fail("out" + index4(at, c.batch, c.heads, c.q_len, c.value_dim) +
                                 " [b,h,i,c] was never written (it still holds the NaN the suite filled out with)");
    return Verdict::pass();
}

Verdict inputs_unchanged(const KernelUnderTest& kernel, const KernelCase& c) {
    const Call r = first_call(kernel, c).call;
    if (!r.input_change.empty()) return Verdict::fail("kernel modified its input: " + r.input_change);
    if (r.rc != 0) return unsupported(r.rc);
    return Verdict::pass();
}

// A supported case with one declared restriction broken (which one: by the case's data seed, so
// that every restriction is exercised); the kernel must refuse it. Vacuous for a kernel that
// declares no restriction (every problem is then supported). A size limit (max_kv_len,
// max_q_len, max_batch, max_heads) is broken on one sequence and one head with every other
// length 1 (the kv_len break a decode step) and sent through call_kernel_lazily: probing
// max_kv_len=1000000 costs no more than max_kv_len=64, however large the problem.
Verdict refuses_undeclared(const KernelUnderTest& kernel, const KernelCase& c) {
    const KernelDeclaration& d = kernel.declaration;
    struct Break {
        bool lazily;  // a size limit: call_kernel_lazily
        std::function<void(KernelCase&)> apply;
    };
    std::vector<Break> breaks;
    auto first_outside = [](int from, auto allowed) {
        for (int w = from + 1; w < from + 4096; ++w)
            if (!allowed(w)) return w;
        for (int w = from - 1; w >= 1; --w)
            if (!allowed(w)) return w;
        return 0;
    };
    if (const int w = first_outside(c.head_dim, [&](int x) { return d.allows_head_dim(x); }); w > 0)
        breaks.push_back({false, [w](KernelCase& u) { u.head_dim = w; }});
    if (const int w = first_outside(c.value_dim, [&](int x) { return d.allows_value_dim(x, c.head_dim); }); w > 0)
        breaks.push_back({false, [w](KernelCase& u) { u.value_dim = w; }});
    // The declared widths, the mask and the scale stay; no padding (kv_valid_len = null).
    const auto minimal = [](KernelCase& u) {
        u.batch = u.heads = u.q_len = u.kv_len = 1;
        u.q_offset = 0;
        u.mode = OffsetMode::general;
        u.kv_valid_len.clear();
    };
    if (d.max_kv_len)
        breaks.push_back({true, [&d, minimal](KernelCase& u) {
                              minimal(u);
                              u.kv_len = d.max_kv_len + 1;
                              u.mode = OffsetMode::decode;
                              u.q_offset = u.kv_len - 1;
                          }});
    if (d.max_q_len)
        breaks.push_back({true, [&d, minimal](KernelCase& u) {
                              minimal(u);
                              u.q_len = d.max_q_len + 1;
                          }});
    if (d.max_batch)
        breaks.push_back({true, [&d, minimal](KernelCase& u) {
                              minimal(u);
                              u.batch = d.max_batch + 1;
                          }});
    if (d.max_heads)
        breaks.push_back({true, [&d, minimal](KernelCase& u) {
                              minimal(u);
                              u.heads = d.max_heads + 1;
                          }});
    if (!d.causal) breaks.push_back({false, [](KernelCase& u) { u.causal = true; }});
    if (!d.non_causal) breaks.push_back({false, [](KernelCase& u) { u.causal = false; }});
    if (!d.padding)
        breaks.push_back({false, [](KernelCase& u) { u.kv_valid_len.assign(std::size_t(u.batch), std::int32_t(u.kv_len)); }});
    if (breaks.empty()) return Verdict::pass();
    const Break& broken = breaks[c.data_seed % breaks.size()];
    KernelCase u = c;
    broken.apply(u);
    const attncheck_problem p = u.problem();
    const std::string reason = d.unsupported_reason(p);
    if (reason.empty()) return Verdict::pass();  // the case could not be moved outside (cannot happen for a valid declaration)
    std::optional<Call> r;
    if (broken.lazily) {
        r = call_kernel_lazily(kernel, p);
        if (!r)
            return Verdict::pass_with_note("a problem outside the declaration (" + reason +
                                           ") was not sent: its memory could not be mapped");
    } else {
        r = call_kernel(kernel, p, fill_inputs(u), u.out_size());
    }
    if (!r->guard_violation.empty())
        return Verdict::fail("on a problem outside its declaration (" + reason + "), kernel " + r->guard_violation);
    if (r->rc == 0)
        return Verdict::fail("the kernel accepted (returned 0) a problem outside its declaration: " + reason +
                             "; a kernel refuses (returns nonzero) what it does not declare, or declares it (" +
                             d.to_string() + ")");
    return Verdict::pass();
}

Verdict abi_version(const KernelUnderTest& kernel, const KernelCase& c) {
    const KernelInputs in = fill_inputs(c);
    for (const std::int32_t version : {ATTNCHECK_ABI_VERSION + 1, 0}) {
        attncheck_problem p = c.problem();
        p.abi_version = version;
        const Call r = call_kernel(kernel, p, in, c.out_size());
        if (r.rc == 0)
            return Verdict::fail("kernel accepted abi_version " + std::to_string(version) +
                                 " (returned 0): it must refuse a version it does not know");
        if (!r.guard_violation.empty())
            return Verdict::fail("refusing abi_version " + std::to_string(version) + ", kernel " + r.guard_violation);
    }
    return Verdict::pass();
}

}  // namespace

const std::vector<KernelProperty>& kernel_properties() {
    static const std::vector<KernelProperty> all = {
        {"agreement", "out agrees with the float64 reference: every element within its bound for any correct float32 evaluation", {}, agreement},
        {"causality", "replacing keys/values in the future of row i leaves rows <= i bitwise unchanged",
         {.need_future = true}, causality},
        {"row_sums", "all-ones values: every row's probabilities sum to 1 (0 for a row with no key)", {}, row_sums},
        {"probabilities", "identity values expose the rows: in [0,1], masked keys exactly 0, equal to the reference",
         {.max_kv = 48, .large_max_kv = 200}, probabilities},
        {"empty_rows", "a row with no visible key (kv_valid_len = 0) gives exactly 0, never NaN",
         {.need_empty = true}, empty_rows},
        {"padding", "replacing padded keys/values (j >= kv_valid_len) changes nothing, bitwise",
         {.need_padding = true}, padding},
        {"batch", "a sequence alone equals the same sequence inside a batch", {.min_batch = 2}, batch},
        {"determinism", "the same call twice, and on one thread, gives bitwise the same out", {}, determinism},
        {"no_oob_write", "nothing written outside out, and every element of out written", {}, no_oob_write},
        {"inputs_unchanged", "q, k, v bitwise unchanged by the call", {}, inputs_unchanged},
        {"abi_version", "a problem with an unknown abi_version (2, 0) is refused (nonzero)", {}, abi_version},
        {"refuses_undeclared", "a problem outside what the kernel declares (a width, a size, the mask, padding) is refused",
         {}, refuses_undeclared},
    };
    return all;
}

std::string not_applicable(const KernelProperty& prop, const KernelDeclaration& d) {
    const CaseOptions& o = prop.options;
    // In version 1 a row is empty only through kv_valid_len[b] = 0 (key 0 is visible to every
    // row otherwise): without padding, no row is.
    if (o.need_padding && !d.padding) return "declared padding=no: no sequence has padded keys";
    if (o.need_empty && !d.padding) return "declared padding=no: no row is ever empty";
    if (o.need_future && !d.causal) return "declared mask=none";
    // A key in the future of row 0 needs Tk >= 2 (q_offset >= 0: key 0 is always visible).
    if (o.need_future && d.max_kv_len == 1) return "declared max_kv_len=1: no key is ever in a row's future";
    if (d.max_batch && d.max_batch < o.min_batch)
        return "declared max_batch=" + std::to_string(d.max_batch) + ": the property needs a batch of " +
               std::to_string(o.min_batch) + " sequences";
    return {};
}

}  // namespace attncheck::properties
