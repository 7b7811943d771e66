// PyTorch's test/test_cuda.py, class TestCuda: the tests of streams and events, and of the caching
// allocator across streams (record_stream). Where PyTorch keeps a stream busy with torch.cuda._sleep,
// queue_busy_work (conformance.h) queues work that sim and meta keep pending until the program waits for it;
// on cuda the assertions that need it are skipped with a message. Pinned host memory (pin_memory(),
// non_blocking copies) is not modelled: host tensors here are ordinary ones and copies are blocking.
#include <stdexcept>
#include <string>
#include <vector>

#include "bytegrad/memory/streams.h"
#include "bytegrad/tensor/ops.h"
#include "bytegrad/tensor/tensor.h"
#include "tests/conformance/conformance.h"

using namespace bytegrad;
using namespace bytegrad::conformance;

namespace {

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

// PyTorch: test_cuda.py TestCuda.test_streams (the pinned ByteTensor it makes is left out)
TEST_CASE("conformance: the default stream is stream 0 and current; a pool stream is another, idle") {
  for_each_device([](Device device) {
    DeviceUnderTest dut(device);
    const Stream default_stream = current_stream(device);
    const Stream user_stream = get_stream_from_pool(device);
    CHECK(current_stream(device) == default_stream);
    CHECK_FALSE(default_stream == user_stream);
    CHECK(default_stream.id() == 0);  // torch's cuda_stream: 0 for the default stream
    CHECK(user_stream.id() != 0);
    {
      StreamGuard guard(user_stream);
      CHECK(current_stream(device) == user_stream);
    }
    CHECK(user_stream.query());
    default_stream.synchronize();
    CHECK(default_stream.query());
  });
}

// PyTorch: test_cuda.py TestCuda.test_stream_event_repr
TEST_CASE("conformance: streams and events describe themselves by their type") {
  for_each_device([](Device device) {
    DeviceUnderTest dut(device);
    const Stream s = current_stream(device);
    CHECK(contains(s.str(), "Stream"));
    Event e;
    CHECK(contains(e.str(), "Event"));
    e.record(s);
    CHECK(contains(e.str(), "Event"));
  });
}

// PyTorch: test_cuda.py TestCuda.test_events
TEST_CASE("conformance: an event is complete before its record, pending behind busy work, complete once waited") {
  for_each_device([](Device device) {
    DeviceUnderTest dut(device);
    const Stream stream = current_stream(device);
    Event event(/*enable_timing=*/true);
    CHECK(event.query());
    Event start_event(/*enable_timing=*/true);
    start_event.record(stream);
    queue_busy_work(stream);
    event.record(stream);
    CHECK_FALSE(event.query());
    event.synchronize();
    CHECK(event.query());
    if (device.type == DeviceType::cuda) {
      CHECK(start_event.elapsed_time(event) > 0);
    } else {
      // sim and meta run no GPU: there is no GPU time to measure, and they say so.
      CHECK_THROWS_AS(start_event.elapsed_time(event), std::logic_error);
    }

    // torch's cuda_event and event_id are 0 until the first record (bytegrad makes the event then too).
    Event timed(/*enable_timing=*/true);
    CHECK_FALSE(timed.is_recorded());
    {
      CurrentDeviceScope on(device);
      timed.record();  // on the current stream
    }
    CHECK(timed.is_recorded());
  });
}

// PyTorch: test_cuda.py TestCuda.test_events_elapsedtime
TEST_CASE("conformance: elapsed time needs two timing events, both recorded") {
  for_each_device([](Device device) {
    DeviceUnderTest dut(device);
    auto message_of = [](const Event& start, const Event& end) {
      try {
        start.elapsed_time(end);
      } catch (const std::invalid_argument& error) {
        return std::string(error.what());
      }
      return std::string("no std::invalid_argument");
    };
    CHECK(contains(message_of(Event(false), Event(false)), "enable_timing=true"));
    CHECK(contains(message_of(Event(true), Event(true)), "recorded"));
    CHECK(contains(message_of(Event(), Event()), "enable_timing=true"));  // enable_timing is off by default
  });
}

// PyTorch: test_cuda.py TestCuda.test_generic_stream_event (the Python class hierarchy checks and event_id
// are left out: bytegrad has one Stream and one Event class, and no event ids)
TEST_CASE("conformance: a stream named by its id works as itself; copies and sums on it are ordered by events") {
  for_each_device([](Device device) {
    DeviceUnderTest dut(device);
    CurrentDeviceScope on(device);
    const Stream stream = get_stream_from_pool(device);
    CHECK(stream.device() == default_device());
    const Stream cuda_stream(stream.device(), stream.id(), stream.priority());
    CHECK(cuda_stream == stream);
    CHECK(stream.id() != current_stream().id());

    Event event1(true), event2(true);
    CHECK_FALSE(event1.is_recorded());
    const Tensor a = randn({1000}, bytegrad::device(kCpu));
    const Tensor b = randn({1000}, bytegrad::device(kCpu));
    Tensor a_dev, b_dev;
    {
      StreamGuard guard(cuda_stream);
      a_dev = a.to(device);
      b_dev = b.to(device);
      CHECK(current_stream().id() == stream.id());
    }
    event1.record(stream);
    event1.synchronize();
    CHECK(event1.query());
    if (device.type == DeviceType::cuda) measurable_work(device);
    const Tensor c = a_dev + b_dev;
    event2.record();
    event2.synchronize();
    CHECK(event2.query());
    if (device.type != DeviceType::meta) CHECK(c.cpu().tolist() == (a + b).tolist());  // meta has no values
    if (device.type == DeviceType::cuda) CHECK(event1.elapsed_time(event2) > 0);
    else CHECK_THROWS_AS(event1.elapsed_time(event2), std::logic_error);
  });
}

// PyTorch: test_cuda.py TestCuda.test_stream_compatibility
TEST_CASE("conformance: set_current_stream makes a stream current; a device index out of range is refused") {
  for_each_device([](Device device) {
    DeviceUnderTest dut(device);
    const Stream s1 = get_stream_from_pool(device);
    const Stream s2 = get_stream_from_pool(device);
    set_current_stream(s1);
    CHECK(current_stream(device).id() == s1.id());
    set_current_stream(s2);
    CHECK(current_stream(device).id() == s2.id());
    set_current_stream(default_stream(device));
    if (device.type == DeviceType::cuda) {
      try {
        current_stream(Device{DeviceType::cuda, cuda_device_count()});
        FAIL("no error for a device index past the last GPU");
      } catch (const std::invalid_argument& error) {
        CHECK(contains(error.what(), "is not available"));
      }
    }
    // sim and meta have a device for every index: nothing is out of range there.
  });
}

// PyTorch: test_cuda.py TestCuda.test_record_stream
TEST_CASE("conformance: a block used on another stream is not reused before that stream's work is done") {
  for_each_device([](Device device) {
    DeviceUnderTest dut(device);
    const Tensor t = tensor({1, 2, 3, 4}, bytegrad::device(kCpu));  // PyTorch pins it; a plain host tensor here
    const Tensor result = empty({4}, bytegrad::device(device));
    const Stream stream = get_stream_from_pool(device);
    void* ptr = nullptr;

    // The host-to-device copy on the side stream; its result used, then freed, on the default stream.
    {
      Tensor tmp;
      {
        StreamGuard guard(stream);
        tmp = t.to(device);
        ptr = tmp.data_ptr();
      }
      current_stream(device).wait_stream(stream);
      tmp.record_stream(current_stream(device));
      queue_busy_work(current_stream(device));  // delays the copy below
      result.copy_(tmp);
    }
    {
      StreamGuard guard(stream);
      const Tensor tmp2 = empty({4}, bytegrad::device(device));
      tmp2.zero_();
      CHECK_MESSAGE(tmp2.data_ptr() != ptr, "allocation reused too soon");
    }
    if (device.type != DeviceType::meta) CHECK(result.tolist() == std::vector<double>{1, 2, 3, 4});

    // The native allocator reuses the block on its own stream once the default stream's copy has finished.
    current_stream(device).synchronize();
    {
      StreamGuard guard(stream);
      const Tensor tmp3 = empty({4}, bytegrad::device(device));
      CHECK_MESSAGE(tmp3.data_ptr() == ptr, "allocation not reused");
    }
  });
}

// PyTorch: test_cuda.py TestCuda.test_record_stream_on_shifted_view (PyTorch issue 27366)
TEST_CASE("conformance: record_stream on a view with an offset holds its whole block") {
  for_each_device([](Device device) {
    DeviceUnderTest dut(device);
    // Tensors are made on a stream of their own, so that no block freed by another stream can serve them.
    const Stream stream_alloc = get_stream_from_pool(device);
    Tensor base;
    {
      StreamGuard guard(stream_alloc);
      base = tensor({10, 10}, bytegrad::device(device));
    }
    Tensor view = base.slice(0, 5, std::nullopt);  // base[5:]
    CHECK(view.storage_offset() > 0);

    const Stream stream_record = get_stream_from_pool(device);
    queue_busy_work(stream_record);
    view.record_stream(stream_record);

    void* data_ptr = base.data_ptr();
    base = Tensor();
    view = Tensor();

    stream_alloc.synchronize();
    Tensor try_realloc;
    {
      StreamGuard guard(stream_alloc);
      try_realloc = tensor({10, 10}, bytegrad::device(device));
    }
    CHECK(try_realloc.data_ptr() != data_ptr);
  });
}

// PyTorch: test_cuda.py TestCuda.test_stream_context_manager
TEST_CASE("conformance: a stream guard makes its stream current and restores the previous one") {
  for_each_device([](Device device) {
    DeviceUnderTest dut(device);
    const Stream prev_stream = current_stream(device);
    {
      const Stream stream = get_stream_from_pool(device);
      StreamGuard guard(stream);
      CHECK(stream == current_stream(device));
    }
    CHECK(prev_stream == current_stream(device));
  });
}

// PyTorch: test_cuda.py TestCuda.test_caching_allocator_record_stream_oom (PyTorch issue 19219): frees held
// back by record_stream are released by the out-of-memory retry. PyTorch's H100 has room for all 100 blocks;
// sim and meta run it on a 1 GiB card, so that the retry happens.
TEST_CASE("conformance: frees held back by record_stream are released before an out-of-memory error") {
  for_each_device([](Device device) {
    DeviceUnderTest dut(device, SimulatedCapacity{kGiB, 64 * kMiB});
    const Stream stream = get_stream_from_pool(device);
    constexpr int64_t kElements = 40 * 1024 * 1024;  // 160 MiB of floats
    Tensor y;
    {
      StreamGuard guard(stream);
      y = zeros({kElements}, bytegrad::device(device));
    }
    for (int i = 0; i < 100; ++i) {
      Tensor x = empty({kElements}, bytegrad::device(device));
      {
        StreamGuard guard(stream);
        y.add_(x);
      }
      x.record_stream(stream);  // x is not reused until the work queued on `stream` is done
    }
    // Ours, not PyTorch's: on the small card the loop did need the retry, and it waited for the streams.
    if (device.type != DeviceType::cuda) {
      CHECK(dut.stat("num_alloc_retries") > 0);
      CHECK(dut.stat("num_sync_all_streams") > 0);
    }
    y = Tensor();
    empty_cache(device);
  });
}

// PyTorch: test_cuda.py TestCuda.test_to_cpu_blocking_by_default (the pinned-memory check is left out)
TEST_CASE("conformance: a copy to the host waits for the device's current stream") {
  for_each_device([](Device device) {
    if (device.type == DeviceType::meta) {
      MESSAGE("meta: no values to copy to the host (PyTorch refuses it too)");
      return;
    }
    DeviceUnderTest dut(device);
    const Tensor src = randn({1000000}, bytegrad::device(device));
    synchronize(device);
    queue_busy_work(current_stream(device));
    const Tensor dst = src.to(kCpu);
    CHECK(current_stream(device).query());
    CHECK(src.cpu().tolist() == dst.tolist());
  });
}
