// What an autograd graph keeps alive, node by node: the visibility API for activation memory.
//   SavedTensors report = saved_tensors(loss);
//   std::cout << report;                 // a table: node, module, operand, shape, block bytes, who holds it
//   report.total_block_bytes;           // every storage the saved tensors point at, each counted once
//   report.graph_only_block_bytes;      // the part that only the graph holds: what backward frees
#pragma once

#include <cstddef>
#include <iosfwd>
#include <string>
#include <vector>

#include "bytegrad/autograd/node.h"

namespace bytegrad {

struct SavedTensors {
  std::vector<SavedTensorReport> entries;  // in the order a backward pass would run the nodes
  size_t storages = 0;                     // distinct storages among the entries
  size_t total_block_bytes = 0;            // their blocks, each once (the sum of charged_bytes)
  size_t graph_only_block_bytes = 0;       // of those, the blocks nothing outside the graph holds

  size_t size() const { return entries.size(); }
  bool empty() const { return entries.empty(); }
  const SavedTensorReport& operator[](size_t i) const { return entries[i]; }
  std::vector<SavedTensorReport>::const_iterator begin() const { return entries.begin(); }
  std::vector<SavedTensorReport>::const_iterator end() const { return entries.end(); }

  // For people: one row per saved tensor (node, module, operand, shape, dtype, device, the block it is
  // charged in human units next to exact bytes, "4.00 MiB (4194304 B)", and whether only the graph holds
  // it), then the totals. A module column of "(top)" is the model's own forward or no module at all.
  std::string table() const;
};
std::ostream& operator<<(std::ostream& out, const SavedTensors& report);

// Every node reachable from `root`'s grad_fn with what it saves, in execution order of a backward pass.
// Bytes are the allocator's blocks (block_size of the storage's pointer; a cpu storage counts its bytes);
// a storage several entries share (a view saved twice, an output saved by two nodes) is charged once, to
// its first entry. Released or hook-packed entries charge nothing.
SavedTensors saved_tensors(const Tensor& root);

}  // namespace bytegrad
