// tests/train/training_test.cpp — the synthetic task, a training run's independence of the
// thread count, and the loss falling (train/training.hpp).
#include <omp.h>

#include <algorithm>
#include <cmath>

#include <catch2/catch.hpp>

#include "attncheck/error.hpp"
#include "train/training.hpp"

namespace {

using namespace attncheck;
using namespace attncheck::train;

TEST_CASE("the task's examples: a prefix, the separator, the prefix sorted, again or reversed", "[train]") {
    std::mt19937_64 rng(4);
    for (const Task task : {Task::sort, Task::copy, Task::reverse}) {
        const TaskSpec t{task, 5, 6};
        for (int i = 0; i < 20; ++i) {
            const reference::Sequence q = make_example(t, rng);
            REQUIRE(q.tokens.size() == 11);
            CHECK(q.weights == std::vector<double>(10, 1.0));
            CHECK(q.tokens[5] == t.separator());
            std::vector<int> prefix(q.tokens.begin(), q.tokens.begin() + 5);
            for (const int s : prefix) CHECK((s >= 0 && s < 6));
            if (task == Task::reverse) std::reverse(prefix.begin(), prefix.end());
            if (task == Task::sort) std::sort(prefix.begin(), prefix.end());
            CHECK(answer_of(t, q.tokens) == prefix);
        }
    }
    CHECK_THROWS_WITH(task_from_string("count"), Catch::Contains("expected copy, reverse or sort"));
}

TrainOptions small(reference::TrainMask mask) {
    TrainOptions o;
    o.task = {Task::copy, 3, 4};
    o.mask = mask;
    o.seed = 7;
    o.steps = 40;
    o.batch = 12;
    o.eval_every = 20;
    o.eval_size = 16;
    o.d_model = 16;
    o.n_heads = 2;
    o.d_ff = 32;
    return o;
}

TEST_CASE("a training run gives the same weights on 1 and 2 threads", "[train]") {
    const int keep = omp_get_max_threads();
    omp_set_num_threads(1);
    const TrainResult one = train::train(small(reference::TrainMask::causal));
    omp_set_num_threads(2);
    const TrainResult two = train::train(small(reference::TrainMask::causal));
    omp_set_num_threads(keep);
    CHECK(one.params.values == two.params.values);
    CHECK(one.final_eval.loss == two.final_eval.loss);
}

TEST_CASE("training lowers the loss, with the mask and without it", "[train]") {
    for (const auto mask : {reference::TrainMask::causal, reference::TrainMask::none}) {
        const TrainResult r = train::train(small(mask));
        REQUIRE(r.curve.size() == 40);
        double first = 0, last = 0;
        for (int i = 0; i < 5; ++i) {
            first += r.curve[std::size_t(i)].train_loss;
            last += r.curve[r.curve.size() - 1 - std::size_t(i)].train_loss;
        }
        INFO(reference::to_string(mask) << ": mean of the first 5 steps " << first / 5 << ", of the last 5 " << last / 5);
        CHECK(last < 0.9 * first);
        CHECK(r.curve.back().evaluated);
        CHECK(r.flops_per_step > 0);
    }
}

// The optimized float32 step (optimized/train_step.hpp with the built-in kernel) on the sort task:
// the loss falls clearly over 50 steps; its first step's loss is the reference step's (same
// weights, same batch) within float32 rounding; and a run repeats bit for bit on one thread count.
TEST_CASE("the optimized step trains: the loss falls over 50 steps of the sort task", "[train][optimized]") {
    TrainOptions o = small(reference::TrainMask::causal);
    o.task = {Task::sort, 4, 6};
    o.steps = 50;
    o.eval_every = 50;
    o.step = Step::optimized;
    const TrainResult r = train::train(o);
    REQUIRE(r.curve.size() == 50);
    double first = 0, last = 0;
    for (int i = 0; i < 5; ++i) {
        first += r.curve[std::size_t(i)].train_loss;
        last += r.curve[r.curve.size() - 1 - std::size_t(i)].train_loss;
    }
    INFO("mean of the first 5 steps " << first / 5 << ", of the last 5 " << last / 5);
    CHECK(last < 0.8 * first);
    std::mt19937_64 rng(1);  // the count depends on the lengths only
    const std::vector<reference::Sequence> shaped(std::size_t(o.batch), make_example(o.task, rng));
    CHECK(r.flops_per_step == optimized::train_flops(r.config, shaped));
    o.step = Step::reference;
    o.steps = 1;
    const TrainResult ref = train::train(o);
    CHECK(std::abs(ref.curve[0].train_loss - r.curve[0].train_loss) < 1e-6 * ref.curve[0].train_loss);
    o.step = Step::optimized;
    o.steps = 10;
    const TrainResult a = train::train(o), b = train::train(o);
    CHECK(a.params.values == b.params.values);
    CHECK(step_from_string("optimized") == Step::optimized);
    CHECK_THROWS_WITH(step_from_string("fast"), Catch::Contains("expected reference or optimized"));
}

TEST_CASE("bad training options are refused, naming them", "[train]") {
    TrainOptions o = small(reference::TrainMask::causal);
    o.task.length = 0;
    CHECK_THROWS_WITH(train::train(o), Catch::Contains("--length"));
    o = small(reference::TrainMask::causal);
    o.steps = 0;
    CHECK_THROWS_WITH(train::train(o), Catch::Contains("--steps"));
}

}  // namespace
