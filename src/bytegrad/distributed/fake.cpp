#include "bytegrad/distributed/fake.h"

#include <string>

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
};

}  // namespace

std::unique_ptr<ProcessGroup> make_fake_process_group(int rank, int world_size, Device device,
                                                      ProcessGroupOptions options) {
  return std::make_unique<FakeProcessGroup>(rank, world_size, device, options);
}

}  // namespace bytegrad::distributed
