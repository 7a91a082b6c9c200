// cli/bench_subject.cpp — `attncheck bench`'s calls and their correctness checks (bench_subject.hpp).
#include "cli/bench_subject.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <sstream>

#include "attncheck/abi_v1.hpp"
#include "attncheck/tolerance.hpp"
#include "properties/calls.hpp"
#include "reference/attention_grad.hpp"
#include "reference/attention_v2.hpp"
#include "reference/error_bound.hpp"

namespace attncheck::cli::bench {
namespace {

attncheck_problem one_head(const attncheck_problem& p) {
    attncheck_problem h = p;
    h.heads = 1;
    return h;
}

HeadOracle oracle_v1(const perf::KernelProblem& pr, int h) {
    const attncheck_problem& p = pr.p;
    const std::size_t qs = std::size_t(p.q_len) * std::size_t(p.head_dim);
    const std::size_t ks = std::size_t(p.kv_len) * std::size_t(p.head_dim);
    const std::size_t vs = std::size_t(p.kv_len) * std::size_t(p.value_dim);
    const reference::BoundedOutput o = reference::attention_bounded(
        one_head(p), pr.q.data() + std::size_t(h) * qs, pr.k_copy(0) + std::size_t(h) * ks,
        pr.v_copy(0) + std::size_t(h) * vs);
    return {std::vector<double>(o.value.begin(), o.value.end()), std::vector<double>(o.bound.begin(), o.bound.end())};
}

// Head h of a version 2 problem as a one-head problem (B = 1, Hq = Hk, [B, H, T, D] tensors, lse
// [B, H, Tq]), and dout's head h with it.
attncheck_problem_v2 head_of(attncheck_problem_v2 p, int h, attncheck_tensor_v2* dout = nullptr) {
    const std::size_t bytes = dtype_size(p.dtype);
    const auto at_head = [&](attncheck_tensor_v2& t) {
        t.data = static_cast<char*>(t.data) + std::size_t(h) * std::size_t(t.stride[1]) * bytes;
    };
    for (attncheck_tensor_v2* t : {&p.q, &p.k, &p.v, &p.out}) at_head(*t);
    if (dout) at_head(*dout);
    if (p.lse) p.lse += std::size_t(h) * std::size_t(p.lse_stride[1]);
    p.q_heads = p.kv_heads = 1;
    return p;
}

// Head h of the version 2 problem (K/V copy 0) through the version 2 oracle: it reads the inputs
// as stored in the kernel's dtype, and its bound is that dtype's.
HeadOracle oracle_v2(ProblemV2& v2, perf::KernelProblem& pr, int h, const KernelDeclaration& d) {
    reference::OracleV2 o = reference::attention_v2_oracle(head_of(v2.on_copy(pr, 0), h), properties::oracle_options(d));
    return {std::move(o.out), std::move(o.out_bound)};
}

// "dq[0,3,17,5] [b,h,i,c]"
std::string element(const char* name, int h, std::size_t flat, int width) {
    return std::string(name) + "[0," + std::to_string(h) + "," + std::to_string(flat / std::size_t(width)) + "," +
           std::to_string(flat % std::size_t(width)) + "]";
}

}  // namespace

std::vector<int> checked_heads(const attncheck_problem& p) {
    std::vector<int> heads;
    if (double(p.q_len) * double(p.kv_len) <= kFullCheckPairs) {
        for (int h = 0; h < p.heads; ++h) heads.push_back(h);
    } else {
        heads = {0, p.heads - 1};
    }
    return heads;
}

std::string describe_heads(const std::vector<int>& checked, int heads) {
    if (int(checked.size()) == heads) return "all " + std::to_string(heads) + " heads";
    std::ostringstream s;
    s << "heads " << checked.front() << " and " << checked.back() << " of " << heads;
    return s.str();
}

float Elements::at(std::size_t i) const { return load_element(dtype, slots.data(), std::int64_t(i)); }
void Elements::set(std::size_t i, float x) { store_element(dtype, slots.data(), std::int64_t(i), x); }
void Elements::poison() {
    const std::size_t n = slots.size() * 4 / dtype_size(dtype);
    for (std::size_t i = 0; i < n; ++i) set(i, std::numeric_limits<float>::quiet_NaN());
}

ProblemV2::ProblemV2(const perf::KernelProblem& pr, std::int32_t dt, bool bwd) : dtype(dt), backward(bwd) {
    const attncheck_problem& v1 = pr.p;
    const auto copy_of = [&](const std::vector<float>& src) {
        Elements e(dtype, src.size());
        for (std::size_t i = 0; i < src.size(); ++i) e.set(i, src[i]);
        return e;
    };
    if (dtype != ATTNCHECK_DTYPE_F32) {
        q = copy_of(pr.q);
        k = copy_of(pr.k);
        v = copy_of(pr.v);
    }
    if (dtype != ATTNCHECK_DTYPE_F32 || backward) out = Elements(dtype, pr.out.size());
    if (backward) {
        std::mt19937 rng(7);
        std::uniform_real_distribution<float> u(-1.0f, 1.0f);
        dout = Elements(dtype, pr.out.size());
        for (std::size_t i = 0; i < pr.out.size(); ++i) dout.set(i, u(rng));
        dq = Elements(dtype, pr.q.size());
        dk = Elements(dtype, pr.k.size() / std::size_t(pr.copies));
        dv = Elements(dtype, pr.v.size() / std::size_t(pr.copies));
        lse.assign(std::size_t(v1.heads) * std::size_t(v1.q_len), 0.0f);
    }
    q_pos = v1.q_offset;
    p = v2_fields_of(v1, &q_pos);  // B = 1: one position; contiguous [B, H, T, D]
    p.dtype = dtype;
    if (backward) {
        p.lse_stride[2] = 1;
        p.lse_stride[1] = v1.q_len;
        p.lse_stride[0] = std::int64_t(v1.heads) * v1.q_len;
        g.struct_size = sizeof(attncheck_grads_v2);
        std::copy(p.out.stride, p.out.stride + 4, g.dout.stride);
        std::copy(p.q.stride, p.q.stride + 4, g.dq.stride);
        std::copy(p.k.stride, p.k.stride + 4, g.dk.stride);
        std::copy(p.v.stride, p.v.stride + 4, g.dv.stride);
    }
}

const attncheck_problem_v2& ProblemV2::on_copy(perf::KernelProblem& pr, int copy) {
    p.q_pos = &q_pos;
    const std::size_t kc = pr.k.size() / std::size_t(pr.copies) * std::size_t(copy);
    const std::size_t vc = pr.v.size() / std::size_t(pr.copies) * std::size_t(copy);
    const std::size_t bytes = dtype_size(dtype);
    if (dtype == ATTNCHECK_DTYPE_F32) {
        p.q.data = pr.q.data();
        p.k.data = pr.k.data() + kc;
        p.v.data = pr.v.data() + vc;
    } else {
        p.q.data = q.data();
        p.k.data = static_cast<char*>(k.data()) + kc * bytes;
        p.v.data = static_cast<char*>(v.data()) + vc * bytes;
    }
    p.out.data = out.slots.empty() ? static_cast<void*>(pr.out.data()) : out.data();
    p.lse = backward ? lse.data() : nullptr;
    return p;
}

const attncheck_grads_v2& ProblemV2::grads() {
    g.dout.data = dout.data();
    g.dq.data = dq.data();
    g.dk.data = dk.data();
    g.dv.data = dv.data();
    return g;
}

float ProblemV2::out_at(const perf::KernelProblem& pr, std::size_t i) const {
    return out.slots.empty() ? pr.out[i] : out.at(i);
}

void ProblemV2::poison_out(perf::KernelProblem& pr) {
    std::fill(pr.out.begin(), pr.out.end(), std::numeric_limits<float>::quiet_NaN());
    if (!out.slots.empty()) out.poison();
    std::fill(lse.begin(), lse.end(), std::numeric_limits<float>::quiet_NaN());
}

Subject::Subject(const Kernel& k, perf::KernelProblem& problem, bool bwd) : kernel(&k), pr(&problem), backward(bwd) {
    if (k.fn_v2) v2 = std::make_unique<ProblemV2>(problem, k.dtype, backward);
}

int Subject::forward(int copy) {
    if (v2) return kernel->fn_v2(&v2->on_copy(*pr, copy));
    return kernel->fn(&pr->p, pr->q.data(), pr->k_copy(copy), pr->v_copy(copy), pr->out.data());
}

int Subject::call(int copy) {
    if (!backward) return forward(copy);
    return kernel->backward(&v2->on_copy(*pr, 0), &v2->grads());
}

double Subject::kv_bytes() const { return v2 ? pr->kv_bytes * double(dtype_size(v2->dtype)) / 4.0 : pr->kv_bytes; }

std::string shape_line(const perf::KernelShape& s) {
    return s.name + " (B=1 H=" + std::to_string(perf::kShapeHeads) + " Tq=" + std::to_string(s.q_len) +
           " Tk=" + std::to_string(s.kv_len) + " Dk=Dv=" + std::to_string(perf::kShapeHeadDim) +
           " q_offset=" + std::to_string(s.q_offset) + " causal)";
}

Refusal refused(const Kernel& k, const perf::KernelShape& s, int rc, bool backward) {
    return {"kernel " + k.label + (backward ? "'s backward" : "") + " returned " + std::to_string(rc) + " (not ATTNCHECK_OK) on shape " +
            shape_line(s) + "; nothing was timed"};
}

void check_declared(Subject& sub, const perf::KernelShape& s) {
    if (!sub.v2) return;
    const std::string why = sub.kernel->declaration.unsupported_reason(sub.v2->on_copy(*sub.pr, 0));
    if (!why.empty())
        throw Refusal{"kernel " + sub.kernel->label + ": shape " + shape_line(s) + " in " +
                      dtype_name(sub.v2->dtype) + " is outside its declaration: " + why +
                      " (--shapes picks the shapes); nothing was timed"};
}

std::vector<HeadOracle> oracles_of(Subject& sub, const std::vector<int>& heads) {
    std::vector<HeadOracle> out;
    for (int h : heads)
        out.push_back(sub.v2 ? oracle_v2(*sub.v2, *sub.pr, h, sub.kernel->declaration) : oracle_v1(*sub.pr, h));
    return out;
}

bool same_oracle(const Subject& a, const Subject& b) {
    if (bool(a.v2) != bool(b.v2)) return false;
    return !a.v2 || (a.v2->dtype == b.v2->dtype &&
                     a.kernel->declaration.rounds_probabilities == b.kernel->declaration.rounds_probabilities &&
                     a.kernel->declaration.tanh_ulps == b.kernel->declaration.tanh_ulps);
}

double check(Subject& sub, const perf::KernelShape& s, const std::vector<int>& heads,
             const std::vector<HeadOracle>& oracles) {
    perf::KernelProblem& pr = *sub.pr;
    if (sub.v2) {
        sub.v2->poison_out(pr);
    } else {
        std::fill(pr.out.begin(), pr.out.end(), std::numeric_limits<float>::quiet_NaN());
    }
    const int rc = sub.forward(0);
    if (rc != ATTNCHECK_OK) throw refused(*sub.kernel, s, rc, false);
    const std::size_t os = std::size_t(pr.p.q_len) * std::size_t(pr.p.value_dim);
    std::vector<float> got(os);
    double worst = 0;
    for (std::size_t k = 0; k < heads.size(); ++k) {
        const int h = heads[k];
        const HeadOracle& o = oracles[k];
        for (std::size_t i = 0; i < os; ++i)
            got[i] = sub.v2 ? sub.v2->out_at(pr, std::size_t(h) * os + i) : pr.out[std::size_t(h) * os + i];
        const Agreement a = check_against_bound(got.data(), o.value.data(), o.bound.data(), os);
        if (!a.ok)
            throw Refusal{"kernel " + sub.kernel->label + " disagrees with the float64 reference on shape " + s.name +
                          " at " + element("out", h, a.worst_index, pr.p.value_dim) + " [b,h,i,c]: " + a.describe() +
                          "; a wrong kernel is not timed"};
        worst = std::max(worst, a.worst_ratio);
    }
    return worst;
}

double check_backward(Subject& sub, const perf::KernelShape& s, const std::vector<int>& heads) {
    ProblemV2& v2 = *sub.v2;
    for (Elements* e : {&v2.dq, &v2.dk, &v2.dv}) e->poison();
    const int rc = sub.call(0);
    if (rc != ATTNCHECK_OK) throw refused(*sub.kernel, s, rc, true);
    const attncheck_problem& p = sub.pr->p;
    const struct {
        const char* name;
        const Elements& got;
        int rows, width;
    } grads[] = {{"dq", v2.dq, p.q_len, p.head_dim}, {"dk", v2.dk, p.kv_len, p.head_dim}, {"dv", v2.dv, p.kv_len, p.value_dim}};
    const auto disagrees = [&](const std::string& what) {
        return Refusal{"kernel " + sub.kernel->label + "'s backward disagrees with the float64 gradient reference on shape " +
                       s.name + " at " + what + "; a wrong kernel is not timed"};
    };
    // Every element written, the unchecked heads' too.
    for (const auto& gr : grads) {
        const std::size_t per_head = std::size_t(gr.rows) * std::size_t(gr.width);
        for (std::size_t i = 0; i < per_head * std::size_t(p.heads); ++i)
            if (std::isnan(gr.got.at(i)))
                throw disagrees(element(gr.name, int(i / per_head), i % per_head, gr.width) +
                                " [b,h,i,c]: NaN (left unwritten, or computed as NaN)");
    }
    const reference::GradOracleOptions options = properties::oracle_options(sub.kernel->declaration);
    double worst = 0;
    std::vector<float> got;
    for (int h : heads) {
        attncheck_tensor_v2 dout = v2.grads().dout;
        const attncheck_problem_v2 one = head_of(v2.on_copy(*sub.pr, 0), h, &dout);
        const reference::GradOracle o = reference::attention_grad_oracle(one, dout, options);
        const std::vector<double>* want[] = {&o.dq, &o.dk, &o.dv};
        const std::vector<double>* bound[] = {&o.dq_bound, &o.dk_bound, &o.dv_bound};
        for (int t = 0; t < 3; ++t) {
            const auto& gr = grads[t];
            const std::size_t per_head = std::size_t(gr.rows) * std::size_t(gr.width);
            got.resize(per_head);
            for (std::size_t i = 0; i < per_head; ++i) got[i] = gr.got.at(std::size_t(h) * per_head + i);
            const Agreement a = check_against_bound(got, *want[t], *bound[t]);
            if (!a.ok) throw disagrees(element(gr.name, h, a.worst_index, gr.width) + " [b,h,i,c]: " + a.describe());
            worst = std::max(worst, a.worst_ratio);
        }
    }
    return worst;
}

}  // namespace attncheck::cli::bench
