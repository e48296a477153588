// The ten-line integration of the README: dcp::scheduler inside a (stand-in) training loop.
// Four ranks run as threads over the `local` communicator; swap in dcp::mpi_comm or
// dcp::nccl_comm and a real model step, and nothing else changes. Prints, per global batch,
// how many micro-steps (gradient-accumulation steps) each rank runs.
#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include <dcp/comm/local.hpp>
#include <dcp/scheduler.hpp>
#include <dcp/workload/embedded.hpp>

// Your model's forward + backward on this rank's token shard of `step.sequences`, with
// `step.checkpointed_blocks` blocks recomputed and Ulysses all-to-alls over `step.comm()`.
// Here: the shard's weighted loss, as if every token's loss were 1, so the batch total is 1.
template <class Step>
double train_micro_step(const Step& step) {
  double loss = 0;
  for (const auto& s : step.sequences) loss += s.loss_weight / step.sp();  // weight, never average
  double check[1] = {1};
  step.comm().all_reduce(std::span<double>(check), dcp::reduce_op::sum);  // the group runs together
  return check[0] == step.sp() ? loss : -1;
}

// Prints the micro-step count of every rank and the all-reduced loss (1 = the full-batch loss).
void report(dcp::local_comm& world, int batch, int steps, double loss) {
  std::vector<int> all(static_cast<std::size_t>(world.size()));
  world.all_gather(std::span<const int>(&steps, 1), std::span<int>(all));
  double total[1] = {loss};
  world.all_reduce(std::span<double>(total), dcp::reduce_op::sum);
  if (world.rank() != 0) return;
  dcp::check(total[0] > 1 - 1e-9 && total[0] < 1 + 1e-9, dcp::errc::mismatch,
             [&] { return "loss weights of batch " + std::to_string(batch) + " sum to " + std::to_string(total[0]); });
  std::printf("batch %d: micro-steps per rank", batch);
  for (int n : all) std::printf(" %d", n);
  std::printf("; summed loss weight %.12f\n", total[0]);
}

int main() {
  dcp::local_world::run(4, [](dcp::local_comm& world) {
    dcp::scheduler sched(dcp::models::cogvideox_5b(), world);     // default policies, H200
    sched.set_dataset(dcp::workloads::make("cogvideox-zipf10"));  // ids and shapes of the dataset
    for (int it = 0; it < 3; ++it) {
      const dcp::plan plan = sched.plan(sched.sampler().next().sequences);  // same on every rank
      sched.verify(plan);                                                  // one all-reduce
      const auto steps = sched.steps_for(plan);                            // this rank's, in order
      double loss = 0;
      for (const auto& step : steps) loss += train_micro_step(step);
      report(world, it, int(steps.size()), loss);  // then: all-reduce SUM of gradients, optimizer step
    }
  });
}
