// bytegrad-launch: starts the ranks of one host as processes, as torchrun does.
//
//   bytegrad-launch --nproc-per-node N [--nnodes M --node-rank K --master-addr A --master-port P] PROGRAM ARGS...
//
// Each child gets torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK,
// MASTER_ADDR, MASTER_PORT) and NCCL_NVLS_ENABLE=0 unless set. Its output lines are forwarded prefixed by its
// rank ("[rank 1] ..."), stdout to stdout and stderr to stderr. When a rank exits with a non-zero status or
// is killed, the others are sent SIGTERM (SIGKILL 5 s later), and the launcher exits with that rank's status
// (128 + signal when killed), naming it. --master-port 0 picks a free port (one host only).
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kKillGrace = std::chrono::seconds(5);

struct Options {
  int nproc_per_node = 0;
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::vector<std::string> command;
};

[[noreturn]] void usage_error(const std::string& message) {
  std::fprintf(stderr,
               "bytegrad-launch: %s\nusage: bytegrad-launch --nproc-per-node N [--nnodes M --node-rank K "
               "--master-addr ADDR --master-port PORT] PROGRAM [ARGS...]\n",
               message.c_str());
  std::exit(2);
}

int parse_count(const std::string& flag, const std::string& text, int low, int high) {
  char* end = nullptr;
  errno = 0;
  const long value = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno == ERANGE || value < low || value > high)
    usage_error(flag + " '" + text + "' is not an integer from " + std::to_string(low) + " to " + std::to_string(high));
  return static_cast<int>(value);
}

Options parse(int argc, char** argv) {
  Options options;
  int i = 1;
  for (; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg.rfind("--", 0) != 0) break;  // the program
    std::string value;
    const size_t equals = arg.find('=');
    if (equals != std::string::npos) {
      value = arg.substr(equals + 1);
      arg = arg.substr(0, equals);
    } else if (arg == "--help" || arg == "-h") {
      usage_error("help");
    } else {
      if (i + 1 >= argc) usage_error(arg + " needs a value");
      value = argv[++i];
    }
    // torchrun spells them with underscores too.
    for (char& c : arg)
      if (c == '_') c = '-';
    if (arg == "--nproc-per-node") options.nproc_per_node = parse_count(arg, value, 1, 4096);
    else if (arg == "--nnodes") options.nnodes = parse_count(arg, value, 1, 65536);
    else if (arg == "--node-rank") options.node_rank = parse_count(arg, value, 0, 65535);
    else if (arg == "--master-addr") options.master_addr = value;
    else if (arg == "--master-port") options.master_port = parse_count(arg, value, 0, 65535);
    else usage_error("unknown option " + arg);
  }
  for (; i < argc; ++i) options.command.emplace_back(argv[i]);
  if (options.nproc_per_node == 0) usage_error("--nproc-per-node is required");
  if (options.command.empty()) usage_error("no program to run");
  if (options.node_rank >= options.nnodes)
    usage_error("--node-rank " + std::to_string(options.node_rank) + " is not below --nnodes " +
                std::to_string(options.nnodes));
  if (options.master_addr.empty()) usage_error("--master-addr is empty");
  if (options.master_port == 0 && options.nnodes > 1)
    usage_error("--master-port 0 (any free port) works on one host only: name the port every node uses");
  return options;
}

// A port that was free a moment ago on the loopback interface (--master-port 0).
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    std::fprintf(stderr, "bytegrad-launch: cannot find a free port: %s\n", std::strerror(errno));
    std::exit(1);
  }
  ::close(fd);
  return ntohs(address.sin_port);
}

// One output stream of one rank, forwarded line by line with the rank's prefix.
struct Output {
  int fd = -1;
  FILE* to = nullptr;
  std::string prefix;
  std::string partial;

  void forward(const char* data, size_t size) {
    partial.append(data, size);
    size_t start = 0;
    for (size_t newline; (newline = partial.find('\n', start)) != std::string::npos; start = newline + 1)
      std::fprintf(to, "%s%.*s\n", prefix.c_str(), static_cast<int>(newline - start), partial.data() + start);
    partial.erase(0, start);
    std::fflush(to);
  }
  void close() {
    if (!partial.empty()) std::fprintf(to, "%s%s\n", prefix.c_str(), partial.c_str());
    partial.clear();
    std::fflush(to);
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
};

struct Rank {
  int rank = 0;
  pid_t pid = -1;
  bool running = false;
  int status = 0;
};

volatile sig_atomic_t g_signal = 0;
void on_signal(int signal) { g_signal = signal; }

std::string describe(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status))
    return "was killed by signal " + std::to_string(WTERMSIG(status)) + " (" + strsignal(WTERMSIG(status)) + ")";
  return "stopped";
}

}  // namespace

