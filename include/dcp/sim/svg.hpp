#pragma once
/// \file
/// SVG timeline of plans (DESIGN section 7): one panel per method, stacked, on one shared time
/// axis so that methods compare at a glance; in each panel one lane per GPU (grey = idle) and
/// one box per micro-step spanning the lanes of its rank block, coloured by sp, with a tooltip
/// (sp, u x r, tp, sequences, tokens, checkpointed blocks, memory, start, time, round); with tp > 1
/// a lane is a unit (TP group, labelled "TP u") and the tooltip names its GPUs. Under pipeline
/// stages (a timeline with the plans' schedules) every stage has its block of lanes, labelled
/// "S s GPU g", and each step is drawn on every stage twice: its forward, and its backward in a
/// lighter shade, when the schedule runs them. Batches run end to end, separated by a dashed line;
/// a dotted red line marks where a barrier round starts.

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <ostream>
#include <set>
#include <span>
#include <string>
#include <string_view>

#include <dcp/error.hpp>
#include <dcp/plan/plan.hpp>
#include <dcp/sim/trace.hpp>

namespace dcp::sim {

/// Size of an SVG timeline.
struct svg_options {
  double width = 1200;        ///< pixels
  double lane_height = 0;     ///< pixels per GPU lane; 0 = fit about 360 px per panel (1.5 .. 14)
  friend bool operator==(const svg_options&, const svg_options&) = default;
};

namespace detail {

inline std::string xml_escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

inline std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", v);
  return buf;
}

inline const char* sp_colour(int sp) noexcept {
  static constexpr std::array<const char*, 11> palette{"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948",
                                                       "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac", "#17becf"};
  // Sizes that are not powers of two (contiguous_groups) take darker shades, by the same level.
  static constexpr std::array<const char*, 11> between{"#2b4a6b", "#a85c12", "#8f2a2c", "#3f7a75", "#2f6a29", "#9c8420",
                                                       "#6e4466", "#b85f69", "#5e463a", "#6f6862", "#0e7f8a"};
  int level = 0;
  while ((1 << (level + 1)) <= sp && level + 1 < static_cast<int>(palette.size())) ++level;
  return (std::has_single_bit(static_cast<unsigned>(sp)) ? palette : between)[static_cast<std::size_t>(level)];
}

}  // namespace detail

