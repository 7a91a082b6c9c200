// properties/campaign.cpp — the campaign driver of `attncheck fuzz` (properties/campaign.hpp):
// the corpus replayed first, then rounds of units taken by this shard until the rounds, the
// time or a signal end it, with a checkpoint of --json along the way.
#include "properties/campaign.hpp"

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "attncheck/error.hpp"
#include "properties/fuzz_run.hpp"
#include "properties/property_runs.hpp"

namespace attncheck::properties {
namespace {

using Clock = std::chrono::steady_clock;

// The signal that asked the campaign to stop (0: none). The first SIGINT or SIGTERM only sets it
// (the property run in flight finishes, the report is written); the handler then gives the
// signal back its default action, so a second one ends the process at once.
volatile std::sig_atomic_t g_stop_signal = 0;

extern "C" void on_stop_signal(int sig) {
    g_stop_signal = sig;
    std::signal(sig, SIG_DFL);
}

// Installs the handlers for the campaign's lifetime and puts the previous ones back after it.
class StopSignals {
public:
    StopSignals() {
        g_stop_signal = 0;
        int_ = std::signal(SIGINT, on_stop_signal);
        term_ = std::signal(SIGTERM, on_stop_signal);
    }
    ~StopSignals() {
        std::signal(SIGINT, int_);
        std::signal(SIGTERM, term_);
    }
    StopSignals(const StopSignals&) = delete;
    StopSignals& operator=(const StopSignals&) = delete;

private:
    void (*int_)(int) = SIG_DFL;
    void (*term_)(int) = SIG_DFL;
};

const char* signal_name(int sig) { return sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "a signal"; }

// std::cout silenced while a round runs (its per-subject lines would repeat every round): the
// campaign prints a line per round instead.
class QuietStdout {
public:
    QuietStdout() : buf_(std::cout.rdbuf(nullptr)) {}
    ~QuietStdout() {
        std::cout.rdbuf(buf_);
        std::cout.clear();
    }
    QuietStdout(const QuietStdout&) = delete;
    QuietStdout& operator=(const QuietStdout&) = delete;

private:
    std::streambuf* buf_;
};

std::string row_key(const Row& r) { return std::string(to_string(r.kind)) + "\n" + r.subject + "\n" + r.result.property; }

// Writes text to path through a temporary file and a rename, so that a reader (or a campaign
// killed mid-write) never sees half a checkpoint.
bool write_atomically(const std::string& path, const std::string& text) {
    const std::string tmp = path + ".tmp";
    if (!write_file(tmp, text)) return false;
    if (std::rename(tmp.c_str(), path.c_str()) != 0) {
        std::remove(tmp.c_str());
        return false;
    }
    return true;
}

// The state of a campaign run, shared by the take callback and the loop.
struct Campaign {
    Campaign(const FuzzOptions& options, std::uint64_t base_seed) : o(options), seed(base_seed) {}
    const FuzzOptions& o;
    const std::uint64_t seed;
    const Clock::time_point start = Clock::now();
    std::optional<Clock::time_point> deadline;
    Clock::time_point last_checkpoint = start;
    std::vector<Row> rows;
    long next_unit = 0;  // the campaign-wide index of the next unit walked
    // The unit in flight: its index, round, first row, and whether a stop came while it ran.
    long open_unit = -1;
    int open_round = 0;
    std::size_t open_first_row = 0;
    int rounds_started = 0, rounds_complete = 0;
    long units_run = 0;
    std::string stopped_by;  // "", "rounds", "duration", "SIGINT", "SIGTERM"
    nlohmann::json corpus_json = nlohmann::json::object();
    std::set<std::string> saved_keys;  // (kind, subject, property) with a corpus entry from this run
    long rounds_per_shard = 1;         // 0: until --duration ends it

    // Sets stopped_by when a signal came or the time is spent; true once it is set.
    bool should_stop() {
        if (g_stop_signal) stopped_by = signal_name(g_stop_signal);
        else if (deadline && Clock::now() >= *deadline) stopped_by = "duration";
        return !stopped_by.empty();
    }

    // Ends the unit in flight: its rows get their round and index, or are dropped when a signal
    // came while it ran (a worker killed by the same Ctrl-C is no finding).
    void close_unit() {
        if (open_unit < 0) return;
        if (g_stop_signal) {
            rows.resize(open_first_row);
        } else {
            for (std::size_t i = open_first_row; i < rows.size(); ++i) {
                rows[i].round = open_round;
                rows[i].unit = open_unit;
            }
            ++units_run;
            save_failures(open_first_row);
        }
        open_unit = -1;
        checkpoint_if_due();
    }

