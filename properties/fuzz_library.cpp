// properties/fuzz_library.cpp — `attncheck fuzz --kernel-lib`: a kernel from a shared library, run
// in a worker process per property (properties/isolation/isolation.hpp describes the protocol: the worker
// is this same program started as `fuzz --worker ...`, announcing each case on a channel and
// writing its results as JSON), and the worker's side of it.
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>

#include "attncheck/error.hpp"
#include "kernels/registry.hpp"
#include "properties/fuzz_run.hpp"

namespace attncheck::properties {
namespace {

// The worker's result file: mkstemp in $TMPDIR (else /tmp), removed when the run ends.
class WorkerOutFile {
public:
    WorkerOutFile() {
        const char* dir = std::getenv("TMPDIR");
        const std::string base = dir && *dir ? dir : "/tmp";
        std::string tmpl = base + "/attncheck-worker-XXXXXX.json";
        std::vector<char> buf(tmpl.begin(), tmpl.end());
        buf.push_back('\0');
        const int fd = ::mkstemps(buf.data(), 5);
        if (fd < 0)
            throw InputError("cannot create the worker's result file in " + base + " (TMPDIR): " + std::strerror(errno));
        ::close(fd);
        path_ = buf.data();
    }
    ~WorkerOutFile() { std::remove(path_.c_str()); }
    WorkerOutFile(const WorkerOutFile&) = delete;
    WorkerOutFile& operator=(const WorkerOutFile&) = delete;
    const std::string& path() const { return path_; }

private:
    std::string path_;
};

// The command line of the worker that runs one property of the kernel `subject` names.
std::vector<std::string> worker_args(const FuzzOptions& o, const std::vector<std::string>& subject, std::uint64_t seed,
                                     const std::string& prop, int cases, const std::string& out_path) {
    std::ostringstream shrink_time;
    shrink_time << o.shrink_time_s;
    std::vector<std::string> args = {"fuzz", "--worker"};
    args.insert(args.end(), subject.begin(), subject.end());
    args.insert(args.end(), {"--property", prop, "--seed", std::to_string(seed),
                             "--cases", std::to_string(cases), "--shrink-time", shrink_time.str(), "--worker-out",
                             out_path});
    if (!o.declare.empty()) args.insert(args.end(), {"--declare", o.declare});
    if (!o.reproduce.empty()) args.insert(args.end(), {"--reproduce", o.reproduce});
    return args;
}

// Runs one property's worker, showing its progress (and its shrinking) on `line`.
WorkerOutcome run_property_worker(const FuzzOptions& o, const std::vector<std::string>& args, const std::string& label,
                                  int cases, ProgressLine& line) {
    WorkerOptions wo;
    wo.timeout_s = std::max(kWorkerPropertyTimeoutS, o.timeout_s);
    wo.case_timeout_s = o.timeout_s;
    const Progress progress = line.track(label, cases);
    wo.on_case = [&](const CaseMark& m) {
        if (m.shrink_step == 0) {
            if (progress) progress(int(m.index) - 1);
        } else {
            line.show(label + " shrinking case " + std::to_string(m.index) + ", step " + std::to_string(m.shrink_step));
        }
    };
    const WorkerOutcome w = run_worker(args, wo);
    line.clear();
    return w;
}

// The rows a worker wrote to its result file (none when it did not exit or the file is unreadable).
void read_worker_rows(const std::string& path, const Row& base, std::vector<Row>& rows) {
    const std::size_t first_new = rows.size();
    std::ifstream in(path);
    nlohmann::json j;
    try {
        if (in && (in >> j) && j.contains("results"))
            for (const auto& r : j["results"]) {
                Row row = base;
                row.kind = row_kind_from_string(r.value("kind", ""), base.kind);
                row.subject = r.value("subject", base.subject);
                row.result = from_json(r);
                rows.push_back(std::move(row));
            }
    } catch (const std::exception&) {
        rows.resize(first_new);
    }
}

// The row of a worker that crashed, hung, or wrote nothing.
Row failed_worker_row(const Row& base, const WorkerOutcome& w) {
    Row row = base;
    row.result.status = Status::fail;
    row.result.message = "worker " + w.describe();
    if (!w.output_tail.empty()) row.result.message += "\n  worker output (tail):\n" + w.output_tail;
    // The announced case number counts from 1, as "FAIL @N" does.
    if (w.last_case) row.result.failed_at = int(w.last_case->index);
    if (w.last_case) row.result.cases = std::max(0, int(w.last_case->index) - 1);
    row.result.seconds = w.seconds;
    return row;
}

// "[kernel k] agreement: pass 300 in 1.2 s" for each new row, as the worker ends.
void print_verdicts(const std::vector<Row>& rows, std::size_t first_new, const std::string& label, int cases,
                    const WorkerOutcome& w, ProgressLine& line) {
    for (std::size_t i = first_new; i < rows.size(); ++i) {
        const Row& r = rows[i];
        line.show(label + " " + std::to_string(r.result.cases) + "/" + std::to_string(cases), true);
        line.clear();
        std::cout << label << ": " << cell(r.result);
        if (r.result.status == Status::fail && w.kind != WorkerOutcome::Kind::exited)
            std::cout << " (" << (w.kind == WorkerOutcome::Kind::crashed ? "crashed" : "timed out") << ")";
        std::cout << " in " << seconds_text(r.result.seconds) << " s\n";
    }
    std::cout.flush();
}

}  // namespace

void run_library_isolated(const FuzzOptions& o, std::uint64_t seed, std::vector<Row>& rows) {
    // A version 2 kernel has the version 2 kernel-level properties; either has the decoder level
    // when its declaration lets the optimized decoder call it (decoder_unavailable).
    const LoadedKernel lk = load_kernel_library(o.kernel_lib, o.symbol);
    IsolatedSubject s;
    s.name = o.symbol;
    s.worker_args = {"--kernel-lib", o.kernel_lib, "--symbol", o.symbol};
    s.flag = "--kernel-lib " + o.kernel_lib + " --symbol " + o.symbol + declare_flag(o);
    s.v2 = lk.fn_v2 != nullptr;
    s.declaration = declaration_of(lk, o);
    const std::string unavailable = decoder_unavailable(s.declaration, s.v2);
    s.decoder_level = unavailable.empty();
    if (!unavailable.empty() && o.level != Level::kernel)
        std::cout << "optimized[" << s.name << "]: no decoder-level run: " << unavailable << "\n";
    run_isolated(o, seed, s, rows);
}

void run_isolated(const FuzzOptions& o, std::uint64_t seed, const IsolatedSubject& s, std::vector<Row>& rows) {
    const std::string& name = s.name;
    const bool v2 = s.v2;
    if (o.level != Level::decoder && s.verdict_lines)
        for (const auto& [prop, why] : kernel_properties_by_applicability(v2, s.declaration))
            if (!why.empty() && selected(o, prop))
                std::cout << progress_label(s.kind, name, prop) << ": not applicable (" << why << ")\n";
    struct Run {
        std::string prop;
        const DecoderProperty* decoder = nullptr;  // a decoder-level property, or null
    };
    std::vector<Run> props;
    for (const std::string& p : kernel_property_names(v2, s.declaration))
        if (selected(o, p) && o.level != Level::decoder) props.push_back({p});
    std::string without_backward;  // the training step's properties of a kernel without a backward, on one line
    for (const auto& p : decoder_properties()) {
        if (!selected(o, p.name) || o.level == Level::kernel || !s.decoder_level) continue;
        if (const std::string why = decoder_not_applicable(p, s.declaration, v2); !why.empty()) {
            if (lacks_backward(p, s.declaration))
                without_backward += (without_backward.empty() ? "" : ", ") + p.name;
            else if (s.verdict_lines)
                std::cout << progress_label(RowKind::decoder, "optimized[" + name + "]", p.name) << ": not applicable ("
                          << why << ")\n";
            continue;
        }
        props.push_back({p.name, &p});
    }
    if (s.verdict_lines && !without_backward.empty())
        std::cout << "[" << to_string(RowKind::decoder) << " optimized[" << name << "]] " << kNoBackwardLine
                  << without_backward << "\n";
    const WorkerOutFile out_file;
    const std::string& flag = s.flag;
    ProgressLine line(o.progress);
    // After the kernel's first crash or hang, its other properties would most likely crash or
    // hang the same way, each costing a worker start or a whole timeout: they are skipped.
    std::string broken;  // the property where it happened, "" while the kernel has not crashed or hung
    for (const auto& [prop, decoder] : props) {
        const bool is_decoder = decoder != nullptr;
        int capped_from = 0;
        int cases = is_decoder ? decoder_cases(o, kernel_failed(rows, name), capped_from) : kernel_cases(o);
        if (is_decoder) cases = decoder_property_cases(*decoder, cases, o.cases.has_value(), capped_from != 0);
        const RowKind kind = is_decoder ? RowKind::decoder : s.kind;
        const std::string subject = is_decoder ? "optimized[" + name + "]" : name;
        if (!takes(o, kind, subject, prop)) continue;
        Row base{kind, subject, flag, run_params(o, seed, cases), {}};
        base.library = s.library;
        base.capped_from = capped_from;
        base.result.property = prop;
        if (!broken.empty()) {
            Row row = base;
            row.result.status = Status::skipped;
            row.result.message = "the kernel crashed or timed out earlier, in " + broken;
            rows.push_back(std::move(row));
            continue;
        }
        if (std::FILE* f = std::fopen(out_file.path().c_str(), "w")) std::fclose(f);  // empty it
        const std::string label = progress_label(kind, subject, prop);
        const WorkerOutcome w =
            run_property_worker(o, worker_args(o, s.worker_args, seed, prop, cases, out_file.path()), label, cases, line);
        if (w.kind == WorkerOutcome::Kind::crashed || w.kind == WorkerOutcome::Kind::timed_out) broken = prop;
        const std::size_t first_new = rows.size();
        if (w.kind == WorkerOutcome::Kind::exited) read_worker_rows(out_file.path(), base, rows);
        if (rows.size() == first_new) rows.push_back(failed_worker_row(base, w));
        for (std::size_t i = first_new; i < rows.size(); ++i)
            if (rows[i].kind == RowKind::kernel) rows[i].kind = s.kind;  // the worker knows its kernel as a kernel
        if (s.verdict_lines) print_verdicts(rows, first_new, label, cases, w, line);
    }
}

namespace {

// The worker's results to o.worker_out; 0 when every property passed.
int finish_worker(const FuzzOptions& o, const std::vector<Row>& rows) {
    nlohmann::json j;
    j["results"] = nlohmann::json::array();
    bool ok = true;
    for (const Row& r : rows) {
        j["results"].push_back(to_json(r));
        ok &= r.result.status == Status::pass;
    }
    if (!o.worker_out.empty() && !write_file(o.worker_out, j.dump() + "\n"))
        std::cerr << "attncheck fuzz --worker: cannot write " << o.worker_out << ": " << std::strerror(errno) << "\n";
    return ok ? 0 : 1;
}

}  // namespace

int run_fuzz_worker(const FuzzOptions& o) {
    quiet_rapidcheck_configuration();
    try {
        const std::uint64_t seed = run_seed(o);
        const WorkerChannel channel = WorkerChannel::from_environment();
        std::vector<Row> rows;
        ProgressLine line;
        if (o.kernel_lib.empty()) {
            // A registry kernel isolated because it reads out of bounds (run_isolated).
            if (o.kernels.size() != 1 || !find_kernel(o.kernels[0]))
                throw InputError("fuzz --worker needs --kernel-lib PATH --symbol NAME, or one registry --kernel NAME");
            const KernelEntry& e = *find_kernel(o.kernels[0]);
            KernelUnderTest k{e.name, e.fn, true, KernelDeclaration::parse(e.declaration)};
            k.declaration.apply(o.declare);
            k.fn_v2 = e.fn_v2;
            set_backward(k, e.backward_v2);
            run_kernel_subject(o, seed, k, RowKind::kernel, rows, line, &channel);
            return finish_worker(o, rows);
        }
        const LoadedKernel lk = load_kernel_library(o.kernel_lib, o.symbol);
        const KernelDeclaration declaration = declaration_of(lk, o);
        KernelUnderTest k{o.symbol, lk.fn, false, declaration};
        k.fn_v2 = lk.fn_v2;
        set_backward(k, lk.backward_v2);
        run_kernel_subject(o, seed, k, RowKind::kernel, rows, line, &channel);
        if (decoder_unavailable(declaration, lk.fn_v2 != nullptr).empty())
            run_decoder_subject(o, run_params(o, seed, decoder_cases(o)), 0,
                                lk.fn_v2 ? DecoderUnderTest{"optimized[" + o.symbol + "]", lk.fn_v2, declaration, lk.backward_v2}
                                         : DecoderUnderTest{"optimized[" + o.symbol + "]", lk.fn, declaration},
                                "", rows, line, &channel);
        return finish_worker(o, rows);
    } catch (const InputError& e) {
        std::cerr << "attncheck fuzz: " << e.what() << "\n";
        return 2;
    }
}

}  // namespace attncheck::properties
