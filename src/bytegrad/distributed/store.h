// A small TCP key-value store for the ranks' rendezvous, as torch.distributed's TCPStore: rank 0 serves it
// on MASTER_ADDR:MASTER_PORT, every rank (rank 0 too) connects as a client. Values are bytes. It carries
// NCCL's unique id from rank 0 to the others, and the `store` backend's collectives (store_backend.h).
//
//   TcpStore store("127.0.0.1", 29500, /*is_server=*/rank == 0, std::chrono::seconds(30));
//   store.set("id", bytes);                  // on rank 0
//   auto id = store.get("id");               // elsewhere: blocks until rank 0 set it, or the timeout
//
// POSIX sockets only. The server runs on a thread of rank 0's process; when that TcpStore is destroyed it
// keeps serving until every other client has disconnected (at most the timeout), so the ranks still
// reading a last value are not cut off.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

namespace bytegrad::distributed {

// The store could not be reached, refused a request, or broke off.
class StoreError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
// get() or wait() waited longer than their timeout for keys that nobody set.
class StoreTimeout : public StoreError {
 public:
  using StoreError::StoreError;
};

class TcpStore {
 public:
  using Bytes = std::vector<uint8_t>;

  // is_server: listen on `port` (0: any free port, see port()) of `host`'s address, then connect to it.
  // Otherwise connect to host:port, retrying until `timeout` (the server may start later).
  TcpStore(const std::string& host, int port, bool is_server, std::chrono::milliseconds timeout);
  ~TcpStore();
  TcpStore(const TcpStore&) = delete;
  TcpStore& operator=(const TcpStore&) = delete;

  void set(const std::string& key, const Bytes& value);
  void set(const std::string& key, const std::string& value);
  // The value of `key`, once some client has set it; StoreTimeout after `timeout` (the store's own when
  // not given).
  Bytes get(const std::string& key);
  Bytes get(const std::string& key, std::chrono::milliseconds timeout);
  std::string get_string(const std::string& key);
  // Adds `delta` to the integer stored under `key` (0 when absent) and returns the new value.
  int64_t add(const std::string& key, int64_t delta);
  // Returns once every key exists; StoreTimeout naming the keys still missing after `timeout`.
  void wait(const std::vector<std::string>& keys);
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);
  // Whether every key exists now (no waiting).
  bool check(const std::vector<std::string>& keys);
  // Removes a key; true if it existed.
  bool delete_key(const std::string& key);

  std::chrono::milliseconds timeout() const { return timeout_; }
  int port() const { return port_; }  // the port served or connected to
  const std::string& host() const { return host_; }

 private:
  class Server;
  Bytes request(uint8_t command, const std::vector<Bytes>& fields, std::chrono::milliseconds wait_budget);

  std::string host_;
  int port_;
  std::chrono::milliseconds timeout_;
  std::unique_ptr<Server> server_;
  int socket_ = -1;
  std::mutex mutex_;  // one request at a time on the connection
};

}  // namespace bytegrad::distributed
