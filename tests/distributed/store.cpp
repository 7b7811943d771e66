// The TCP store (set, get, add, wait, check, delete; timeouts; several clients on threads), the rank
// environment's parsing and its errors, and the store backend's collectives: ranks on threads of this
// process, each with its own connection, give the threads backend's bits.
#include <doctest/doctest.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "bytegrad/distributed/init.h"
#include "bytegrad/distributed/launcher.h"
#include "bytegrad/distributed/store.h"
#include "bytegrad/distributed/store_backend.h"
#include "bytegrad/memory/streams.h"
#include "bytegrad/tensor/ops.h"
#include "tests/distributed/support.h"

using namespace bytegrad;
using namespace bytegrad::distributed;
using namespace std::chrono_literals;
using bytegrad::testing::error_of;
using bytegrad::testing::FreshRankDevices;

namespace {

// A server on a free port of the loopback interface.
TcpStore make_server(std::chrono::milliseconds timeout = 5000ms) { return TcpStore("127.0.0.1", 0, true, timeout); }

}  // namespace

TEST_CASE("store: set, get, add, check, delete between a server and a client") {
  TcpStore server = make_server();
  TcpStore client("127.0.0.1", server.port(), false, 5000ms);
  server.set("greeting", std::string("hello"));
  CHECK(client.get_string("greeting") == "hello");
  client.set("bytes", TcpStore::Bytes{0, 1, 2, 255});
  CHECK(server.get("bytes") == TcpStore::Bytes{0, 1, 2, 255});
  CHECK(client.add("counter", 5) == 5);
  CHECK(server.add("counter", -2) == 3);
  CHECK(client.check({"greeting", "bytes"}));
  CHECK_FALSE(client.check({"greeting", "missing"}));
  CHECK(client.delete_key("greeting"));
  CHECK_FALSE(client.delete_key("greeting"));
  CHECK_FALSE(server.check({"greeting"}));
  server.set("empty", std::string());
  CHECK(client.get("empty").empty());
}

TEST_CASE("store: get and wait block until another client sets the key") {
  TcpStore server = make_server();
  std::thread setter([port = server.port()] {
    TcpStore late("127.0.0.1", port, false, 5000ms);
    std::this_thread::sleep_for(100ms);
    late.set("a", std::string("1"));
    std::this_thread::sleep_for(50ms);
    late.set("b", std::string("2"));
  });
  const auto start = std::chrono::steady_clock::now();
  server.wait({"a", "b"});
  CHECK(std::chrono::steady_clock::now() - start >= 100ms);
  CHECK(server.get_string("b") == "2");
  setter.join();
}

TEST_CASE("store: a get or wait for a key nobody sets times out naming it, and the connection stays usable") {
  TcpStore server = make_server();
  TcpStore client("127.0.0.1", server.port(), false, 5000ms);
  const std::string get_error = error_of([&] { client.get("never", 100ms); });
  CHECK(get_error.find("timed out after 100 ms waiting for key(s) never") != std::string::npos);
  client.set("here", std::string("x"));
  const std::string wait_error = error_of([&] { client.wait({"here", "absent"}, 100ms); });
  CHECK(wait_error.find("waiting for key(s) absent") != std::string::npos);
  CHECK_THROWS_AS(client.wait({"absent"}, 50ms), StoreTimeout);
  CHECK(client.get_string("here") == "x");  // the same connection answers afterwards
}

