// bench/bound_campaign/bound_campaign.cpp — attncheck_bound_campaign: the long false-alarm and
// tightness campaign of NUMERICS.md version 2 (docs/numerics.md records its results).
//
//   attncheck_bound_campaign --cases N --seed S [--first I] [--kernels a,b] [--decoders]
//                            [--decoder-cases M] [--histograms FILE] [--merge FILE...]
//
// Draws kernel cases I .. I+N-1 of seed S from the suite's own generator (tests/zoo/ratio_cases:
// every input style, offset mode, padding and the large tier), computes the float64 oracle and
// its bound once per case, and runs every selected kernel on it: the correct kernels of
// tests/zoo/correct_kernels.hpp and the built-in attncheck_reference_kernel and
// attncheck_optimized_kernel. With --decoders, also M decoder cases (default N / 1000): the
// teacher-forced logits of reference::Decoder<float> and of optimized::Decoder with each kernel,
// against DecoderBound. Per subject and per input style: cases, flags (test ratio > 1), and the
// maximum, 99th percentile and median of the test ratio.
//
// A flag is printed when it happens, with the line that replays that one case. Exit 1 if any
// case is flagged (or a kernel refuses a well-formed case), 0 otherwise, 2 on bad usage.
//
// Percentiles come from a histogram of log10(ratio) with 200 bins per decade (a percentile is
// reported as its bin's upper edge: at most 1.2% above the exact value); the maximum is exact.
// --histograms writes the counts so that campaigns run in chunks (--first) can be combined with
// --merge into one table. Cases run in parallel (OpenMP, dynamic schedule); every case depends
// only on (seed, index), so the results do not depend on the thread count.
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <omp.h>

#include "attncheck/kernels.hpp"
#include "tests/zoo/correct_kernels.hpp"
#include "tests/zoo/ratio_cases.hpp"

namespace {

using attncheck::properties::InputStyle;

// log10(ratio) from kLogMin to kLogMax in kPerDecade bins; ratio 0 (an exact result) and
// anything below 10^kLogMin in bin 0, anything above 10^kLogMax (a flag far out) in the last.
constexpr int kPerDecade = 200, kLogMin = -12, kLogMax = 4;
constexpr int kBins = (kLogMax - kLogMin) * kPerDecade + 2;

struct Stats {
    std::uint64_t cases = 0, flags = 0, refused = 0;
    double max = 0;
    std::vector<std::uint64_t> bins = std::vector<std::uint64_t>(kBins, 0);

