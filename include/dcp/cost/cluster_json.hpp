#pragma once
/// \file
/// `dcp.cluster/v1`: the nodes of a mixed cluster as JSON (`read_cluster_json`), for
/// `dcp-sim --cluster FILE` and trainers that read their cluster from a file:
/// \code
/// { "format": "dcp.cluster/v1",
///   "nodes": [ { "device": "h100", "count": 2 },
///              { "device": "h200", "count": 1, "mem_bytes": 1.0e11 } ] }
/// \endcode
/// Entries are presets (`devices::preset`) with node counts, in rank order. An entry may set
/// the preset's "peak", "eff_max", "mem_bytes" and "usable" (a node with less memory free, or
/// one that runs slower); any other key is an error, so that nothing that changes a cost is
/// dropped. `node_devices(nodes, reference)` turns the result into a layout's nodes.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <istream>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include <dcp/cost/device.hpp>
#include <dcp/error.hpp>
#include <dcp/json_reader.hpp>

namespace dcp {

inline constexpr std::string_view cluster_format = "dcp.cluster/v1";

/// The nodes a `dcp.cluster/v1` document lists, one device per node in rank order. Throws
/// `dcp::error(errc::parse_error)` naming `source` and the field unless the document is one.
inline std::vector<device_spec> read_cluster_json(std::istream& in, const std::string& source = "cluster") {
  const json_reader r(source + ": ");
  const nlohmann::json j = r.parse(in);
  r.expect_format(j, {cluster_format});
  for (const auto& [key, value] : j.items())
    if (key != "format" && key != "nodes")
      r.fail("unknown key \"" + key + "\"; a cluster has \"format\" and \"nodes\"");
  if (!j.contains("nodes") || !j["nodes"].is_array() || j["nodes"].empty())
    r.fail("\"nodes\" must be a non-empty array of {\"device\", \"count\"}");
  std::vector<device_spec> out;
  for (std::size_t i = 0; i < j["nodes"].size(); ++i) {
    const auto& e = j["nodes"][i];
    const std::string where = "nodes[" + std::to_string(i) + "]";
    if (!e.is_object() || !e.contains("device") || !e["device"].is_string())
      r.fail(where + " needs a \"device\" preset name");
    device_spec d;
    try {
      d = devices::preset(e["device"].get<std::string>());
    } catch (const error& x) {
      r.fail(where + ": " + x.what());
    }
    std::int64_t count = 1;
    for (const auto& [key, value] : e.items()) {
      if (key == "device") continue;
      if (!value.is_number() || !std::isfinite(value.get<double>()))
        r.fail(where + " \"" + key + "\" = " + value.dump() + " is not a finite number");
      const double v = value.get<double>();
      if (key == "count") {
        if (!value.is_number_integer() || value.get<std::int64_t>() < 1 || value.get<std::int64_t>() > 65536)
          r.fail(where + " \"count\" = " + value.dump() + " must be an integer in [1, 65536]");
        count = value.get<std::int64_t>();
      } else if (key == "peak") {
        d.peak = v;
      } else if (key == "eff_max") {
        d.eff_max = v;
      } else if (key == "mem_bytes") {
        d.mem_bytes = v;
      } else if (key == "usable") {
        d.usable = v;
      } else {
        r.fail(where + ": unknown key \"" + key + "\"; an entry may set count, peak, eff_max, mem_bytes and usable");
      }
    }
    try {
      validate(d);
    } catch (const error& x) {
      r.fail(where + ": " + x.what());
    }
    out.insert(out.end(), static_cast<std::size_t>(count), d);
  }
  return out;
}

/// `read_cluster_json` of a file; a file that cannot be opened is `errc::io_error`.
inline std::vector<device_spec> read_cluster_json(const std::filesystem::path& file) {
  std::ifstream in(file);
  check(in.is_open(), errc::io_error, [&] { return "cannot open cluster file '" + file.string() + "'"; });
  return read_cluster_json(in, file.string());
}

}  // namespace dcp
