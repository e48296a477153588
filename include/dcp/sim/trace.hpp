#pragma once
/// \file
/// Chrome / Perfetto trace of plans (DESIGN section 7): the `traceEvents` JSON that
/// chrome://tracing and ui.perfetto.dev open. One process per method, one track (thread) per
/// GPU, one complete event per (step, GPU) on the cost model's clock, in microseconds; the
/// batches of a method run end to end, each marked by an instant event. A plan with tp > 1 names
/// units (TP groups, DESIGN section 4.2): its tracks are units, named by their GPUs, and every
/// step's args carry "tp". A method whose timeline gives its pipeline schedules (pp > 1, DESIGN
/// section 4.5) gets one track per stage and unit, and every step one forward and one backward
/// event on each stage, when the schedule runs them.

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <ostream>
#include <span>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include <dcp/error.hpp>
#include <dcp/plan/pipeline_schedule.hpp>
#include <dcp/plan/plan.hpp>

namespace dcp::sim {

/// The batches one method planned, in order, under a label; under pipeline stages, each plan's
/// schedule (`schedule_pipeline`, one per plan), to draw every stage's forwards and backwards
/// (empty: each step is drawn once, at its start for its time, as the plan says).
struct timeline {
  std::string_view method;
  std::span<const plan> plans;
  std::span<const pipeline_timeline> stages{};

