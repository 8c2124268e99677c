#include "models/idx.hpp"

#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>

namespace shapetune {
namespace {

struct GzCloser {
  void operator()(gzFile_s* f) const { gzclose(f); }
};

// Reads exactly `n` bytes or says why not; `before` and `whole` place them within a larger read
// (`whole` 0: this read is the whole of `what`).
void read_exact(gzFile file, const std::string& path, void* out, std::size_t n, const char* what,
                std::int64_t before = 0, std::int64_t whole = 0) {
  auto* bytes = static_cast<unsigned char*>(out);
  std::size_t done = 0;
  while (done < n) {
    const unsigned chunk = static_cast<unsigned>(std::min<std::size_t>(n - done, 1u << 30));
    const int got = gzread(file, bytes + done, chunk);
    if (got < 0) {
      int code = 0;
      const char* message = gzerror(file, &code);
      throw DataError(path + ": cannot read " + what + ": " + (message ? message : "zlib error"));
    }
    if (got == 0)
      throw DataError(path + ": truncated: " + what + " needs " + std::to_string(whole ? whole : static_cast<std::int64_t>(n)) +
                      " bytes, the file ends after " + std::to_string(before + static_cast<std::int64_t>(done)));
    done += static_cast<std::size_t>(got);
  }
}

std::string missing_hint() {
  return std::string("install Debian's dataset-fashion-mnist package (it puts the files in ") + kFashionMnistDir +
         "), or pass --data DIR holding the four .gz files";
}

LabelledImages load_split(const std::string& dir, const std::string& prefix) {
  const std::string images_path = dir + "/" + prefix + "-images-idx3-ubyte.gz";
  const std::string labels_path = dir + "/" + prefix + "-labels-idx1-ubyte.gz";
  for (const auto& p : {images_path, labels_path})
    if (!std::filesystem::exists(p)) throw DataError(p + ": no such file; " + missing_hint());
  IdxArray images = read_idx(images_path);
  IdxArray labels = read_idx(labels_path);
  if (images.dims.size() != 3)
    throw DataError(images_path + ": expected a rank-3 array (count, rows, cols), got rank " +
                    std::to_string(images.dims.size()));
  if (labels.dims.size() != 1)
    throw DataError(labels_path + ": expected a rank-1 array of labels, got rank " + std::to_string(labels.dims.size()));
  if (labels.dims[0] != images.dims[0])
    throw DataError(labels_path + ": " + std::to_string(labels.dims[0]) + " labels for " +
                    std::to_string(images.dims[0]) + " images in " + images_path);
  for (std::size_t i = 0; i < labels.data.size(); ++i)
    if (labels.data[i] >= FashionMnist::kClasses)
      throw DataError(labels_path + ": label " + std::to_string(labels.data[i]) + " of item " + std::to_string(i) +
                      " is not a class (0.." + std::to_string(FashionMnist::kClasses - 1) + ")");
  LabelledImages out;
  out.count = images.dims[0];
  out.rows = images.dims[1];
  out.cols = images.dims[2];
  out.pixels = std::move(images.data);
  out.labels = std::move(labels.data);
  return out;
}

}  // namespace

IdxArray read_idx(const std::string& path) {
  std::unique_ptr<gzFile_s, GzCloser> file(gzopen(path.c_str(), "rb"));
  if (!file) throw DataError(path + ": cannot open (" + (std::filesystem::exists(path) ? "unreadable" : "no such file") + ")");
  unsigned char magic[4];
  read_exact(file.get(), path, magic, 4, "the 4-byte magic");
  if (magic[0] != 0 || magic[1] != 0)
    throw DataError(path + ": not an IDX file (magic must start with two zero bytes)");
  if (magic[2] != 0x08) {
    char code[8];
    std::snprintf(code, sizeof code, "0x%02X", static_cast<unsigned>(magic[2]));
    throw DataError(path + ": IDX element type " + code + " is not unsigned byte (0x08), the only type the datasets use");
  }
  const int rank = magic[3];
  if (rank < 1 || rank > 4) throw DataError(path + ": IDX rank " + std::to_string(rank) + " outside 1..4");
  IdxArray out;
  constexpr std::int64_t kMaxBytes = std::int64_t{1} << 34;  // 16 GiB
  std::int64_t total = 1;
  for (int d = 0; d < rank; ++d) {
    unsigned char be[4];
    read_exact(file.get(), path, be, 4, "the dimension sizes");
    const std::int64_t extent = (std::int64_t{be[0]} << 24) | (std::int64_t{be[1]} << 16) | (std::int64_t{be[2]} << 8) | be[3];
    if (extent < 1) throw DataError(path + ": dimension " + std::to_string(d) + " is " + std::to_string(extent));
    if (extent > kMaxBytes / total) throw DataError(path + ": more than 16 GiB of data declared");
    total *= extent;
    out.dims.push_back(extent);
  }
  // Read in pieces, the buffer growing with what arrives (pieces of 1 MiB doubling to 64 MiB): a
  // short file claiming gigabytes fails at its end, having allocated about what it held.
  std::int64_t piece = std::int64_t{1} << 20;
  for (std::int64_t done = 0; done < total; done += piece, piece = std::min(piece * 2, std::int64_t{64} << 20)) {
    const std::int64_t n = std::min(piece, total - done);
    out.data.resize(static_cast<std::size_t>(done + n));
    read_exact(file.get(), path, out.data.data() + done, static_cast<std::size_t>(n), "the data", done, total);
  }
  unsigned char extra;
  if (gzread(file.get(), &extra, 1) > 0)
    throw DataError(path + ": trailing bytes after the " + std::to_string(total) + " the header declares");
  return out;
}

FashionMnist load_fashion_mnist(const std::string& dir) {
  if (!std::filesystem::is_directory(dir)) throw DataError(dir + ": no such directory; " + missing_hint());
  FashionMnist data;
  data.train = load_split(dir, "train");
  data.test = load_split(dir, "t10k");
  if (data.train.rows != data.test.rows || data.train.cols != data.test.cols)
    throw DataError(dir + ": train and test images differ in size");
  return data;
}

}  // namespace shapetune
