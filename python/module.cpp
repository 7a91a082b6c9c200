// python/module.cpp — the extension module attncheck._attncheck: the C++ engine driven from
// Python. The Python package (python/attncheck/) is the API; this file is its boundary:
//
//   * A problem as Python sees it: every tensor and array of an attncheck_problem_v2 as a
//     zero-copy NumPy view (element dtype float32, float16, or uint16 bit patterns for bfloat16;
//     q, k, v, dout read-only), built from the struct's own pointers and strides. A problem
//     handed to a kernel lives only during the call (its Handle expires after it); one built
//     with make_problem() owns its arrays.
//   * check_kernel(): attncheck::check_kernel() on a version 2 kernel whose forward (and
//     backward) is a Python callable. The engine calls C function pointers; the two trampolines
//     below are those pointers and find the callable of the running check in `g_running` (one
//     check at a time per process: the engine's kernels carry no context pointer, so a second
//     concurrent check is refused, never mixed up). The GIL is released while the engine runs
//     and taken back by the trampolines.
//   * The ABI boundary: a trampoline refuses a problem the ABI calls malformed (the properties
//     abi_version and refuses_malformed send some) before any view is built, so no Python code
//     sees an inconsistent shape or an out-of-range pointer. An exception raised by the kernel is
//     re-thrown as a C++ exception, which the engine turns into a failed case with its message
//     (properties/property_runs.cpp); KeyboardInterrupt stops the whole check instead.
//   * reference(): the float64 oracle and its bound (reference/attention_v2.hpp) on a problem.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cmath>
#include <limits>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "attncheck/check.hpp"
#include "attncheck/declaration.hpp"
#include "attncheck/kernel_abi_v2.h"
#include "attncheck/problem_v2.hpp"
#include "properties/fuzz_run.hpp"
#include "reference/attention_v2.hpp"

namespace py = pybind11;