TEST_CASE("store: eight clients on threads add and read concurrently") {
  TcpStore server = make_server();
  constexpr int kClients = 8, kAdds = 50;
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int c = 0; c < kClients; ++c)
    threads.emplace_back([&, c, port = server.port()] {
      TcpStore client("127.0.0.1", port, false, 5000ms);
      for (int i = 0; i < kAdds; ++i) client.add("total", 1);
      client.set("done/" + std::to_string(c), std::string(1, static_cast<char>('a' + c)));
      // Every client waits for every other's key, as ranks do.
      std::vector<std::string> keys;
      for (int o = 0; o < kClients; ++o) keys.push_back("done/" + std::to_string(o));
      client.wait(keys);
      for (int o = 0; o < kClients; ++o)
        if (client.get_string(keys[o]) != std::string(1, static_cast<char>('a' + o))) ++wrong;
    });
  for (auto& t : threads) t.join();
  CHECK(wrong == 0);
  CHECK(server.add("total", 0) == kClients * kAdds);  // 8 * 50 = 400
}

TEST_CASE("store: a client with no server gives up after its timeout, naming the address") {
  // A port bound but not listening: connections are refused, and no other process (a launcher test running
  // beside this one) can take it meanwhile, as it could a port a closed server gave back.
  const int holder = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(holder >= 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  REQUIRE(::bind(holder, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0);
  socklen_t length = sizeof(address);
  REQUIRE(::getsockname(holder, reinterpret_cast<sockaddr*>(&address), &length) == 0);
  const int port = ntohs(address.sin_port);
  const std::string error = error_of([&] { TcpStore("127.0.0.1", port, false, 200ms); });
  CHECK(error.find("could not connect to rank 0's store at 127.0.0.1:" + std::to_string(port) + " within 200 ms") !=
        std::string::npos);
  ::close(holder);
  CHECK(error_of([] { TcpStore("127.0.0.1", 0, false, 200ms); }).find("needs the server's port") != std::string::npos);
  CHECK(error_of([] { TcpStore("no-such-host.invalid", 29500, false, 200ms); }).find("cannot resolve") !=
        std::string::npos);
}

TEST_CASE("rank environment: torchrun's and mpirun's variables, and errors naming the variable") {
  auto from = [](std::map<std::string, std::string> vars) {
    return [vars](const char* name) -> const char* {
      auto it = vars.find(name);
      return it == vars.end() ? nullptr : it->second.c_str();
    };
  };
  const RankEnvironment torchrun = read_rank_environment(from(
      {{"RANK", "3"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "1"}, {"MASTER_ADDR", "10.0.0.2"}, {"MASTER_PORT", "1234"}}));
  CHECK(torchrun.rank == 3);
  CHECK(torchrun.world_size == 4);
  CHECK(torchrun.local_rank == 1);
  CHECK(torchrun.master_addr == "10.0.0.2");
  CHECK(torchrun.master_port == 1234);
  CHECK(torchrun.source == "torchrun");

  const RankEnvironment mpi = read_rank_environment(
      from({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}}));
  CHECK(mpi.rank == 1);
  CHECK(mpi.world_size == 2);
  CHECK(mpi.master_addr == "127.0.0.1");  // the defaults
  CHECK(mpi.master_port == 29500);
  CHECK(mpi.source == "mpirun");

  auto error = [&](std::map<std::string, std::string> vars) {
    return error_of([&] { read_rank_environment(from(vars)); });
  };
  CHECK(error({}).find("RANK is not set") != std::string::npos);
  CHECK(error({{"RANK", "0"}, {"LOCAL_RANK", "0"}}).find("WORLD_SIZE is not set") != std::string::npos);
  CHECK(error({{"RANK", "0"}, {"WORLD_SIZE", "2"}}).find("LOCAL_RANK is not set") != std::string::npos);
  CHECK(error({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "0"}})
            .find("OMPI_COMM_WORLD_SIZE is not set") != std::string::npos);
  CHECK(error({{"RANK", "two"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "0"}}).find("RANK='two' is not an integer") !=
        std::string::npos);
  CHECK(error({{"RANK", "2"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "0"}})
            .find("RANK=2 is not a rank of a world of 2 (0 to 1)") != std::string::npos);
  CHECK(error({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "0"}, {"MASTER_PORT", "70000"}})
            .find("MASTER_PORT=70000 is not a TCP port") != std::string::npos);
  CHECK(error_of([] { init_process_group("gloo", RankEnvironment{}); }).find("unknown backend 'gloo'") !=
        std::string::npos);
}

