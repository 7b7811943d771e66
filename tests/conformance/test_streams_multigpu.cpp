// PyTorch's test/test_cuda_multigpu.py, class TestCudaMultiGPU: streams, events and memory on two devices of
// one kind (sim:0 and sim:1, meta:0 and meta:1; cuda:0 and cuda:1 where two GPUs are present, else skipped
// with a message as PyTorch skips them). torch.cuda.device(d) is CurrentDeviceScope (conformance.h), and
// torch.cuda._sleep queue_busy_work.
#include <stdexcept>
#include <string>

#include "bytegrad/memory/streams.h"
#include "bytegrad/tensor/tensor.h"
#include "tests/conformance/conformance.h"

using namespace bytegrad;
using namespace bytegrad::conformance;

namespace {

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// The message of the std::invalid_argument `call` throws ("" if it throws none).
template <typename Call>
std::string invalid_argument_of(Call call) {
  try {
    call();
  } catch (const std::invalid_argument& error) {
    return error.what();
  }
  return "";
}

}  // namespace

// PyTorch: test_cuda_multigpu.py TestCudaMultiGPU.test_cuda_synchronize. PyTorch's torch.cuda.synchronize
// refuses a cpu device; bytegrad's synchronize serves every device type and, as torch.cpu.synchronize, has
// nothing to wait for on cpu, so that refusal is not asserted.
TEST_CASE("conformance: synchronize takes the current device or one named") {
  for_each_device([](Device device) {
    DeviceUnderTest dut(device);
    CurrentDeviceScope on(device);
    synchronize();
    synchronize(device);
    synchronize(Device::parse(device.str()));
    if (has_second_device(device)) synchronize(second_device_of(device));
    CHECK(current_stream(device).query());
  });
}

// PyTorch: test_cuda_multigpu.py TestCudaMultiGPU.test_current_stream
TEST_CASE("conformance: each device has its own current stream; cpu has none") {
  for_each_device_pair([](Device d0, Device d1) {
    CurrentDeviceScope on(d0);
    Stream s0 = current_stream();
    Stream s1 = current_stream(d1);
    Stream s2 = current_stream(d0);
    CHECK(s0.device() == d0);
    CHECK(s1.device() == d1);
    CHECK(s2.device() == d0);
    CHECK(s0 == s2);
    {
      CurrentDeviceScope on_d1(d1);
      s0 = current_stream();
      s1 = current_stream(d1);
      s2 = current_stream(d0);
    }
    CHECK(s0.device() == d1);
    CHECK(s1.device() == d1);
    CHECK(s2.device() == d0);
    CHECK(s0 == s1);
    CHECK(contains(invalid_argument_of([] { current_stream(kCpu); }), "cpu"));
  });
}

// PyTorch: test_cuda_multigpu.py TestCudaMultiGPU.test_default_stream
TEST_CASE("conformance: each device has its own default stream, current until another is set") {
  for_each_device_pair([](Device d0, Device d1) {
    Stream s0, s1;
    {
      CurrentDeviceScope on(d0);
      s0 = default_stream();
    }
    {
      CurrentDeviceScope on(d1);
      s1 = default_stream();
    }
    const Stream s2 = default_stream(d0);
    const Stream s3 = default_stream(d1);
    CHECK(s0.device() == d0);
    CHECK(s1.device() == d1);
    CHECK(s2.device() == d0);
    CHECK(s3.device() == d1);
    CHECK(s0 == s2);
    CHECK(s1 == s3);
    {
      CurrentDeviceScope on(d0);
      CHECK(current_stream() == s0);
    }
    {
      CurrentDeviceScope on(d1);
      CHECK(current_stream() == s1);
    }
    CHECK(contains(invalid_argument_of([] { default_stream(kCpu); }), "cpu"));
  });
}

// PyTorch: test_cuda_multigpu.py TestCudaMultiGPU.test_stream_event_device
TEST_CASE("conformance: an event belongs to the device of the stream it was recorded on") {
  for_each_device_pair([](Device d0, Device d1) {
    Event e0;
    CHECK_FALSE(e0.device().has_value());
    Stream s0, s1;
    Event e1;
    {
      CurrentDeviceScope on(d0);
      s0 = current_stream();
      e0.record(s0);
    }
    {
      CurrentDeviceScope on(d1);
      s1 = get_stream_from_pool();
      e1 = s1.record_event();
    }
    CHECK(s0.device() == d0);
    CHECK(e0.device() == d0);
    CHECK(s1.device() == d1);
    CHECK(e1.device() == d1);
  });
}

