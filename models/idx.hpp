// IDX files (the MNIST / Fashion-MNIST container), gzipped or not, and the Fashion-MNIST
// dataset as Debian's dataset-fashion-mnist package installs it.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace shapetune {

// A missing, truncated or malformed data file; the message names the file and what was wrong.
class DataError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// An IDX array of unsigned bytes (type code 0x08, the only one the datasets use).
struct IdxArray {
  std::vector<std::int64_t> dims;
  std::vector<std::uint8_t> data;  // row-major, product(dims) bytes
};

// Reads `path` through zlib (a plain, uncompressed file reads the same). Checks the magic
// (0x00 0x00 0x08 rank), that every dimension is >= 1 and that exactly product(dims) bytes
// follow. Throws DataError naming the file.
IdxArray read_idx(const std::string& path);

struct LabelledImages {
  std::int64_t count = 0;
  std::int64_t rows = 0, cols = 0;
  std::vector<std::uint8_t> pixels;  // count x rows x cols
  std::vector<std::uint8_t> labels;  // count, each < classes
};

struct FashionMnist {
  LabelledImages train, test;
  static constexpr int kClasses = 10;
};

// Where Debian's dataset-fashion-mnist puts the files.
inline constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

// Reads {train,t10k}-{images-idx3,labels-idx1}-ubyte.gz from `dir`, and checks that images
// and labels agree in count and that every label is a class. A missing directory or file gets
// an error that names the package to install (or --data to point elsewhere).
FashionMnist load_fashion_mnist(const std::string& dir);

}  // namespace shapetune