namespace {

// Runs `body` on `world_size` ranks of the store backend on sim, one thread each with its own connection
// to a server on this thread, and returns what each rank's body returned.
template <typename Body>
std::vector<std::vector<double>> on_store_ranks(int world_size, Body body,
                                                std::chrono::milliseconds timeout = 10000ms) {
  TcpStore server = make_server(timeout);
  std::vector<std::vector<double>> results(world_size);
  std::vector<std::string> errors(world_size);
  std::vector<std::thread> threads;
  for (int r = 0; r < world_size; ++r)
    threads.emplace_back([&, r] {
      try {
        auto store = std::make_shared<TcpStore>("127.0.0.1", server.port(), false, timeout);
        auto pg = make_store_process_group(store, r, world_size, Device{DeviceType::sim, r},
                                           ProcessGroupOptions{.timeout = timeout});
        results[r] = body(*pg);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < world_size; ++r)
    if (!errors[r].empty()) throw std::runtime_error("rank " + std::to_string(r) + ": " + errors[r]);
  return results;
}

// Every collective in a row; the results of all, concatenated.
std::vector<double> every_collective(ProcessGroup& pg) {
  const Device d = pg.device();
  const int n = pg.size();
  // Values whose float32 sums depend on the order: 1e8, 1, -1e8, 1, ... with a fraction per rank.
  const double big = pg.rank() % 2 == 0 ? 1e8 : 1.0;
  const double sign = pg.rank() % 4 < 2 ? 1 : -1;
  std::vector<double> out;
  auto take = [&](const Tensor& t) {
    const auto values = t.tolist();
    out.insert(out.end(), values.begin(), values.end());
  };
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::product, ReduceOp::min, ReduceOp::max}) {
    for (ScalarType dtype : {ScalarType::float32, ScalarType::bfloat16, ScalarType::int32}) {
      Tensor x = from_vector({sign * big, 0.1 * (pg.rank() + 1), 3.0 + pg.rank()}, {3}, TensorOptions{dtype, d});
      pg.all_reduce(x, op);
      take(x);
    }
  }
  Tensor flags = from_vector({pg.rank() == 0 ? 1.0 : 0.0, 0}, {2}, TensorOptions{ScalarType::bool_, d});
  pg.all_reduce(flags, ReduceOp::sum);  // or
  take(flags);
  Tensor b = full({2}, 7.5 * pg.rank(), device(d));
  pg.broadcast(b, n - 1);
  take(b);
  Tensor g = empty({2 * n}, device(d));
  pg.all_gather_into_tensor(g, from_vector({1.0 * pg.rank(), -1.0 * pg.rank()}, {2}, device(d)));
  take(g);
  std::vector<double> ramp;
  for (int i = 0; i < 3 * n; ++i) ramp.push_back(0.1 * i * (pg.rank() + 1) + (i % 2 ? big : 0));
  Tensor rs = empty({3}, device(d));
  auto work = pg.reduce_scatter_tensor(rs, from_vector(ramp, {3 * n}, device(d)), ReduceOp::sum, true);
  work->wait();
  take(rs);
  pg.barrier();
  return out;
}

}  // namespace

TEST_CASE("store backend: every collective on 2 and 3 ranks gives the threads backend's bits") {
  for (int world : {2, 3}) {
    CAPTURE(world);
    FreshRankDevices fresh(world, DeviceType::sim);
    std::vector<std::vector<double>> threads_results(world);
    run_ranks(world, DeviceType::sim, [&](ProcessGroup& pg) { threads_results[pg.rank()] = every_collective(pg); });
    const auto store_results = on_store_ranks(world, every_collective);
    for (int r = 0; r < world; ++r) {
      CAPTURE(r);
      CHECK(store_results[r] == threads_results[r]);  // exact: the same reductions in the same order
    }
  }
}

