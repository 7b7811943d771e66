// The process generator's in-place fills, for the nn::init fills and dropout's mask. The generator itself
// (manual_seed, get_rng_state, rand, randn, randint, randperm, Generator) is declared in tensor.h.
//
// The generator is Philox4x32-10 (kernels/philox.h: counter-based, as PyTorch's CUDA generator and curand),
// its state a seed and an offset, as PyTorch's: manual_seed(s) sets seed s and offset 0, and each draw takes
// the next range of counter blocks, so a call's values depend on the seed, the calls before it and each
// element's index only, not on the device, the thread count or the build (kernels/random_fill.h says which
// counter gives which element). get_rng_state's text is "philox4x32_10 SEED OFFSET" (a Generator's the same,
// its offset counting 64-bit values); set_rng_state refuses any other text, a state of the mt19937_64
// generator bytegrad had before included, with std::invalid_argument.
#pragma once

#include "bytegrad/tensor/tensor.h"

namespace bytegrad {

// Fill t in place from the process generator, in t's dtype, as the random factories draw (nothing drawn on
// meta or for no elements): uniform on [low, high) (PyTorch's uniform_: u (high - low) + low, and a value
// that rounds to high gives low), normal with mean and std (float math for float32 and the 16-bit dtypes,
// double for float64; both refuse a dtype that is not floating, as rand does), and ones with probability p,
// else zeros, in any dtype (dropout's mask; p outside [0, 1] is refused). A strided t is written through a
// contiguous temporary, as fill_from_host writes it.
void uniform_fill_(const Tensor& t, double low, double high);
void normal_fill_(const Tensor& t, double mean, double std);
void bernoulli_fill_(const Tensor& t, double p);

}  // namespace bytegrad