namespace {

// ---- views ------------------------------------------------------------------------------------

// What keeps a problem's memory valid: for a problem handed to a kernel, the duration of the call
// (live is cleared after it); for one built by make_problem, the arrays it holds.
struct Handle {
    attncheck_problem_v2 p{};
    bool live = true;
    bool owned = false;            // built by make_problem (its memory lives as long as this)
    std::vector<py::object> keep;  // make_problem: the arrays the pointers point into
    std::vector<std::int32_t> ints;  // make_problem: q_pos when none was given
    void check_live(const char* what) const {
        if (!live)
            throw std::runtime_error(std::string(what) +
                                     ": this problem's memory was valid only during the kernel call that "
                                     "received it; copy what you keep (np.array(p.out))");
    }
};

const char* dtype_text(std::int32_t dtype) {
    return dtype == ATTNCHECK_DTYPE_F16 ? "float16" : dtype == ATTNCHECK_DTYPE_BF16 ? "bfloat16" : "float32";
}
py::dtype element_dtype(std::int32_t dtype) {
    return dtype == ATTNCHECK_DTYPE_F16 ? py::dtype("float16")
           : dtype == ATTNCHECK_DTYPE_BF16 ? py::dtype("uint16")
                                           : py::dtype("float32");
}

// A view of `shape` with element strides `strides` at data; base keeps the memory alive (a
// handle) or is a no-op capsule (the call's lifetime).
py::array view(const py::dtype& dt, const void* data, std::vector<py::ssize_t> shape,
               std::vector<py::ssize_t> strides, bool writable, const py::handle& base) {
    const py::ssize_t item = dt.itemsize();
    for (auto& s : strides) s *= item;
    py::array a(dt, std::move(shape), std::move(strides), data, base);
    if (!writable) a.attr("flags").attr("writeable") = false;
    return a;
}
py::object int_array(const std::int32_t* data, std::vector<py::ssize_t> shape, const py::handle& base) {
    if (!data) return py::none();
    std::vector<py::ssize_t> strides(shape.size(), 1);
    for (std::size_t i = shape.size(); i-- > 1;) strides[i - 1] = strides[i] * shape[i];
    return view(py::dtype("int32"), data, std::move(shape), std::move(strides), false, base);
}
py::object float_array(const float* data, py::ssize_t n, const py::handle& base) {
    if (!data) return py::none();
    return view(py::dtype("float32"), data, {n}, {1}, false, base);
}

// Rows of q / out (per head) and of k / v: the tensors' row axis lengths.
py::ssize_t q_rows(const attncheck_problem_v2& p) { return p.cu_seqlens_q ? p.cu_seqlens_q[p.batch] : p.q_len; }
py::ssize_t kv_rows(const attncheck_problem_v2& p) {
    if (p.block_table) return p.block_size;
    return p.cu_seqlens_k ? p.cu_seqlens_k[p.batch] : p.kv_len;
}
py::ssize_t q_outer(const attncheck_problem_v2& p) { return p.cu_seqlens_q ? 1 : p.batch; }
py::ssize_t kv_outer(const attncheck_problem_v2& p) {
    if (p.block_table) return p.num_blocks;
    return p.cu_seqlens_k ? 1 : p.batch;
}
std::vector<py::ssize_t> strides_of(const attncheck_tensor_v2& t, bool packed) {
    return {packed ? 0 : py::ssize_t(t.stride[0]), py::ssize_t(t.stride[1]), py::ssize_t(t.stride[2]),
            py::ssize_t(t.stride[3])};
}
py::array q_like(const attncheck_problem_v2& p, const attncheck_tensor_v2& t, int width, bool writable,
                 const py::handle& base) {
    return view(element_dtype(p.dtype), t.data, {q_outer(p), p.q_heads, q_rows(p), width},
                strides_of(t, p.cu_seqlens_q != nullptr), writable, base);
}
py::array kv_like(const attncheck_problem_v2& p, const attncheck_tensor_v2& t, int width, bool writable,
                  const py::handle& base) {
    return view(element_dtype(p.dtype), t.data, {kv_outer(p), p.kv_heads, kv_rows(p), width},
                strides_of(t, p.cu_seqlens_k != nullptr && !p.block_table), writable, base);
}

// The fields of a well-formed problem, as keyword arguments of attncheck.Problem.
py::dict problem_fields(const std::shared_ptr<Handle>& h, const py::handle& base) {
    const attncheck_problem_v2& p = h->p;
    const py::ssize_t B = p.batch;
    py::dict f;
    f["dtype"] = dtype_text(p.dtype);
    f["layout"] = p.block_table ? "paged" : p.cu_seqlens_q ? "varlen" : "dense";
    f["batch"] = p.batch;
    f["q_heads"] = p.q_heads;
    f["kv_heads"] = p.kv_heads;
    f["head_dim"] = p.head_dim;
    f["value_dim"] = p.value_dim;
    f["q_len"] = p.q_len;
    f["kv_len"] = p.kv_len;
    f["kv_lens"] = int_array(p.kv_lens, {B}, base);
    f["cu_seqlens_q"] = int_array(p.cu_seqlens_q, {B + 1}, base);
    f["cu_seqlens_k"] = int_array(p.cu_seqlens_k, {B + 1}, base);
    f["q_pos"] = int_array(p.q_pos, {B}, base);
    f["causal"] = p.causal != 0;
    f["window_left"] = p.window_left;
    f["window_right"] = p.window_right;
    f["scale"] = double(p.scale);
    f["softcap"] = double(p.softcap);
    f["alibi_slopes"] = float_array(p.alibi_slopes, p.q_heads, base);
    f["sinks"] = float_array(p.sinks, p.q_heads, base);
    f["block_table"] = int_array(p.block_table, {B, p.block_table_stride}, base);
    f["block_size"] = p.block_table ? p.block_size : 0;
    f["num_blocks"] = p.block_table ? p.num_blocks : 0;
    f["q"] = q_like(p, p.q, p.head_dim, false, base);
    f["k"] = kv_like(p, p.k, p.head_dim, false, base);
    f["v"] = kv_like(p, p.v, p.value_dim, false, base);
    f["out"] = q_like(p, p.out, p.value_dim, true, base);
    if (p.lse) {
        f["lse"] = view(py::dtype("float32"), p.lse, {q_outer(p), p.q_heads, q_rows(p)},
                        {p.cu_seqlens_q ? 0 : py::ssize_t(p.lse_stride[0]), py::ssize_t(p.lse_stride[1]),
                         py::ssize_t(p.lse_stride[2])},
                        true, base);
    } else {
        f["lse"] = py::none();
    }
    f["_handle"] = py::cast(h);
    return f;
}

py::object make_python_problem(const std::shared_ptr<Handle>& h, const py::handle& base) {
    return py::module_::import("attncheck").attr("Problem")(**problem_fields(h, base));
}

// ---- the running check and its trampolines ----------------------------------------------------

struct Running {
    py::object forward, backward;  // the author's callables (backward may be None)
    py::object call_forward, call_backward;  // attncheck._call_forward / _call_backward
    bool interrupted = false;
};
Running* g_running = nullptr;
std::mutex g_running_mutex;

// Thrown by a trampoline when the kernel raised: the engine fails the case with this message.
struct KernelRaised : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// "ValueError: assignment destination is read-only (numpy_kernel.py:57 in attention)".
std::string describe_python_error(py::error_already_set& e) {
    std::string text;
    try {
        py::module_ tb = py::module_::import("traceback");
        py::list lines = tb.attr("format_exception_only")(e.type(), e.value());
        for (auto line : lines) text += line.cast<std::string>();
        while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
        if (e.trace()) {
            py::list frames = tb.attr("extract_tb")(e.trace());
            if (py::len(frames) > 0) {
                py::object last = frames[py::len(frames) - 1];
                const std::string file = py::str(last.attr("filename"));
                const std::size_t slash = file.find_last_of('/');
                text += " (" + (slash == std::string::npos ? file : file.substr(slash + 1)) + ":" +
                        py::str(last.attr("lineno")).cast<std::string>() + " in " +
                        last.attr("name").cast<std::string>() + ")";
            }
        }
    } catch (...) {
        text = e.what();
    }
    return text;
}

// Calls attncheck._call_forward(fn, problem) (or _call_backward(fn, problem, grads)): the return
// code of the kernel's call, with the Python side's checks of what the kernel returned.
int call_python(bool backward, const attncheck_problem_v2* p, const attncheck_grads_v2* g) {
    Running* r = g_running;
    if (!r) return 1;
    // The ABI's own argument check: a malformed problem is refused here, as a C kernel does.
    if (p->abi_version != ATTNCHECK_ABI_VERSION_2 || p->struct_size < int(sizeof(attncheck_problem_v2)))
        return 1;
    if (!attncheck::problem_v2_error(*p).empty()) return 1;
    if (backward && !attncheck::grads_v2_error(*p, *g).empty()) return 1;
    py::gil_scoped_acquire gil;
    if (r->interrupted) throw KernelRaised("the check was interrupted (KeyboardInterrupt)");
    if (PyErr_CheckSignals() != 0) {
        PyErr_Clear();
        r->interrupted = true;
        throw KernelRaised("the check was interrupted (KeyboardInterrupt)");
    }
    auto h = std::make_shared<Handle>();
    h->p = *p;
    int rc = 0;
    try {
        py::capsule base(h.get(), [](void*) {});
        py::object problem = make_python_problem(h, base);
        if (!backward) {
            rc = r->call_forward(r->forward, problem).cast<int>();
        } else {
            const attncheck_problem_v2& q = *p;
            py::dict f;
            f["dout"] = q_like(q, g->dout, q.value_dim, false, base);
            f["dq"] = q_like(q, g->dq, q.head_dim, true, base);
            f["dk"] = kv_like(q, g->dk, q.head_dim, true, base);
            f["dv"] = kv_like(q, g->dv, q.value_dim, true, base);
            f["dsinks"] = g->dsinks ? view(py::dtype("float32"), g->dsinks, {q.q_heads}, {1}, true, base)
                                    : py::object(py::none());
            py::object grads = py::module_::import("attncheck").attr("Grads")(**f);
            rc = r->call_backward(r->backward, problem, grads).cast<int>();
        }
    } catch (py::error_already_set& e) {
        h->live = false;
        if (e.matches(PyExc_KeyboardInterrupt)) {
            r->interrupted = true;
            throw KernelRaised("the check was interrupted (KeyboardInterrupt)");
        }
        throw KernelRaised(std::string(backward ? "the backward raised " : "the kernel raised ") +
                           describe_python_error(e));
    }
    h->live = false;
    return rc;
}

int forward_trampoline(const attncheck_problem_v2* p) { return call_python(false, p, nullptr); }
int backward_trampoline(const attncheck_problem_v2* p, const attncheck_grads_v2* g) { return call_python(true, p, g); }

py::dict report_to_python(const attncheck::CheckReport& report) {
    py::dict d;
    d["passed"] = report.passed;
    d["text"] = report.text;
    d["seed"] = report.seed;
    d["failed"] = report.failed;
    py::list props;
    for (const attncheck::CheckedProperty& c : report.properties) {
        py::dict x;
        x["property"] = c.property;
        x["status"] = c.status;
        x["cases"] = c.cases;
        x["unsupported"] = c.unsupported;
        x["budget"] = c.budget;
        x["failed_at"] = c.failed_at;
        x["counterexample"] = c.counterexample;
        x["message"] = c.message;
        x["warning"] = c.warning;
        x["replay"] = c.replay;
        x["seconds"] = c.seconds;
        x["shrink_stopped"] = c.shrink_stopped;
        props.append(x);
    }
    d["properties"] = props;
    return d;
}

py::dict check_kernel(py::object forward, py::object backward, const std::string& name, const std::string& declare,
                      std::vector<std::string> properties, int cases, int decoder_cases, bool decoder,
                      std::uint64_t seed, double shrink_time, bool allow_unchecked, const std::string& replay) {
    std::unique_lock<std::mutex> lock(g_running_mutex, std::try_to_lock);
    if (!lock.owns_lock() || g_running)
        throw std::runtime_error("attncheck.check_kernel: another check is running in this process (one at a time: "
                                 "the engine calls kernels through plain C function pointers)");
    attncheck::CheckOptions o;
    o.seed = seed;
    o.cases = cases;
    o.decoder_cases = decoder_cases;
    o.decoder = decoder;
    o.only = std::move(properties);
    o.declaration = declare;
    o.allow_unchecked = allow_unchecked;
    o.shrink_time_s = shrink_time;
    o.replay = replay;
    py::module_ m = py::module_::import("attncheck");
    Running running{forward, backward, m.attr("_call_forward"), m.attr("_call_backward")};
    g_running = &running;
    attncheck::CheckReport report;
    try {
        py::gil_scoped_release release;
        report = backward.is_none() ? attncheck::check_kernel(forward_trampoline, name, o)
                                    : attncheck::check_kernel(forward_trampoline, backward_trampoline, name, o);
    } catch (...) {
        g_running = nullptr;
        throw;
    }
    g_running = nullptr;
    if (running.interrupted) {
        PyErr_SetNone(PyExc_KeyboardInterrupt);
        throw py::error_already_set();
    }
    return report_to_python(report);
}

// ---- problems built from NumPy arrays, and the oracle ---------------------------------------

// The element strides of a, checked to be whole elements and non-negative.
void set_tensor(attncheck_tensor_v2& t, const py::array& a, int ndim, const char* name) {
    if (a.ndim() != ndim)
        throw py::value_error(std::string(name) + ": expected " + std::to_string(ndim) + " dimensions, got " +
                              std::to_string(a.ndim()));
    t.data = const_cast<void*>(a.data());
    for (int i = 0; i < 4; ++i) t.stride[i] = 0;
    for (int i = 0; i < ndim; ++i) {
        const py::ssize_t s = a.strides(i);
        if (s < 0 || s % a.itemsize() != 0)
            throw py::value_error(std::string(name) + ": stride " + std::to_string(s) + " bytes of axis " +
                                  std::to_string(i) + " is negative or not a whole number of elements");
        t.stride[4 - ndim + i] = s / a.itemsize();
    }
}
std::int32_t dtype_code(const std::string& dtype) {
    if (dtype == "float32") return ATTNCHECK_DTYPE_F32;
    if (dtype == "float16") return ATTNCHECK_DTYPE_F16;
    if (dtype == "bfloat16") return ATTNCHECK_DTYPE_BF16;
    throw py::value_error("dtype '" + dtype + "': expected float32, float16 or bfloat16");
}
const std::int32_t* ints_of(const py::object& o, const char* name, py::ssize_t n, std::shared_ptr<Handle>& h) {
    if (o.is_none()) return nullptr;
    py::array_t<std::int32_t, py::array::c_style | py::array::forcecast> a(o);
    if (a.size() != n)
        throw py::value_error(std::string(name) + ": expected " + std::to_string(n) + " values, got " +
                              std::to_string(a.size()));
    h->keep.push_back(a);
    return a.data();
}
const float* floats_of(const py::object& o, const char* name, py::ssize_t n, std::shared_ptr<Handle>& h) {
    if (o.is_none()) return nullptr;
    py::array_t<float, py::array::c_style | py::array::forcecast> a(o);
    if (a.size() != n)
        throw py::value_error(std::string(name) + ": expected " + std::to_string(n) + " values, got " +
                              std::to_string(a.size()));
    h->keep.push_back(a);
    return a.data();
}

// The fields of make_problem's result: q, k, v as given ([B, H, T, D] axes, any strides; varlen:
// batch axis of length 1, rows packed; paged: k, v [num_blocks, Hk, block_size, D]), out (and
// lse when asked) allocated.
py::object make_problem(py::array q, py::array k, py::array v, const std::string& dtype, bool causal,
                        py::object scale, py::object q_pos, py::object kv_lens, py::object cu_seqlens_q,
                        py::object cu_seqlens_k, int window_left, int window_right, double softcap,
                        py::object alibi_slopes, py::object sinks, py::object block_table, bool lse) {
    auto h = std::make_shared<Handle>();
    h->owned = true;
    attncheck_problem_v2& p = h->p;
    p.abi_version = ATTNCHECK_ABI_VERSION_2;
    p.struct_size = sizeof(attncheck_problem_v2);
    p.dtype = dtype_code(dtype);
    const py::dtype want = element_dtype(p.dtype);
    for (auto* a : {&q, &k, &v})
        if (!a->dtype().is(want))
            throw py::value_error("q, k and v must be " + std::string(py::str(py::handle(want))) + " arrays for dtype " + dtype +
                                  ", got " + std::string(py::str(py::handle(a->dtype()))));
    h->keep = {q, k, v};
    set_tensor(p.q, q, 4, "q");
    set_tensor(p.k, k, 4, "k");
    set_tensor(p.v, v, 4, "v");
    const bool packed = !cu_seqlens_q.is_none();
    const bool paged = !block_table.is_none();
    p.q_heads = int(q.shape(1));
    p.kv_heads = int(k.shape(1));
    p.head_dim = int(q.shape(3));
    p.value_dim = int(v.shape(3));
    if (packed) {
        py::array_t<std::int32_t, py::array::c_style | py::array::forcecast> cu(cu_seqlens_q);
        if (cu.ndim() != 1 || cu.size() < 2) throw py::value_error("cu_seqlens_q: expected B + 1 >= 2 values");
        p.batch = int(cu.size() - 1);
    } else {
        p.batch = int(q.shape(0));  // dense and paged: q's batch axis
    }
    const py::ssize_t B = p.batch;
    p.cu_seqlens_q = ints_of(cu_seqlens_q, "cu_seqlens_q", B + 1, h);
    p.cu_seqlens_k = ints_of(cu_seqlens_k, "cu_seqlens_k", B + 1, h);
    p.kv_lens = ints_of(kv_lens, "kv_lens", B, h);
    if (packed) {
        int mq = 0, mk = 0;
        for (int b = 0; b < B; ++b) {
            mq = std::max(mq, p.cu_seqlens_q[b + 1] - p.cu_seqlens_q[b]);
            if (p.cu_seqlens_k) mk = std::max(mk, p.cu_seqlens_k[b + 1] - p.cu_seqlens_k[b]);
        }
        p.q_len = mq;
        p.kv_len = p.cu_seqlens_k ? mk : int(k.shape(2));
    } else {
        p.q_len = int(q.shape(2));
        p.kv_len = int(k.shape(2));
    }
    if (paged) {
        py::array_t<std::int32_t, py::array::c_style | py::array::forcecast> t(block_table);
        if (t.ndim() != 2 || t.shape(0) != B) throw py::value_error("block_table: expected [batch, entries] int32");
        h->keep.push_back(t);
        p.block_table = t.data();
        p.block_table_stride = int(t.shape(1));
        p.block_size = int(k.shape(2));
        p.num_blocks = int(k.shape(0));
        if (p.kv_lens) {
            int m = 0;
            for (int b = 0; b < B; ++b) m = std::max(m, p.kv_lens[b]);
            p.kv_len = m;
        } else {
            p.kv_len = p.block_table_stride * p.block_size;
        }
    }
    if (q_pos.is_none()) {
        // Bottom-right: the query rows are the sequence's last rows (a prefill has q_pos 0).
        h->ints.resize(std::size_t(B));
        for (int b = 0; b < B; ++b) {
            const int tq = p.cu_seqlens_q ? p.cu_seqlens_q[b + 1] - p.cu_seqlens_q[b] : p.q_len;
            const int tk = p.cu_seqlens_k ? p.cu_seqlens_k[b + 1] - p.cu_seqlens_k[b] : p.kv_lens ? p.kv_lens[b] : p.kv_len;
            h->ints[std::size_t(b)] = std::max(0, tk - tq);
        }
        p.q_pos = h->ints.data();
    } else {
        p.q_pos = ints_of(q_pos, "q_pos", B, h);
    }
    p.causal = causal ? 1 : 0;
    p.window_left = window_left;
    p.window_right = window_right;
    p.scale = scale.is_none() ? float(1.0 / std::sqrt(double(p.head_dim))) : scale.cast<float>();
    p.softcap = float(softcap);
    p.alibi_slopes = floats_of(alibi_slopes, "alibi_slopes", p.q_heads, h);
    p.sinks = floats_of(sinks, "sinks", p.q_heads, h);
    const py::ssize_t rows = packed ? p.cu_seqlens_q[B] : p.q_len;
    const py::ssize_t outer = packed ? 1 : B;
    py::array out(want, std::vector<py::ssize_t>{outer, p.q_heads, rows, p.value_dim});
    h->keep.push_back(out);
    set_tensor(p.out, out, 4, "out");
    if (lse) {
        py::array_t<float> l(std::vector<py::ssize_t>{outer, p.q_heads, rows});
        for (py::ssize_t i = 0; i < l.size(); ++i) l.mutable_data()[i] = std::numeric_limits<float>::quiet_NaN();
        h->keep.push_back(l);
        p.lse = l.mutable_data();
        p.lse_stride[0] = packed ? 0 : p.q_heads * rows;
        p.lse_stride[1] = rows;
        p.lse_stride[2] = 1;
    }
    if (const std::string why = attncheck::problem_v2_error(p); !why.empty())
        throw py::value_error("attncheck.problem: " + why);
    py::object handle = py::cast(h);
    return make_python_problem(h, handle);
}

std::shared_ptr<Handle> handle_of(const py::object& problem) {
    return problem.attr("_handle").cast<std::shared_ptr<Handle>>();
}

// The oracle in the problem's own shapes: out and out_bound like out (float64), lse and
// lse_bound like lse without the column.
py::dict reference(const py::object& problem, bool rounds_probabilities, double tanh_ulps) {
    const std::shared_ptr<Handle> h = handle_of(problem);
    h->check_live("attncheck.reference");
    const attncheck_problem_v2& p = h->p;
    attncheck::reference::OracleV2Options opt;
    opt.probabilities_rounded = rounds_probabilities;
    opt.tanh_ulps = tanh_ulps;
    const attncheck::reference::OracleV2 o = attncheck::reference::attention_v2_oracle(p, opt);
    const py::ssize_t outer = q_outer(p), rows = q_rows(p), H = p.q_heads, Dv = p.value_dim;
    const double nan = std::numeric_limits<double>::quiet_NaN();
    py::array_t<double> out({outer, H, rows, py::ssize_t(Dv)}), out_bound({outer, H, rows, py::ssize_t(Dv)});
    py::array_t<double> lse({outer, H, rows}), lse_bound({outer, H, rows});
    std::fill(out.mutable_data(), out.mutable_data() + out.size(), nan);
    std::fill(out_bound.mutable_data(), out_bound.mutable_data() + out_bound.size(), nan);
    std::fill(lse.mutable_data(), lse.mutable_data() + lse.size(), nan);
    std::fill(lse_bound.mutable_data(), lse_bound.mutable_data() + lse_bound.size(), nan);
    for (int b = 0; b < p.batch; ++b)
        for (int hh = 0; hh < H; ++hh)
            for (int i = 0; i < o.q_len[std::size_t(b)]; ++i) {
                const std::size_t r = o.row(b, hh, i);
                const py::ssize_t ob = p.cu_seqlens_q ? 0 : b, t = attncheck::q_row_of(p, b, i);
                const py::ssize_t at = ((ob * H + hh) * rows + t);
                for (int c = 0; c < Dv; ++c) {
                    out.mutable_data()[at * Dv + c] = o.out[r * std::size_t(Dv) + std::size_t(c)];
                    out_bound.mutable_data()[at * Dv + c] = o.out_bound[r * std::size_t(Dv) + std::size_t(c)];
                }
                lse.mutable_data()[at] = o.lse[r];
                lse_bound.mutable_data()[at] = o.lse_bound[r];
            }
    py::dict d;
    d["out"] = out;
    d["out_bound"] = out_bound;
    d["lse"] = lse;
    d["lse_bound"] = lse_bound;
    return d;
}

// The built-in version 2 kernels, callable from Python on a problem: for measuring the Python
// boundary against the C ABI on the same kernel, and as a known-good kernel in tests.
int run_builtin(const std::string& name, const py::object& problem) {
    const std::shared_ptr<Handle> h = handle_of(problem);
    h->check_live("attncheck.builtin");
    if (name == "reference_v2") return attncheck_reference_kernel_v2(&h->p);
    throw py::value_error("no built-in kernel '" + name + "' (reference_v2)");
}

int builtin_forward(const attncheck_problem_v2* p) { return attncheck_reference_kernel_v2(p); }

py::dict check_builtin(const std::string& name, const std::string& declare, std::vector<std::string> properties,
                       int cases, bool decoder, std::uint64_t seed) {
    if (name != "reference_v2") throw py::value_error("no built-in kernel '" + name + "' (reference_v2)");
    attncheck::CheckOptions o;
    o.seed = seed;
    o.cases = cases;
    o.decoder = decoder;
    o.only = std::move(properties);
    o.declaration = declare;
    attncheck::CheckReport report;
    {
        py::gil_scoped_release release;
        report = attncheck::check_kernel(builtin_forward, name, o);
    }
    return report_to_python(report);
}

}  // namespace

