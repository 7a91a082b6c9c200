// properties/fuzz.cpp — the `attncheck fuzz` run (properties/fuzz.hpp): which subjects run, in
// what order, and the verdict; the report itself is properties/fuzz_report.cpp.
//
// Subjects: every kernel at kernel level (kernel_properties.hpp) and every decoder at decoder
// level (decoder_properties.hpp): the reference decoder in float32 and the optimized decoder
// with each kernel plugged in. A kernel from a shared library (--kernel-lib) runs in a worker
// process, one per property, so a crash or a hang is reported and the run carries on
// (properties/fuzz_library.cpp).
//
// Seeds: one seed S for the run (time-based unless --seed); every property runs RapidCheck at S
// with --cases as maxSuccess, so `--property P --seed S --cases N` replays any line exactly (the
// failing case exactly; how far it shrinks depends on the shrink budget, --shrink-time).
#include "properties/fuzz.hpp"

#include <cerrno>
#include <cstring>
#include <iomanip>
#include <iostream>

#include "attncheck/error.hpp"
#include "attncheck/isa.hpp"
#include "kernels/registry.hpp"
#include "properties/campaign.hpp"
#include "properties/fuzz_parallel.hpp"
#include "properties/fuzz_run.hpp"

namespace attncheck::properties {
namespace {

int usage_error(const std::string& message) {
    std::cerr << "attncheck fuzz: " << message << "\n";
    return 2;
}

// A registry kernel as the properties take it, with what its entry declares (version 1 or 2;
// bitwise batch independence: the built-ins and the zoo split work by sequence and head only).
KernelUnderTest under_test(const KernelEntry& e) {
    KernelUnderTest k{e.name, e.fn, true, KernelDeclaration::parse(e.declaration)};
    k.fn_v2 = e.fn_v2;
    set_backward(k, e.backward_v2);
    return k;
}

// Whether the optimized decoder runs around k (when its declaration allows: decoder_unavailable).
bool has_decoder_level(const KernelUnderTest& k) { return decoder_unavailable(k.declaration, k.fn_v2 != nullptr).empty(); }

// A registry kernel that reads outside its inputs (KernelEntry::reads_out_of_bounds) runs in a
// worker process per property, like a --kernel-lib kernel: its reads may fault.
IsolatedSubject isolated(const KernelEntry& e, const FuzzOptions& o, RowKind kind) {
    IsolatedSubject s;
    s.name = e.name;
    s.worker_args = {"--kernel", e.name};
    s.flag = "--kernel " + e.name + declare_flag(o);
    s.v2 = e.fn_v2 != nullptr;
    s.declaration = KernelDeclaration::parse(e.declaration);
    s.declaration.apply(o.declare);
    s.declaration.set_backward(e.fn_v2 && e.backward_v2);
    s.kind = kind;
    s.library = false;
    s.verdict_lines = kind != RowKind::mutant;
    return s;
}

// The kernels the run checks in process, with their declarations: --kernel's names from the
// registry, or every built-in when nothing else is selected. Throws InputError for an unknown name.
std::vector<KernelUnderTest> selected_kernels(const FuzzOptions& o, bool everything) {
    std::vector<KernelUnderTest> kernels;
    for (const std::string& name : o.kernels) {
        const KernelEntry* e = find_kernel(name);
        if (!e) {
            std::string known;
            for (const KernelEntry* b : kernels_of(KernelRole::builtin)) known += " " + b->name;
            throw InputError("--kernel " + name + ": no such kernel (built-ins:" + known +
                             "; or a mutant name from --mutants)");
        }
        kernels.push_back(under_test(*e));
    }
    if (everything)
        for (const KernelEntry* e : kernels_of(KernelRole::builtin)) kernels.push_back(under_test(*e));
    // The registry's declaration, then the flags' items over it.
    for (auto& k : kernels) {
        k.declaration = KernelDeclaration::parse(find_kernel(k.name)->declaration);
        k.declaration.apply(o.declare);
        set_backward(k, k.backward);
    }
    return kernels;
}

// Why the selection runs nothing, for the usage error.
std::string nothing_selected(const FuzzOptions& o, const std::vector<PlannedKernel>& kernels) {
    std::string filter;
    if (!o.properties.empty()) {
        filter = "--property ";
        for (std::size_t i = 0; i < o.properties.size(); ++i) filter += (i ? "," : "") + o.properties[i];
    }
    if (o.level != Level::all) filter += (filter.empty() ? "" : " with ") + std::string("--level ") + to_string(o.level);
    // Decoder-level runs asked for, and none of the kernels has one: say why.
    std::string no_decoder;
    if (o.level != Level::kernel)
        for (const PlannedKernel& k : kernels)
            if (!k.decoder && !k.no_decoder.empty()) no_decoder += (no_decoder.empty() ? " (" : "; ") + k.no_decoder;
    if (!no_decoder.empty()) no_decoder += ")";
    return "no property selected: " + filter + " leaves nothing to run on the selected subjects" +
           (o.reference_decoder && !o.properties.empty() ? " (the reference decoder has no kernel-level properties)"
                                                         : "") +
           no_decoder + "; see attncheck fuzz --list";
}

// The mutant zoo: the correct base kernels first (they must pass everything, or a kill would
// prove nothing), then every mutant, a line of the kill table each as it finishes.
int run_mutants(const FuzzOptions& o, std::uint64_t seed, std::vector<Row>& rows, nlohmann::json& json_out) {
    ProgressLine line(o.progress);
    // A backward zoo entry runs the selected gradient properties only (its forward is a built-in).
    FuzzOptions gradients_only = o;
    gradients_only.properties.clear();
    for (const KernelProperty& p : kernel_properties())
        if (needs_backward(p) && selected(o, p.name)) gradients_only.properties.push_back(p.name);
    const auto options_of = [&](const KernelEntry& e) -> const FuzzOptions& { return e.backward_only ? gradients_only : o; };
    for (const KernelEntry* base : kernels_of(KernelRole::zoo_base))
        if (!base->backward_only || !gradients_only.properties.empty())
            run_kernel_subject(options_of(*base), seed, under_test(*base), RowKind::control, rows, line);
    bool controls_ok = true;
    for (const Row& r : rows)
        if (r.kind == RowKind::control && r.result.status != Status::pass) controls_ok = false;

    print_mutant_header(std::cout, seed, kernel_cases(o));
    const std::vector<const KernelEntry*> mutants = kernels_of(KernelRole::mutant);
    std::vector<int> kill_cases;
    for (const KernelEntry* m : mutants) {
        std::vector<Row> mine;
        if (m->backward_only && gradients_only.properties.empty()) {
            // nothing selected that reaches its bug: it survives this selection
        } else if (m->reads_out_of_bounds) {
            run_isolated(options_of(*m), seed, isolated(*m, options_of(*m), RowKind::mutant), mine);
        } else {
            run_kernel_subject(options_of(*m), seed, under_test(*m), RowKind::mutant, mine, line);
        }
        const MutantVerdict v = mutant_verdict(mine);
        if (v.first) kill_cases.push_back(v.first->result.failed_at);
        json_out["mutants"].push_back(mutant_json(m->name, m->bug, v));
        print_mutant_line(std::cout, m->name, v);
        for (Row& r : mine) rows.push_back(std::move(r));
    }
    const bool all_killed = kill_cases.size() == mutants.size();
    json_out["median_cases_to_kill"] = print_mutant_summary(std::cout, std::move(kill_cases), mutants.size());
    if (!controls_ok) {
        std::cout << "\nthe zoo's correct base kernels FAILED a property (a kill proves nothing then):\n";
        std::map<std::string, std::string> seen;
        for (const Row& r : rows)
            if (r.kind == RowKind::control && r.result.status != Status::pass) print_failure(std::cout, r, seen);
    }
    return all_killed && controls_ok ? 0 : 1;
}

}  // namespace

void collect_subjects(const FuzzOptions& o, std::uint64_t seed, const std::vector<KernelUnderTest>& kernels,
                      bool reference_decoder, std::vector<Row>& rows) {
    ProgressLine line(o.progress);
    for (const auto& k : kernels) {
        const KernelEntry* e = find_kernel(k.name);
        if (e && e->reads_out_of_bounds)
            run_isolated(o, seed, isolated(*e, o, RowKind::kernel), rows);
        else
            run_kernel_subject(o, seed, k, RowKind::kernel, rows, line);
    }
    if (reference_decoder)
        run_decoder_subject(o, run_params(o, seed, decoder_cases(o)), 0, DecoderUnderTest{"reference", attncheck_kernel_fn{nullptr}},
                            "--decoder reference", rows, line);
    for (const auto& k : kernels) {
        const KernelEntry* e = find_kernel(k.name);
        if (e && e->reads_out_of_bounds) continue;  // in process it would read outside the decoder's tensors
        if (!has_decoder_level(k)) {
            if (o.level != Level::kernel)
                std::cout << "optimized[" << k.name << "]: no decoder-level run: "
                          << decoder_unavailable(k.declaration, k.fn_v2 != nullptr) << "\n";
            continue;
        }
        int capped_from = 0;
        const int cases = decoder_cases(o, kernel_failed(rows, k.name), capped_from);
        run_decoder_subject(o, run_params(o, seed, cases), capped_from,
                            DecoderUnderTest{"optimized[" + k.name + "]", *find_kernel(k.name), k.declaration},
                            "--kernel " + k.name + declare_flag(o), rows, line);
    }
    if (!o.kernel_lib.empty()) run_library_isolated(o, seed, rows);
}

int report_rows(const FuzzOptions& o, const std::vector<Row>& table, const std::vector<Row>& rows) {
    print_table(std::cout, table, RowKind::kernel, "kernel property");
    print_table(std::cout, table, RowKind::decoder, "decoder property");
    int code = 0;
    for (const Row& r : table)
        if (fails_run(r.result.status, o.allow_unchecked)) code = 1;
    print_notes(std::cout, table);
    print_failures(std::cout, rows);
    print_skipped(std::cout, table);
    return code;
}

int finish(const FuzzOptions& o, std::uint64_t seed, double seconds, const std::vector<Row>& rows,
           nlohmann::json& json_out, int code, const std::vector<Row>* junit_rows) {
    int total_cases = 0;
    for (const Row& r : rows) total_cases += r.result.cases;
    std::cout << (code == 0 ? (o.mutants ? "every mutant killed" : "all passed") : "FAILED") << ": " << rows.size()
              << " property runs, " << total_cases << " cases in " << std::fixed << std::setprecision(1) << seconds
              << " s (seed " << seed << ")\n";
    std::cout.flush();
    const auto written = [&](const std::string& flag, const std::string& path, const std::string& text) {
        if (path.empty() || write_file(path, text)) return;
        std::cerr << "attncheck fuzz: " << flag << " " << path << ": cannot write: " << std::strerror(errno) << "\n";
        if (code == 0) code = 2;
    };
    if (!o.json.empty()) {
        json_out["results"] = nlohmann::json::array();
        for (const Row& r : rows) json_out["results"].push_back(to_json(r));
        json_out["seconds"] = seconds;
        json_out["passed"] = code == 0;
        written("--json", o.json, json_out.dump(2) + "\n");
    }
    written("--junit", o.junit, junit_xml(junit_rows ? *junit_rows : rows, seed, seconds));
    return code;
}

namespace {

// Everything that makes the run bad usage, found before it starts: unknown kernels, a library
// or declaration that does not load, a selection that runs nothing, unwritable output files.
// Returns the kernels to run in process, what is declared (for the "declared:" line) and how
// many property runs the selection makes.
std::vector<KernelUnderTest> prepare(const FuzzOptions& o, bool everything, std::string& declared, int& planned) {
    std::vector<KernelUnderTest> kernels = selected_kernels(o, everything);
    declared = KernelDeclaration::parse(o.declare).to_string();
    std::vector<PlannedKernel> planned_kernels;
    for (const auto& k : kernels) {
        const KernelEntry* e = find_kernel(k.name);
        const std::string why = e && e->reads_out_of_bounds ? k.name + " reads out of bounds: it runs only isolated, at kernel level"
                                                            : decoder_unavailable(k.declaration, k.fn_v2 != nullptr);
        planned_kernels.push_back({k.fn_v2 != nullptr, k.declaration, why.empty(), why});
    }
    if (!o.kernel_lib.empty()) {
        const LoadedKernel lk = load_kernel_library(o.kernel_lib, o.symbol);
        const KernelDeclaration d = declaration_of(lk, o);
        declared = d.to_string();
        const std::string why = decoder_unavailable(d, lk.fn_v2 != nullptr);
        planned_kernels.push_back({lk.fn_v2 != nullptr, d, why.empty(), why});
    }
    KernelDeclaration with_backward;
    with_backward.set_backward(true);
    planned = o.mutants ? planned_runs(o, {{false, {}, false, {}}, {true, with_backward, false, {}}}, false)
                        : planned_runs(o, planned_kernels, everything || o.reference_decoder);
    if (planned == 0) throw InputError(nothing_selected(o, planned_kernels));
    for (const auto& [flag, path] : {std::pair<std::string, std::string>{"--json", o.json}, {"--junit", o.junit}}) {
        if (path.empty()) continue;
        const std::string why = unwritable(path);
        if (!why.empty()) throw InputError(flag + " " + path + ": " + why);
    }
    return kernels;
}

// The subjects whose property runs --jobs keeps in one process, in order (their group's name; ""
// for any other): a kernel run isolated (--kernel-lib, a registry kernel that reads out of
// bounds) skips its remaining properties after its first crash or hang (run_isolated).
SubjectGroup isolated_group(const FuzzOptions& o) {
    return [&o](const std::string& subject) -> std::string {
        if (!o.kernel_lib.empty() && (subject == o.symbol || subject == "optimized[" + o.symbol + "]")) return o.symbol;
        const KernelEntry* e = find_kernel(subject);
        return e && e->reads_out_of_bounds ? subject : "";
    };
}

// Whether the selection is one subject whose runs stay in one process anyway (isolated_group):
// --jobs would only fork a worker for it, and lose its progress line.
bool one_process_anyway(const FuzzOptions& o, const std::vector<KernelUnderTest>& kernels, bool everything) {
    if (everything || o.reference_decoder) return false;
    int isolated = o.kernel_lib.empty() ? 0 : 1;
    for (const KernelUnderTest& k : kernels) {
        const KernelEntry* e = find_kernel(k.name);
        if (!e || !e->reads_out_of_bounds) return false;
        ++isolated;
    }
    return isolated <= 1;
}

}  // namespace

int run_fuzz(const FuzzOptions& o) {
    quiet_rapidcheck_configuration();
    const std::uint64_t seed = run_seed(o);
    try {
        const bool everything = !o.mutants && o.kernels.empty() && o.kernel_lib.empty() && !o.reference_decoder;
        std::string declared;
        int planned = 0;
        const std::vector<KernelUnderTest> kernels = prepare(o, everything, declared, planned);

        std::cout << "attncheck fuzz: seed " << seed << "; " << isa_line() << std::endl;
        if (!declared.empty()) std::cout << "declared: " << declared << std::endl;
        const auto t0 = std::chrono::steady_clock::now();
        std::vector<Row> rows;
        nlohmann::json json_out;
        json_out["schema_version"] = kJsonSchemaVersion;
        json_out["seed"] = seed;
        json_out["isa"] = isa_line();
        if (o.campaign() || !o.corpus.empty())
            return run_campaign(o, seed, kernels, everything || o.reference_decoder, json_out);
        int code = 0;
        if (o.mutants) {
            code = run_mutants(o, seed, rows, json_out);
        } else {
            const auto walk = [&](const FuzzOptions& w, std::vector<Row>& into) {
                collect_subjects(w, seed, kernels, everything || o.reference_decoder, into);
            };
            if (o.jobs <= 1 || one_process_anyway(o, kernels, everything)) walk(o, rows);
            else if (!walk_in_processes(o, planned, walk, isolated_group(o), rows)) return 1;
            code = report_rows(o, rows, rows);
        }
        if (o.verbose) print_spread(std::cout, rows);
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        return finish(o, seed, seconds, rows, json_out, code);
    } catch (const InputError& e) {
        return usage_error(e.what());
    }
}

void print_property_list(std::ostream& os) {
    // One name column for the three lists: the longest name and two spaces.
    std::size_t width = 0;
    const auto fit = [&width](const std::string& name) { width = name.size() > width ? name.size() : width; };
    for (const auto& p : kernel_properties()) fit(p.name);
    for (const auto& p : decoder_properties()) fit(p.name);
    const int column = int(width + 2);
    // What a version 1 kernel (attncheck/kernel_abi.h) cannot be posed.
    const std::string v1_lacks = abi_v1_lacks([](const std::string&) { return true; });
    os << "kernel-level properties:\n";
    for (const auto& p : kernel_properties()) os << "  " << std::left << std::setw(column) << p.name << p.summary << "\n";
    os << "(a kernel of ABI version 1, attncheck/kernel_abi.h, gets all but " << v1_lacks
       << ": its ABI has nothing they need)\n";
    os << "decoder-level properties:\n";
    for (const auto& p : decoder_properties()) os << "  " << std::left << std::setw(column) << p.name << p.summary << "\n";
}


}  // namespace attncheck::properties