    // A unit is walked: true when this shard runs it (and it is not too late to start it).
    bool take(int round) {
        close_unit();
        const long unit = next_unit++;
        if (should_stop()) return false;
        if (unit % o.shard_count != o.shard_index) return false;
        open_unit = unit;
        open_round = round;
        open_first_row = rows.size();
        return true;
    }

    // The first failure of each (kind, subject, property) in this run goes into the corpus,
    // unless an entry for it replayed and still failed: a bug is kept once, not once per round.
    void save_failures(std::size_t first) {
        if (o.corpus.empty()) return;
        for (std::size_t i = first; i < rows.size(); ++i) {
            const Row& r = rows[i];
            if (r.result.status != Status::fail || !r.corpus_entry.empty() || !saved_keys.insert(row_key(r)).second) continue;
            const std::string name = corpus_file_name(r);
            const std::string path = (std::filesystem::path(o.corpus) / name).string();
            if (std::filesystem::exists(path)) continue;
            if (write_atomically(path, corpus_entry_text(r))) corpus_json["saved"].push_back(name);
            else std::cerr << "attncheck fuzz: --corpus: cannot write " << path << ": " << std::strerror(errno) << "\n";
        }
    }

    nlohmann::json campaign_json() const {
        nlohmann::json c;
        c["base_seed"] = seed;
        c["rounds"] = rounds_per_shard > 0 ? nlohmann::json(rounds_per_shard) : nlohmann::json(nullptr);
        c["duration_s"] = o.duration_s;
        c["shard"] = {{"index", o.shard_index}, {"count", o.shard_count}};
        c["rounds_started"] = rounds_started;
        c["rounds_complete"] = rounds_complete;
        c["units_run"] = units_run;
        c["stopped_by"] = stopped_by.empty() ? "running" : stopped_by;
        c["complete"] = stopped_by == "rounds" || stopped_by == "duration";
        c["interrupted"] = stopped_by == "SIGINT" || stopped_by == "SIGTERM";
        c["seconds"] = std::chrono::duration<double>(Clock::now() - start).count();
        if (!o.corpus.empty()) c["corpus"] = corpus_json;
        c["throughput"] = throughput_json(aggregate_rows(rows));
        return c;
    }

    void checkpoint_if_due() {
        if (o.json.empty() || Clock::now() - last_checkpoint < std::chrono::duration<double>(o.checkpoint_every_s)) return;
        last_checkpoint = Clock::now();
        write_checkpoint();
    }

