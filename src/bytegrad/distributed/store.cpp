#include "bytegrad/distributed/store.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <optional>
#include <thread>

namespace bytegrad::distributed {

namespace {

using Bytes = TcpStore::Bytes;
using Clock = std::chrono::steady_clock;

// The wire: a request is [command u8][field count u32][per field: length u32, bytes]; a reply is
// [status u8][field count u32][fields]. Lengths in host order: both ends are this code on one kind of host.
enum Command : uint8_t { kSet = 1, kGet, kAdd, kWait, kCheck, kDelete };
enum Status : uint8_t { kOk = 0, kTimedOut = 1 };

Bytes to_bytes(const std::string& text) { return Bytes(text.begin(), text.end()); }
std::string to_string(const Bytes& bytes) { return std::string(bytes.begin(), bytes.end()); }

Bytes int_bytes(int64_t value) {
  Bytes bytes(sizeof value);
  std::memcpy(bytes.data(), &value, sizeof value);
  return bytes;
}
int64_t bytes_int(const Bytes& bytes) {
  int64_t value = 0;
  if (bytes.size() == sizeof value) std::memcpy(&value, bytes.data(), sizeof value);
  return value;
}

void append_u32(Bytes& out, uint32_t value) {
  const auto* p = reinterpret_cast<const uint8_t*>(&value);
  out.insert(out.end(), p, p + sizeof value);
}

Bytes encode(uint8_t head, const std::vector<Bytes>& fields) {
  size_t total = 1 + sizeof(uint32_t);
  for (const Bytes& f : fields) total += sizeof(uint32_t) + f.size();
  Bytes out;
  out.reserve(total);
  out.push_back(head);
  append_u32(out, static_cast<uint32_t>(fields.size()));
  for (const Bytes& f : fields) {
    append_u32(out, static_cast<uint32_t>(f.size()));
    out.insert(out.end(), f.begin(), f.end());
  }
  return out;
}

// Parses one message from the front of `buffer`; none while it is incomplete. Erases what it parsed.
std::optional<std::pair<uint8_t, std::vector<Bytes>>> decode(Bytes& buffer) {
  size_t at = 0;
  auto read_u32 = [&](uint32_t& value) {
    if (buffer.size() < at + sizeof value) return false;
    std::memcpy(&value, buffer.data() + at, sizeof value);
    at += sizeof value;
    return true;
  };
  if (buffer.empty()) return std::nullopt;
  const uint8_t head = buffer[at++];
  uint32_t count = 0;
  if (!read_u32(count)) return std::nullopt;
  std::vector<Bytes> fields;
  for (uint32_t i = 0; i < count; ++i) {
    uint32_t length = 0;
    if (!read_u32(length) || buffer.size() < at + length) return std::nullopt;
    fields.emplace_back(buffer.begin() + static_cast<ptrdiff_t>(at),
                        buffer.begin() + static_cast<ptrdiff_t>(at + length));
    at += length;
  }
  buffer.erase(buffer.begin(), buffer.begin() + static_cast<ptrdiff_t>(at));
  return std::make_pair(head, std::move(fields));
}

bool send_all(int fd, const Bytes& data) {
  size_t sent = 0;
  while (sent < data.size()) {
    const ssize_t n = ::send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    sent += static_cast<size_t>(n);
  }
  return true;
}

std::string errno_text() { return std::strerror(errno); }

// The IPv4 address of `host` (a name or dotted address).
sockaddr_in resolve(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int status = ::getaddrinfo(host.c_str(), nullptr, &hints, &found);
  if (status != 0 || found == nullptr)
    throw StoreError("store: cannot resolve the address '" + host + "': " + ::gai_strerror(status));
  sockaddr_in address{};
  std::memcpy(&address, found->ai_addr, sizeof address);
  ::freeaddrinfo(found);
  address.sin_port = htons(static_cast<uint16_t>(port));
  return address;
}

int milliseconds_until(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(left, 0, int64_t{1000} * 1000));
}

}  // namespace