PYBIND11_MODULE(_attncheck, m) {
    m.doc() = "attncheck's C++ engine (use the package attncheck, not this module)";
    // RapidCheck announces its configuration on stderr when it first loads it: not in a test log.
    attncheck::properties::quiet_rapidcheck_configuration();
    py::class_<Handle, std::shared_ptr<Handle>>(m, "Handle")
        .def_property_readonly("live", [](const Handle& h) { return h.live; })
        .def("describe", [](const Handle& h) {
            h.check_live("Problem.describe");
            return attncheck::describe_v2(h.p);
        });
    py::register_exception<KernelRaised>(m, "KernelRaised", PyExc_RuntimeError);
    m.def("check_kernel", &check_kernel, py::arg("forward"), py::arg("backward"), py::arg("name"), py::arg("declare"),
          py::arg("properties"), py::arg("cases"), py::arg("decoder_cases"), py::arg("decoder"), py::arg("seed"),
          py::arg("shrink_time"), py::arg("allow_unchecked"), py::arg("replay"));
    m.def("make_problem", &make_problem, py::arg("q"), py::arg("k"), py::arg("v"), py::arg("dtype"),
          py::arg("causal"), py::arg("scale"), py::arg("q_pos"), py::arg("kv_lens"), py::arg("cu_seqlens_q"),
          py::arg("cu_seqlens_k"), py::arg("window_left"), py::arg("window_right"), py::arg("softcap"),
          py::arg("alibi_slopes"), py::arg("sinks"), py::arg("block_table"), py::arg("lse"));
    m.def("reference", &reference, py::arg("problem"), py::arg("rounds_probabilities"), py::arg("tanh_ulps"));
    m.def("run_builtin", &run_builtin, py::arg("name"), py::arg("problem"));
    m.def("check_builtin", &check_builtin, py::arg("name"), py::arg("declare"), py::arg("properties"),
          py::arg("cases"), py::arg("decoder"), py::arg("seed"));
    m.def("unsupported_reason", [](const py::object& problem, const std::string& declare) {
        const std::shared_ptr<Handle> h = handle_of(problem);
        h->check_live("attncheck.require_declared");
        return attncheck::KernelDeclaration::parse(declare).unsupported_reason(h->p);
    });
    m.def("declaration_error", [](const std::string& text) -> std::string {
        try {
            attncheck::KernelDeclaration::parse(text);
            return "";
        } catch (const std::invalid_argument& e) {
            return e.what();
        }
    });
}