  /// Pipeline stages drawn: 1 without schedules.
  int stage_count() const noexcept { return stages.empty() ? 1 : stages.front().stages; }
};

namespace detail {

// The names below are appended piece by piece: GCC 12 at -O3 takes `"literal" + std::string`
// for a copy onto overlapping memory (a false -Wrestrict).

// "GPU 3", or "TP group 1 (GPUs 8-15)" for a unit of tp > 1 GPUs; with stages drawn, "stage 2,
// GPU 19": the unit's GPUs on that stage.
inline std::string trace_track_name(int unit, const parallel_layout& layout, int stage = -1) {
  std::string out;
  if (stage >= 0) {
    out = "stage ";
    out += std::to_string(stage);
    out += ", ";
  }
  const rank_block g = layout.gpus_of({unit, 1}, std::max(stage, 0));
  out += layout.tp == 1 ? "GPU " : "TP group ";
  out += std::to_string(layout.tp == 1 ? g.first : unit);
  if (layout.tp == 1) return out;
  out += " (GPUs ";
  out += std::to_string(g.first);
  out += '-';
  out += std::to_string(g.end() - 1);
  out += ')';
  return out;
}

// "sp8 x3 k12": sp, sequences, checkpointed blocks; a Ulysses x Ring step reads "sp64=32x2 ...".
inline std::string trace_step_name(const plan_step& s) {
  std::string out = "sp";
  out += std::to_string(s.sp());
  if (s.ring != 1) {
    out += '=';
    out += std::to_string(s.ulysses());
    out += 'x';
    out += std::to_string(s.ring);
  }
  out += " x";
  out += std::to_string(s.sequences.size());
  out += " k";
  out += std::to_string(s.checkpointed_blocks);
  return out;
}

}  // namespace detail

/// Writes the trace of `runs` to `os`.
inline void write_trace(std::ostream& os, std::span<const timeline> runs) {
  using json = nlohmann::ordered_json;
  os << "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
  bool first = true;
  auto emit = [&](const json& e) {
    os << (first ? "" : ",\n") << e.dump();
    first = false;
  };
  for (std::size_t m = 0; m < runs.size(); ++m) {
    const int pid = static_cast<int>(m) + 1;
    int gpus = 0;
    parallel_layout layout;  // a method's plans share one layout
    for (const auto& p : runs[m].plans) gpus = std::max(gpus, p.gpus), layout = p.layout;
    emit({{"name", "process_name"}, {"ph", "M"}, {"pid", pid}, {"args", {{"name", std::string(runs[m].method)}}}});
    emit({{"name", "process_sort_index"}, {"ph", "M"}, {"pid", pid}, {"args", {{"sort_index", pid}}}});
    const int stages = runs[m].stage_count();
    check(runs[m].stages.empty() || runs[m].stages.size() == runs[m].plans.size(), errc::invalid_argument, [&] {
      return "write_trace: " + std::to_string(runs[m].stages.size()) + " pipeline schedules for " +
             std::to_string(runs[m].plans.size()) + " plans of " + std::string(runs[m].method) + "; give one per plan";
    });
    for (int r = 0; r < gpus * stages; ++r) {
      const std::string track = detail::trace_track_name(r % gpus, layout, runs[m].stages.empty() ? -1 : r / gpus);
      emit({{"name", "thread_name"}, {"ph", "M"}, {"pid", pid}, {"tid", r}, {"args", {{"name", track}}}});
      emit({{"name", "thread_sort_index"}, {"ph", "M"}, {"pid", pid}, {"tid", r}, {"args", {{"sort_index", r}}}});
    }
    double offset_us = 0;
    for (std::size_t b = 0; b < runs[m].plans.size(); ++b) {
      const plan& p = runs[m].plans[b];
      emit({{"name", "batch " + std::to_string(b)},
            {"ph", "i"},
            {"s", "p"},
            {"ts", offset_us},
            {"pid", pid},
            {"tid", 0},
            {"args", {{"makespan_s", p.makespan_s}, {"lower_bound_s", p.lower_bound_s}, {"joint_lower_bound_s", p.joint_lower_bound_s}}}});
      for (std::size_t i = 0; i < p.steps.size(); ++i) {
        const plan_step& s = p.steps[i];
        std::int64_t tokens = 0;
        json ids = json::array();
        for (const auto& q : s.sequences) tokens += q.tokens, ids.push_back(q.id);
        const std::string name = detail::trace_step_name(s);
        json args = {{"batch", b},
                     {"step", i},
                     {"sp", s.sp()},
                     {"checkpointed_blocks", s.checkpointed_blocks},
                     {"round", s.round},
                     {"memory_bytes", s.memory_bytes},
                     {"tokens", tokens},
                     {"sequences", std::move(ids)}};
        if (s.ring != 1) {
          args["ulysses"] = s.ulysses();
          args["ring"] = s.ring;
        }
        if (p.layout.tp != 1) args["tp"] = p.layout.tp;
        if (runs[m].stages.empty()) {
          for (int r = s.ranks.first; r < s.ranks.end(); ++r)
            emit({{"name", name},
                  {"cat", "step"},
                  {"ph", "X"},
                  {"ts", offset_us + s.start_s * 1e6},
                  {"dur", s.time_s * 1e6},
                  {"pid", pid},
                  {"tid", r},
                  {"args", args}});
          continue;
        }
        const pipeline_timeline& lanes = runs[m].stages[b];
        for (int st = 0; st < stages; ++st)
          for (const bool backward : {false, true}) {
            const stage_span& span = backward ? lanes.backward_of(i, st) : lanes.forward_of(i, st);
            json a = args;
            a["stage"] = st;
            a["pass"] = backward ? "backward" : "forward";
            for (int r = s.ranks.first; r < s.ranks.end(); ++r)
              emit({{"name", name + (backward ? " B" : " F")},
                    {"cat", "step"},
                    {"ph", "X"},
                    {"ts", offset_us + span.start_s * 1e6},
                    {"dur", (span.end_s - span.start_s) * 1e6},
                    {"pid", pid},
                    {"tid", st * gpus + r},
                    {"args", a}});
          }
      }
      offset_us += p.makespan_s * 1e6;
    }
  }
  os << "\n]}\n";
}

/// Writes the trace to the file at `path`; throws `dcp::error(errc::io_error)` when it cannot.
inline void write_trace(const std::filesystem::path& path, std::span<const timeline> runs) {
  std::ofstream out(path);
  check(out.is_open(), errc::io_error, [&] { return "cannot write trace to '" + path.string() + "'"; });
  write_trace(out, runs);
  out.close();  // flushes: a full disk fails here, not silently later
  check(!out.fail(), errc::io_error, [&] { return "writing trace to '" + path.string() + "' failed"; });
}

}  // namespace dcp::sim