// PyTorch: test_cuda_multigpu.py TestCudaMultiGPU.test_streams_multi_gpu
TEST_CASE("conformance: a stream made for the second device is on it, apart from the first's") {
  for_each_device_pair([](Device d0, Device d1) {
    CurrentDeviceScope on(d0);
    const Stream default_stream_of_d0 = current_stream();
    CHECK(default_stream_of_d0.device() == d0);
    const Stream stream = get_stream_from_pool(d1);
    CHECK(stream.device() == d1);
    {
      CurrentDeviceScope on_d1(d1);
      CHECK(current_stream().device() == d1);
      CHECK_FALSE(current_stream() == default_stream_of_d0);
    }
  });
}

// PyTorch: test_cuda_multigpu.py TestCudaMultiGPU.test_streams_multi_gpu_query
TEST_CASE("conformance: busy work on one device's stream leaves the other device's idle, whoever asks") {
  for_each_device_pair([](Device d0, Device d1) {
    synchronize(d0);
    synchronize(d1);
    const Stream s0 = current_stream(d0);
    const Stream s1 = current_stream(d1);
    queue_busy_work(s1);
    for (Device asker : {d0, d0, d1}) {  // as asked from no d0 scope, then from each d0's
      CurrentDeviceScope on(asker);
      CHECK(s0.query());
      CHECK_FALSE(s1.query());
    }
    {
      CurrentDeviceScope on(d0);  // deliberately from the other d0
      s1.synchronize();
    }
    for (Device asker : {d0, d0, d1}) {
      CurrentDeviceScope on(asker);
      CHECK(s0.query());
      CHECK(s1.query());
    }
  });
}

// PyTorch: test_cuda_multigpu.py TestCudaMultiGPU.test_streams_multi_gpu_eq (the hash checks are left out:
// bytegrad's Stream has no hash; equality is by device and id, as the hash is)
TEST_CASE("conformance: streams are equal when device and id are") {
  for_each_device_pair([](Device d0, Device d1) {
    Stream s0, s1, s2, s3;
    {
      CurrentDeviceScope on(d0);
      s0 = current_stream();
      s1 = current_stream();
    }
    {
      CurrentDeviceScope on(d1);
      s2 = current_stream();
      s3 = current_stream();
    }
    CHECK(s0 == s0);
    CHECK(s0 == s1);
    CHECK(s2 == s2);
    CHECK(s2 == s3);
    CHECK_FALSE(s0 == s2);
    CHECK_FALSE(s1 == s3);
    CHECK(s0.device() == s1.device());
    CHECK(s0.id() == s1.id());
    CHECK(s2.device() == s3.device());
    CHECK(s2.id() == s3.id());
    CHECK_FALSE(s0.device() == s3.device());
  });
}

// PyTorch: test_cuda_multigpu.py TestCudaMultiGPU.test_streams_priority. torch.cuda.Stream.priority_range()
// is (0, -3) on the H100 (PyTorch keeps 4 levels): kStreamPriorityLevels.
TEST_CASE("conformance: streams keep the lowest and highest priority on either device") {
  for_each_device_pair([](Device d0, Device d1) {
    const int low = 0, high = -(kStreamPriorityLevels - 1);
    const Stream s0 = get_stream_from_pool(d0, low);
    CHECK(s0.priority() == low);
    CHECK(s0.device() == d0);
    const Stream s1 = get_stream_from_pool(d1, high);
    CHECK(s1.priority() == high);
    CHECK(s1.device() == d1);
  });
}

