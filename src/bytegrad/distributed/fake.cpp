#include "bytegrad/distributed/fake.h"

#include <string>
#include <vector>

namespace bytegrad::distributed {

namespace {

class FakeProcessGroup final : public ProcessGroup {
 public:
  using ProcessGroup::ProcessGroup;
  std::string_view backend_name() const override { return "fake"; }
  void abort(const std::string& /*reason*/) override {}
  void shutdown() override {}

 protected:
  void exchange(const Collective& /*call*/, const std::optional<Stream>& /*stream*/) override {}
  // Alone as before: rank group_rank of the subgroup's size, on the same device.
  std::unique_ptr<ProcessGroup> make_subgroup(const std::vector<int>& ranks, int group_rank, const std::string& /*key*/,
                                              ProcessGroupOptions options) override {
    return std::make_unique<FakeProcessGroup>(group_rank, static_cast<int>(ranks.size()), device(), options);
  }
};

}  // namespace

std::unique_ptr<ProcessGroup> make_fake_process_group(int rank, int world_size, Device device,
                                                      ProcessGroupOptions options) {
  return std::make_unique<FakeProcessGroup>(rank, world_size, device, options);
}

}  // namespace bytegrad::distributed