// ---------------------------------------------------------------------------------------------- server

class TcpStore::Server {
 public:
  Server(const std::string& host, int port, std::chrono::milliseconds linger) : linger_(linger) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    if (listen_fd_ < 0) throw StoreError("store: socket() failed: " + errno_text());
    const int one = 1;
    ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in address = resolve(host, port);
    if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
      const std::string why = errno_text();
      ::close(listen_fd_);
      throw StoreError("store: rank 0 cannot listen on " + host + ":" + std::to_string(port) + ": " + why +
                       (port != 0 ? " (another job on that port? set MASTER_PORT)" : ""));
    }
    ::listen(listen_fd_, 128);
    socklen_t length = sizeof address;
    ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&address), &length);
    port_ = ntohs(address.sin_port);
    if (::pipe(wake_) != 0) {
      ::close(listen_fd_);
      throw StoreError("store: pipe() failed: " + errno_text());
    }
    thread_ = std::thread([this] { serve(); });
  }

  ~Server() {
    const char stop = 1;
    (void)!::write(wake_[1], &stop, 1);
    thread_.join();
    for (auto& [fd, client] : clients_) ::close(fd);
    ::close(listen_fd_);
    ::close(wake_[0]);
    ::close(wake_[1]);
  }

  int port() const { return port_; }

 private:
  struct Client {
    Bytes input;
  };
  struct Pending {  // a get or wait whose keys are not all there yet
    uint8_t command = 0;
    std::vector<std::string> keys;
    Clock::time_point deadline;
  };

  void serve() {
    std::optional<Clock::time_point> stop_deadline;
    while (true) {
      if (stop_deadline && (clients_.empty() || Clock::now() >= *stop_deadline)) return;
      std::vector<pollfd> fds{{wake_[0], POLLIN, 0}, {listen_fd_, POLLIN, 0}};
      for (auto& [fd, client] : clients_) fds.push_back({fd, POLLIN, 0});
      int wait_ms = 1000;
      for (auto& [fd, p] : pending_) wait_ms = std::min(wait_ms, milliseconds_until(p.deadline));
      if (stop_deadline) wait_ms = std::min(wait_ms, milliseconds_until(*stop_deadline));
      const int ready = ::poll(fds.data(), fds.size(), wait_ms);
      if (ready < 0 && errno != EINTR) return;
      if (fds[0].revents & POLLIN) {
        char drained[16];
        (void)!::read(wake_[0], drained, sizeof drained);
        // Keep serving the other ranks until they disconnect, at most `linger_`.
        if (!stop_deadline) stop_deadline = Clock::now() + linger_;
      }
      if (fds[1].revents & POLLIN) {
        const int fd = ::accept(listen_fd_, nullptr, nullptr);
        if (fd >= 0) {
          const int one = 1;
          ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
          clients_[fd] = Client{};
        }
      }
      for (size_t i = 2; i < fds.size(); ++i)
        if (fds[i].revents != 0) receive(fds[i].fd);
      expire_pending();
    }
  }

  void drop(int fd) {
    ::close(fd);
    clients_.erase(fd);
    pending_.erase(fd);
  }

  // Reads what arrived from a client and answers each complete request; drops a client that is gone.
  void receive(int fd) {
    auto it = clients_.find(fd);
    if (it == clients_.end()) return;  // dropped while answering another client
    uint8_t chunk[65536];
    const ssize_t n = ::recv(fd, chunk, sizeof chunk, 0);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) return;
    if (n <= 0) return drop(fd);
    it->second.input.insert(it->second.input.end(), chunk, chunk + n);
    while (auto message = decode(it->second.input)) {
      if (!handle(fd, message->first, message->second)) return drop(fd);
      it = clients_.find(fd);
      if (it == clients_.end()) return;
    }
  }

  bool reply(int fd, uint8_t status, const std::vector<Bytes>& fields) { return send_all(fd, encode(status, fields)); }

  bool handle(int fd, uint8_t command, std::vector<Bytes>& fields) {
    auto key = [&](size_t i) { return i < fields.size() ? to_string(fields[i]) : std::string(); };
    switch (command) {
      case kSet:
        values_[key(0)] = fields.size() > 1 ? fields[1] : Bytes{};
        if (!reply(fd, kOk, {})) return false;
        answer_pending();
        return true;
      case kAdd: {
        Bytes& stored = values_[key(0)];
        const int64_t value = bytes_int(stored) + bytes_int(fields.size() > 1 ? fields[1] : Bytes{});
        stored = int_bytes(value);
        if (!reply(fd, kOk, {stored})) return false;
        answer_pending();
        return true;
      }
      case kCheck: {
        bool all = true;
        for (size_t i = 0; i < fields.size(); ++i) all = all && values_.count(key(i)) > 0;
        return reply(fd, kOk, {int_bytes(all ? 1 : 0)});
      }
      case kDelete: return reply(fd, kOk, {int_bytes(values_.erase(key(0)) > 0 ? 1 : 0)});
      case kGet:
      case kWait: {
        // The last field is the timeout in milliseconds; the others are keys.
        if (fields.empty()) return false;
        const int64_t timeout_ms = bytes_int(fields.back());
        Pending pending{command, {}, Clock::now() + std::chrono::milliseconds(timeout_ms)};
        for (size_t i = 0; i + 1 < fields.size(); ++i) pending.keys.push_back(key(i));
        pending_[fd] = std::move(pending);
        return try_answer(fd);
      }
      default: return false;  // not our protocol: drop the connection
    }
  }

  // Answers fd's pending request if its keys are all there (or its deadline passed); false if the client
  // is gone.
  bool try_answer(int fd) {
    auto it = pending_.find(fd);
    if (it == pending_.end()) return true;
    Pending& p = it->second;
    std::vector<Bytes> missing;
    for (const std::string& k : p.keys)
      if (values_.count(k) == 0) missing.push_back(to_bytes(k));
    if (!missing.empty() && Clock::now() < p.deadline) return true;
    std::vector<Bytes> fields;
    uint8_t status = kOk;
    if (!missing.empty()) {
      status = kTimedOut;
      fields = std::move(missing);
    } else if (p.command == kGet) {
      fields.push_back(values_[p.keys.front()]);
    }
    pending_.erase(it);
    return reply(fd, status, fields);
  }

  void answer_pending() {
    std::vector<int> fds;
    for (auto& [fd, p] : pending_) fds.push_back(fd);
    for (int fd : fds)
      if (!try_answer(fd)) drop(fd);
  }
  void expire_pending() { answer_pending(); }

  std::chrono::milliseconds linger_;
  int listen_fd_ = -1;
  int port_ = 0;
  int wake_[2] = {-1, -1};
  std::thread thread_;
  std::map<int, Client> clients_;
  std::map<int, Pending> pending_;
  std::map<std::string, Bytes> values_;
};

