// properties/fuzz_run.cpp — the budgets, the progress line and the subject runs of `attncheck
// fuzz` (properties/fuzz_run.hpp).
#include "properties/fuzz_run.hpp"

#include <unistd.h>

#include <rapidcheck.h>

#include <algorithm>
#include <cstdio>
#include <iostream>

#include "attncheck/error.hpp"
#include "properties/property_runs.hpp"

namespace attncheck::properties {

const char* to_string(Level level) {
    switch (level) {
        case Level::all: return "all";
        case Level::kernel: return "kernel";
        case Level::decoder: return "decoder";
    }
    return "?";
}

void quiet_rapidcheck_configuration() {
    std::streambuf* err = std::cerr.rdbuf(nullptr);
    (void)rc::detail::configuration();
    std::cerr.rdbuf(err);
}

std::uint64_t run_seed(const FuzzOptions& o) {
    return o.seed.value_or(std::uint64_t(std::chrono::system_clock::now().time_since_epoch().count()) % 1000000007ull);
}

std::string progress_label(RowKind kind, const std::string& subject, const std::string& property) {
    std::string label = "[";
    label += to_string(kind);
    label += " " + subject + "] " + property;
    return label;
}

namespace {
bool g_progress_off = false;  // ProgressLine::turn_off_in_this_process
}  // namespace

ProgressLine::ProgressLine(bool forced) : tty_(isatty(2) != 0), on_(!g_progress_off && (tty_ || forced)) {}

void ProgressLine::turn_off_in_this_process() { g_progress_off = true; }

Progress ProgressLine::track(const std::string& label, int total) {
    if (!on_) return {};
    return [this, label, total](int done) {
        show(label + " " + std::to_string(done) + "/" + std::to_string(total), done == total);
    };
}

void ProgressLine::show(const std::string& text, bool force) {
    if (!on_) return;
    const auto now = std::chrono::steady_clock::now();
    if (!force && now - last_ < (tty_ ? std::chrono::milliseconds(100) : std::chrono::milliseconds(1000))) return;
    last_ = now;
    if (tty_) std::fprintf(stderr, "\r\033[K%s", text.c_str());
    else std::fprintf(stderr, "%s\n", text.c_str());
    std::fflush(stderr);
}

void ProgressLine::clear() {
    if (tty_ && on_) std::fprintf(stderr, "\r\033[K");
}

bool selected(const FuzzOptions& o, const std::string& property) {
    return o.properties.empty() || std::find(o.properties.begin(), o.properties.end(), property) != o.properties.end();
}

int kernel_cases(const FuzzOptions& o) { return o.cases.value_or(kDefaultKernelCases); }
int decoder_cases(const FuzzOptions& o) { return o.cases.value_or(kDefaultDecoderCases); }

int decoder_cases(const FuzzOptions& o, bool kernel_failed, int& capped_from) {
    capped_from = 0;
    // A campaign keeps every budget whole: a shard does not see the other shards' kernel-level
    // failures, and its runs must be the ones a single run of the campaign would make.
    if (o.cases || !kernel_failed || o.campaign() || kDefaultDecoderCases <= kCappedDecoderCases) return decoder_cases(o);
    capped_from = kDefaultDecoderCases;
    return kCappedDecoderCases;
}

RunParams run_params(const FuzzOptions& o, std::uint64_t seed, int cases) {
    RunParams p{seed, cases, o.shrink_time_s};
    p.reproduce = o.reproduce;
    return p;
}

bool takes(const FuzzOptions& o, RowKind kind, const std::string& subject, const std::string& property) {
    return !o.take || o.take(to_string(kind), subject, property);
}

std::string declare_flag(const FuzzOptions& o) { return o.declare.empty() ? "" : " --declare '" + o.declare + "'"; }

KernelDeclaration declaration_of(const LoadedKernel& lk, const FuzzOptions& o) {
    KernelDeclaration d = KernelDeclaration::parse(lk.declaration);
    d.apply(o.declare);
    if (d.backward_said == KernelDeclaration::Said::yes && !lk.backward_v2)
        throw InputError("kernel library " + lk.path + ": declared backward=yes, but " +
                         (lk.fn_v2 ? "it exports no '" + lk.symbol + "_backward'"
                                   : std::string("the backward pass is a version 2 entry point and '") + lk.symbol +
                                         "' is a version 1 kernel"));
    d.set_backward(lk.backward_v2 != nullptr);
    return d;
}

std::vector<std::pair<std::string, std::string>> kernel_properties_by_applicability(bool v2,
                                                                                   const KernelDeclaration& declaration) {
    std::vector<std::pair<std::string, std::string>> out;
    const KernelDeclaration checked = checked_declaration(declaration, v2);
    for (const auto& p : kernel_properties()) out.emplace_back(p.name, not_applicable(p, checked));
    return out;
}

std::vector<std::string> kernel_property_names(bool v2, const KernelDeclaration& declaration) {
    std::vector<std::string> names;
    for (const auto& [name, why] : kernel_properties_by_applicability(v2, declaration))
        if (why.empty()) names.push_back(name);
    return names;
}

void run_kernel_subject(const FuzzOptions& o, std::uint64_t seed, const KernelUnderTest& given, RowKind kind,
                        std::vector<Row>& rows, ProgressLine& line, const WorkerChannel* channel) {
    if (o.level == Level::decoder) return;
    const KernelUnderTest k = checked(given);
    const auto run = [&](const std::string& name, const auto& run_one) {
        if (!selected(o, name) || !takes(o, kind, k.name, name)) return;
        const RunParams params = run_params(o, seed, kernel_cases(o));
        Row row{kind, k.name, "--kernel " + k.name + declare_flag(o), params, {}};
        row.result = run_one(params, line.track(progress_label(kind, k.name, name), params.cases));
        line.clear();
        rows.push_back(std::move(row));
    };
    // What version 1 of the ABI lacks is one line; what a declaration excludes, a line each. A
    // mutant run's table says all (kind mutant).
    const bool v1 = k.fn_v2 == nullptr, say = kind != RowKind::mutant;
    const bool no_backward = !v1 && !k.backward && k.declaration.backward_said != KernelDeclaration::Said::no;
    std::string without_backward;
    for (const auto& prop : kernel_properties()) {
        if (const std::string why = not_applicable(prop, k.declaration); !why.empty()) {
            if (no_backward && needs_backward(prop)) {
                if (selected(o, prop.name)) without_backward += (without_backward.empty() ? "" : ", ") + prop.name;
            } else if (selected(o, prop.name) && say && !(v1 && needs_abi_v2(prop))) {
                std::cout << progress_label(kind, k.name, prop.name) << ": not applicable (" << why << ")\n";
            }
            continue;
        }
        run(prop.name, [&](const RunParams& params, const Progress& progress) {
            return run_kernel_property(prop, k, params, progress, channel);
        });
    }
    if (const std::string names = v1 && say ? abi_v1_lacks([&](const std::string& n) { return selected(o, n); }) : "";
        !names.empty())
        std::cout << "[" << to_string(kind) << " " << k.name << "] " << kAbiV1LacksLine << names << "\n";
    if (say && !without_backward.empty())
        std::cout << "[" << to_string(kind) << " " << k.name << "] " << kNoBackwardLine << without_backward << "\n";
}

void run_decoder_subject(const FuzzOptions& o, const RunParams& params, int capped_from, const DecoderUnderTest& d,
                         const std::string& flag, std::vector<Row>& rows, ProgressLine& line,
                         const WorkerChannel* channel) {
    if (o.level == Level::kernel) return;
    std::string without_backward;  // the training step's properties of a kernel without a backward, on one line
    for (const DecoderProperty& prop : decoder_properties()) {
        if (!selected(o, prop.name) || (prop.optimized_only && !d.optimized())) continue;
        if (const std::string why = decoder_not_applicable(prop, d.declaration, d.kernel.fn_v2 != nullptr); !why.empty()) {
            if (lacks_backward(prop, d.declaration))
                without_backward += (without_backward.empty() ? "" : ", ") + prop.name;
            else
                std::cout << progress_label(RowKind::decoder, d.name, prop.name) << ": not applicable (" << why << ")\n";
            continue;
        }
        if (!takes(o, RowKind::decoder, d.name, prop.name)) continue;
        RunParams own = params;
        own.cases = decoder_property_cases(prop, params.cases, o.cases.has_value(), capped_from != 0);
        Row row{RowKind::decoder, d.name, flag, own, {}};
        row.capped_from = capped_from;
        row.result = run_decoder_property(prop, d, own, line.track(progress_label(RowKind::decoder, d.name, prop.name), own.cases),
                                          channel);
        line.clear();
        rows.push_back(std::move(row));
    }
    if (!without_backward.empty())
        std::cout << "[" << to_string(RowKind::decoder) << " " << d.name << "] " << kNoBackwardLine << without_backward << "\n";
}

bool kernel_failed(const std::vector<Row>& rows, const std::string& kernel) {
    for (const Row& r : rows)
        if (r.kind == RowKind::kernel && r.subject == kernel && r.result.status != Status::pass) return true;
    return false;
}

int planned_runs(const FuzzOptions& o, const std::vector<PlannedKernel>& kernels, bool reference_decoder) {
    int n = 0;
    for (const PlannedKernel& k : kernels) {
        if (o.level != Level::decoder)
            for (const std::string& name : kernel_property_names(k.v2, k.declaration)) n += selected(o, name) ? 1 : 0;
        if (o.level != Level::kernel && k.decoder)
            for (const auto& p : decoder_properties())
                n += selected(o, p.name) && decoder_not_applicable(p, k.declaration, k.v2).empty() ? 1 : 0;
    }
    if (o.level != Level::kernel && reference_decoder)
        for (const auto& p : decoder_properties()) n += selected(o, p.name) && !p.optimized_only ? 1 : 0;
    return n;
}

}  // namespace attncheck::properties