    void add(double ratio) {
        ++cases;
        if (ratio > attncheck::kRatioThreshold) ++flags;
        max = std::max(max, ratio);
        int b = 0;
        if (!(ratio <= std::pow(10.0, kLogMax))) {
            b = kBins - 1;  // also NaN and inf
        } else if (ratio >= std::pow(10.0, kLogMin)) {
            b = 1 + int(std::floor((std::log10(ratio) - kLogMin) * kPerDecade));
            b = std::clamp(b, 1, kBins - 2);
        }
        ++bins[std::size_t(b)];
    }
    void merge(const Stats& o) {
        cases += o.cases;
        flags += o.flags;
        refused += o.refused;
        max = std::max(max, o.max);
        for (int b = 0; b < kBins; ++b) bins[std::size_t(b)] += o.bins[std::size_t(b)];
    }
    // The upper edge of the bin holding the q-quantile (0 if that bin is the exact-zero bin).
    double quantile(double q) const {
        if (cases == 0) return 0;
        const auto want = std::uint64_t(std::ceil(q * double(cases)));
        std::uint64_t seen = 0;
        for (int b = 0; b < kBins; ++b) {
            seen += bins[std::size_t(b)];
            if (seen >= std::max<std::uint64_t>(want, 1)) {
                if (b == 0) return 0;
                if (b == kBins - 1) return max;
                return std::min(max, std::pow(10.0, kLogMin + double(b) / kPerDecade));
            }
        }
        return max;
    }
};

// subject -> style ("all" included) -> stats
using Table = std::map<std::string, std::map<std::string, Stats>>;

struct Subject {
    std::string name;
    attncheck_kernel_fn fn;
};

std::vector<Subject> all_kernels() {
    std::vector<Subject> s;
    for (const auto& k : attncheck::zoo::correct_kernels()) s.push_back({k.name, k.fn});
    s.push_back({"builtin_reference", attncheck_reference_kernel});
    s.push_back({"builtin_optimized", attncheck_optimized_kernel});
    return s;
}

std::vector<std::string> split(const std::string& s) {
    std::vector<std::string> out;
    std::stringstream in(s);
    for (std::string item; std::getline(in, item, ',');)
        if (!item.empty()) out.push_back(item);
    return out;
}

void print_table(const std::string& title, const Table& t, const std::vector<std::string>& order) {
    std::cout << "\n" << title << "\n";
    std::cout << std::left << std::setw(38) << "subject" << std::setw(11) << "style" << std::right << std::setw(10)
              << "cases" << std::setw(7) << "flags" << std::setw(12) << "max" << std::setw(12) << "p99"
              << std::setw(12) << "median" << "\n";
    for (const std::string& name : order) {
        const auto it = t.find(name);
        if (it == t.end()) continue;
        for (const auto& [style, st] : it->second) {
            std::cout << std::left << std::setw(38) << name << std::setw(11) << style << std::right << std::setw(10)
                      << st.cases << std::setw(7) << st.flags << std::setprecision(3) << std::setw(12) << st.max
                      << std::setw(12) << st.quantile(0.99) << std::setw(12) << st.quantile(0.5);
            if (st.refused) std::cout << "  (" << st.refused << " refused)";
            std::cout << "\n";
        }
    }
}

void write_histograms(const std::string& kind, const Table& t, std::ofstream& f) {
    for (const auto& [name, styles] : t)
        for (const auto& [style, st] : styles) {
            f << kind << " " << name << " " << style << " " << st.cases << " " << st.flags << " " << st.refused << " "
              << std::setprecision(17) << st.max;
            for (int b = 0; b < kBins; ++b)
                if (st.bins[std::size_t(b)]) f << " " << b << ":" << st.bins[std::size_t(b)];
            f << "\n";
        }
}

// Reads write_histograms' lines into kernel and decoder tables (adding to what they hold).
bool read_histograms(const std::string& path, Table& kernels, Table& decoders, std::vector<std::string>& order) {
    std::ifstream f(path);
    if (!f) return false;
    for (std::string line; std::getline(f, line);) {
        std::istringstream in(line);
        std::string kind, name, style;
        Stats st;
        in >> kind >> name >> style >> st.cases >> st.flags >> st.refused >> st.max;
        for (std::string bc; in >> bc;) {
            const auto colon = bc.find(':');
            st.bins[std::size_t(std::stoi(bc.substr(0, colon)))] = std::stoull(bc.substr(colon + 1));
        }
        (kind == "kernel" ? kernels : decoders)[name][style].merge(st);
        if (std::find(order.begin(), order.end(), name) == order.end()) order.push_back(name);
    }
    return true;
}

int usage(const std::string& why) {
    std::cerr << "attncheck_bound_campaign: " << why << "\n"
              << "usage: attncheck_bound_campaign --cases N --seed S [--first I] [--kernels a,b] [--decoders]\n"
              << "                                [--decoder-cases M] [--histograms FILE] [--merge FILE...]\n"
              << "kernels:";
    for (const Subject& s : all_kernels()) std::cerr << " " << s.name;
    std::cerr << "\n";
    return 2;
}

// The command line; Options::parse throws std::invalid_argument on a bad one.
struct Options {
    std::uint64_t cases = 0, seed = 0, first = 0;
    std::int64_t decoder_cases = -1;  // -1: cases / 1000, at least 1
    bool have_cases = false, have_seed = false, decoders = false, help = false;
    std::string kernels, histograms;
    std::vector<std::string> merge;