// PyTorch: test_cuda_multigpu.py TestCudaMultiGPU.test_events_multi_gpu_query
TEST_CASE("conformance: an event behind busy work on one device is pending, from either device") {
  for_each_device_pair([](Device d0, Device d1) {
    const Stream s0 = current_stream(d0);
    const Event e0 = s0.record_event();
    s0.synchronize();
    const Stream s1 = current_stream(d1);
    queue_busy_work(s1);
    const Event e1 = s1.record_event();
    for (Device asker : {d0, d0, d1}) {
      CurrentDeviceScope on(asker);
      CHECK(e0.query());
      CHECK_FALSE(e1.query());
    }
    {
      CurrentDeviceScope on(d0);  // deliberately from the other d0
      e1.synchronize();
    }
    for (Device asker : {d0, d0, d1}) {
      CurrentDeviceScope on(asker);
      CHECK(e0.query());
      CHECK(e1.query());
    }
  });
}

// PyTorch: test_cuda_multigpu.py TestCudaMultiGPU.test_events_multi_gpu_elapsed_time
TEST_CASE("conformance: elapsed time between events of two devices is refused, of one device measured") {
  for_each_device_pair([](Device d0, Device d1) {
    Event e0(true), e1(true), e2(true);
    e0.record(current_stream(d0));
    queue_busy_work(current_stream(d1));
    e1.record(current_stream(d1));
    e0.synchronize();
    e1.synchronize();
    for (Device asker : {d0, d1}) {
      CurrentDeviceScope on(asker);
      CHECK_THROWS_AS(e0.elapsed_time(e1), std::invalid_argument);
    }
    queue_busy_work(current_stream(d0));
    e2.record(current_stream(d0));
    current_stream(d0).synchronize();
    for (Device asker : {d0, d1}) {  // the second deliberately from the other d0
      CurrentDeviceScope on(asker);
      if (d0.type == DeviceType::cuda) CHECK(e0.elapsed_time(e2) > 0);
      else CHECK_THROWS_AS(e0.elapsed_time(e2), std::logic_error);  // sim and meta: no GPU time to measure
    }
  });
}

// PyTorch: test_cuda_multigpu.py TestCudaMultiGPU.test_mem_get_info
TEST_CASE("conformance: free device memory falls by a new segment, total stays; for each way to name a device") {
  for_each_device([](Device device) {
    DeviceUnderTest dut0(device);
    auto check = [](Device named) {
      empty_cache(named);
      synchronize(named);
      const auto [before_free, before_total] = mem_get_info(named);
      const Tensor t = randn({1024 * 1024 * 8}, bytegrad::device(named));  // 32 MiB: a segment of its own
      const auto [after_free, after_total] = mem_get_info(named);
      CHECK(after_free < before_free);
      CHECK(before_total == after_total);
    };
    check(device);
    check(Device::parse(device_type_name(device.type)));  // "sim": index 0
    check(Device::parse(device.str()));
    {
      CurrentDeviceScope on(device);
      check(default_device());
    }
    if (has_second_device(device)) {
      const Device d1 = second_device_of(device);
      DeviceUnderTest dut1(d1);
      check(d1);
      check(Device::parse(d1.str()));
    }
  });
}

// PyTorch: test_cuda_multigpu.py TestCudaMultiGPU.test_cuda_device_memory_allocated
TEST_CASE("conformance: a tensor on the first device leaves the second device's memory_allocated alone") {
  for_each_device_pair([](Device d0, Device d1) {
    const int64_t current_alloc0 = memory_allocated(d0);
    const int64_t current_alloc1 = memory_allocated(d1);
    const Tensor x = ones({10}, bytegrad::device(d0));
    CHECK(memory_allocated(d0) > current_alloc0);
    CHECK(memory_allocated(d1) == current_alloc1);
  });
}

// PyTorch: test_cuda_multigpu.py TestCudaMultiGPU.test_tensor_device
TEST_CASE("conformance: a tensor goes to the device named, else the current one") {
  for_each_device_pair([](Device d0, Device d1) {
    CurrentDeviceScope on(d0);
    CHECK(empty({1}).device() == d0);
    CHECK(empty({1}, bytegrad::device(d1)).device() == d1);
    {
      CurrentDeviceScope on_d1(d1);
      CHECK(empty({1}).device() == d1);
      CHECK(empty({1}, bytegrad::device(d0)).device() == d0);
      CHECK(empty({1}, TensorOptions{}).device() == d1);  // d0=None
    }
  });
}
