// When autograd keeps and frees memory: no_grad, detach, in-place ops, retain_graph, checkpointing and
// reductions over dims. Transcribed from tools/probes/pytorch_extra_scenarios.py.
#include "bytegrad/autograd/grad_mode.h"
#include "bytegrad/memory/device_allocators.h"
#include "bytegrad/nn/checkpoint_sequential.h"
#include "bytegrad/nn/linear.h"
#include "programs/extra_programs.h"
#include "bytegrad/tensor/ops.h"

namespace bytegrad::programs {

void x_no_grad_and_detach(ScenarioRecorder& r) {
  const Device on = r.device();
  nn::Linear lin1(1024, 2048, true, device(on));
  nn::Linear lin2(2048, 16, true, device(on));
  Tensor x = randn({256, 1024}, device(on));
  r.mark("setup");
  Tensor out;
  {
    NoGradGuard no_grad;  // nothing saved: each intermediate is freed as soon as the next op has run
    // out = lin2(relu(lin1(x))): Python frees lin1's output when relu returns, before lin2 runs (a C++
    // temporary would live to the end of the statement, through lin2), hence two statements.
    Tensor hidden = relu(lin1(x));
    out = lin2(hidden);
  }
  r.mark("no_grad_forward");
  out = Tensor();  // del out
  r.mark("no_grad_del");
  Tensor h = relu(lin1(x)).detach();  // the graph behind h (lin1's output) is gone with the temporary
  r.mark("detached_hidden");
  out = lin2(h);
  r.mark("head_forward");
  out.sum().backward();  // grads for lin2 only
  r.mark("head_backward");
  h = Tensor();  // del h, out
  out = Tensor();
  r.mark("del_all");
  {
    Tensor hidden = relu(lin1(x));  // ReluBackward0 keeps relu's output (lin2's input); lin1's is freed
    out = lin2(hidden);
  }
  r.mark("full_forward");
  {
    // out.pow(2).mean().backward(): the square is freed when mean returns (PowBackward0 keeps out, not
    // its result), before backward runs.
    Tensor loss = out.pow(2).mean();
    loss.backward();
  }
  r.mark("full_backward");
  lin1.weight().set_grad(Tensor());  // lin1.weight.grad = None, ...
  lin1.bias().set_grad(Tensor());
  lin2.weight().set_grad(Tensor());
  lin2.bias().set_grad(Tensor());
  r.mark("grads_none");
}

void x_inplace_ops(ScenarioRecorder& r) {
  const Device on = r.device();
  nn::Linear lin1(512, 1024, false, device(on));
  nn::Linear lin2(1024, 1, false, device(on));
  Tensor x = randn({1024, 512}, device(on));
  r.mark("setup");
  Tensor h = lin1(x);
  r.mark("hidden");
  h.mul_(0.5);  // in place: no new memory
  r.mark("mul_inplace");
  h.add_(1.0);
  r.mark("add_inplace");
  h.relu_();
  r.mark("relu_inplace");
  Tensor loss = lin2(h).sum();
  r.mark("loss");
  loss.backward();
  r.mark("backward");
  x.add_(1.0);
  r.mark("leaf_input_add_inplace");
  {
    NoGradGuard no_grad;
    lin1.weight().mul_(0.9);
  }
  r.mark("weight_mul_inplace_no_grad");
  h = Tensor();  // del h, loss
  loss = Tensor();
  r.mark("del");
}

void x_retain_graph(ScenarioRecorder& r) {
  const Device on = r.device();
  nn::Linear lin1(256, 1024, true, device(on));
  nn::Linear lin2(1024, 1, true, device(on));
  Tensor x = randn({512, 256}, device(on));
  r.mark("setup");
  // loss = torch.sigmoid(lin2(torch.tanh(lin1(x)))).sum(): Python frees each intermediate that no node
  // saves as soon as the call consuming it returns (lin1's output after tanh, lin2's after sigmoid), so
  // the chain is cut where a C++ temporary would outlive it.
  Tensor loss;
  {
    Tensor hidden = tanh(lin1(x));        // TanhBackward0 keeps its result
    Tensor prob = sigmoid(lin2(hidden));  // SigmoidBackward0 keeps its result
    loss = prob.sum();
  }
  r.mark("forward");
  loss.backward(Tensor(), /*retain_graph=*/true);  // saved tensors stay for another backward
  r.mark("backward_retain");
  loss.backward(Tensor(), /*retain_graph=*/true);  // accumulates into the existing .grad
  r.mark("backward_retain_again");
  loss.backward();  // frees the saved tensors
  r.mark("backward_free");
  loss = Tensor();  // del loss
  r.mark("del_loss");
}

void x_checkpoint_deep(ScenarioRecorder& r) {
  const Device on = r.device();
  auto model = mlp(on, {512, 1024, 1024, 1024, 1024, 256});
  Tensor x = randn({512, 512}, device(on));
  Tensor t = randn({512, 256}, device(on));
  r.mark("setup");
  Tensor out = (*model)(x);
  r.mark("plain_forward");
  mse_loss(out, t).backward();
  r.mark("plain_backward");
  out = Tensor();  // del out
  model->zero_grad();
  caching_allocator(on).reset_peak_stats();
  r.mark("reset");
  out = nn::checkpoint_sequential(*model, 3, x);  // segments of 3 modules; only their inputs are kept
  r.mark("ckpt_forward");
  mse_loss(out, t).backward();
  r.mark("ckpt_backward");
}

void x_mean_sum_reductions(ScenarioRecorder& r) {
  const Device on = r.device();
  Tensor x = randn({4096, 1024}, device(on));
  x.requires_grad_();
  Tensor w = randn({1024}, device(on));
  w.requires_grad_();
  r.mark("setup");
  Tensor y = (x * w).sum({0});
  r.mark("sum_dim0");
  Tensor z = (x + w).mean({1});
  r.mark("mean_dim1");
  // s = y.sum() + z.mean() + x.sum(): Python evaluates left to right and frees both operands of each +
  // when it returns; C++ leaves the operands' order unspecified, so the terms are spelled out in order.
  Tensor s = y.sum();
  s = s + z.mean();
  s = s + x.sum();
  r.mark("scalars");
  s.backward();
  r.mark("backward");
  y = Tensor();  // del y, z, s
  z = Tensor();
  s = Tensor();
  r.mark("del");
}

}  // namespace bytegrad::programs
