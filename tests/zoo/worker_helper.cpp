// tests/zoo/worker_helper.cpp — a stand-in for a worker process, for the isolation tests.
//
// `zoo_worker_helper MODE` announces cases on the channel (properties/isolation/isolation.hpp) and then
// misbehaves the way a kernel under test can:
//   ok         cases 0..2, output on stdout, exit 0
//   exit3      case 0, exit code 3
//   segv       cases 0, 1, then a null-pointer write during case 1
//   abort      case 0, then abort()
//   hang       case 0, then an endless loop
//   hang_case  case 0 finishes, case 1 loops forever (for the per-case timeout)
//   grandchild starts a child that sleeps 60 s holding the pipes, then exits 0
//   noisy      writes 1 MiB to stderr, then exits 0
//   sanitizer  prints an AddressSanitizer-style error line, exits 1
//   env        announces a case, exits 0 when the channel is active (4 when not)
#include <unistd.h>

#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "properties/isolation/isolation.hpp"

using attncheck::properties::WorkerChannel;

namespace {
// Not null: a write to a low unmapped page is a plain SEGV (UBSan would name a null store).
volatile int* volatile g_bad = reinterpret_cast<volatile int*>(std::uintptr_t(64));
volatile unsigned long g_spin = 0;
[[noreturn]] void spin_forever() {
    for (;;) g_spin = g_spin + 1;
}
}  // namespace

int main(int argc, char** argv) {
    if (argc < 2) return 2;
    const std::string mode = argv[1];
    const WorkerChannel ch = WorkerChannel::from_environment();
    if (mode == "env") {
        ch.announce_case("env", 0, 1);
        return ch.active() ? 0 : 4;
    }
    if (mode == "ok") {
        for (int c = 0; c < 3; ++c) ch.announce_case("agreement", c, 1000 + c, "replay-me " + std::to_string(c));
        std::printf("some output on stdout\n");
        return 0;
    }
    if (mode == "exit3") {
        ch.announce_case("agreement", 0, 7);
        return 3;
    }
    if (mode == "segv") {
        ch.announce_case("causality", 0, 41);
        ch.announce_case("causality", 1, 42, "attncheck fuzz --seed 42");
        *g_bad = 1;
        return 0;
    }
    if (mode == "abort") {
        ch.announce_case("agreement", 0, 5);
        std::abort();
    }
    if (mode == "hang") {
        ch.announce_case("row_sums", 0, 9);
        spin_forever();
    }
    if (mode == "hang_case") {
        ch.announce_case("row_sums", 0, 9);
        ch.announce_case("row_sums", 1, 10);
        spin_forever();
    }
    if (mode == "grandchild") {
        ch.announce_case("agreement", 0, 1);
        if (fork() == 0) {
            sleep(60);
            _exit(0);
        }
        return 0;
    }
    if (mode == "noisy") {
        std::string line(1023, 'x');
        line.push_back('\n');
        for (int i = 0; i < 1024; ++i) std::fwrite(line.data(), 1, line.size(), stderr);
        std::fprintf(stderr, "the last line\n");
        return 0;
    }
    if (mode == "sanitizer") {
        ch.announce_case("no_write_outside_out", 4, 77);
        std::fprintf(stderr, "=================================================================\n"
                             "==123==ERROR: AddressSanitizer: heap-buffer-overflow on address 0x602 at pc 0x1\n"
                             "WRITE of size 4\n");
        return 1;
    }
    return 2;
}
