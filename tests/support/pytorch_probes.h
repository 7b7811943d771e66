// tests/data/pytorch_probes/events.jsonl (tools/probes/pytorch_event_probe.py): one JSON object per line, the
// allocator events PyTorch recorded on the H100 for each op, module or optimizer case.
#pragma once

#include <doctest/doctest.h>

#include <fstream>
#include <string>
#include <vector>

#include "tests/support/allocation_probe.h"
#include "tests/support/json.h"

namespace bytegrad::testing {

// The rows of one "group" ("reduce", "layernorm", "ops", "optim" in events.jsonl; "op_table" in
// op_table_events.jsonl) that carry "events", in file order.
inline std::vector<Json> probe_rows(const std::string& group, const std::string& file = "events.jsonl") {
  std::ifstream in(std::string(BYTEGRAD_TEST_DATA_DIR) + "/pytorch_probes/" + file);
  REQUIRE(in.good());
  std::vector<Json> rows;
  std::string line;
  while (std::getline(in, line)) {
    Json row = parse_json(line);
    const Json* g = row.find("group");
    if (g && g->string() == group && row.find("events")) rows.push_back(std::move(row));
  }
  return rows;
}

// [["alloc" | "free", requested bytes], ...] as allocation_events returns them.
inline AllocationEvents events_of(const Json& list) {
  AllocationEvents out;
  for (const Json& e : list.items) out.emplace_back(e.items.at(0).string(), e.items.at(1).integer());
  return out;
}

}  // namespace bytegrad::testing
