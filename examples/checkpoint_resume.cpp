// Checkpoint and resume: an MLP trained with a shuffling DataLoader, AdamW, a cosine schedule,
// clip_grad_norm_ and a GradScaler (off here: float32 has no underflow to guard against; on for float16
// autocast on cuda), saving every 5 steps. The run is cut short after 13 steps, a fresh process-like
// start loads the last checkpoint (step 10) and trains on to step 24, and the result is compared with an
// uninterrupted run: the losses and the final parameters are the same, bit for bit.
//   build/examples/checkpoint_resume [sim|cpu|cuda] [checkpoint folder]
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <bytegrad/bytegrad.h>

using namespace bytegrad;

namespace {

constexpr int kSteps = 24, kSaveEvery = 5, kBatch = 16;

struct Run {
  std::map<int, double> losses;                 // step -> loss
  std::vector<std::vector<double>> parameters;  // at the end
};

// Trains from step 0, or from the checkpoint in `folder` when resume is set, until `stop_after` steps have
// been taken (a crash), saving every kSaveEvery steps.
Run train(Device on, const std::string& folder, bool resume, int stop_after) {
  // The data and the first weights come from fixed seeds, so every run starts from the same place.
  manual_seed(0);
  const Tensor x = randn({96, 8}, device(on));
  const Tensor y = matmul(x, randn({8, 1}, device(on))) + 0.1 * randn({96, 1}, device(on));
  data::DataLoader loader(data::TensorDataset({x, y}), {.batch_size = kBatch, .shuffle = true, .drop_last = true});
  const int batches_per_epoch = static_cast<int>(loader.size());

  manual_seed(1);
  auto model = std::make_shared<nn::Sequential>();
  model->push_back(std::make_shared<nn::Linear>(8, 32, true, device(on)));
  model->push_back(std::make_shared<nn::ReLU>());
  model->push_back(std::make_shared<nn::Linear>(32, 1, true, device(on)));
  optim::AdamW optimizer(model->parameters(), 1e-2);
  optim::CosineAnnealingLR schedule(optimizer, kSteps);
  optim::GradScaler scaler(on.type, 65536.0, 2.0, 0.5, 2000, /*enabled=*/false);

  const std::string model_file = folder + "/model.safetensors", optimizer_file = folder + "/optimizer.safetensors";
  int step = 0;
  if (resume) {
    nn::load_model(*model, model_file);
    const safetensors::Metadata saved = optim::load(optimizer, optimizer_file);
    schedule.load_state_dict(json::parse(saved.at("scheduler")));
    scaler.load_state_dict(json::parse(saved.at("scaler")));
    step = std::stoi(saved.at("step"));
    std::printf("resumed from step %d (lr %.6g)\n", step, optimizer.lr(0));
  }

  Run run;
  while (step < stop_after) {
    // One order per epoch from a seed of its own (PyTorch's sampler.set_epoch idiom), so a resumed run
    // draws the same order and skips the batches already taken.
    const int epoch = step / batches_per_epoch;
    loader.generator().manual_seed(1000 + epoch);
    auto batch = loader.begin();
    for (int skip = 0; skip < step % batches_per_epoch; ++skip) ++batch;  // skipping makes no batch
    for (; batch != loader.end() && step < stop_after; ++batch) {
      const data::DataLoader::Batch xy = *batch;
      optimizer.zero_grad();
      Tensor loss = mse_loss((*model)(xy[0]), xy[1]);
      run.losses[step] = loss.item();
      scaler.scale(loss).backward();
      scaler.unscale_(optimizer);  // clip the true gradients
      nn::utils::clip_grad_norm_(model->parameters(), 1.0);
      scaler.step(optimizer);
      scaler.update();
      schedule.step();
      ++step;
      if (step % kSaveEvery == 0) {
        nn::save_model(*model, model_file);
        optim::save(optimizer, optimizer_file,
                    {{"step", std::to_string(step)},
                     {"scheduler", json::dump(schedule.state_dict())},
                     {"scaler", json::dump(scaler.state_dict())}});
      }
    }
  }
  for (const Tensor& p : model->parameters()) run.parameters.push_back(p.tolist());
  return run;
}

}  // namespace

int main(int argc, char** argv) {
  const Device on = argc > 1 ? Device::parse(argv[1]) : default_device();
  const std::string folder =
      argc > 2 ? argv[2] : (std::filesystem::temp_directory_path() / "bytegrad_checkpoint_resume").string();
  std::filesystem::create_directories(folder);
  std::printf("training on %s, checkpoints in %s\n", on.str().c_str(), folder.c_str());

  std::filesystem::create_directories(folder + "/a");
  std::filesystem::create_directories(folder + "/b");
  const Run uninterrupted = train(on, folder + "/a", false, kSteps);
  const Run first_part = train(on, folder + "/b", false, 13);  // cut short: the last save was at step 10
  const Run resumed = train(on, folder + "/b", true, kSteps);

  bool same = resumed.parameters == uninterrupted.parameters;
  for (const auto& [step, loss] : resumed.losses) {
    same = same && uninterrupted.losses.at(step) == loss;
    std::printf("step %2d  loss %.6f  (uninterrupted %.6f)\n", step, loss, uninterrupted.losses.at(step));
  }
  std::printf("first part: %zu steps; resumed: steps %d to %d\n", first_part.losses.size(),
              resumed.losses.begin()->first, resumed.losses.rbegin()->first);
  std::printf("resumed run matches the uninterrupted one: %s\n", same ? "yes" : "NO");
  return same ? 0 : 1;
}