// ---------------------------------------------------------------------------------------------- client

TcpStore::TcpStore(const std::string& host, int port, bool is_server, std::chrono::milliseconds timeout)
    : host_(host), port_(port), timeout_(timeout) {
  if (port < 0 || port > 65535) throw StoreError("store: port " + std::to_string(port) + " is not a TCP port");
  if (timeout.count() <= 0)
    throw StoreError("store: the timeout must be positive, got " + std::to_string(timeout.count()) + " ms");
  if (is_server) {
    server_ = std::make_unique<Server>(host, port, timeout);
    port_ = server_->port();
  } else if (port == 0) {
    throw StoreError("store: a client needs the server's port (MASTER_PORT), not 0");
  }
  const sockaddr_in address = resolve(host, port_);
  const auto deadline = Clock::now() + timeout;
  std::string last_error;
  while (true) {
    socket_ = ::socket(AF_INET, SOCK_STREAM, 0);
    if (socket_ < 0) throw StoreError("store: socket() failed: " + errno_text());
    if (::connect(socket_, reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0) break;
    last_error = errno_text();
    ::close(socket_);
    socket_ = -1;
    if (Clock::now() >= deadline) {
      std::string message = "store: could not connect to rank 0's store at " + host + ":" + std::to_string(port_);
      message += " within " + std::to_string(timeout.count()) + " ms (" + last_error;
      message += "); is rank 0 running, with the same MASTER_ADDR and MASTER_PORT?";
      throw StoreTimeout(message);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const int one = 1;
  ::setsockopt(socket_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

TcpStore::~TcpStore() {
  if (socket_ >= 0) ::close(socket_);
  server_.reset();  // serves the others until they disconnect, at most the timeout
}

Bytes TcpStore::request(uint8_t command, const std::vector<Bytes>& fields, std::chrono::milliseconds wait_budget) {
  std::lock_guard lock(mutex_);
  const std::string where = "store at " + host_ + ":" + std::to_string(port_);
  if (socket_ < 0) throw StoreError(where + ": the connection was lost earlier");
  if (!send_all(socket_, encode(command, fields))) {
    ::close(socket_);
    socket_ = -1;
    throw StoreError(where + ": sending failed: " + errno_text() + " (did rank 0 exit?)");
  }
  // The server answers a timed-out request itself; this deadline only catches a server that went silent.
  const auto deadline = Clock::now() + wait_budget + timeout_;
  Bytes buffer;
  while (true) {
    if (auto message = decode(buffer)) {
      if (message->first == kTimedOut) {
        std::string missing;
        for (const Bytes& k : message->second) missing += (missing.empty() ? "" : ", ") + to_string(k);
        throw StoreTimeout(where + ": timed out after " + std::to_string(wait_budget.count()) +
                           " ms waiting for key(s) " + std::move(missing));
      }
      return message->second.empty() ? Bytes{} : message->second.front();
    }
    pollfd fd{socket_, POLLIN, 0};
    const int ready = ::poll(&fd, 1, milliseconds_until(deadline));
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0) {
      ::close(socket_);
      socket_ = -1;
      throw StoreTimeout(where + ": no answer from the server (rank 0 stopped responding)");
    }
    uint8_t chunk[65536];
    const ssize_t n = ::recv(socket_, chunk, sizeof chunk, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ::close(socket_);
      socket_ = -1;
      throw StoreError(where + ": the server closed the connection (did rank 0 exit?)");
    }
    buffer.insert(buffer.end(), chunk, chunk + n);
  }
}

void TcpStore::set(const std::string& key, const Bytes& value) { request(kSet, {to_bytes(key), value}, {}); }
void TcpStore::set(const std::string& key, const std::string& value) { set(key, to_bytes(value)); }

Bytes TcpStore::get(const std::string& key) { return get(key, timeout_); }
Bytes TcpStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  return request(kGet, {to_bytes(key), int_bytes(timeout.count())}, timeout);
}
std::string TcpStore::get_string(const std::string& key) { return to_string(get(key)); }

int64_t TcpStore::add(const std::string& key, int64_t delta) {
  return bytes_int(request(kAdd, {to_bytes(key), int_bytes(delta)}, {}));
}

void TcpStore::wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }
void TcpStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  std::vector<Bytes> fields;
  fields.reserve(keys.size() + 1);
  for (const std::string& k : keys) fields.push_back(to_bytes(k));
  fields.push_back(int_bytes(timeout.count()));
  request(kWait, fields, timeout);
}

bool TcpStore::check(const std::vector<std::string>& keys) {
  std::vector<Bytes> fields;
  fields.reserve(keys.size());
  for (const std::string& k : keys) fields.push_back(to_bytes(k));
  return bytes_int(request(kCheck, fields, {})) == 1;
}

bool TcpStore::delete_key(const std::string& key) { return bytes_int(request(kDelete, {to_bytes(key)}, {})) == 1; }

}  // namespace bytegrad::distributed