    static Options parse(int argc, char** argv) {
        Options o;
        for (int a = 1; a < argc; ++a) {
            const std::string arg = argv[a];
            auto next = [&]() -> std::string {
                if (a + 1 >= argc) throw std::invalid_argument(arg + " needs a value");
                return argv[++a];
            };
            if (arg == "--cases") o.cases = std::stoull(next()), o.have_cases = true;
            else if (arg == "--seed") o.seed = std::stoull(next()), o.have_seed = true;
            else if (arg == "--first") o.first = std::stoull(next());
            else if (arg == "--kernels") o.kernels = next();
            else if (arg == "--decoders") o.decoders = true;
            else if (arg == "--decoder-cases") o.decoder_cases = std::stoll(next());
            else if (arg == "--histograms") o.histograms = next();
            else if (arg == "--merge") {
                while (a + 1 < argc && std::string(argv[a + 1]).rfind("--", 0) != 0) o.merge.push_back(argv[++a]);
            } else if (arg == "--help") return o.help = true, o;
            else throw std::invalid_argument("unknown option " + arg);
        }
        return o;
    }
};

// --merge: one table from the histogram files of earlier runs. Exit code as main's.
int merge_histograms(const std::vector<std::string>& files) {
    Table kt, dt;
    std::vector<std::string> order;
    for (const std::string& f : files)
        if (!read_histograms(f, kt, dt, order)) return usage("cannot read " + f);
    std::uint64_t flags = 0;
    for (const auto* t : {&kt, &dt})
        for (const auto& [n, s] : *t) flags += s.at("all").flags + s.at("all").refused;
    print_table("kernel cases (merged from " + std::to_string(files.size()) + " files)", kt, order);
    if (!dt.empty()) print_table("decoder cases (teacher-forced logits)", dt, order);
    std::cout << "\n" << (flags ? "FLAGGED" : "no flags") << "\n";
    return flags ? 1 : 0;
}

// Runs body(index, table) for cases first .. first+count-1 on the OpenMP threads (dynamic
// schedule, `chunk` cases at a time), each thread adding to a table of its own, and merges those
// tables into `into`. Returns the sum of what the bodies returned (their flags).
template <class Body>
std::uint64_t run_cases(std::uint64_t first, std::uint64_t count, int chunk, Table& into, const Body& body) {
    std::uint64_t flagged = 0;
#pragma omp parallel
    {
        Table mine;
#pragma omp for schedule(dynamic, chunk) reduction(+ : flagged)
        for (std::int64_t n = 0; n < std::int64_t(count); ++n) flagged += body(first + std::uint64_t(n), mine);
#pragma omp critical(merge)
        for (const auto& [name, styles] : mine)
            for (const auto& [style, st] : styles) into[name][style].merge(st);
    }
    return flagged;
}

// Kernel case `index`: every subject against the case's oracle and bound. Returns its flags.
std::uint64_t kernel_case(std::uint64_t seed, std::uint64_t index, const std::vector<Subject>& subjects, Table& t) {
    std::uint64_t flagged = 0;
    const attncheck::zoo::BoundedKernelCase bc(attncheck::zoo::draw_kernel_case(seed, index));
    const std::string style = attncheck::properties::to_string(bc.c.style);
    for (const Subject& s : subjects) {
        const auto r = attncheck::zoo::kernel_ratio(s.fn, bc);
        if (r.refused) {
            ++t[s.name]["all"].refused;
            ++flagged;
            continue;
        }
        const double ratio = r.agreement.worst_ratio;
        t[s.name]["all"].add(ratio);
        t[s.name][style].add(ratio);
        if (ratio > attncheck::kRatioThreshold) {
            ++flagged;
#pragma omp critical(report)
            std::cout << "FLAG kernel " << s.name << " ratio " << ratio << " element " << r.agreement.worst_index
                      << ": " << r.agreement.describe() << "\n  case: " << describe(bc.c)
                      << "\n  replay: attncheck_bound_campaign --seed " << seed << " --first " << index
                      << " --cases 1 --kernels " << s.name << std::endl;
        }
    }
    return flagged;
}

// Decoder case `index`: the float32 reference decoder (names[0]) and the optimized decoder with
// each kernel of fns (names[1..]) against DecoderBound. Returns its flags.
std::uint64_t decoder_case(std::uint64_t seed, std::uint64_t index, const std::vector<attncheck_kernel_fn>& fns,
                           const std::vector<std::string>& names, Table& t) {
    std::uint64_t flagged = 0;
    const auto r = attncheck::zoo::decoder_ratios(attncheck::zoo::draw_decoder_case(seed, index), fns);
    for (std::size_t i = 0; i <= fns.size(); ++i) {
        const std::string& name = names[i];
        if (i > 0 && r.refused[i - 1]) {
            ++t[name]["all"].refused;
            ++flagged;
            continue;
        }
        const attncheck::Agreement& a = i == 0 ? r.reference_float : r.kernel[i - 1];
        t[name]["all"].add(a.worst_ratio);
        if (!a.ok) {
            ++flagged;
#pragma omp critical(report)
            std::cout << "FLAG decoder " << name << " ratio " << a.worst_ratio << " logit " << a.worst_index << ": "
                      << a.describe() << "\n  case: " << r.describe << "\n  replay: attncheck_bound_campaign --seed "
                      << seed << " --first " << index << " --cases 0 --decoders --decoder-cases 1" << std::endl;
        }
    }
    return flagged;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
    Options o;
    try {
        o = Options::parse(argc, argv);
    } catch (const std::exception& e) {
        return usage(e.what());
    }
    if (o.help) return usage("help"), 0;
    if (!o.merge.empty()) return merge_histograms(o.merge);
    if (!o.have_cases || !o.have_seed) return usage("--cases and --seed are required");

    std::vector<Subject> subjects = all_kernels();
    if (!o.kernels.empty()) {
        std::vector<Subject> chosen;
        for (const std::string& n : split(o.kernels)) {
            const auto it = std::find_if(subjects.begin(), subjects.end(), [&](const Subject& s) { return s.name == n; });
            if (it == subjects.end()) return usage("unknown kernel " + n);
            chosen.push_back(*it);
        }
        subjects = chosen;
    }
    std::vector<std::string> order;
    for (const Subject& s : subjects) order.push_back(s.name);

    const std::uint64_t seed = o.seed, first = o.first, cases = o.cases;
    std::cout << "attncheck_bound_campaign: seed " << seed << ", kernel cases " << first << ".." << first + cases
              << ", " << subjects.size() << " kernels, " << omp_get_max_threads() << " threads\n";
    Table kt;
    const auto t0 = std::chrono::steady_clock::now();
    std::uint64_t flagged = run_cases(first, cases, 8, kt, [&](std::uint64_t index, Table& t) {
        return kernel_case(seed, index, subjects, t);
    });
    const double kernel_s = seconds_since(t0);
    if (cases > 0) {
        print_table("kernel cases: test ratio |kernel - oracle| / bound (max over each case's elements)", kt, order);
        std::cout << "kernel cases: " << cases << " in " << std::fixed << std::setprecision(1) << kernel_s << " s ("
                  << std::setprecision(0) << double(cases) / kernel_s << " cases/s)\n" << std::defaultfloat;
    }

    Table dt;
    if (o.decoders) {
        const std::uint64_t M =
            o.decoder_cases >= 0 ? std::uint64_t(o.decoder_cases) : std::max<std::uint64_t>(1, cases / 1000);
        std::vector<attncheck_kernel_fn> fns;
        std::vector<std::string> dorder = {"reference_decoder_float"};
        for (const Subject& s : subjects) {
            fns.push_back(s.fn);
            dorder.push_back("optimized_decoder+" + s.name);
        }
        const auto t1 = std::chrono::steady_clock::now();
        flagged += run_cases(first, M, 1, dt, [&](std::uint64_t index, Table& t) {
            return decoder_case(seed, index, fns, dorder, t);
        });
        const double dec_s = seconds_since(t1);
        print_table("decoder cases: test ratio of the teacher-forced logits against DecoderBound", dt, dorder);
        std::cout << "decoder cases: " << M << " in " << std::fixed << std::setprecision(1) << dec_s << " s\n"
                  << std::defaultfloat;
    }

    if (!o.histograms.empty()) {
        std::ofstream f(o.histograms);
        write_histograms("kernel", kt, f);
        write_histograms("decoder", dt, f);
        if (!f) {
            std::cerr << "cannot write " << o.histograms << "\n";
            return 2;
        }
    }
    std::cout << "\n" << (flagged ? "FLAGGED: " + std::to_string(flagged) + " subject-cases" : std::string("no flags"))
              << " (seed " << seed << ", kernel cases " << first << ".." << first + cases << ")\n";
    return flagged ? 1 : 0;
}
