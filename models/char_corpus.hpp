// The data of the character-level language models (`shapetune train lstm|gru`): a UTF-8 text
// file, gzipped or not, read as Unicode code points, mapped to ids through a sorted vocabulary,
// split into training and validation, and cut into batches for truncated backpropagation through
// time (TBPTT).
//
// Tokens are code points, not bytes: a byte model of UTF-8 text would spend steps and
// probability on partial characters and could sample invalid UTF-8; a code point is what a
// reader calls a character, and a text's distinct code points stay a small vocabulary.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "models/idx.hpp"  // DataError, shared by every data reader of the runners

namespace shapetune {

// The default corpus: the Jargon File (public domain, 1.6 million characters of English prose,
// UTF-8) as Debian's jargon-text package installs it.
inline constexpr const char* kDefaultCharCorpus = "/usr/share/doc/jargon-text/jargon.txt.gz";
// More distinct characters than this is not text a character model should learn (a table of one
// language's text stays in the low hundreds; CJK prose may need a few thousand).
inline constexpr std::int64_t kMaxCharVocabulary = 4096;
// A larger file is refused before it is all in memory (a gzip bomb included).
inline constexpr std::int64_t kMaxCharCorpusBytes = std::int64_t{1} << 30;

// The distinct characters of a corpus, sorted by code point; a character's id is its index, so
// the same set of characters always gets the same ids.
struct CharVocabulary {
  std::vector<char32_t> symbols;

  std::int64_t size() const { return static_cast<std::int64_t>(symbols.size()); }
  // The id of `c`, or -1 when the corpus never holds it.
  std::int32_t id(char32_t c) const;
  // The characters of `ids` as UTF-8 (what `--sample` prints). Throws std::out_of_range for an id
  // outside the vocabulary.
  std::string decode(std::span<const std::int32_t> ids) const;
};

struct CharCorpus {
  std::string source;                // the file (or the name given for text read from memory)
  CharVocabulary vocabulary;         // of the whole corpus, so validation holds no unknown character
  std::vector<std::int32_t> tokens;  // the text as ids, a byte-order mark at its start left out
};

// Reads `path` through zlib (a plain file reads the same) and builds the corpus. Throws DataError
// naming the file: missing, a directory, unreadable, larger than kMaxCharCorpusBytes, empty,
// binary (a NUL byte, or invalid UTF-8: the byte offset and line of the first bad byte), or more
// than kMaxCharVocabulary distinct characters. A missing default corpus names the package.
CharCorpus load_char_corpus(const std::string& path);
// The same from bytes in memory; `source` names them in errors.
CharCorpus char_corpus_from_bytes(std::string_view bytes, const std::string& source);

// Strict UTF-8 to code points: overlong forms, surrogates, values past U+10FFFF, stray or
// missing continuation bytes and NUL are DataError with the byte offset and line, naming `source`.
std::vector<char32_t> decode_utf8(std::string_view bytes, const std::string& source);
void append_utf8(char32_t c, std::string& out);

// One split's tokens cut into `batch` streams of equal length (stream b is the b-th contiguous
// piece; the last tokens.size() % batch tokens are dropped). Batch i holds, time-major [T, B]
// row-major as the recurrent primitives take x [T, N, D]:
//   inputs[t * B + b]  = stream_b[i * T + t]
//   targets[t * B + b] = stream_b[i * T + t + 1]     for t < T = seq_len
// so batch i + 1 continues every stream where batch i stopped: the hidden state of row b carries
// over. The tail of a stream shorter than a full sequence is dropped (a step has one shape).
class TbpttBatches {
 public:
  // Throws DataError when fewer than min_tokens(seq_len, batch) tokens are given (`what` names
  // them), std::invalid_argument when seq_len or batch is < 1.
  TbpttBatches(std::vector<std::int32_t> tokens, int seq_len, int batch, const std::string& what = "the tokens");

  // Tokens one batch needs: every stream seq_len inputs and one more target.
  static std::int64_t min_tokens(int seq_len, int batch);

  int seq_len() const { return seq_len_; }
  int batch() const { return batch_; }
  std::int64_t stream_length() const { return stream_length_; }
  std::int64_t batches() const { return (stream_length_ - 1) / seq_len_; }  // per epoch, >= 1
  // Fills batch `i` (0 <= i < batches()); both spans hold seq_len * batch ids.
  void fill(std::int64_t i, std::span<std::int32_t> inputs, std::span<std::int32_t> targets) const;

 private:
  std::vector<std::int32_t> tokens_;
  int seq_len_ = 0, batch_ = 0;
  std::int64_t stream_length_ = 0;
};

struct CharSplitOptions {
  int seq_len = 128;
  int batch = 64;
  double validation_fraction = 0.1;  // the last this-much of the text, contiguous
};

struct CharCorpusSplit {
  TbpttBatches train, validation;
};

// The first (1 - validation_fraction) of the tokens for training, the rest for validation. Throws
// DataError naming the corpus when either split is shorter than one batch, saying how many
// characters the file needs for this --seq-len and --batch; std::invalid_argument for a fraction
// outside (0, 1) or a seq_len or batch < 1.
CharCorpusSplit split_char_corpus(const CharCorpus&, const CharSplitOptions&);
// The fewest characters a corpus needs for that split to succeed.
std::int64_t min_char_corpus_length(const CharSplitOptions&);

}  // namespace shapetune