int main(int argc, char** argv) {
  const Options options = parse(argc, argv);
  const int port = options.master_port == 0 ? free_port() : options.master_port;
  const int world_size = options.nnodes * options.nproc_per_node;

  struct sigaction action {};
  action.sa_handler = on_signal;
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
  signal(SIGPIPE, SIG_IGN);

  std::vector<Rank> ranks(options.nproc_per_node);
  std::vector<Output> outputs;
  for (int local = 0; local < options.nproc_per_node; ++local) {
    const int rank = options.node_rank * options.nproc_per_node + local;
    int out_pipe[2], err_pipe[2];
    if (::pipe(out_pipe) != 0 || ::pipe(err_pipe) != 0) {
      std::fprintf(stderr, "bytegrad-launch: pipe() failed: %s\n", std::strerror(errno));
      return 1;
    }
    const pid_t pid = ::fork();
    if (pid < 0) {
      std::fprintf(stderr, "bytegrad-launch: fork() failed: %s\n", std::strerror(errno));
      for (const Rank& r : ranks)
        if (r.running) ::kill(-r.pid, SIGKILL);
      return 1;
    }
    if (pid == 0) {
      ::setpgid(0, 0);  // its own process group: terminating a rank reaches whatever it started
      ::dup2(out_pipe[1], STDOUT_FILENO);
      ::dup2(err_pipe[1], STDERR_FILENO);
      for (int fd : {out_pipe[0], out_pipe[1], err_pipe[0], err_pipe[1]}) ::close(fd);
      auto set = [](const char* name, const std::string& value) { ::setenv(name, value.c_str(), 1); };
      set("RANK", std::to_string(rank));
      set("WORLD_SIZE", std::to_string(world_size));
      set("LOCAL_RANK", std::to_string(local));
      set("LOCAL_WORLD_SIZE", std::to_string(options.nproc_per_node));
      set("GROUP_RANK", std::to_string(options.node_rank));
      set("MASTER_ADDR", options.master_addr);
      set("MASTER_PORT", std::to_string(port));
      ::setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0);  // NVLink multicast off unless the user chose
      std::vector<char*> args;
      for (const std::string& a : options.command) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      ::execvp(args[0], args.data());
      std::fprintf(stderr, "bytegrad-launch: cannot run %s: %s\n", args[0], std::strerror(errno));
      ::_exit(127);
    }
    ::setpgid(pid, pid);
    ::close(out_pipe[1]);
    ::close(err_pipe[1]);
    ranks[local] = Rank{rank, pid, true, 0};
    const std::string prefix = "[rank " + std::to_string(rank) + "] ";
    outputs.push_back(Output{out_pipe[0], stdout, prefix, {}});
    outputs.push_back(Output{err_pipe[0], stderr, prefix, {}});
  }

  std::optional<size_t> failed;  // the first rank that failed
  std::optional<Clock::time_point> kill_at;
  bool interrupted = false;
  int terminated = 0;  // ranks still running when the launcher stopped them
  auto terminate_others = [&] {
    for (const Rank& r : ranks)
      if (r.running) {
        ::kill(-r.pid, SIGTERM);
        ++terminated;
      }
    if (!kill_at) kill_at = Clock::now() + kKillGrace;
  };

  while (true) {
    bool any_running = false;
    for (const Rank& r : ranks) any_running = any_running || r.running;
    bool any_open = false;
    for (const Output& o : outputs) any_open = any_open || o.fd >= 0;
    if (!any_running && !any_open) break;

    std::vector<pollfd> fds;
    std::vector<Output*> polled;
    for (Output& o : outputs)
      if (o.fd >= 0) {
        fds.push_back({o.fd, POLLIN, 0});
        polled.push_back(&o);
      }
    const int ready = ::poll(fds.data(), fds.size(), 100);
    for (size_t i = 0; ready > 0 && i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      char buffer[65536];
      const ssize_t n = ::read(fds[i].fd, buffer, sizeof buffer);
      if (n > 0) polled[i]->forward(buffer, static_cast<size_t>(n));
      else if (n == 0 || (errno != EINTR && errno != EAGAIN)) polled[i]->close();
    }

    for (size_t i = 0; i < ranks.size(); ++i) {
      Rank& r = ranks[i];
      if (!r.running) continue;
      int status = 0;
      if (::waitpid(r.pid, &status, WNOHANG) != r.pid) continue;
      r.running = false;
      r.status = status;
      const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
      if (!ok && !failed && !interrupted) {
        failed = i;
        terminate_others();
      }
    }
    // Every rank has exited, but something they started keeps a pipe open: stop reading after the grace.
    if (!any_running && kill_at && Clock::now() > *kill_at)
      for (Output& o : outputs) o.close();
    if (g_signal != 0 && !interrupted) {
      interrupted = true;
      std::fprintf(stderr, "bytegrad-launch: got signal %d, terminating the ranks\n", static_cast<int>(g_signal));
      terminate_others();
    }
    if (kill_at && Clock::now() > *kill_at) {
      for (const Rank& r : ranks)
        if (r.running) ::kill(-r.pid, SIGKILL);
      if (!any_running) kill_at = Clock::now();  // for the pipes' grace above
    }
    if (!any_running && !kill_at) {
      // All exited cleanly: read what is left, then stop.
      kill_at = Clock::now() + std::chrono::seconds(1);
    }
  }

  if (failed) {
    const Rank& r = ranks[*failed];
    std::fprintf(
        stderr, "bytegrad-launch: rank %d (pid %d) %s%s\n", r.rank, static_cast<int>(r.pid), describe(r.status).c_str(),
        terminated > 0 ? ("; " + std::to_string(terminated) + " other rank(s) still running were terminated").c_str()
                       : "");
    if (WIFEXITED(r.status)) return WEXITSTATUS(r.status);
    return WIFSIGNALED(r.status) ? 128 + WTERMSIG(r.status) : 1;
  }
  if (interrupted) return 128 + static_cast<int>(g_signal);
  return 0;
}
