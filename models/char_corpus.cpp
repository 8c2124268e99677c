#include "models/char_corpus.hpp"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <stdexcept>

namespace shapetune {
namespace {

struct GzCloser {
  void operator()(gzFile_s* f) const { gzclose(f); }
};

std::string hex_byte(unsigned char b) {
  char text[8];
  std::snprintf(text, sizeof text, "0x%02X", static_cast<unsigned>(b));
  return text;
}

// Where byte `offset` is, for a person to find it in an editor.
std::string place(std::string_view bytes, std::size_t offset) {
  const auto line = 1 + std::count(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(offset), '\n');
  return "byte offset " + std::to_string(offset) + " (line " + std::to_string(line) + ")";
}

std::string percent(double fraction) {
  char text[32];
  std::snprintf(text, sizeof text, "%g%%", 100 * fraction);
  return text;
}

// Rounded to the nearest token, so that 90% of 1000 is 900 whatever the binary fraction does.
std::int64_t train_length(std::int64_t tokens, double validation_fraction) {
  return std::llround(static_cast<double>(tokens) * (1.0 - validation_fraction));
}

void check_split_options(const CharSplitOptions& o) {
  if (o.seq_len < 1 || o.batch < 1)
    throw std::invalid_argument("seq_len and batch must be >= 1 (got " + std::to_string(o.seq_len) + " and " +
                                std::to_string(o.batch) + ")");
  if (!(o.validation_fraction > 0 && o.validation_fraction < 1))
    throw std::invalid_argument("the validation fraction must lie strictly between 0 and 1 (got " +
                                std::to_string(o.validation_fraction) + ")");
}

bool splits_fit(std::int64_t tokens, const CharSplitOptions& o) {
  const std::int64_t need = TbpttBatches::min_tokens(o.seq_len, o.batch);
  const std::int64_t train = train_length(tokens, o.validation_fraction);
  return train >= need && tokens - train >= need;
}

}  // namespace

void append_utf8(char32_t c, std::string& out) {
  const auto u = static_cast<std::uint32_t>(c);
  if (u < 0x80) {
    out += static_cast<char>(u);
  } else if (u < 0x800) {
    out += static_cast<char>(0xC0 | (u >> 6));
    out += static_cast<char>(0x80 | (u & 0x3F));
  } else if (u < 0x10000) {
    out += static_cast<char>(0xE0 | (u >> 12));
    out += static_cast<char>(0x80 | ((u >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (u & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (u >> 18));
    out += static_cast<char>(0x80 | ((u >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((u >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (u & 0x3F));
  }
}

std::vector<char32_t> decode_utf8(std::string_view bytes, const std::string& source) {
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(bytes[i]); };
  const auto not_utf8 = [&](std::size_t offset, const std::string& why) {
    return DataError(source + ": not UTF-8 text (binary?) at " + place(bytes, offset) + ": " + why);
  };
  std::vector<char32_t> out;
  out.reserve(bytes.size());
  std::size_t i = 0;
  while (i < bytes.size()) {
    const unsigned char lead = byte(i);
    if (lead == 0) throw DataError(source + ": binary, not text: a NUL byte at " + place(bytes, i));
    if (lead < 0x80) {
      out.push_back(lead);
      ++i;
      continue;
    }
    int length = 0;
    std::uint32_t value = 0;
    // The range the second byte must lie in: narrower than 0x80..0xBF where the lead alone would
    // allow an overlong form, a UTF-16 surrogate or a value past U+10FFFF.
    unsigned char low = 0x80, high = 0xBF;
    const char* narrowed = "";
    if (lead >= 0xC2 && lead <= 0xDF) {
      length = 2, value = lead & 0x1F;
    } else if (lead >= 0xE0 && lead <= 0xEF) {
      length = 3, value = lead & 0x0F;
      if (lead == 0xE0) low = 0xA0, narrowed = " (an overlong form)";
      if (lead == 0xED) high = 0x9F, narrowed = " (a UTF-16 surrogate)";
    } else if (lead >= 0xF0 && lead <= 0xF4) {
      length = 4, value = lead & 0x07;
      if (lead == 0xF0) low = 0x90, narrowed = " (an overlong form)";
      if (lead == 0xF4) high = 0x8F, narrowed = " (past U+10FFFF)";
    } else if (lead >= 0x80 && lead <= 0xBF) {
      throw not_utf8(i, "byte " + hex_byte(lead) + " continues a character that never began");
    } else {
      throw not_utf8(i, "byte " + hex_byte(lead) + " cannot start a character" +
                            (lead < 0xC2 ? " (an overlong form)" : " (past U+10FFFF)"));
    }
    if (i + static_cast<std::size_t>(length) > bytes.size())
      throw not_utf8(i, "the text ends inside the " + std::to_string(length) + "-byte character that byte " +
                            hex_byte(lead) + " starts");
    for (int k = 1; k < length; ++k) {
      const unsigned char next = byte(i + static_cast<std::size_t>(k));
      const bool fits = k == 1 ? next >= low && next <= high : next >= 0x80 && next <= 0xBF;
      if (!fits)
        throw not_utf8(i + static_cast<std::size_t>(k),
                       "byte " + hex_byte(next) + " does not continue the character that byte " + hex_byte(lead) +
                           " at offset " + std::to_string(i) + " starts" +
                           (k == 1 && next >= 0x80 && next <= 0xBF ? narrowed : ""));
      value = (value << 6) | (next & 0x3F);
    }
    out.push_back(static_cast<char32_t>(value));
    i += static_cast<std::size_t>(length);
  }
  return out;
}

std::int32_t CharVocabulary::id(char32_t c) const {
  const auto it = std::lower_bound(symbols.begin(), symbols.end(), c);
  return it != symbols.end() && *it == c ? static_cast<std::int32_t>(it - symbols.begin()) : -1;
}

std::string CharVocabulary::decode(std::span<const std::int32_t> ids) const {
  std::string out;
  out.reserve(ids.size());
  for (const std::int32_t id : ids) {
    if (id < 0 || id >= size())
      throw std::out_of_range("character id " + std::to_string(id) + " outside a vocabulary of " +
                              std::to_string(size()));
    append_utf8(symbols[static_cast<std::size_t>(id)], out);
  }
  return out;
}

CharCorpus char_corpus_from_bytes(std::string_view bytes, const std::string& source) {
  if (bytes.empty()) throw DataError(source + ": empty: no text to learn from");
  std::vector<char32_t> text = decode_utf8(bytes, source);
  // A byte-order mark says how the file is encoded, it is not part of the text.
  if (text.front() == U'\uFEFF') text.erase(text.begin());
  if (text.empty()) throw DataError(source + ": no text, only a byte-order mark");

  CharCorpus corpus;
  corpus.source = source;
  std::vector<char32_t>& symbols = corpus.vocabulary.symbols;
  symbols = text;
  std::sort(symbols.begin(), symbols.end());
  symbols.erase(std::unique(symbols.begin(), symbols.end()), symbols.end());
  if (corpus.vocabulary.size() > kMaxCharVocabulary)
    throw DataError(source + ": " + std::to_string(symbols.size()) + " distinct characters, more than " +
                    std::to_string(kMaxCharVocabulary) + ": probably not text a character model can learn");
  corpus.tokens.reserve(text.size());
  for (const char32_t c : text) corpus.tokens.push_back(corpus.vocabulary.id(c));
  return corpus;
}

CharCorpus load_char_corpus(const std::string& path) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (!std::filesystem::exists(status)) {
    std::string message = path + ": no such file";
    if (path == kDefaultCharCorpus)
      message += "; install Debian's jargon-text package (the Jargon File, the default corpus), or pass --data FILE";
    throw DataError(message);
  }
  if (std::filesystem::is_directory(status)) throw DataError(path + ": a directory, not a text file");
  errno = 0;
  std::unique_ptr<gzFile_s, GzCloser> file(gzopen(path.c_str(), "rb"));
  if (!file) throw DataError(path + ": cannot open: " + (errno ? std::strerror(errno) : "out of memory"));

  // Pieces of 64 KiB doubling to 16 MiB: a short file costs a short buffer.
  std::string bytes;
  for (std::size_t piece = std::size_t{1} << 16;; piece = std::min(2 * piece, std::size_t{1} << 24)) {
    const std::size_t done = bytes.size();
    bytes.resize(done + piece);
    const int got = gzread(file.get(), bytes.data() + done, static_cast<unsigned>(piece));
    int code = Z_OK;
    const char* message = gzerror(file.get(), &code);
    if (got < 0 || (code != Z_OK && code != Z_STREAM_END))
      throw DataError(path + ": cannot read" + (gzdirect(file.get()) ? "" : " (a damaged or truncated gzip file)") +
                      ": " + (code == Z_ERRNO ? std::strerror(errno) : message ? message : "zlib error"));
    bytes.resize(done + static_cast<std::size_t>(got));
    if (got == 0) break;
    if (static_cast<std::int64_t>(bytes.size()) > kMaxCharCorpusBytes)
      throw DataError(path + ": more than " + std::to_string(kMaxCharCorpusBytes >> 20) +
                      " MiB of text, larger than a character model's corpus needs to be");
  }
  // Offsets in errors count bytes of the text, which for a gzip file are not those on disk.
  const std::string source = gzdirect(file.get()) ? path : path + " (uncompressed)";
  CharCorpus corpus = char_corpus_from_bytes(bytes, source);
  corpus.source = path;
  return corpus;
}

TbpttBatches::TbpttBatches(std::vector<std::int32_t> tokens, int seq_len, int batch, const std::string& what)
    : tokens_(std::move(tokens)), seq_len_(seq_len), batch_(batch) {
  if (seq_len < 1 || batch < 1)
    throw std::invalid_argument("seq_len and batch must be >= 1 (got " + std::to_string(seq_len) + " and " +
                                std::to_string(batch) + ")");
  const std::int64_t need = min_tokens(seq_len, batch);
  if (static_cast<std::int64_t>(tokens_.size()) < need)
    throw DataError(what + ": " + std::to_string(tokens_.size()) + " tokens, fewer than one batch needs: " +
                    std::to_string(batch) + " x (" + std::to_string(seq_len) + " + 1) = " + std::to_string(need));
  stream_length_ = static_cast<std::int64_t>(tokens_.size()) / batch;
}

std::int64_t TbpttBatches::min_tokens(int seq_len, int batch) {
  return static_cast<std::int64_t>(batch) * (static_cast<std::int64_t>(seq_len) + 1);
}

void TbpttBatches::fill(std::int64_t i, std::span<std::int32_t> inputs, std::span<std::int32_t> targets) const {
  if (i < 0 || i >= batches())
    throw std::out_of_range("batch " + std::to_string(i) + " outside 0.." + std::to_string(batches() - 1));
  const auto size = static_cast<std::size_t>(seq_len_) * static_cast<std::size_t>(batch_);
  if (inputs.size() != size || targets.size() != size)
    throw std::invalid_argument("a batch holds seq_len x batch = " + std::to_string(size) + " ids, the buffers " +
                                std::to_string(inputs.size()) + " and " + std::to_string(targets.size()));
  for (int b = 0; b < batch_; ++b) {
    const std::int32_t* stream = tokens_.data() + b * stream_length_ + i * seq_len_;
    for (int t = 0; t < seq_len_; ++t) {
      inputs[static_cast<std::size_t>(t) * batch_ + b] = stream[t];
      targets[static_cast<std::size_t>(t) * batch_ + b] = stream[t + 1];
    }
  }
}

std::int64_t min_char_corpus_length(const CharSplitOptions& o) {
  check_split_options(o);
  const std::int64_t need = TbpttBatches::min_tokens(o.seq_len, o.batch);
  const double smaller = std::min(o.validation_fraction, 1 - o.validation_fraction);
  // Rounding to the nearest token lets a split reach `need` at most one token early, so this
  // bound is at or below the answer and the walk up from it is short.
  std::int64_t length = std::max<std::int64_t>(2 * need, static_cast<std::int64_t>((need - 1) / smaller));
  while (!splits_fit(length, o)) ++length;
  return length;
}

CharCorpusSplit split_char_corpus(const CharCorpus& corpus, const CharSplitOptions& o) {
  check_split_options(o);
  const auto tokens = static_cast<std::int64_t>(corpus.tokens.size());
  if (!splits_fit(tokens, o)) {
    const std::int64_t need = TbpttBatches::min_tokens(o.seq_len, o.batch);
    throw DataError(corpus.source + ": " + std::to_string(tokens) + " characters are too few for --seq-len " +
                    std::to_string(o.seq_len) + " and --batch " + std::to_string(o.batch) + ": training (the first " +
                    percent(1 - o.validation_fraction) + ") and validation (the last " +
                    percent(o.validation_fraction) + ") each need " + std::to_string(o.batch) + " x (" +
                    std::to_string(o.seq_len) + " + 1) = " + std::to_string(need) +
                    ", so the file must hold at least " + std::to_string(min_char_corpus_length(o)) +
                    " characters; use a longer file or a smaller --seq-len or --batch");
  }
  const auto cut = corpus.tokens.begin() + train_length(tokens, o.validation_fraction);
  return {TbpttBatches({corpus.tokens.begin(), cut}, o.seq_len, o.batch, corpus.source + " (training)"),
          TbpttBatches({cut, corpus.tokens.end()}, o.seq_len, o.batch, corpus.source + " (validation)")};
}

}  // namespace shapetune
