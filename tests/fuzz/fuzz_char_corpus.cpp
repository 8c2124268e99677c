// libFuzzer target: text files for the character-level models, plain or gzipped. Any bytes either
// become a corpus or raise DataError. A corpus has a sorted vocabulary of valid code points within
// the cap, its ids decode back to exactly the bytes read (less a leading byte-order mark), and,
// with a small seq_len and batch taken from the first two bytes, every batch of its split holds
// vocabulary ids whose targets are the inputs one step on, each batch resuming where the last ended.
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "models/char_corpus.hpp"

namespace fs = std::filesystem;
using namespace shapetune;

namespace {

void check_batches(const TbpttBatches& batches, std::int64_t vocabulary) {
  const int T = batches.seq_len(), B = batches.batch();
  std::vector<std::int32_t> x(static_cast<std::size_t>(T) * B), y(x.size()), last_y;
  for (std::int64_t i = 0; i < batches.batches(); ++i) {
    batches.fill(i, x, y);
    for (std::size_t k = 0; k < x.size(); ++k)
      if (x[k] < 0 || x[k] >= vocabulary || y[k] < 0 || y[k] >= vocabulary) std::abort();
    for (std::size_t k = 0; k + B < x.size(); ++k)
      if (y[k] != x[k + B]) std::abort();
    if (!last_y.empty())
      for (int b = 0; b < B; ++b)
        if (x[b] != last_y[static_cast<std::size_t>(T - 1) * B + b]) std::abort();
    last_y = y;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const fs::path file =
      fs::temp_directory_path() / ("shapetune-fuzz-char-corpus-" + std::to_string(getpid()));
  std::ofstream(file, std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  CharCorpus corpus;
  try {
    corpus = load_char_corpus(file.string());
  } catch (const DataError&) {
    return 0;
  }
  const std::vector<char32_t>& symbols = corpus.vocabulary.symbols;
  if (symbols.empty() || corpus.vocabulary.size() > kMaxCharVocabulary || corpus.tokens.empty()) std::abort();
  if (std::adjacent_find(symbols.begin(), symbols.end(), [](char32_t a, char32_t b) { return a >= b; }) !=
      symbols.end())
    std::abort();
  for (const char32_t c : symbols)
    if (c == 0 || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) std::abort();
  const std::string text = corpus.vocabulary.decode(corpus.tokens);  // throws (and so crashes) on a bad id
  const bool gzipped = size >= 2 && data[0] == 0x1F && data[1] == 0x8B;
  if (!gzipped) {
    const std::size_t bom = size >= 3 && data[0] == 0xEF && data[1] == 0xBB && data[2] == 0xBF ? 3 : 0;
    if (text != std::string(reinterpret_cast<const char*>(data) + bom, size - bom)) std::abort();
  }
  const CharSplitOptions options{.seq_len = 1 + data[0] % 8, .batch = 1 + (size > 1 ? data[1] : 0) % 4,
                                 .validation_fraction = 0.1};
  try {
    const CharCorpusSplit split = split_char_corpus(corpus, options);
    if (static_cast<std::int64_t>(corpus.tokens.size()) < min_char_corpus_length(options)) std::abort();
    check_batches(split.train, corpus.vocabulary.size());
    check_batches(split.validation, corpus.vocabulary.size());
  } catch (const DataError&) {
    if (static_cast<std::int64_t>(corpus.tokens.size()) >= min_char_corpus_length(options)) std::abort();
  }
  return 0;
}