TEST_CASE("store backend: calls that differ fail on every rank naming each rank's call") {
  FreshRankDevices fresh(2, DeviceType::sim);
  const std::string error = error_of([] {
    on_store_ranks(2, [](ProcessGroup& pg) {
      Tensor x = zeros({pg.rank() == 0 ? 4 : 8}, device(pg.device()));
      pg.all_reduce(x);
      return std::vector<double>{};
    });
  });
  CHECK(error.find("collective #1: the ranks' calls differ: rank 0: all_reduce(float32 [4], sum); rank 1: "
                   "all_reduce(float32 [8], sum)") != std::string::npos);
}

TEST_CASE("store backend: a rank that never calls the collective makes the others time out naming it") {
  FreshRankDevices fresh(3, DeviceType::sim);
  std::vector<std::string> errors(3);
  TcpStore server = make_server();
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r)
    threads.emplace_back([&, r] {
      auto store = std::make_shared<TcpStore>("127.0.0.1", server.port(), false, 5000ms);
      auto pg =
          make_store_process_group(store, r, 3, Device{DeviceType::sim, r}, ProcessGroupOptions{.timeout = 300ms});
      if (r == 2) {
        std::this_thread::sleep_for(1000ms);  // late: the group was aborted meanwhile
      }
      errors[r] = error_of([&] {
        Tensor x = ones({4}, device(pg->device()));
        pg->all_reduce(x);
      });
    });
  for (auto& t : threads) t.join();
  // Ranks 0 and 1 time out (or the second sees the first's abort); rank 2 finds the group aborted.
  for (int r = 0; r < 2; ++r) {
    CAPTURE(errors[r]);
    CHECK(errors[r].find("waiting for rank 2 (arrived: ranks 0, 1)") != std::string::npos);
  }
  CHECK(errors[2].find("the process group was aborted") != std::string::npos);
}

TEST_CASE("store backend: a rank whose group is destroyed is named at once by the ranks waiting for it") {
  FreshRankDevices fresh(2, DeviceType::sim);
  std::vector<std::string> errors(2);
  TcpStore server = make_server();
  std::vector<std::thread> threads;
  const auto start = std::chrono::steady_clock::now();
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      auto store = std::make_shared<TcpStore>("127.0.0.1", server.port(), false, 5000ms);
      auto pg =
          make_store_process_group(store, r, 2, Device{DeviceType::sim, r}, ProcessGroupOptions{.timeout = 5000ms});
      if (r == 1) return;  // its group is destroyed: it shuts down
      errors[r] = error_of([&] {
        Tensor x = ones({4}, device(pg->device()));
        pg->all_reduce(x);
      });
    });
  for (auto& t : threads) t.join();
  CHECK(errors[0].find("rank 1 will never arrive: it shut down") != std::string::npos);
  CHECK(std::chrono::steady_clock::now() - start < 4000ms);  // well before the 5 s timeout
  CHECK(error_of([] { make_store_process_group(nullptr, 0, 1, kSim); }).find("no store") != std::string::npos);
}

TEST_CASE("store backend: subgroups (new_group) move data among their ranks only") {
  const auto results = on_store_ranks(4, [](ProcessGroup& pg) {
    auto pair = pg.split_group({{0, 1}, {2, 3}});
    Tensor x = full({2}, pg.rank() + 1, device(pg.device()));
    pair->all_reduce(x);
    std::vector<double> out = x.tolist();
    out.push_back(pair->rank());
    pg.all_reduce(x);
    out.push_back(x.tolist().at(0));
    return out;
  });
  CHECK(results[0] == std::vector<double>{3, 3, 0, 20});
  CHECK(results[1] == std::vector<double>{3, 3, 1, 20});
  CHECK(results[2] == std::vector<double>{7, 7, 0, 20});
  CHECK(results[3] == std::vector<double>{7, 7, 1, 20});
}