    void write_checkpoint() const {
        nlohmann::json j;
        j["schema_version"] = kJsonSchemaVersion;
        j["seed"] = seed;
        j["campaign"] = campaign_json();
        j["results"] = nlohmann::json::array();
        for (const Row& r : rows) j["results"].push_back(to_json(r));
        j["seconds"] = j["campaign"]["seconds"];
        j["passed"] = nullptr;  // not decided before the campaign ends
        if (!write_atomically(o.json, j.dump(2) + "\n"))
            std::cerr << "attncheck fuzz: --json " << o.json << ": cannot write the checkpoint: " << std::strerror(errno) << "\n";
    }
};

// The corpus's entries of this shard (corpus_shard), each run once as the first and only case of
// its property on its subject.
void replay_corpus(Campaign& c, const std::vector<KernelUnderTest>& kernels, bool reference_decoder) {
    const FuzzOptions& o = c.o;
    const CorpusLoad corpus = load_corpus(o.corpus);
    nlohmann::json& j = c.corpus_json;
    j["dir"] = o.corpus;
    j["entries"] = corpus.entries.size();
    j["refused"] = nlohmann::json::array();
    j["saved"] = nlohmann::json::array();
    for (const auto& [file, why] : corpus.refused) {
        std::cerr << "attncheck fuzz: --corpus: " << file << " refused: " << why << "\n";
        j["refused"].push_back({{"file", file}, {"why", why}});
    }
    int replayed = 0, failing = 0, fixed = 0, pruned = 0, elsewhere = 0;
    for (const CorpusEntry& e : corpus.entries) {
        if (corpus_shard(e.file, o.shard_count) != o.shard_index) continue;
        if (c.should_stop()) break;
        FuzzOptions ro = o;
        ro.properties = {e.property};
        ro.cases = e.cases;
        ro.reproduce = e.reproduce;
        ro.level = e.kind == RowKind::decoder ? Level::decoder : Level::kernel;
        // A case without its shrunk form (a crash or hang) is reached from its seed; either way
        // the rows are those of the entry's subject and property only.
        bool taken = false;
        ro.take = [&](const std::string& kind, const std::string& subject, const std::string& property) {
            if (taken || kind != to_string(e.kind) || subject != e.subject || property != e.property) return false;
            return taken = true;
        };
        std::vector<Row> got;
        {
            const QuietStdout quiet;
            try {
                collect_subjects(ro, e.seed, kernels, reference_decoder, got);
            } catch (const InputError&) {
                got.clear();  // the entry names a property this kernel's declaration cannot be posed
            }
        }
        if (got.empty()) {
            ++elsewhere;
            continue;
        }
        ++replayed;
        Row& r = got.front();
        r.round = -1;
        r.corpus_entry = e.file;
        const bool fails = r.result.status == Status::fail;
        std::cout << "corpus " << e.file << ": " << e.property << " on " << to_string(e.kind) << " " << e.subject << ": "
                  << (fails ? "still fails" : r.result.status == Status::pass ? "passes now (fixed)" : cell(r.result));
        if (fails) {
            ++failing;
            c.saved_keys.insert(row_key(r));
        } else if (r.result.status == Status::pass) {
            ++fixed;
            if (o.corpus_prune) {
                std::error_code ec;
                if (std::filesystem::remove(std::filesystem::path(o.corpus) / e.file, ec)) {
                    ++pruned;
                    std::cout << "; pruned";
                }
            } else {
                std::cout << "; kept (--corpus-prune deletes it)";
            }
        }
        std::cout << "\n";
        c.rows.push_back(std::move(r));
    }
    j["replayed"] = replayed;
    j["still_failing"] = failing;
    j["fixed"] = fixed;
    j["pruned"] = pruned;
    j["not_for_this_run"] = elsewhere;
    std::cout << "corpus " << o.corpus << ": " << corpus.entries.size() << " entries";
    if (o.shard_count > 1) std::cout << " (" << replayed + elsewhere << " of them this shard's)";
    std::cout << ": " << failing << " still fail, " << fixed << " fixed, " << elsewhere
              << " not for this run's selection, " << corpus.refused.size() << " refused" << std::endl;
}

std::string duration_text(double s) {
    std::ostringstream t;
    if (s >= 3600) t << s / 3600 << " h";
    else if (s >= 60) t << s / 60 << " min";
    else t << s << " s";
    return t.str();
}

}  // namespace

std::uint64_t seed_of_round(std::uint64_t base, long round) {
    if (round == 0) return base;
    // splitmix64 of (base, round)
    std::uint64_t z = base + 0x9e3779b97f4a7c15ull * std::uint64_t(round);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return (z ^ (z >> 31)) >> 2;
}

std::vector<Row> aggregate_rows(const std::vector<Row>& rows) {
    // Worse first: a failure decides the cell, then an error, "not checked", skipped, pass.
    const auto rank = [](Status s) {
        switch (s) {
            case Status::fail: return 0;
            case Status::error: return 1;
            case Status::not_checked: return 2;
            case Status::skipped: return 3;
            case Status::pass: return 4;
            case Status::not_applicable: return 5;
        }
        return 6;
    };
    std::vector<Row> out;
    std::map<std::string, std::size_t> at;
    for (const Row& r : rows) {
        const auto [it, first] = at.emplace(row_key(r), out.size());
        if (first) {
            out.push_back(r);
            continue;
        }
        Row& a = out[it->second];
        PropertyResult& s = a.result;
        const PropertyResult& p = r.result;
        if (rank(p.status) < rank(s.status)) {
            // the worse result's details, the sums kept
            Row worse = r;
            worse.result.cases += s.cases;
            worse.result.unsupported += s.unsupported;
            worse.result.vacuous += s.vacuous;
            worse.result.notes += s.notes;
            worse.result.seconds += s.seconds;
            a = std::move(worse);
            continue;
        }
        s.cases += p.cases;
        s.unsupported += p.unsupported;
        s.vacuous += p.vacuous;
        s.notes += p.notes;
        s.seconds += p.seconds;
        if (s.note.empty()) s.note = p.note;
    }
    return out;
}

std::vector<Row> first_failures(const std::vector<Row>& rows) {
    std::vector<Row> out;
    std::set<std::string> shown;
    for (const Row& r : rows)
        if (r.result.status != Status::pass && r.result.status != Status::not_applicable && shown.insert(row_key(r)).second)
            out.push_back(r);
    return out;
}

nlohmann::json throughput_json(const std::vector<Row>& table) {
    nlohmann::json out = nlohmann::json::array();
    for (const Row& r : table)
        out.push_back({{"kind", to_string(r.kind)},
                       {"subject", r.subject},
                       {"property", r.result.property},
                       {"cases", r.result.cases},
                       {"seconds", r.result.seconds},
                       {"cases_per_s", r.result.seconds > 0 ? r.result.cases / r.result.seconds : 0.0}});
    return out;
}

void print_throughput(std::ostream& os, const std::vector<Row>& table) {
    std::size_t w = std::string("cases per second").size();
    for (const Row& r : table) w = std::max(w, r.result.property.size() + r.subject.size() + 4);
    os << std::left << std::setw(int(w)) << "cases per second" << "  " << std::right << std::setw(10) << "cases" << "  "
       << std::setw(10) << "seconds" << "  " << std::setw(10) << "cases/s" << "\n";
    for (const Row& r : table) {
        const double s = r.result.seconds;
        os << std::left << std::setw(int(w)) << (r.result.property + " on " + r.subject) << "  " << std::right
           << std::setw(10) << r.result.cases << "  " << std::setw(10) << std::fixed << std::setprecision(1) << s << "  "
           << std::setw(10) << std::setprecision(1) << (s > 0 ? r.result.cases / s : 0.0) << "\n";
    }
    os << std::left << "\n";
}

int run_campaign(const FuzzOptions& o, std::uint64_t seed, const std::vector<KernelUnderTest>& kernels,
                 bool reference_decoder, nlohmann::json& json_out) {
    const StopSignals signals;
    Campaign c(o, seed);
    if (o.duration_s > 0) c.deadline = c.start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.duration_s));
    // Without --rounds and --duration (a shard or a corpus only): one round per shard.
    const long rounds_per_shard = c.rounds_per_shard = o.rounds ? *o.rounds : o.duration_s > 0 ? 0 : 1;
    const long total_rounds = rounds_per_shard > 0 ? rounds_per_shard * o.shard_count : std::numeric_limits<long>::max();
    if (o.campaign()) {
        std::cout << "campaign: seed " << seed << ", ";
        if (rounds_per_shard > 0) std::cout << total_rounds << " round" << (total_rounds == 1 ? "" : "s");
        if (rounds_per_shard > 0 && o.duration_s > 0) std::cout << " or ";
        if (o.duration_s > 0) std::cout << duration_text(o.duration_s) << (rounds_per_shard > 0 ? " (whichever ends first)" : "");
        if (o.shard_count > 1) std::cout << ", shard " << o.shard_index << "/" << o.shard_count << " (one property run in " << o.shard_count << ")";
        std::cout << std::endl;
    }
    if (!o.corpus.empty()) replay_corpus(c, kernels, reference_decoder);

    for (long round = 0; round < total_rounds; ++round) {
        if (c.should_stop()) break;
        const std::uint64_t round_seed = seed_of_round(seed, round);
        FuzzOptions ro = o;
        ro.take = [&c, round](const std::string&, const std::string&, const std::string&) { return c.take(int(round)); };
        const std::size_t first = c.rows.size();
        const long units_before = c.units_run;
        {
            const QuietStdout quiet;
            collect_subjects(ro, round_seed, kernels, reference_decoder, c.rows);
        }
        c.close_unit();
        if (c.units_run > units_before) ++c.rounds_started;
        if (!c.stopped_by.empty()) break;
        ++c.rounds_complete;
        if (c.units_run == units_before) continue;  // none of this round's runs is this shard's
        int cases = 0, failed = 0;
        double seconds = 0;
        for (std::size_t i = first; i < c.rows.size(); ++i) {
            cases += c.rows[i].result.cases;
            seconds += c.rows[i].result.seconds;
            failed += fails_run(c.rows[i].result.status, o.allow_unchecked) ? 1 : 0;
        }
        std::cout << "round " << round << " (seed " << round_seed << "): " << c.rows.size() - first << " property runs, "
                  << cases << " cases, " << failed << " failed, " << seconds_text(seconds) << " s" << std::endl;
    }
    if (c.stopped_by.empty()) c.stopped_by = "rounds";
    if (c.stopped_by == "SIGINT" || c.stopped_by == "SIGTERM")
        std::cout << "campaign stopped by " << c.stopped_by << ": the property run in flight was dropped; reporting "
                  << c.units_run << " completed runs" << std::endl;
    else if (c.stopped_by == "duration")
        std::cout << "campaign: --duration spent after " << c.rounds_complete << " complete rounds" << std::endl;

    const std::vector<Row> table = aggregate_rows(c.rows);
    std::cout << "\n";
    const int code = report_rows(o, table, first_failures(c.rows));
    print_throughput(std::cout, table);
    json_out["campaign"] = c.campaign_json();
    const double seconds = json_out["campaign"]["seconds"].get<double>();
    return finish(o, seed, seconds, c.rows, json_out, code, &table);
}

}  // namespace attncheck::properties
