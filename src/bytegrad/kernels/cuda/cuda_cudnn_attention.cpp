// cuDNN's fused attention (cuda_cudnn_attention.h). One graph per call shape, built on first use and kept per
// thread (a cuDNN handle and its graphs are used by one thread at a time): a forward graph writes O and, when
// a logsumexp is asked for, the softmax statistics (cuDNN's Stats: the logsumexp of the scaled scores, natural
// log, as PyTorch's logsumexp); a backward graph writes dQ, dK, dV from Q, K, V, O, dO and those statistics.
// Every tensor is passed with its own strides, so GPT-2's transposed views of the split c_attn output and
// the op layer's gradient layouts are used in place, as PyTorch's cuDNN backend uses them.
#include "bytegrad/kernels/cuda/cuda_cudnn_attention.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string_view>

#ifdef BYTEGRAD_HAVE_CUDNN
#include <cudnn.h>

#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "bytegrad/kernels/cuda/cuda_launch_stream.h"

#define CUDNN_FRONTEND_SKIP_JSON_LIB
#include <cudnn_frontend.h>
#endif

namespace bytegrad::cuda {

#ifndef BYTEGRAD_HAVE_CUDNN

bool cudnn_attention_enabled() { return false; }
bool cudnn_attention_pays(int64_t, int64_t, int64_t, int64_t, int64_t) { return false; }
std::string cudnn_attention_refusal() { return "this build has no cuDNN"; }
bool cudnn_attention_forward(const StridedView&, const StridedView*, const StridedView&, const StridedView&,
                             const StridedView&, double, bool, DeviceScratch) {
  return false;
}
bool cudnn_attention_backward(const StridedView&, const StridedView&, const StridedView&, const StridedView&,
                              const StridedView&, const StridedView&, const StridedView&, const StridedView&,
                              const StridedView&, double, bool, DeviceScratch) {
  return false;
}

#else

namespace {

namespace fe = cudnn_frontend;

// The uids of the graphs' tensors in the variant pack.
enum Uid : int64_t { kQ = 1, kK, kV, kO, kStats, kDO, kDQ, kDK, kDV };

// BYTEGRAD_CUDNN_ATTENTION: 0 never, 1 every call cuDNN takes, unset (or anything else) by size.
enum class Mode { never, by_size, always };

Mode mode() {
  static const Mode m = [] {
    const char* v = std::getenv("BYTEGRAD_CUDNN_ATTENTION");
    if (v != nullptr && std::string_view(v) == "0") return Mode::never;
    if (v != nullptr && std::string_view(v) == "1") return Mode::always;
    return Mode::by_size;
  }();
  return m;
}

// What is sent to cuDNN: 16-bit inputs with head dimensions that are multiples of 8 up to 128 (PyTorch sends
// cuDNN up to 256; above 128 has not been tested here), the last dimension contiguous, 16-byte aligned rows.
bool fits(const StridedView& t) {
  if (t.sizes.size() != 4 || t.strides[3] != 1) return false;
  if (reinterpret_cast<uintptr_t>(t.data) % 16 != 0) return false;
  for (int d = 0; d < 3; ++d)
    if (t.sizes[d] != 1 && t.strides[d] % 8 != 0) return false;
  return true;
}

bool fits_call(const StridedView& q, const StridedView& k, const StridedView& v) {
  if (q.dtype != ScalarType::bfloat16 && q.dtype != ScalarType::float16) return false;
  if (k.dtype != q.dtype || v.dtype != q.dtype) return false;
  const int64_t D = q.sizes[3];
  if (D % 8 != 0 || D > 128 || k.sizes[3] != D || v.sizes[3] != D) return false;
  if (k.sizes[1] != q.sizes[1] || v.sizes[1] != q.sizes[1]) return false;  // grouped heads: not here
  return fits(q) && fits(k) && fits(v);
}

fe::DataType_t data_type(ScalarType t) {
  return t == ScalarType::bfloat16 ? fe::DataType_t::BFLOAT16 : fe::DataType_t::HALF;
}

std::vector<int64_t> dims_of(const StridedView& t) { return {t.sizes.begin(), t.sizes.end()}; }
std::vector<int64_t> strides_of(const StridedView& t) { return {t.strides.begin(), t.strides.end()}; }

// The logsumexp (B, H, Sq) as cuDNN's (B, H, Sq, 1) float statistics.
void set_stats_layout(fe::graph::Tensor_attributes& t, const StridedView& lse) {
  t.set_uid(kStats)
      .set_data_type(fe::DataType_t::FLOAT)
      .set_dim({lse.sizes[0], lse.sizes[1], lse.sizes[2], 1})
      .set_stride({lse.strides[0], lse.strides[1], lse.strides[2], 1});
}

struct Built {
  std::shared_ptr<fe::graph::Graph> graph;  // null: cuDNN refused this shape
  int64_t workspace = 0;
  std::string refusal;  // why cuDNN refused it
};

// A graph is identified by everything its build read: the direction, dtype, masks, scale, and every
// tensor's sizes and strides.
using Key = std::vector<int64_t>;

void add_view(Key& key, const StridedView& t) {
  key.insert(key.end(), t.sizes.begin(), t.sizes.end());
  key.insert(key.end(), t.strides.begin(), t.strides.end());
}

Key key_of(int64_t direction, const StridedView& q, bool is_causal, double scale,
           std::initializer_list<const StridedView*> views) {
  int64_t scale_bits = 0;
  const float scale_f = static_cast<float>(scale);
  std::memcpy(&scale_bits, &scale_f, sizeof(scale_f));
  Key key{direction, static_cast<int64_t>(q.dtype), is_causal ? 1 : 0, scale_bits, q.device.index};
  for (const StridedView* v : views) {
    if (v == nullptr) {
      key.push_back(-1);
      continue;
    }
    add_view(key, *v);
  }
  return key;
}

struct ThreadState {
  std::unordered_map<int, cudnnHandle_t> handles;  // per device; never destroyed (process teardown)
  std::map<Key, Built> graphs;
  std::string refusal;  // why this thread's last call did not run on cuDNN
};

ThreadState& state() {
  thread_local ThreadState s;
  return s;
}

bool refuse(std::string why) {
  state().refusal = std::move(why);
  return false;
}

cudnnHandle_t handle_for(int device) {
  auto& handles = state().handles;
  auto it = handles.find(device);
  if (it == handles.end()) {
    cudnnHandle_t h = nullptr;
    if (cudnnCreate(&h) != CUDNN_STATUS_SUCCESS) return nullptr;
    it = handles.emplace(device, h).first;
  }
  cudnnSetStream(it->second, launch_stream());
  return it->second;
}

// Validates and builds `graph` for `handle` with cuDNN's heuristics; no graph, and why, when a step refuses.
Built finish(std::shared_ptr<fe::graph::Graph> graph, cudnnHandle_t handle) {
  Built built;
  auto step = [&](const char* what, fe::error_object e) {
    if (!e.is_good()) built.refusal = std::string(what) + ": " + e.get_message();
    return e.is_good();
  };
  if (step("validate", graph->validate()) && step("operation graph", graph->build_operation_graph(handle)) &&
      step("execution plans", graph->create_execution_plans({fe::HeurMode_t::A})) &&
      step("support", graph->check_support(handle)) && step("plans", graph->build_plans(handle)) &&
      step("workspace size", graph->get_workspace_size(built.workspace)))
    built.graph = std::move(graph);
  return built;
}

std::shared_ptr<fe::graph::Graph> new_graph(ScalarType dtype) {
  auto graph = std::make_shared<fe::graph::Graph>();
  graph->set_io_data_type(data_type(dtype))
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  return graph;
}

std::shared_ptr<fe::graph::Tensor_attributes> input(fe::graph::Graph& graph, const char* name, Uid uid,
                                                    const StridedView& t) {
  return graph.tensor(
      fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim(dims_of(t)).set_stride(strides_of(t)));
}

void as_output(const std::shared_ptr<fe::graph::Tensor_attributes>& t, Uid uid, const StridedView& view) {
  t->set_output(true).set_uid(uid).set_dim(dims_of(view)).set_stride(strides_of(view));
}

Built build_forward(cudnnHandle_t handle, const StridedView& out, const StridedView* lse, const StridedView& q,
                    const StridedView& k, const StridedView& v, double scale, bool is_causal) {
  auto graph = new_graph(q.dtype);
  auto Q = input(*graph, "Q", kQ, q);
  auto K = input(*graph, "K", kK, k);
  auto V = input(*graph, "V", kV, v);
  auto options = fe::graph::SDPA_attributes()
                     .set_name("attention_forward")
                     .set_generate_stats(lse != nullptr)
                     .set_causal_mask(is_causal)
                     .set_attn_scale(static_cast<float>(scale));
  auto [O, stats] = graph->sdpa(Q, K, V, options);
  as_output(O, kO, out);
  if (lse != nullptr) set_stats_layout(stats->set_output(true), *lse);
  return finish(std::move(graph), handle);
}

Built build_backward(cudnnHandle_t handle, const StridedView& dq, const StridedView& dk, const StridedView& dv,
                     const StridedView& dout, const StridedView& q, const StridedView& k, const StridedView& v,
                     const StridedView& out, const StridedView& lse, double scale, bool is_causal) {
  auto graph = new_graph(q.dtype);
  auto Q = input(*graph, "Q", kQ, q);
  auto K = input(*graph, "K", kK, k);
  auto V = input(*graph, "V", kV, v);
  auto O = input(*graph, "O", kO, out);
  auto dO = input(*graph, "dO", kDO, dout);
  fe::graph::Tensor_attributes stats_attributes;
  set_stats_layout(stats_attributes.set_name("stats"), lse);
  auto stats = graph->tensor(stats_attributes);
  auto options = fe::graph::SDPA_backward_attributes()
                     .set_name("attention_backward")
                     .set_causal_mask(is_causal)
                     .set_attn_scale(static_cast<float>(scale));
  auto [dQ, dK, dV] = graph->sdpa_backward(Q, K, V, O, dO, stats, options);
  as_output(dQ, kDQ, dq);
  as_output(dK, kDK, dk);
  as_output(dV, kDV, dv);
  return finish(std::move(graph), handle);
}

template <typename BuildFn>
const Built& graph_for(const Key& key, BuildFn&& build) {
  auto& graphs = state().graphs;
  auto it = graphs.find(key);
  if (it == graphs.end()) it = graphs.emplace(key, build()).first;
  return it->second;
}

bool run(const Built& built, cudnnHandle_t handle, std::unordered_map<int64_t, void*>& pack, DeviceScratch workspace) {
  if (!built.graph) return refuse(built.refusal);
  if (built.workspace > workspace.bytes)
    return refuse("needs " + std::to_string(built.workspace) + " bytes of workspace, lent " +
                  std::to_string(workspace.bytes));
  auto status = built.graph->execute(handle, pack, built.workspace > 0 ? workspace.data : nullptr);
  if (!status.is_good())
    throw std::runtime_error("cuda backend: cuDNN attention failed to run: " + status.get_message());
  state().refusal.clear();
  return true;
}

}  // namespace

bool cudnn_attention_enabled() { return mode() != Mode::never; }

bool cudnn_attention_pays(int64_t B, int64_t H, int64_t Sq, int64_t Sk, int64_t D) {
  constexpr double kWorthIt = 1073741824.0;  // 2^30 multiply-adds a call (cuda_cudnn_attention.h)
  if (mode() != Mode::by_size) return mode() == Mode::always;
  return static_cast<double>(B) * static_cast<double>(H) * static_cast<double>(Sq) * static_cast<double>(Sk) *
             static_cast<double>(D) >=
         kWorthIt;
}

std::string cudnn_attention_refusal() { return state().refusal; }

bool cudnn_attention_forward(const StridedView& out, const StridedView* lse, const StridedView& q, const StridedView& k,
                             const StridedView& v, double scale, bool is_causal, DeviceScratch workspace) {
  if (!cudnn_attention_enabled()) return false;
  if (!fits_call(q, k, v) || !fits(out) || out.dtype != q.dtype) return refuse("operands cuDNN does not take");
  if (lse != nullptr && (lse->dtype != ScalarType::float32 || lse->sizes.size() != 3))
    return refuse("a logsumexp cuDNN does not take");
  cudnnHandle_t handle = handle_for(q.device.index);
  if (handle == nullptr) return refuse("no cuDNN handle");
  const Key key = key_of(0, q, is_causal, scale, {&out, lse, &q, &k, &v});
  const Built& built = graph_for(key, [&] { return build_forward(handle, out, lse, q, k, v, scale, is_causal); });
  std::unordered_map<int64_t, void*> pack{{kQ, q.data}, {kK, k.data}, {kV, v.data}, {kO, out.data}};
  if (lse != nullptr) pack.emplace(kStats, lse->data);
  return run(built, handle, pack, workspace);
}

bool cudnn_attention_backward(const StridedView& dq, const StridedView& dk, const StridedView& dv,
                              const StridedView& dout, const StridedView& q, const StridedView& k, const StridedView& v,
                              const StridedView& out, const StridedView& lse, double scale, bool is_causal,
                              DeviceScratch workspace) {
  if (!cudnn_attention_enabled()) return false;
  if (!fits_call(q, k, v)) return refuse("operands cuDNN does not take");
  for (const StridedView* t : {&dq, &dk, &dv, &dout, &out})
    if (!fits(*t) || t->dtype != q.dtype) return refuse("operands cuDNN does not take");
  if (lse.dtype != ScalarType::float32 || lse.sizes.size() != 3) return refuse("a logsumexp cuDNN does not take");
  cudnnHandle_t handle = handle_for(q.device.index);
  if (handle == nullptr) return refuse("no cuDNN handle");
  const Key key = key_of(1, q, is_causal, scale, {&dq, &dk, &dv, &dout, &q, &k, &v, &out, &lse});
  const Built& built =
      graph_for(key, [&] { return build_backward(handle, dq, dk, dv, dout, q, k, v, out, lse, scale, is_causal); });
  std::unordered_map<int64_t, void*> pack{{kQ, q.data},   {kK, k.data},     {kV, v.data},
                                          {kO, out.data}, {kDO, dout.data}, {kStats, lse.data},
                                          {kDQ, dq.data}, {kDK, dk.data},   {kDV, dv.data}};
  return run(built, handle, pack, workspace);
}

#endif

}  // namespace bytegrad::cuda
