// docs/training.md's example: a small MLP fitted to y = sin(2 x) with the training essentials
// -- Xavier initialisation from a seed, a parameter list, Adam, no_grad for evaluation, printing,
// and a checkpoint in NumPy's .npz format. Non-zero exit unless the loss falls at least tenfold
// and the checkpoint loads back bit for bit.
#include <dualcast/autodiff.hpp>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <vector>

namespace dc = dualcast;

int main() {
  std::vector<float> xs, ys;
  for (int i = 0; i < 32; ++i) {
    xs.push_back(-1.0f + 2.0f * float(i) / 31.0f);
    ys.push_back(std::sin(2.0f * xs.back()));
  }
  auto X = dc::tensor<float>::from({32, 1}, xs), Y = dc::tensor<float>::from({32, 1}, ys);

  dc::tape tp;
  dc::parameters<float> ps; // variables made once: they outlive tp.clear()
  auto w1 = ps.add("w1", tp.variable(dc::xavier_uniform<float>({1, 16}, /*seed*/ 1)));
  auto b1 = ps.add("b1", tp.variable(dc::tensor<float>::zeros({16})));
  auto w2 = ps.add("w2", tp.variable(dc::xavier_uniform<float>({16, 1}, /*seed*/ 2)));
  auto b2 = ps.add("b2", tp.variable(dc::tensor<float>::zeros({1})));
  dc::adam opt(ps, {.lr = 0.02});
  auto x = tp.constant(X);
  auto model = [&] { return dc::matmul(dc::tanh(dc::matmul(x, w1) + b1), w2) + b2; };

  float first = 0, last = 0;
  for (int step = 0; step < 300; ++step) {
    auto err = model() - Y;
    auto loss = dc::mean(err * err);
    tp.backward(loss);
    opt.step();     // the values of w1, b1, w2, b2 updated in place
    tp.zero_grad(); // next iteration: gradients from zero,
    tp.clear();     // no nodes
    (step == 0 ? first : last) = loss.item();
  }
  {
    dc::no_grad guard(tp); // evaluation: values only, nothing recorded
    std::cout << "prediction " << dc::slice(model(), 0, 0, 4) << "\n";
  }
  auto path = std::filesystem::temp_directory_path() / "dualcast_train_mlp.npz";
  dc::save_npz(path, ps); // >>> np.load(path)["w1"]
  auto saved = w1.value().to_vector();
  w1.value().fill_(0.0f);
  dc::load_npz(path, ps); // back into the variables, by name
  std::filesystem::remove(path);

  bool const ok = last < 0.1f * first && w1.value().to_vector() == saved;
  std::printf("%zu parameters (%lld numbers), loss %.5f -> %.5f: %s\n", ps.size(),
              static_cast<long long>(ps.numel()), double(first), double(last),
              ok ? "ok" : "FAILED");
  return ok ? 0 : 1;
}
