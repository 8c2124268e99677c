// The logistic-regression runner's host side: `train logreg` option errors (raised before any
// device is needed), the class filter and label mapping on a tiny IDX set written here, the pixel
// scaling, the float64 reference trainer on a separable toy set, the weights file, and
// shapes/logreg.yaml against the runner's problems.
#include <gtest/gtest.h>
#include <zlib.h>

#include <cmath>
#include <cstring>
#include <random>
#include <set>

#include "models/logreg.hpp"
#include "models/safetensors.hpp"
#include "support/test_support.hpp"
#include "tuner/shape_file.hpp"
#include "variants/catalogue.hpp"

namespace shapetune {
namespace {

using test_support::run_shapetune;

TEST(LogregOptions, BadValuesAreUsageErrorsBeforeAnyDeviceIsNeeded) {
  const struct {
    std::vector<std::string> args;
    std::string says;
  } cases[] = {
      {{"train", "logreg", "--classes", "3"}, "--classes expects A,B"},
      {{"train", "logreg", "--classes", "a,b"}, "--classes expects A,B"},
      {{"train", "logreg", "--classes", "1,2,3"}, "--classes expects A,B"},
      {{"train", "logreg", "--classes", "0,10"}, "class 10 is not one of Fashion-MNIST's 0..9"},
      {{"train", "logreg", "--classes", "-1,4"}, "class -1 is not one of"},
      {{"train", "logreg", "--classes", "4,4"}, "A and B must differ"},
      {{"train", "logreg", "--lr", "0"}, "--lr must be between"},
      {{"train", "logreg", "--lr", "x"}, "--lr expects a number"},
      {{"train", "logreg", "--epochs", "0"}, "--epochs must be between"},
      {{"train", "logreg", "--batch", "-1"}, "--batch must be between"},
      {{"train", "logreg", "--dtype", "f16", "--batch", "32"}, "full batch only"},
      {{"train", "logreg", "--dtype", "i32"}, "--dtype must be f32, f16 or bf16"},
      {{"train", "logreg", "--shuffle"}, "--shuffle needs --batch"},
      {{"train", "mlp", "--classes", "0,6"}, "is an option of `train logreg`"},
  };
  for (const auto& c : cases) {
    const auto r = run_shapetune(c.args);
    EXPECT_NE(r.code, 0) << c.args[2];
    EXPECT_CONTAINS(r.err, c.says);
  }
}

TEST(LogregOptions, ClassesParseAndValidate) {
  EXPECT_EQ(parse_logreg_classes("0,6"), (std::array<int, 2>{0, 6}));
  EXPECT_EQ(parse_logreg_classes("9,1"), (std::array<int, 2>{9, 1}));
  EXPECT_THROW(parse_logreg_classes(",6"), std::invalid_argument);
  EXPECT_THROW(parse_logreg_classes("0, 6"), std::invalid_argument);
  LogregOptions o;
  EXPECT_NO_THROW(validate(o));
  o.lr = std::nan("");
  EXPECT_THROW(validate(o), std::invalid_argument);
}

TEST(LogregOptions, HelpListsTheRunner) {
  const auto r = run_shapetune({"train", "--help"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_CONTAINS(r.out, "`logreg` (binary logistic regression");
  EXPECT_CONTAINS(r.out, "logreg: the two classes");
}

// ---- data ----------------------------------------------------------------------------------------

std::vector<std::uint8_t> idx_bytes(std::vector<std::uint32_t> dims, const std::vector<std::uint8_t>& data) {
  std::vector<std::uint8_t> out = {0, 0, 0x08, static_cast<std::uint8_t>(dims.size())};
  for (auto d : dims)
    for (int shift : {24, 16, 8, 0}) out.push_back(static_cast<std::uint8_t>(d >> shift));
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

void write_gz(const std::string& path, const std::vector<std::uint8_t>& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())), static_cast<int>(bytes.size()));
  gzclose(f);
}

// A split whose image i is filled with the byte i and labelled labels[i].
void write_split(const test_support::TempDir& dir, const std::string& prefix, const std::vector<std::uint8_t>& labels) {
  std::vector<std::uint8_t> pixels;
  for (std::size_t i = 0; i < labels.size(); ++i) pixels.insert(pixels.end(), 784, static_cast<std::uint8_t>(i));
  const auto n = static_cast<std::uint32_t>(labels.size());
  write_gz(dir.file(prefix + "-images-idx3-ubyte.gz"), idx_bytes({n, 28, 28}, pixels));
  write_gz(dir.file(prefix + "-labels-idx1-ubyte.gz"), idx_bytes({n}, labels));
}

TEST(LogregData, KeepsTwoClassesInFileOrderAndMapsTheirLabels) {
  test_support::TempDir dir;
  write_split(dir, "train", {2, 7, 0, 7, 2, 9, 2});
  write_split(dir, "t10k", {7, 1, 2});
  const FashionMnist all = load_fashion_mnist(dir.path().string());

  const LogregData d = select_classes(all, {2, 7});
  EXPECT_EQ(d.train.count, 5);
  EXPECT_EQ(d.train.labels, (std::vector<std::uint8_t>{0, 1, 1, 0, 0}));
  ASSERT_EQ(d.train.pixels.size(), 5u * 784);
  const std::uint8_t kept_rows[] = {0, 1, 3, 4, 6};  // each row's pixels are its index in the file
  for (int r = 0; r < 5; ++r) {
    EXPECT_EQ(d.train.pixels[static_cast<std::size_t>(r) * 784], kept_rows[r]);
    EXPECT_EQ(d.train.pixels[static_cast<std::size_t>(r) * 784 + 783], kept_rows[r]);
  }
  EXPECT_EQ(d.test.count, 2);
  EXPECT_EQ(d.test.labels, (std::vector<std::uint8_t>{1, 0}));
  EXPECT_EQ(d.test.pixels[784], 2);

  // The order of --classes is the label mapping.
  EXPECT_EQ(select_classes(all, {7, 2}).train.labels, (std::vector<std::uint8_t>{1, 0, 0, 1, 1}));
  // A class with no image in a split is an error naming it.
  try {
    select_classes(all, {2, 9});
    ADD_FAILURE() << "class 9 has no test image";
  } catch (const DataError& e) {
    EXPECT_CONTAINS(std::string(e.what()), "test split has no image of class 9");
  }
}

TEST(LogregData, PixelsScaleToTheUnitInterval) {
  EXPECT_EQ(logreg_pixel(0), 0.0f);
  EXPECT_EQ(logreg_pixel(255), 1.0f);
  EXPECT_NEAR(logreg_pixel(51), 0.2, 1e-7);
  const std::vector<float> v = logreg_pixels({0, 128, 255});
  ASSERT_EQ(v.size(), 3u);
  EXPECT_EQ(v[1], logreg_pixel(128));
}

// ---- the float64 reference trainer -----------------------------------------------------------------

TEST(LogregReferenceTrainer, LossFallsOnASeparableToySetAndEveryRowEndsRight) {
  // Label 1 where x . u > 0 for a fixed direction u, with a margin: linearly separable.
  const int features = 5, rows = 64;
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<double> unit(-1, 1);
  const double u[features] = {1, -2, 0.5, 0, 1};
  std::vector<double> x;
  std::vector<std::int32_t> y;
  while (static_cast<int>(y.size()) < rows) {
    double row[features], dot = 0;
    for (int j = 0; j < features; ++j) dot += u[j] * (row[j] = unit(rng));
    if (std::abs(dot) < 0.2) continue;
    x.insert(x.end(), row, row + features);
    y.push_back(dot > 0 ? 1 : 0);
  }
  const LogregReferenceRun run = logreg_reference_train(x, y, features, 300, 0.05);
  ASSERT_EQ(run.losses.size(), 300u);
  ASSERT_EQ(run.parameters.size(), static_cast<std::size_t>(features + 1));
  EXPECT_DOUBLE_EQ(run.losses[0], std::log(2.0));  // zero w and b: p = 1/2 for every row
  for (std::size_t t = 1; t < run.losses.size(); ++t)
    EXPECT_LT(run.losses[t], run.losses[t - 1]) << "step " << t + 1;
  EXPECT_LT(run.losses.back(), 0.1);
  for (int r = 0; r < rows; ++r) {
    double z = run.parameters[features];
    for (int j = 0; j < features; ++j) z += x[static_cast<std::size_t>(r * features + j)] * run.parameters[static_cast<std::size_t>(j)];
    EXPECT_EQ(z > 0 ? 1 : 0, y[static_cast<std::size_t>(r)]) << "row " << r;
  }
}

TEST(LogregReferenceTrainer, FirstAdamStepMovesEveryParameterByLrAgainstItsGradient) {
  // Adam's first step is lr sign(g) (up to eps): a hand check of the wiring of both references.
  const std::vector<double> x = {1, 0, 0, 1};  // two rows, two features
  const std::vector<std::int32_t> y = {1, 0};
  const LogregReferenceRun run = logreg_reference_train(x, y, 2, 1, 0.1);
  // g = x^T (1/2 - y) / 2 = {-1/4, 1/4}, db = 0: w moves by +-lr, b stays.
  EXPECT_NEAR(run.parameters[0], 0.1, 1e-6);
  EXPECT_NEAR(run.parameters[1], -0.1, 1e-6);
  EXPECT_EQ(run.parameters[2], 0.0);
}

TEST(LogregWeights, SafetensorsWithPyTorchNamesAndTheClasses) {
  test_support::TempDir dir;
  std::vector<float> p(static_cast<std::size_t>(kLogregParameters));
  for (std::size_t i = 0; i < p.size(); ++i) p[i] = static_cast<float>(i) * 0.5f;
  save_logreg_weights(dir.file("w.safetensors"), p, {0, 6});
  const SafetensorsFile f = read_safetensors(dir.file("w.safetensors"));
  EXPECT_EQ(f.tensor("weight").shape, (std::vector<std::int64_t>{1, 784}));
  EXPECT_EQ(f.tensor("bias").shape, (std::vector<std::int64_t>{1}));
  float bias = 0;
  std::memcpy(&bias, f.tensor("bias").bytes.data(), sizeof(float));
  EXPECT_EQ(bias, p.back());
  EXPECT_EQ(f.metadata().at("class_1"), "6");
  EXPECT_THROW(save_logreg_weights(dir.file("x"), {1.f}, {0, 6}), std::invalid_argument);
}

// shapes/logreg.yaml holds exactly the problems the runner resolves on its default classes (12000
// training and 2000 test rows): full batch with X in f32, f16 and bf16, and --batch 128 in f32.
TEST(LogregShapes, TheMatrixIsExactlyTheRunnersProblems) {
  std::set<std::string> in_runner;
  auto add = [&](std::int64_t batch_rows, DType dtype) {
    for (const ModelOp& op : logreg_operations(12000, 2000, batch_rows, dtype)) {
      EXPECT_NE(catalogue().find_primitive(op.problem.primitive), nullptr) << op.problem.primitive;
      in_runner.insert(op.problem.key());
    }
  };
  for (DType dtype : {DType::f32, DType::f16, DType::bf16}) add(12000, dtype);
  add(128, DType::f32);
  const ShapeFile file = load_shape_file((test_support::source_dir() / "shapes" / "logreg.yaml").string(), catalogue());
  std::set<std::string> in_file;
  for (const auto& p : file.problems) EXPECT_TRUE(in_file.insert(p.problem.key()).second) << "twice: " << p.problem.key();
  EXPECT_EQ(in_file, in_runner);
}

TEST(LogregShapes, OperationsAreTheStepAdamAndBothEvaluations) {
  const auto ops = logreg_operations(12000, 2000, 128, DType::bf16);
  ASSERT_EQ(ops.size(), 4u);
  EXPECT_EQ(ops[0].problem.key(), "logistic_bce/bf16/rows=128,features=784");
  EXPECT_EQ(ops[1].problem.key(), "adam/f32/n=785,tensors=2");
  EXPECT_EQ(ops[2].problem.shape.at("rows"), 12000);
  EXPECT_EQ(ops[3].problem.shape.at("rows"), 2000);
}

}  // namespace
}  // namespace shapetune
