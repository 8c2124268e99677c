// The character-level language models' data path (models/char_corpus): reading and rejecting
// text files, UTF-8, the vocabulary, the train/validation split and the TBPTT batch layout.
#include "models/char_corpus.hpp"

#include <gtest/gtest.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "support/test_support.hpp"

namespace shapetune {
namespace {

using test_support::TempDir;

std::string write_file(const TempDir& dir, const std::string& name, const std::string& bytes) {
  const std::string path = dir.file(name);
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return path;
}

std::string write_gzip(const TempDir& dir, const std::string& name, const std::string& bytes) {
  const std::string path = dir.file(name);
  gzFile file = gzopen(path.c_str(), "wb");
  EXPECT_NE(file, nullptr);
  EXPECT_EQ(gzwrite(file, bytes.data(), static_cast<unsigned>(bytes.size())), static_cast<int>(bytes.size()));
  gzclose(file);
  return path;
}

// The DataError message of loading `path`, or a note that none came.
std::string load_error(const std::string& path) {
  try {
    load_char_corpus(path);
  } catch (const DataError& e) {
    return e.what();
  }
  return "(no DataError)";
}

std::string bytes_error(const std::string& bytes) {
  try {
    char_corpus_from_bytes(bytes, "text.txt");
  } catch (const DataError& e) {
    return e.what();
  }
  return "(no DataError)";
}

// `count` distinct CJK characters in order: their ids are their positions.
std::string distinct_characters(int count) {
  std::string text;
  for (int k = 0; k < count; ++k) append_utf8(static_cast<char32_t>(0x4E00 + k), text);
  return text;
}

std::vector<std::int32_t> iota_tokens(std::int64_t n) {
  std::vector<std::int32_t> tokens(static_cast<std::size_t>(n));
  std::iota(tokens.begin(), tokens.end(), 0);
  return tokens;
}

// ---- reading ------------------------------------------------------------------------------------

TEST(CharCorpusLoad, MissingFileDirectoryAndEmptyFileAreNamed) {
  TempDir dir;
  const std::string missing = dir.file("absent.txt");
  EXPECT_EQ(load_error(missing), missing + ": no such file");
  EXPECT_EQ(load_error(dir.path().string()), dir.path().string() + ": a directory, not a text file");
  const std::string empty = write_file(dir, "empty.txt", "");
  EXPECT_EQ(load_error(empty), empty + ": empty: no text to learn from");
  const std::string empty_gz = write_gzip(dir, "empty.txt.gz", "");
  EXPECT_CONTAINS(load_error(empty_gz), "empty: no text to learn from");
}

TEST(CharCorpusLoad, TheDefaultCorpusWhenMissingNamesItsPackage) {
  if (std::filesystem::exists(kDefaultCharCorpus)) GTEST_SKIP() << kDefaultCharCorpus << " is installed here";
  const std::string message = load_error(kDefaultCharCorpus);
  EXPECT_CONTAINS(message, "jargon-text");
  EXPECT_CONTAINS(message, "--data FILE");
}

TEST(CharCorpusLoad, NulByteIsBinaryWithOffsetAndLine) {
  TempDir dir;
  const std::string path = write_file(dir, "nul.bin", std::string("ab\ncd\0e", 7));
  EXPECT_EQ(load_error(path), path + ": binary, not text: a NUL byte at byte offset 5 (line 2)");
}

TEST(CharCorpusLoad, PlainAndGzippedFilesReadTheSame) {
  TempDir dir;
  const std::string text = "Hacker's dictionary \xE2\x80\x9C" "quoted\xE2\x80\x9D\n";
  const CharCorpus plain = load_char_corpus(write_file(dir, "t.txt", text));
  const CharCorpus gzipped = load_char_corpus(write_gzip(dir, "t.txt.gz", text));
  EXPECT_EQ(plain.tokens, gzipped.tokens);
  EXPECT_EQ(plain.vocabulary.symbols, gzipped.vocabulary.symbols);
  EXPECT_EQ(plain.vocabulary.decode(plain.tokens), text);
  EXPECT_EQ(gzipped.source, dir.file("t.txt.gz"));
}

TEST(CharCorpusLoad, AFileOfManyReadPiecesReadsWhole) {
  TempDir dir;
  std::string text;
  while (text.size() < 300'000) text += "\xC3\xA9t\xC3\xA9 " + std::to_string(text.size()) + "\n";
  EXPECT_EQ(load_char_corpus(write_file(dir, "long.txt", text)).vocabulary.decode(
                load_char_corpus(write_gzip(dir, "long.txt.gz", text)).tokens),
            text);
}

TEST(CharCorpusLoad, ErrorsInAGzipFileCountUncompressedBytes) {
  TempDir dir;
  const std::string path = write_gzip(dir, "bad.txt.gz", "line one\nline \xFF");
  EXPECT_CONTAINS(load_error(path), path + " (uncompressed): not UTF-8 text (binary?) at byte offset 14 (line 2)");
}

TEST(CharCorpusLoad, TruncatedGzipIsAnError) {
  TempDir dir;
  std::string text;
  for (int i = 0; i < 2000; ++i) text += "line " + std::to_string(i) + " of some text\n";
  const std::string whole = test_support::read_file(write_gzip(dir, "whole.gz", text));
  ASSERT_GT(whole.size(), 100u);
  const std::string path = write_file(dir, "cut.gz", whole.substr(0, whole.size() / 2));
  EXPECT_CONTAINS(load_error(path), path + ": cannot read (a damaged or truncated gzip file)");
}

// ---- UTF-8 --------------------------------------------------------------------------------------

TEST(CharCorpusUtf8, DecodesMultiByteCharactersAndEncodesThemBack) {
  // 1, 2, 3 and 4 bytes: 'a', e-acute, the euro sign, an emoji; then the largest code point.
  const std::string text = "a\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80\xF4\x8F\xBF\xBF";
  const std::vector<char32_t> expected = {U'a', U'\u00E9', U'\u20AC', U'\U0001F600', U'\U0010FFFF'};
  EXPECT_EQ(decode_utf8(text, "t"), expected);
  std::string back;
  for (const char32_t c : expected) append_utf8(c, back);
  EXPECT_EQ(back, text);
}

struct BadUtf8 {
  std::string bytes;
  std::string place;   // "byte offset N (line L)"
  std::string reason;  // part of the message after it
};

TEST(CharCorpusUtf8, InvalidSequencesGiveTheFirstBadByte) {
  const std::vector<BadUtf8> cases = {
      {"ab\xFF", "byte offset 2 (line 1)", "byte 0xFF cannot start a character (past U+10FFFF)"},
      {"a\x80", "byte offset 1 (line 1)", "byte 0x80 continues a character that never began"},
      {"\xC3\x41xyz", "byte offset 1 (line 1)", "byte 0x41 does not continue the character that byte 0xC3 at offset 0 starts"},
      {"\xC0\xAF", "byte offset 0 (line 1)", "byte 0xC0 cannot start a character (an overlong form)"},
      {"\n\xE0\x80\x80", "byte offset 2 (line 2)", "byte 0x80 does not continue the character that byte 0xE0 at offset 1 starts (an overlong form)"},
      {"\xED\xA0\x80", "byte offset 1 (line 1)", "(a UTF-16 surrogate)"},
      {"\xF0\x80\x80\x80", "byte offset 1 (line 1)", "(an overlong form)"},
      {"\xF4\x90\x80\x80", "byte offset 1 (line 1)", "(past U+10FFFF)"},
      {"\xF5\x80\x80\x80", "byte offset 0 (line 1)", "byte 0xF5 cannot start a character (past U+10FFFF)"},
      {"\xE2\x82\xE2\x82\xAC", "byte offset 2 (line 1)", "byte 0xE2 does not continue the character that byte 0xE2 at offset 0 starts"},
      {"x\n\n\xE2\x82", "byte offset 3 (line 3)", "the text ends inside the 3-byte character that byte 0xE2 starts"},
      {"\xF0\x9F\x98", "byte offset 0 (line 1)", "the text ends inside the 4-byte character that byte 0xF0 starts"},
  };
  for (const BadUtf8& c : cases) {
    const std::string message = bytes_error(c.bytes);
    EXPECT_CONTAINS(message, "text.txt: not UTF-8 text (binary?) at " + c.place + ": ");
    EXPECT_CONTAINS(message, c.reason);
  }
}

TEST(CharCorpusUtf8, ALeadingByteOrderMarkIsNoCharacter) {
  const CharCorpus corpus = char_corpus_from_bytes("\xEF\xBB\xBFhi", "t");
  EXPECT_EQ(corpus.vocabulary.decode(corpus.tokens), "hi");
  EXPECT_EQ(bytes_error("\xEF\xBB\xBF"), "text.txt: no text, only a byte-order mark");
  // Anywhere else U+FEFF is a character of the text (a zero-width no-break space).
  const CharCorpus inner = char_corpus_from_bytes("h\xEF\xBB\xBFi", "t");
  EXPECT_EQ(inner.tokens.size(), 3u);
}

// ---- vocabulary ---------------------------------------------------------------------------------

TEST(CharCorpusVocabulary, SortedDistinctCharactersWhateverTheirOrder) {
  const CharCorpus one = char_corpus_from_bytes("cab\xC3\xA9" "ba", "one");
  const CharCorpus two = char_corpus_from_bytes("\xC3\xA9" "abcc", "two");
  const std::vector<char32_t> expected = {U'a', U'b', U'c', U'\u00E9'};
  EXPECT_EQ(one.vocabulary.symbols, expected);
  EXPECT_EQ(two.vocabulary.symbols, expected);
  EXPECT_EQ(one.tokens, (std::vector<std::int32_t>{2, 0, 1, 3, 1, 0}));
  EXPECT_EQ(one.vocabulary.id(U'\u00E9'), 3);
  EXPECT_EQ(one.vocabulary.id(U'z'), -1);
}

TEST(CharCorpusVocabulary, DecodeRoundTripsAndRefusesUnknownIds) {
  const std::string text = "Line one\r\n\tgr\xC3\xBC\xC3\x9F" "e \xE2\x80\x94 \xF0\x9F\x98\x80\n";
  const CharCorpus corpus = char_corpus_from_bytes(text, "t");
  EXPECT_EQ(corpus.vocabulary.decode(corpus.tokens), text);
  const std::vector<std::int32_t> past = {0, static_cast<std::int32_t>(corpus.vocabulary.size())};
  EXPECT_THROW(corpus.vocabulary.decode(past), std::out_of_range);
  const std::vector<std::int32_t> negative = {-1};
  EXPECT_THROW(corpus.vocabulary.decode(negative), std::out_of_range);
}

TEST(CharCorpusVocabulary, MoreThanTheCapIsNotText) {
  EXPECT_EQ(char_corpus_from_bytes(distinct_characters(kMaxCharVocabulary), "t").vocabulary.size(),
            kMaxCharVocabulary);
  EXPECT_EQ(bytes_error(distinct_characters(kMaxCharVocabulary + 1)),
            "text.txt: 4097 distinct characters, more than 4096: probably not text a character model can learn");
}

// ---- split --------------------------------------------------------------------------------------

TEST(CharCorpusSplit, FirstNinetyPercentTrainLastTenValidate) {
  const CharCorpus corpus = char_corpus_from_bytes(distinct_characters(1000), "t");
  ASSERT_EQ(corpus.tokens, iota_tokens(1000));  // ids are positions
  const CharCorpusSplit split = split_char_corpus(corpus, {.seq_len = 4, .batch = 2, .validation_fraction = 0.1});
  EXPECT_EQ(split.train.stream_length(), 450);       // 900 tokens / 2 streams
  EXPECT_EQ(split.train.batches(), (450 - 1) / 4);
  EXPECT_EQ(split.validation.stream_length(), 50);   // 100 tokens / 2 streams
  EXPECT_EQ(split.validation.batches(), (50 - 1) / 4);
  std::vector<std::int32_t> x(8), y(8);
  split.train.fill(0, x, y);
  EXPECT_EQ(x[0], 0);
  EXPECT_EQ(x[1], 450);  // stream 1 begins halfway through the training text
  split.validation.fill(0, x, y);
  EXPECT_EQ(x[0], 900);
  EXPECT_EQ(x[1], 950);
  split.validation.fill(split.validation.batches() - 1, x, y);
  EXPECT_EQ(y[7], 950 + 12 * 4);  // the last target in the last full batch, stream 1
}

TEST(CharCorpusSplit, OtherFractionsRoundToTheNearestToken) {
  const CharCorpus corpus = char_corpus_from_bytes(distinct_characters(1001), "t");
  const CharCorpusSplit split = split_char_corpus(corpus, {.seq_len = 2, .batch = 1, .validation_fraction = 0.25});
  EXPECT_EQ(split.train.stream_length(), 751);  // 750.75
  EXPECT_EQ(split.validation.stream_length(), 250);
}

TEST(CharCorpusSplit, TooShortSaysHowLongTheFileMustBe) {
  const CharSplitOptions o{.seq_len = 128, .batch = 64, .validation_fraction = 0.1};
  EXPECT_EQ(min_char_corpus_length(o), 82556);  // its last 10%, 8255.6 rounded, holds 64 x 129 = 8256
  const CharCorpus corpus = char_corpus_from_bytes(std::string(82555, 'a'), "short.txt");
  try {
    split_char_corpus(corpus, o);
    FAIL() << "no DataError";
  } catch (const DataError& e) {
    EXPECT_EQ(std::string(e.what()),
              "short.txt: 82555 characters are too few for --seq-len 128 and --batch 64: training (the first 90%) and "
              "validation (the last 10%) each need 64 x (128 + 1) = 8256, so the file must hold at least 82556 "
              "characters; use a longer file or a smaller --seq-len or --batch");
  }
  EXPECT_NO_THROW(split_char_corpus(char_corpus_from_bytes(std::string(82556, 'a'), "t"), o));
}

TEST(CharCorpusSplit, TheMinimumLengthIsExactlyTheBoundary) {
  for (const double fraction : {0.1, 0.25, 0.5, 0.9, 0.03}) {
    for (const int seq_len : {1, 3, 7}) {
      for (const int batch : {1, 2, 5}) {
        const CharSplitOptions o{.seq_len = seq_len, .batch = batch, .validation_fraction = fraction};
        const std::int64_t n = min_char_corpus_length(o);
        SCOPED_TRACE("fraction " + std::to_string(fraction) + " seq_len " + std::to_string(seq_len) + " batch " +
                     std::to_string(batch) + ": " + std::to_string(n));
        EXPECT_NO_THROW(split_char_corpus(char_corpus_from_bytes(std::string(static_cast<std::size_t>(n), 'a'), "t"), o));
        EXPECT_THROW(split_char_corpus(char_corpus_from_bytes(std::string(static_cast<std::size_t>(n - 1), 'a'), "t"), o),
                     DataError);
      }
    }
  }
}

TEST(CharCorpusSplit, RefusesImpossibleOptions) {
  const CharCorpus corpus = char_corpus_from_bytes(std::string(1000, 'a'), "t");
  EXPECT_THROW(split_char_corpus(corpus, {.seq_len = 0, .batch = 1}), std::invalid_argument);
  EXPECT_THROW(split_char_corpus(corpus, {.seq_len = 1, .batch = 0}), std::invalid_argument);
  EXPECT_THROW(split_char_corpus(corpus, {.seq_len = 1, .batch = 1, .validation_fraction = 0}), std::invalid_argument);
  EXPECT_THROW(split_char_corpus(corpus, {.seq_len = 1, .batch = 1, .validation_fraction = 1}), std::invalid_argument);
}

// ---- TBPTT batches ------------------------------------------------------------------------------

TEST(CharCorpusBatches, LayoutIsTimeMajorWithTargetsShiftedByOne) {
  constexpr int T = 3, B = 4;
  // 4 streams of 11 tokens (46 / 4, two dropped): three batches of 3 steps, the 10th and 11th
  // tokens of each stream left over (the 10th is a last target, not an input).
  const TbpttBatches batches(iota_tokens(46), T, B);
  ASSERT_EQ(batches.stream_length(), 11);
  ASSERT_EQ(batches.batches(), 3);
  std::vector<std::int32_t> x(T * B), y(T * B), next_x(T * B), next_y(T * B);
  for (std::int64_t i = 0; i < batches.batches(); ++i) {
    batches.fill(i, x, y);
    for (int t = 0; t < T; ++t)
      for (int b = 0; b < B; ++b) {
        SCOPED_TRACE("batch " + std::to_string(i) + " t " + std::to_string(t) + " b " + std::to_string(b));
        // Token k is id k: stream b is the b-th contiguous run of 11, batch i its steps i*T...
        EXPECT_EQ(x[t * B + b], b * 11 + i * T + t);
        EXPECT_EQ(y[t * B + b], x[t * B + b] + 1);
      }
    if (i + 1 < batches.batches()) {
      batches.fill(i + 1, next_x, next_y);
      // What the state carries over: each row resumes right after its last input.
      for (int b = 0; b < B; ++b) EXPECT_EQ(next_x[b], y[(T - 1) * B + b]);
    }
  }
}

TEST(CharCorpusBatches, ExactlyOneBatchAndOneTokenShort) {
  constexpr int T = 5, B = 3;
  EXPECT_EQ(TbpttBatches::min_tokens(T, B), 18);
  const TbpttBatches one(iota_tokens(18), T, B);
  EXPECT_EQ(one.batches(), 1);
  std::vector<std::int32_t> x(T * B), y(T * B);
  one.fill(0, x, y);
  EXPECT_EQ(y[(T - 1) * B + (B - 1)], 17);  // the very last token is the last target
  try {
    TbpttBatches(iota_tokens(17), T, B, "short (training)");
    FAIL() << "no DataError";
  } catch (const DataError& e) {
    EXPECT_EQ(std::string(e.what()), "short (training): 17 tokens, fewer than one batch needs: 3 x (5 + 1) = 18");
  }
  // Tokens short of another stream or another sequence add no batch.
  EXPECT_EQ(TbpttBatches(iota_tokens(18 + B - 1), T, B).batches(), 1);
  EXPECT_EQ(TbpttBatches(iota_tokens(B * (2 * T)), T, B).batches(), 1);
  EXPECT_EQ(TbpttBatches(iota_tokens(B * (2 * T + 1)), T, B).batches(), 2);
}

TEST(CharCorpusBatches, FillRefusesABatchOutOfRangeOrWrongBuffers) {
  const TbpttBatches batches(iota_tokens(40), 3, 2);
  std::vector<std::int32_t> x(6), y(6), small(5);
  EXPECT_THROW(batches.fill(-1, x, y), std::out_of_range);
  EXPECT_THROW(batches.fill(batches.batches(), x, y), std::out_of_range);
  EXPECT_THROW(batches.fill(0, small, y), std::invalid_argument);
  EXPECT_THROW(TbpttBatches(iota_tokens(40), 0, 2), std::invalid_argument);
}

// ---- the default corpus -------------------------------------------------------------------------

TEST(CharCorpusDefault, TheJargonFileLoadsAndSplits) {
  if (!std::filesystem::exists(kDefaultCharCorpus))
    GTEST_SKIP() << kDefaultCharCorpus << " not installed (Debian's jargon-text package)";
  const CharCorpus corpus = load_char_corpus(kDefaultCharCorpus);
  EXPECT_GT(corpus.tokens.size(), 1'000'000u);
  EXPECT_LT(corpus.vocabulary.size(), 300);
  EXPECT_GE(corpus.vocabulary.id(U'e'), 0);
  const CharCorpusSplit split = split_char_corpus(corpus, {});
  EXPECT_GT(split.train.batches(), 100);
  EXPECT_GT(split.validation.batches(), 10);
  // The text decodes back to what zlib reads from the file.
  gzFile file = gzopen(kDefaultCharCorpus, "rb");
  ASSERT_NE(file, nullptr);
  std::string head(4096, '\0');
  head.resize(static_cast<std::size_t>(gzread(file, head.data(), static_cast<unsigned>(head.size()))));
  gzclose(file);
  const std::string decoded = corpus.vocabulary.decode(std::span(corpus.tokens).first(2000));
  EXPECT_EQ(head.substr(0, decoded.size()), decoded);
}

}  // namespace
}  // namespace shapetune
