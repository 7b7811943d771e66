// Device memory of the new modules on sim, as arithmetic from PyTorch's rules: every block is its
// numel * element_size rounded up to 512 bytes; the cuBLAS (and, following it, cuBLASLt) workspaces are
// configured to 0 (CUBLAS_WORKSPACE_CONFIG=:0:0, the goldens' setting), so matrix products park nothing.
#include <cstdlib>

#include "bytegrad/nn/attention.h"
#include "bytegrad/nn/dropout.h"
#include "bytegrad/nn/embedding.h"
#include "nn_helpers.h"

using namespace bytegrad;
using namespace bytegrad::testing;

namespace {

struct NoWorkspace {
  NoWorkspace() { setenv("CUBLAS_WORKSPACE_CONFIG", ":0:0", 1); }
  ~NoWorkspace() { unsetenv("CUBLAS_WORKSPACE_CONFIG"); }
};

}  // namespace

TEST_CASE("MultiheadSelfAttention (B=2, L=8, C=16, H=4) forward and backward memory, byte for byte") {
  NoWorkspace no_workspace;
  fresh_sim();  // clear_blas_workspaces(); reset_device(sim)
  {
    manual_seed(0);
    nn::MultiheadSelfAttention attn(16, 4, true, device(kSim));
    // in_proj.weight (48, 16): 48*16*4 = 3072; in_proj.bias 48*4 = 192 -> 512;
    // out_proj.weight (16, 16): 16*16*4 = 1024; out_proj.bias 16*4 = 64 -> 512.
    const int64_t params = 3072 + 512 + 1024 + 512;  // 5120
    CHECK(allocated() == params);
    Tensor x = randn({2, 8, 16}, device(kSim));  // 2*8*16*4 = 1024
    x.requires_grad_(true);
    const int64_t input = 1024;
    CHECK(allocated() == params + input);

    Tensor y = attn(x);
    // Kept for backward (D = 4, B*H = 8):
    //  qkv (2*8*48*4 = 3072) is freed: q/k/v are views whose nodes keep only shapes;
    //  q reshaped (8, 8, 4) for bmm: a contiguous copy 2*4*8*4*4 = 1024, saved by BmmBackward0;
    //  k^T reshaped (8, 4, 8): copy 1024, saved by the same BmmBackward0;
    //  the raw scores (2,4,8,8)*4 = 2048 and the scaled ones (2048) are freed;
    //  attn = softmax result (2,4,8,8)*4 = 2048, saved by SoftmaxBackward0 (and, as a view, by the second bmm);
    //  v reshaped (8, 8, 4): copy 1024, saved by the second BmmBackward0;
    //  the (2,4,8,4) product (1024) is freed after transpose(1,2).reshape({2,8,16}) copies it: 2*8*16*4 = 1024,
    //  saved by out_proj's AddmmBackward0 as mat1; the output y (2,8,16)*4 = 1024.
    const int64_t saved = 1024 + 1024 + 2048 + 1024 + 1024;  // 6144
    const int64_t output = 1024;
    CHECK(allocated() == params + input + saved + output);  // 13312
    // The peak is inside the forward, when the attention output is copied by transpose(1,2).reshape: qkv
    // 3072 (alive until forward's scope ends), the q and k^T copies 2 * 1024, attn 2048, the v copy 1024,
    // the (2,4,8,4) bmm product 1024 and its reshaped copy 1024 = 10240. (Earlier, at the scale: qkv 3072
    // + q, k^T copies 2048 + raw scores 2048 + scaled scores 2048 = 9216; temporaries are dropped eagerly.)
    CHECK(peak() == params + input + 3072 + 2 * 1024 + 2048 + 1024 + 1024 + 1024);  // 16384

    Tensor loss = sum(y);  // 0-d: 512
    y = Tensor();          // only the graph holds y's producer now; y's block (1024) is freed
    CHECK(allocated() == params + input + saved + 512);
    loss.backward();
    // Saved tensors released; gradients stay: params' grads 3072 + 512 + 1024 + 512 = 5120, x.grad 1024.
    CHECK(allocated() == params + input + params + 1024 + 512);  // 12800
    attn.zero_grad();
  }
  CHECK(allocated() == 0);
}

TEST_CASE("MultiheadSelfAttention forward under no_grad keeps nothing but the output") {
  NoWorkspace no_workspace;
  fresh_sim();
  {
    nn::MultiheadSelfAttention attn(16, 4, true, device(kSim));
    Tensor x = randn({2, 8, 16}, device(kSim));
    NoGradGuard no_grad;
    Tensor y = attn(x);
    CHECK(allocated() == 5120 + 1024 + 1024);  // params, x, y
  }
  CHECK(allocated() == 0);
}

TEST_CASE("Dropout memory: eval allocates nothing; training allocates the output and a bool mask") {
  fresh_sim();
  {
    Tensor x = randn({8, 100}, device(kSim));  // 8*100*4 = 3200 -> 3584
    x.requires_grad_(true);
    CHECK(allocated() == 3584);
    nn::Dropout drop(0.25);
    drop.eval();
    caching_allocator(kSim).reset_peak_stats();
    Tensor same = drop(x);
    CHECK(same.data_ptr() == x.data_ptr());
    CHECK(allocated() == 3584);
    CHECK(peak() == 3584);

    drop.train();
    Tensor y = drop(x);
    // output 3200 -> 3584, bool mask 8*100*1 = 800 -> 1024 (kept by NativeDropoutBackward0)
    CHECK(allocated() == 3584 + 3584 + 1024);
    CHECK(peak() == 3584 + 3584 + 1024);
    y = Tensor();  // the node (and its mask) go with the output
    CHECK(allocated() == 3584);
    {
      NoGradGuard no_grad;
      Tensor z = drop(x);  // without a graph the mask is a temporary
      CHECK(allocated() == 3584 + 3584);
    }
  }
  CHECK(allocated() == 0);
}

TEST_CASE("Embedding memory: weight, output rows; the backward gradient is dense") {
  fresh_sim();
  {
    nn::Embedding emb(10, 32, device(kSim));  // 10*32*4 = 1280 -> 1536
    CHECK(allocated() == 1536);
    Tensor idx = from_vector({1, 3, 3, 7}, {4}, TensorOptions{ScalarType::int64, kSim});  // 32 -> 512
    Tensor y = emb(idx);  // 4*32*4 = 512; EmbeddingBackward0 keeps idx (already alive)
    CHECK(allocated() == 1536 + 512 + 512);
    Tensor loss = sum(y);
    loss.backward();
    // weight.grad dense (10, 32): 1536; y, loss (512) and idx stay
    CHECK(allocated() == 1536 + 512 + 512 + 512 + 1536);
  }
  CHECK(allocated() == 0);
}
