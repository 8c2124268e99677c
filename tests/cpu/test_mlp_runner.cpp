// The MLP runner's host side: the IDX reader on files written here (good, gzipped, truncated,
// wrong magic, bad labels), shapes/mlp.yaml against the runner's own operation list, and the
// float64 reference gradients against finite differences.
#include <gtest/gtest.h>
#include <zlib.h>

#include <cmath>
#include <fstream>
#include <random>
#include <set>

#include "models/idx.hpp"
#include "models/mlp.hpp"
#include "support/test_support.hpp"
#include "tuner/shape_file.hpp"
#include "variants/catalogue.hpp"

namespace shapetune {
namespace {

std::vector<std::uint8_t> idx_bytes(std::vector<std::uint32_t> dims, const std::vector<std::uint8_t>& data,
                                    std::uint8_t type = 0x08) {
  std::vector<std::uint8_t> out = {0, 0, type, static_cast<std::uint8_t>(dims.size())};
  for (auto d : dims)
    for (int shift : {24, 16, 8, 0}) out.push_back(static_cast<std::uint8_t>(d >> shift));
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

void write_plain(const std::string& path, const std::vector<std::uint8_t>& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

void write_gz(const std::string& path, const std::vector<std::uint8_t>& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())), static_cast<int>(bytes.size()));
  gzclose(f);
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const DataError& e) {
    return e.what();
  }
  return "";
}

TEST(IdxReader, ReadsGzippedAndPlainFiles) {
  test_support::TempDir dir;
  const std::vector<std::uint8_t> data = {1, 2, 3, 4, 5, 6};
  write_gz(dir.file("a.gz"), idx_bytes({2, 3}, data));
  write_plain(dir.file("b"), idx_bytes({6}, data));
  const IdxArray a = read_idx(dir.file("a.gz"));
  EXPECT_EQ(a.dims, (std::vector<std::int64_t>{2, 3}));
  EXPECT_EQ(a.data, data);
  const IdxArray b = read_idx(dir.file("b"));
  EXPECT_EQ(b.dims, (std::vector<std::int64_t>{6}));
  EXPECT_EQ(b.data, data);
}

TEST(IdxReader, NamesTheFileAndTheProblem) {
  test_support::TempDir dir;
  write_gz(dir.file("short.gz"), idx_bytes({2, 3}, {1, 2, 3, 4}));
  std::string e = error_of([&] { read_idx(dir.file("short.gz")); });
  EXPECT_NE(e.find("short.gz"), std::string::npos) << e;
  EXPECT_NE(e.find("truncated"), std::string::npos) << e;

  write_gz(dir.file("magic.gz"), {0x1f, 0x00, 0x08, 0x01, 0, 0, 0, 1, 7});
  e = error_of([&] { read_idx(dir.file("magic.gz")); });
  EXPECT_NE(e.find("magic.gz"), std::string::npos) << e;
  EXPECT_NE(e.find("not an IDX file"), std::string::npos) << e;

  write_gz(dir.file("float.gz"), idx_bytes({1}, {0, 0, 0, 0}, 0x0d));
  e = error_of([&] { read_idx(dir.file("float.gz")); });
  EXPECT_NE(e.find("unsigned byte"), std::string::npos) << e;

  write_gz(dir.file("long.gz"), idx_bytes({2}, {1, 2, 3}));
  e = error_of([&] { read_idx(dir.file("long.gz")); });
  EXPECT_NE(e.find("trailing"), std::string::npos) << e;

  e = error_of([&] { read_idx(dir.file("missing.gz")); });
  EXPECT_NE(e.find("no such file"), std::string::npos) << e;

  write_gz(dir.file("zero.gz"), idx_bytes({0}, {}));
  e = error_of([&] { read_idx(dir.file("zero.gz")); });
  EXPECT_NE(e.find("dimension 0 is 0"), std::string::npos) << e;
}

// Headers that claim too much: products past 2^63 (which wrapped and passed before), extents at
// 2^32 - 1 (which reached std::length_error), and a short file claiming 8 GiB, which must fail at
// its end without allocating what it claims. The element type is named in hex.
TEST(IdxReader, HostileHeadersAreCleanErrors) {
  test_support::TempDir dir;
  const std::uint32_t huge = 0xffffffffu;
  for (const std::vector<std::uint32_t>& dims : {std::vector<std::uint32_t>{huge, huge},
                                                  std::vector<std::uint32_t>{huge, huge, huge, huge},
                                                  std::vector<std::uint32_t>{65536, 65536, 65536},
                                                  std::vector<std::uint32_t>{1u << 31, 9}}) {
    write_gz(dir.file("huge.gz"), idx_bytes(dims, {1, 2, 3}));
    const std::string e = error_of([&] { read_idx(dir.file("huge.gz")); });
    EXPECT_NE(e.find("more than 16 GiB of data declared"), std::string::npos) << dims.size() << " dims: " << e;
  }
  // 8 GiB declared, 3 bytes present: truncated, and read piece by piece (no 8 GiB allocation:
  // under AddressSanitizer or a memory limit this would abort otherwise).
  write_gz(dir.file("claims.gz"), idx_bytes({1u << 16, 1u << 17}, {1, 2, 3}));
  const std::string e = error_of([&] { read_idx(dir.file("claims.gz")); });
  EXPECT_NE(e.find("truncated: the data needs 8589934592 bytes, the file ends after 3"), std::string::npos) << e;

  write_gz(dir.file("type.gz"), idx_bytes({1}, {0, 0, 0, 0}, 0x0d));
  const std::string type = error_of([&] { read_idx(dir.file("type.gz")); });
  EXPECT_NE(type.find("element type 0x0D"), std::string::npos) << type;
}

