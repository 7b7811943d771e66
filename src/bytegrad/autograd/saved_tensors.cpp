#include "bytegrad/autograd/saved_tensors.h"

#include <fmt/format.h>

#include <algorithm>
#include <ostream>
#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "bytegrad/autograd/autograd_meta.h"
#include "bytegrad/memory/memory_functions.h"

namespace bytegrad {

SavedTensors saved_tensors(const Tensor& root) {
  SavedTensors report;
  Edge edge = gradient_edge(root);
  if (!edge.valid()) return report;

  struct StorageUse {
    size_t block_bytes = 0;
    long saved_references = 0;  // entries holding it (each saved variable holds an alias of its own)
    long use_count = 0;         // all its holders
  };
  // Keyed by address: holding a Storage here would change the use counts being read.
  std::unordered_map<const StorageImpl*, StorageUse> uses;
  std::vector<const StorageImpl*> entry_storage;  // per entry (null when released or packed)

  // Visit in the order backward would run them (ignoring readiness): highest sequence number first.
  std::unordered_set<Node*> seen{edge.function.get()};
  std::priority_queue<std::pair<uint64_t, Node*>> order;
  order.push({edge.function->sequence_nr(), edge.function.get()});
  while (!order.empty()) {
    Node* node = order.top().second;
    order.pop();
    for (const auto& [name, saved] : node->saved_variables()) {
      SavedTensorReport entry;
      entry.node = node->name();
      entry.module = node->module();
      entry.name = name;
      entry.released = saved->released();
      entry.packed = saved->packed();
      const Tensor& t = saved->peek();
      const StorageImpl* storage = nullptr;
      if (t.defined()) {
        storage = t.storage().get();
        entry.sizes = t.sizes();
        entry.dtype = t.dtype();
        entry.device = t.device();
        entry.bytes = t.nbytes();
        entry.block_bytes = storage->block_bytes();
        // One reference is the saved alias itself; any other means the bytes are shared.
        entry.shares_storage = t.storage().use_count() > 1;
        auto [it, first] = uses.try_emplace(storage);
        if (first) {
          it->second.block_bytes = entry.block_bytes;
          it->second.use_count = t.storage().use_count();
          entry.charged_bytes = entry.block_bytes;
        }
        ++it->second.saved_references;
      }
      report.entries.push_back(std::move(entry));
      entry_storage.push_back(storage);
    }
    for (const Edge& next : node->next_edges)
      if (next.valid() && seen.insert(next.function.get()).second)
        order.push({next.function->sequence_nr(), next.function.get()});
  }

  report.storages = uses.size();
  for (const auto& [storage, use] : uses) {
    report.total_block_bytes += use.block_bytes;
    if (use.use_count == use.saved_references) report.graph_only_block_bytes += use.block_bytes;
  }
  for (size_t i = 0; i < report.entries.size(); ++i)
    if (const StorageImpl* storage = entry_storage[i]) {
      const StorageUse& use = uses.at(storage);
      report.entries[i].graph_only = use.use_count == use.saved_references;
    }
  return report;
}

std::string SavedTensors::table() const {
  struct Row {
    std::string node, module, name, shape, dtype, device, block, held;
  };
  std::vector<Row> rows;
  rows.push_back({"node", "module", "saved", "shape", "dtype", "device", "block", "held by"});
  for (const SavedTensorReport& e : entries) {
    Row row{e.node, e.module.empty() ? "(top)" : e.module, e.name, "-", "-", "-", "-", "-"};
    if (e.released) {
      row.held = "released";
    } else if (e.packed) {
      row.held = "packed by hooks";
    } else if (e.sizes.empty() && e.bytes == 0) {
      row.held = "nothing (undefined)";
    } else {
      row.shape = shape_str(e.sizes);
      row.dtype = std::string(scalar_type_name(e.dtype));
      row.device = e.device.str();
      row.block = e.charged_bytes != 0 || e.block_bytes == 0 ? human_bytes(static_cast<int64_t>(e.charged_bytes))
                                                             : "counted above";
      row.held = e.graph_only ? "graph only" : "graph and others";
    }
    rows.push_back(std::move(row));
  }
  size_t w[8] = {};
  for (const Row& r : rows) {
    const std::string* cells[8] = {&r.node, &r.module, &r.name, &r.shape, &r.dtype, &r.device, &r.block, &r.held};
    for (int c = 0; c < 8; ++c) w[c] = std::max(w[c], cells[c]->size());
  }
  std::string out;
  for (const Row& r : rows) {
    std::string line =
        fmt::format("{:<{}}  {:<{}}  {:<{}}  {:<{}}  {:<{}}  {:<{}}  {:>{}}  {}", r.node, w[0], r.module, w[1], r.name,
                    w[2], r.shape, w[3], r.dtype, w[4], r.device, w[5], r.block, w[6], r.held);
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  }
  out += fmt::format("{} saved tensors in {} storages: {} in blocks, {} held only by the graph (freed by backward)\n",
                     entries.size(), storages, human_bytes(static_cast<int64_t>(total_block_bytes)),
                     human_bytes(static_cast<int64_t>(graph_only_block_bytes)));
  return out;
}

std::ostream& operator<<(std::ostream& out, const SavedTensors& report) { return out << report.table(); }

}  // namespace bytegrad