/// Writes the SVG timeline of `runs` to `os`.
inline void write_svg(std::ostream& os, std::span<const timeline> runs, const svg_options& opt = {}) {
  using detail::num;
  int gpus = 1, widest = 1, tp = 1, stages = 1;
  double longest = 0;
  std::set<int> sizes;  // the legend: every power of two up to the widest step, and every size used
  for (const auto& run : runs) {
    check(run.stages.empty() || run.stages.size() == run.plans.size(), errc::invalid_argument, [&] {
      return "write_svg: " + std::to_string(run.stages.size()) + " pipeline schedules for " +
             std::to_string(run.plans.size()) + " plans of " + std::string(run.method) + "; give one per plan";
    });
    double total = 0;
    stages = std::max(stages, run.stage_count());
    for (const auto& p : run.plans) {
      gpus = std::max(gpus, p.gpus), tp = std::max(tp, p.layout.tp), total += p.makespan_s;
      for (const auto& s : p.steps) widest = std::max(widest, s.sp()), sizes.insert(s.sp());
    }
    longest = std::max(longest, total);
  }
  const int rows = gpus * stages;  // lanes per panel
  for (int sp = 1; sp <= widest; sp *= 2) sizes.insert(sp);
  const double lane = opt.lane_height > 0 ? opt.lane_height : std::clamp(360.0 / rows, 1.5, 14.0);
  const double left = 78, right = 24, title = 26, axis = 22, gap = 16, legend = 30;
  const double plot = std::max(100.0, opt.width - left - right);
  const double scale = longest > 0 ? plot / longest : 0;
  const double panel = title + rows * lane + axis + gap;
  const double height = legend + panel * static_cast<double>(runs.size()) + 4;
  const int label_every = lane >= 9 ? 1 : std::max(1, static_cast<int>(9.0 / lane + 0.999));

  os << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << num(opt.width) << "\" height=\"" << num(height)
     << "\" viewBox=\"0 0 " << num(opt.width) << " " << num(height)
     << "\" font-family=\"sans-serif\" font-size=\"11\">\n"
     << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  // Legend: colour of each sp.
  double lx = left;
  os << "<text x=\"8\" y=\"19\">sp</text>\n";
  for (int sp : sizes) {
    os << "<rect x=\"" << num(lx) << "\" y=\"8\" width=\"14\" height=\"14\" fill=\"" << detail::sp_colour(sp)
       << "\"/><text x=\"" << num(lx + 18) << "\" y=\"19\">" << sp << "</text>\n";
    lx += 56;
  }
  os << "<rect x=\"" << num(lx) << "\" y=\"8\" width=\"14\" height=\"14\" fill=\"#e8e8e8\"/><text x=\"" << num(lx + 18)
     << "\" y=\"19\">idle</text>\n";

  for (std::size_t m = 0; m < runs.size(); ++m) {
    const double top = legend + panel * static_cast<double>(m);
    const double lanes_top = top + title;
    double total = 0, bound = 0;
    for (const auto& p : runs[m].plans) total += p.makespan_s, bound += p.bound_s();
    os << "<g class=\"method\" data-method=\"" << detail::xml_escape(runs[m].method) << "\">\n"
       << "<text x=\"8\" y=\"" << num(top + 17) << "\" font-weight=\"bold\">" << detail::xml_escape(runs[m].method)
       << "</text><text x=\"" << num(left) << "\" y=\"" << num(top + 17) << "\">" << num(total) << " s, "
       << runs[m].plans.size() << " batch" << (runs[m].plans.size() == 1 ? "" : "es") << ", efficiency "
       << num(total > 0 ? bound / total : 1) << "</text>\n";
    const bool piped = !runs[m].stages.empty();
    const int lanes = piped ? rows : gpus;
    parallel_layout layout;  // a method's plans share one layout
    for (const auto& p : runs[m].plans) layout = p.layout;
    for (int r = 0; r < lanes; ++r) {
      const double y = lanes_top + r * lane;
      os << "<rect class=\"lane\" data-gpu=\"" << r << "\" x=\"" << num(left) << "\" y=\"" << num(y) << "\" width=\""
         << num(plot) << "\" height=\"" << num(lane) << "\" fill=\"" << (r % 2 ? "#e4e4e4" : "#ececec") << "\"/>\n";
      if (r % label_every == 0) {
        os << "<text x=\"" << num(left - 4) << "\" y=\"" << num(y + std::min(lane, 11.0) - 1)
           << "\" text-anchor=\"end\" font-size=\"" << num(std::min(10.0, std::max(lane, 8.0))) << "\">";
        if (piped) os << "S" << r / gpus << " ";
        os << (tp == 1 ? "GPU " : "TP ")
           << (piped && tp == 1 ? layout.gpus_of({r % gpus, 1}, r / gpus).first : r % gpus) << "</text>\n";
      }
    }
    double offset = 0;
    for (std::size_t b = 0; b < runs[m].plans.size(); ++b) {
      const plan& p = runs[m].plans[b];
      for (std::size_t i = 0; i < p.steps.size(); ++i) {
        const plan_step& s = p.steps[i];
        std::int64_t tokens = 0;
        for (const auto& q : s.sequences) tokens += q.tokens;
        // One box, or under stages a forward and a backward box on every stage.
        auto box = [&](double start, double time, int stage, const char* pass) {
          const double x = left + (offset + start) * scale;
          const double w = std::max(0.5, time * scale);
          const double inset = lane >= 4 ? 0.5 : 0;
          const double y = lanes_top + ((stage < 0 ? 0 : stage) * gpus + s.ranks.first) * lane + inset;
          os << "<rect class=\"step\" x=\"" << num(x) << "\" y=\"" << num(y) << "\" width=\"" << num(w)
             << "\" height=\"" << num(s.sp() * lane - 2 * inset) << "\" fill=\"" << detail::sp_colour(s.sp())
             << (pass && pass[0] == 'b' ? "\" fill-opacity=\"0.55" : "") << "\" stroke=\"#333\" stroke-width=\""
             << (lane >= 4 ? "0.4" : "0") << "\"><title>batch " << b << ", ";
          if (pass) os << "stage " << stage << " " << pass << ", ";
          os << "ranks [" << s.ranks.first << ", " << s.ranks.end() << "), sp " << s.sp();
          if (s.ring != 1) os << " (ulysses " << s.ulysses() << " x ring " << s.ring << ")";
          if (p.layout.tp != 1 || pass)
            os << (p.layout.tp != 1 ? " of tp " + std::to_string(p.layout.tp) : std::string()) << " (GPUs "
               << p.layout.gpus_of(s.ranks, stage < 0 ? 0 : stage) << ")";
          os << ", " << s.sequences.size() << " sequences, " << tokens << " tokens, " << s.checkpointed_blocks
             << " checkpointed blocks, " << num(s.memory_bytes / 1e9) << " GB, start " << num(start) << " s, time "
             << num(time) << " s, round " << s.round << "</title></rect>\n";
        };
        if (!piped) {
          box(s.start_s, s.time_s, -1, nullptr);
          continue;
        }
        const pipeline_timeline& sched = runs[m].stages[b];
        for (int st = 0; st < sched.stages; ++st) {
          const stage_span f = sched.forward_of(i, st), bw = sched.backward_of(i, st);
          box(f.start_s, f.end_s - f.start_s, st, "forward");
          box(bw.start_s, bw.end_s - bw.start_s, st, "backward");
        }
      }
      // Barriers: where a round starts, every GPU has waited for all earlier rounds to end.
      std::map<int, double> round_start;
      for (const auto& s : p.steps)
        if (s.round > 0) {
          auto [it, fresh] = round_start.try_emplace(s.round, s.start_s);
          if (!fresh) it->second = std::min(it->second, s.start_s);
        }
      for (const auto& [r, t] : round_start)
        os << "<line class=\"barrier\" data-round=\"" << r << "\" x1=\"" << num(left + (offset + t) * scale)
           << "\" y1=\"" << num(lanes_top) << "\" x2=\"" << num(left + (offset + t) * scale) << "\" y2=\""
           << num(lanes_top + lanes * lane) << "\" stroke=\"#c00\" stroke-width=\"0.5\" stroke-dasharray=\"1,2\"/>\n";
      offset += p.makespan_s;
      if (b + 1 < runs[m].plans.size())
        os << "<line class=\"batch\" x1=\"" << num(left + offset * scale) << "\" y1=\"" << num(lanes_top) << "\" x2=\""
           << num(left + offset * scale) << "\" y2=\"" << num(lanes_top + lanes * lane)
           << "\" stroke=\"black\" stroke-dasharray=\"3,2\"/>\n";
    }
    // Time axis: about 8 ticks at round seconds.
    const double axis_y = lanes_top + rows * lane;
    os << "<line x1=\"" << num(left) << "\" y1=\"" << num(axis_y) << "\" x2=\"" << num(left + plot) << "\" y2=\""
       << num(axis_y) << "\" stroke=\"black\"/>\n";
    if (longest > 0) {
      double step = 1e-6;
      while (longest / step > 8) step *= (static_cast<int>(std::round(step / std::pow(10.0, std::floor(std::log10(step))))) == 2 ? 2.5 : 2);
      for (double t = 0; t <= longest * (1 + 1e-9); t += step)
        os << "<line x1=\"" << num(left + t * scale) << "\" y1=\"" << num(axis_y) << "\" x2=\"" << num(left + t * scale)
           << "\" y2=\"" << num(axis_y + 4) << "\" stroke=\"black\"/><text x=\"" << num(left + t * scale) << "\" y=\""
           << num(axis_y + 15) << "\" text-anchor=\"middle\" font-size=\"9\">" << num(t) << " s</text>\n";
    }
    os << "</g>\n";
  }
  os << "</svg>\n";
}

/// Writes the SVG to the file at `path`; throws `dcp::error(errc::io_error)` when it cannot.
inline void write_svg(const std::filesystem::path& path, std::span<const timeline> runs, const svg_options& opt = {}) {
  std::ofstream out(path);
  check(out.is_open(), errc::io_error, [&] { return "cannot write SVG to '" + path.string() + "'"; });
  write_svg(out, runs, opt);
  out.close();  // flushes: a full disk fails here, not silently later
  check(!out.fail(), errc::io_error, [&] { return "writing SVG to '" + path.string() + "' failed"; });
}

}  // namespace dcp::sim