// A dataset directory of `count` random 28x28 images per split.
void write_dataset(const std::string& dir, int count, std::uint8_t max_label) {
  std::mt19937 rng(3);
  for (const std::string split : {"train", "t10k"}) {
    std::vector<std::uint8_t> pixels(static_cast<std::size_t>(count) * 784), labels(static_cast<std::size_t>(count));
    for (auto& p : pixels) p = static_cast<std::uint8_t>(rng());
    for (auto& l : labels) l = static_cast<std::uint8_t>(rng() % (max_label + 1));
    write_gz(dir + "/" + split + "-images-idx3-ubyte.gz", idx_bytes({static_cast<std::uint32_t>(count), 28, 28}, pixels));
    write_gz(dir + "/" + split + "-labels-idx1-ubyte.gz", idx_bytes({static_cast<std::uint32_t>(count)}, labels));
  }
}

TEST(FashionMnistLoader, LoadsADirectoryAndChecksLabels) {
  test_support::TempDir good, bad;
  write_dataset(good.path().string(), 5, 9);
  const FashionMnist d = load_fashion_mnist(good.path().string());
  EXPECT_EQ(d.train.count, 5);
  EXPECT_EQ(d.test.count, 5);
  EXPECT_EQ(d.train.rows * d.train.cols, 784);
  EXPECT_EQ(d.train.pixels.size(), 5u * 784);

  write_dataset(bad.path().string(), 40, 12);
  std::string e = error_of([&] { load_fashion_mnist(bad.path().string()); });
  EXPECT_NE(e.find("is not a class"), std::string::npos) << e;

  e = error_of([&] { load_fashion_mnist((good.path() / "nowhere").string()); });
  EXPECT_NE(e.find("dataset-fashion-mnist"), std::string::npos) << e;
  std::filesystem::remove(good.path() / "t10k-labels-idx1-ubyte.gz");
  e = error_of([&] { load_fashion_mnist(good.path().string()); });
  EXPECT_NE(e.find("t10k-labels-idx1-ubyte.gz: no such file"), std::string::npos) << e;
  EXPECT_NE(e.find("dataset-fashion-mnist"), std::string::npos) << e;
}

// shapes/mlp.yaml holds exactly the problems the runner launches at its defaults, so sweeping it
// tunes every launch of a training step and of the evaluation.
TEST(MlpShapes, TheMatrixIsExactlyTheRunnersProblems) {
  const ShapeFile file = load_shape_file((test_support::source_dir() / "shapes" / "mlp.yaml").string(), catalogue());
  std::set<std::string> in_file, in_runner;
  for (const auto& p : file.problems) in_file.insert(p.problem.key());
  for (const auto& op : mlp_operations(128, 10000)) {
    EXPECT_NE(catalogue().find_primitive(op.problem.primitive), nullptr) << op.problem.primitive;
    in_runner.insert(op.problem.key());
  }
  EXPECT_EQ(in_file, in_runner);
}

// The float64 reference the GPU gradients are checked against, itself checked by central
// differences of its own loss on a few parameters of every tensor.
TEST(MlpReference, GradientsMatchFiniteDifferences) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<float> u(-0.1f, 0.1f), px(-1.f, 2.f);
  std::vector<float> params(static_cast<std::size_t>(kMlpParameters));
  for (auto& p : params) p = u(rng);
  const int rows = 3;
  std::vector<float> x(rows * 784);
  for (auto& v : x) v = px(rng);
  const std::vector<std::int32_t> labels = {2, 9, 0};
  const GradientResult g = mlp_reference_gradients(params, x, labels);
  EXPECT_GT(g.loss, 0);
  // One index in each tensor: W1, b1, W2, b2, W3, b3.
  const std::int64_t probes[] = {784 * 256 / 2 + 3, 784 * 256 + 17, 200960 + 4000, 200960 + 32768 + 5,
                                 200960 + 32896 + 600, 200960 + 32896 + 1280 + 7};
  for (std::int64_t i : probes) {
    // Float parameters: the central difference divides by the steps the floats actually took.
    const float p0 = params[static_cast<std::size_t>(i)], up = p0 + 1e-3f, down = p0 - 1e-3f;
    auto loss_at = [&](float value) {
      std::vector<float> p = params;
      p[static_cast<std::size_t>(i)] = value;
      return mlp_reference_gradients(p, x, labels).loss;
    };
    const double numeric = (loss_at(up) - loss_at(down)) / (static_cast<double>(up) - static_cast<double>(down));
    EXPECT_NEAR(g.gradients[static_cast<std::size_t>(i)], numeric, 1e-4 + 1e-3 * std::abs(numeric)) << "parameter " << i;
  }
}

}  // namespace
}  // namespace shapetune
