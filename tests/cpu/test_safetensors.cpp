// The safetensors reader and writer (models/safetensors) and the JSON pull reader under it
// (core/json_reader). The reader is checked against a file the format's reference implementation
// wrote (its bytes are below, so no Python is needed here), and every refusal names the file and
// the problem.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>

#include "core/json_reader.hpp"
#include "models/safetensors.hpp"
#include "support/test_support.hpp"

namespace shapetune {
namespace {

std::vector<std::byte> bytes_of(std::string_view text) {
  std::vector<std::byte> out(text.size());
  std::memcpy(out.data(), text.data(), text.size());
  return out;
}

std::string le64(std::uint64_t n) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[static_cast<std::size_t>(i)] = static_cast<char>(n >> (8 * i));
  return out;
}

// A file of `header` (its length in front, as the format has it) followed by `data`.
std::string file_of(std::string_view header, std::string_view data = "") {
  return le64(header.size()) + std::string(header) + std::string(data);
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const DataError& e) {
    return e.what();
  }
  return "(no error)";
}

std::string parse_error(const std::string& file) {
  return error_of([&] { parse_safetensors(bytes_of(file), "t.safetensors"); });
}

void write_bytes(const std::string& path, std::string_view bytes) {
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string text_of(std::span<const std::byte> bytes) { return {reinterpret_cast<const char*>(bytes.data()), bytes.size()}; }

// What safetensors 0.8.0 (the reference implementation) wrote for
//   {"w": F32 [2, 2] = 1, -2, 0.5, 3;  "bé😀": BF16 [3] = 1, 2, -3;  "ids": I32 [] = -7;  "mask": BOOL [0, 4]}
// with metadata {"format": "pt", "note": "say \"hi\""}: tensors ordered by dtype alignment, the
// header padded with one space to 288 bytes.
const std::string kReferenceFile =
    std::string("\x20\x01\x00\x00\x00\x00\x00\x00", 8) +
    R"({"__metadata__":{"format":"pt","note":"say \"hi\""},)"
    R"("w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},)"
    R"("ids":{"dtype":"I32","shape":[],"data_offsets":[16,20]},)"
    "\"b\xc3\xa9\xf0\x9f\x98\x80\""
    R"(:{"dtype":"BF16","shape":[3],"data_offsets":[20,26]},)"
    R"("mask":{"dtype":"BOOL","shape":[0,4],"data_offsets":[26,26]}} )" +
    std::string("\x00\x00\x80\x3f\x00\x00\x00\xc0\x00\x00\x00\x3f\x00\x00\x40\x40"  // w
                "\xf9\xff\xff\xff"                                                  // ids
                "\x80\x3f\x00\x40\x40\xc0",                                         // bé😀
                26);

const std::string kEmojiName = "b\xc3\xa9\xf0\x9f\x98\x80";

TEST(Safetensors, ReadsTheReferenceImplementationsFile) {
  ASSERT_EQ(kReferenceFile.size(), 322u);
  const SafetensorsFile file = parse_safetensors(bytes_of(kReferenceFile), "reference.safetensors");
  ASSERT_EQ(file.tensors().size(), 4u);
  EXPECT_EQ(file.tensors()[0].name, "w");
  EXPECT_EQ(file.tensors()[2].name, kEmojiName);

  const SafetensorsTensor& w = file.tensor("w");
  EXPECT_EQ(w.dtype, "F32");
  EXPECT_EQ(w.shapetune_dtype(), DType::f32);
  EXPECT_EQ(w.shape, (std::vector<std::int64_t>{2, 2}));
  ASSERT_EQ(w.bytes.size(), 16u);
  float values[4];
  std::memcpy(values, w.bytes.data(), sizeof values);
  EXPECT_EQ(values[0], 1.0f);
  EXPECT_EQ(values[1], -2.0f);
  EXPECT_EQ(values[2], 0.5f);
  EXPECT_EQ(values[3], 3.0f);

  const SafetensorsTensor& ids = file.tensor("ids");
  EXPECT_EQ(ids.shapetune_dtype(), DType::i32);
  EXPECT_TRUE(ids.shape.empty());
  std::int32_t id = 0;
  std::memcpy(&id, ids.bytes.data(), sizeof id);
  EXPECT_EQ(id, -7);

  const SafetensorsTensor& emoji = file.tensor(kEmojiName);
  EXPECT_EQ(emoji.shapetune_dtype(), DType::bf16);
  EXPECT_EQ(text_of(emoji.bytes), std::string("\x80\x3f\x00\x40\x40\xc0", 6));

  const SafetensorsTensor& mask = file.tensor("mask");
  EXPECT_EQ(mask.dtype, "BOOL");
  EXPECT_EQ(mask.shapetune_dtype(), std::nullopt);
  EXPECT_EQ(mask.shape, (std::vector<std::int64_t>{0, 4}));
  EXPECT_TRUE(mask.bytes.empty());

  EXPECT_EQ(file.metadata(), (std::map<std::string, std::string>{{"format", "pt"}, {"note", "say \"hi\""}}));
}

TEST(Safetensors, WritesWhatTheReferenceImplementationWrites) {
  const SafetensorsFile reference = parse_safetensors(bytes_of(kReferenceFile), "reference.safetensors");
  test_support::TempDir dir;
  write_safetensors(dir.file("ours.safetensors"), reference.tensors(), reference.metadata());
  EXPECT_EQ(test_support::read_file(dir.path() / "ours.safetensors"), kReferenceFile);
}

TEST(Safetensors, RoundTripsTensorsAndMetadata) {
  test_support::TempDir dir;
  std::vector<std::byte> f32(2 * 3 * 4), bf16(5 * 2), i32(4 * 4), u8(3), f8(7), f4(2);
  for (auto* buffer : {&f32, &bf16, &i32, &u8, &f8, &f4})
    for (std::size_t i = 0; i < buffer->size(); ++i) (*buffer)[i] = static_cast<std::byte>(i * 37 + buffer->size());
  const std::vector<SafetensorsTensor> tensors = {
      {"layer.0.weight", "F32", {2, 3}, f32},     {"layer.0.bias", std::string(safetensors_dtype(DType::bf16)), {5}, bf16},
      {"tokens", "I32", {2, 2}, i32},             {"flags", "U8", {3}, u8},
      {"scales", "F8_E4M3", {7}, f8},             {"packed", "F4", {4}, f4},
      {"empty", "F16", {3, 0}, {}},               {"scalar\n\"odd\" name", "U8", {}, std::span(u8).first(1)}};
  const std::map<std::string, std::string> metadata = {{"format", "pt"}, {"step", "12"}, {"quote", "a \"b\"\\ \xc3\xa9"}};
  const std::string path = dir.file("out.safetensors");
  write_safetensors(path, tensors, metadata);

  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path()), std::filesystem::directory_iterator()), 1)
      << "the temporary file was left behind";
  const std::string raw = test_support::read_file(path);
  ASSERT_GE(raw.size(), 8u);
  std::uint64_t header_length = 0;
  for (int i = 7; i >= 0; --i) header_length = (header_length << 8) | static_cast<unsigned char>(raw[static_cast<std::size_t>(i)]);
  EXPECT_EQ(header_length % 8, 0u) << "the data section starts aligned";
  EXPECT_EQ(raw[8], '{');

  const SafetensorsFile file = read_safetensors(path);
  EXPECT_EQ(file.source(), path);
  ASSERT_EQ(file.tensors().size(), tensors.size());
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const SafetensorsTensor& got = file.tensors()[i];
    EXPECT_EQ(got.name, tensors[i].name);
    EXPECT_EQ(got.dtype, tensors[i].dtype);
    EXPECT_EQ(got.shape, tensors[i].shape);
    EXPECT_EQ(text_of(got.bytes), text_of(tensors[i].bytes)) << got.name;
  }
  EXPECT_EQ(file.tensor("layer.0.bias").shapetune_dtype(), DType::bf16);
  EXPECT_EQ(file.metadata(), metadata);

  // The object moves without its tensors' bytes moving away.
  SafetensorsFile moved = read_safetensors(path);
  const SafetensorsFile kept = std::move(moved);
  EXPECT_EQ(text_of(kept.tensor("flags").bytes), text_of(u8));

  // Without metadata, no "__metadata__"; overwriting replaces the file.
  write_safetensors(path, std::span(tensors).first(1));
  EXPECT_EQ(test_support::read_file(path).find("__metadata__"), std::string::npos);
  EXPECT_EQ(read_safetensors(path).tensors().size(), 1u);
}

TEST(Safetensors, WriterRefusesInconsistentTensorsAndLeavesTheOldFile) {
  test_support::TempDir dir;
  const std::string path = dir.file("out.safetensors");
  std::vector<std::byte> twelve(12);
  write_safetensors(path, std::vector<SafetensorsTensor>{{"a", "F32", {3}, twelve}});
  const std::string before = test_support::read_file(path);

  auto write_error = [&](std::vector<SafetensorsTensor> tensors) { return error_of([&] { write_safetensors(path, tensors); }); };
  std::string e = write_error({{"a", "F32", {2, 2}, twelve}});
  EXPECT_CONTAINS(e, path + ": tensor \"a\": F32 of shape [2, 2] is 16 bytes, but 12 were given");
  e = write_error({{"a", "F31", {3}, twelve}});
  EXPECT_CONTAINS(e, "unknown dtype \"F31\"; the format defines BOOL, U8");
  e = write_error({{"a", "F32", {3}, twelve}, {"a", "F32", {3}, twelve}});
  EXPECT_CONTAINS(e, "tensor \"a\": the name is given twice");
  e = write_error({{"__metadata__", "F32", {3}, twelve}});
  EXPECT_CONTAINS(e, "the format's key for metadata");
  e = write_error({{"a", "U8", {-12}, twelve}});
  EXPECT_CONTAINS(e, "has a negative extent");
  e = write_error({{"a", "F6_E2M3", {3}, {}}});
  EXPECT_CONTAINS(e, "3 elements of F6_E2M3 (6 bits each) are not a whole number of bytes");
  EXPECT_EQ(test_support::read_file(path), before);

  e = error_of([&] { write_safetensors(dir.file("no-such-dir/out.safetensors"), {}); });
  EXPECT_CONTAINS(e, "no-such-dir/out.safetensors: cannot write");
}

TEST(Safetensors, LookupNamesTheFileTheTensorAndWhatIsThere) {
  const SafetensorsFile file = parse_safetensors(bytes_of(kReferenceFile), "model.safetensors");
  EXPECT_EQ(file.find("nope"), nullptr);
  const std::string e = error_of([&] { file.tensor("decoder.weight"); });
  EXPECT_CONTAINS(e, "model.safetensors: no tensor \"decoder.weight\"; the file has \"w\", \"ids\", \"" + kEmojiName +
                         "\", \"mask\" (4 tensors)");
  const SafetensorsFile empty = parse_safetensors(bytes_of(file_of("{}")), "empty.safetensors");
  EXPECT_CONTAINS(error_of([&] { empty.tensor("x"); }), "empty.safetensors: no tensor \"x\"; the file has no tensors");
}

TEST(Safetensors, RefusesBadLengthFields) {
  EXPECT_CONTAINS(parse_error(std::string("\x01\x00\x00", 3)),
                  "t.safetensors: 3 bytes; a safetensors file starts with an 8-byte header length");
  EXPECT_CONTAINS(parse_error(le64(0) + "{}"), "t.safetensors: header length is 0; expected a JSON object");
  EXPECT_CONTAINS(parse_error(le64(1000) + "{}"), "header length 1000 is more than the 2 bytes that follow it (truncated");
  // A 30-byte file claiming a 1 TB header: refused by the bound before anything is allocated.
  EXPECT_CONTAINS(parse_error(le64(std::uint64_t{1} << 40) + std::string(22, ' ')),
                  "header length 1099511627776 is over the format's bound of 100000000 bytes");
  EXPECT_CONTAINS(parse_error(le64(100'000'001) + "{}"), "over the format's bound");
  EXPECT_CONTAINS(parse_error(le64(~std::uint64_t{0}) + "{}"), "header length 18446744073709551615 is over");
}

TEST(Safetensors, RefusesHeadersThatAreNotAJsonObject) {
  EXPECT_CONTAINS(parse_error(file_of("[1, 2]   ")), "t.safetensors: the header must start with '{' (a JSON object)");
  EXPECT_CONTAINS(parse_error(file_of(" {}")), "must start with '{'");
  EXPECT_CONTAINS(parse_error(file_of("{\"a\":")), "t.safetensors: tensor \"a\": header byte 5: the text ends where a value was expected");
  EXPECT_CONTAINS(parse_error(file_of("{} x")), "header byte 3: unexpected 'x' after the end of the document");
  EXPECT_CONTAINS(parse_error(file_of("{}{}")), "after the end of the document");
  EXPECT_CONTAINS(parse_error(file_of("{\"a\xff\":{}}")), "header byte 3: invalid UTF-8 in a string (byte 0xFF starts no character)");
  EXPECT_CONTAINS(parse_error(file_of("{\"a\" 1}")), "expected ':' after a member name");
  EXPECT_CONTAINS(parse_error(file_of("{,}")), "expected a member name (a string), got ','");
  EXPECT_CONTAINS(parse_error(le64(3) + std::string("{}\0", 3)), "header byte 2: unexpected byte 0x00 after the end of the document");
  // Padding is spaces (JSON whitespace in general reads the same).
  EXPECT_NO_THROW(parse_safetensors(bytes_of(file_of("{}      ")), "pad"));
  EXPECT_NO_THROW(parse_safetensors(bytes_of(file_of("{ }\n\t\r ")), "pad"));
}

TEST(Safetensors, RefusesMalformedTensorEntries) {
  const std::string one = R"({"x":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}})";
  ASSERT_NO_THROW(parse_safetensors(bytes_of(file_of(one, "abcd")), "ok"));
  auto entry_error = [](const std::string& entry, std::string_view data = "abcd") {
    return parse_error(file_of("{\"x\":" + entry + "}", data));
  };
  EXPECT_CONTAINS(entry_error(R"({"shape":[4],"data_offsets":[0,4]})"),
                  "t.safetensors: tensor \"x\": no \"dtype\"; a tensor has \"dtype\", \"shape\" and \"data_offsets\"");
  EXPECT_CONTAINS(entry_error(R"({"dtype":"U8","data_offsets":[0,4]})"), "tensor \"x\": no \"shape\"");
  EXPECT_CONTAINS(entry_error(R"({"dtype":"U8","shape":[4]})"), "tensor \"x\": no \"data_offsets\"");
  EXPECT_CONTAINS(entry_error(R"({"dtype":"U8","shape":[4],"data_offsets":[0,4],"offsets":[0,4]})"),
                  "tensor \"x\": unexpected key \"offsets\"; a tensor has exactly \"dtype\", \"shape\" and \"data_offsets\"");
  EXPECT_CONTAINS(entry_error(R"({"dtype":"U8","dtype":"U8","shape":[4],"data_offsets":[0,4]})"), "tensor \"x\": key \"dtype\" appears twice");
  EXPECT_CONTAINS(entry_error("[1]"), "tensor \"x\": is an array, expected an object {\"dtype\", \"shape\", \"data_offsets\"}");
  EXPECT_CONTAINS(entry_error(R"({"dtype":"float32","shape":[4],"data_offsets":[0,4]})"),
                  "tensor \"x\": unknown dtype \"float32\"; the format defines BOOL, U8, I8, F8_E5M2");
  EXPECT_CONTAINS(entry_error(R"({"dtype":8,"shape":[4],"data_offsets":[0,4]})"), "tensor \"x\": header byte 14: expected a string, got a number");
  EXPECT_CONTAINS(entry_error(R"({"dtype":"U8","shape":4,"data_offsets":[0,4]})"), "expected an array, got a number");
  EXPECT_CONTAINS(entry_error(R"({"dtype":"U8","shape":[-4],"data_offsets":[0,4]})"), "tensor \"x\": shape extent -4 is negative");
  EXPECT_CONTAINS(entry_error(R"({"dtype":"U8","shape":[4.0],"data_offsets":[0,4]})"), "expected an integer, got 4.0");
  EXPECT_CONTAINS(entry_error(R"({"dtype":"U8","shape":[4e0],"data_offsets":[0,4]})"), "expected an integer, got 4e0");
  EXPECT_CONTAINS(entry_error(R"({"dtype":"U8","shape":[4,],"data_offsets":[0,4]})"), "unexpected ']' where a value was expected");
  EXPECT_CONTAINS(entry_error(R"({"dtype":"U8","shape":[99999999999999999999],"data_offsets":[0,4]})"),
                  "integer 99999999999999999999 does not fit in 64 bits");
  EXPECT_CONTAINS(entry_error(R"({"dtype":"U8","shape":[4611686018427387904,4],"data_offsets":[0,4]})"),
                  "tensor \"x\": shape [4611686018427387904, 4] has more than 2^63 elements");
  EXPECT_CONTAINS(entry_error(R"({"dtype":"F64","shape":[4611686018427387904],"data_offsets":[0,4]})"),
                  "shape [4611686018427387904] of F64 has more than 2^63 bits");
  EXPECT_CONTAINS(entry_error(R"({"dtype":"U8","shape":[4],"data_offsets":[0]})"),
                  "tensor \"x\": data_offsets has 1 integers; expected two, [begin, end]");
  EXPECT_CONTAINS(entry_error(R"({"dtype":"U8","shape":[4],"data_offsets":[0,2,4]})"), "data_offsets has more than two integers");
  EXPECT_CONTAINS(entry_error(R"({"dtype":"U8","shape":[4],"data_offsets":[0,4.5]})"), "expected an integer, got 4.5");
  EXPECT_CONTAINS(entry_error(R"({"dtype":"U8","shape":[4],"data_offsets":[4,0]})"), "data_offsets [4, 0] ends before it begins");
  EXPECT_CONTAINS(entry_error(R"({"dtype":"U8","shape":[4],"data_offsets":[-4,0]})"), "data_offsets [-4, 0] has a negative offset");
  EXPECT_CONTAINS(entry_error(R"({"dtype":"U8","shape":[4],"data_offsets":[0,5]})"),
                  "tensor \"x\": data_offsets [0, 5] end past the data section, which is 4 bytes");
  EXPECT_CONTAINS(entry_error(R"({"dtype":"F32","shape":[4],"data_offsets":[0,4]})"),
                  "tensor \"x\": F32 of shape [4] is 16 bytes, but data_offsets [0, 4] hold 4");
  EXPECT_CONTAINS(entry_error(R"({"dtype":"F4","shape":[3],"data_offsets":[0,4]})"),
                  "3 elements of F4 (4 bits each) are not a whole number of bytes");
}

TEST(Safetensors, RefusesDataSectionsNotCoveredExactly) {
  auto tensor = [](const std::string& name, int begin, int end) {
    return "\"" + name + "\":{\"dtype\":\"U8\",\"shape\":[" + std::to_string(end - begin) + "],\"data_offsets\":[" +
           std::to_string(begin) + "," + std::to_string(end) + "]}";
  };
  // Any order in the header, covering exactly: fine.
  EXPECT_NO_THROW(parse_safetensors(bytes_of(file_of("{" + tensor("b", 2, 6) + "," + tensor("a", 0, 2) + "," + tensor("z", 6, 6) + "}", "abcdef")), "ok"));
  EXPECT_CONTAINS(parse_error(file_of("{" + tensor("a", 0, 4) + "," + tensor("b", 2, 6) + "}", "abcdef")),
                  "t.safetensors: tensor \"b\" at [2, 6) overlaps tensor \"a\" at [0, 4) in the data section");
  EXPECT_CONTAINS(parse_error(file_of("{" + tensor("a", 0, 2) + "," + tensor("b", 3, 6) + "}", "abcdef")),
                  "t.safetensors: bytes [2, 3) of the data section belong to no tensor (a gap before tensor \"b\"); the format "
                  "requires the tensors to cover the data section exactly");
  EXPECT_CONTAINS(parse_error(file_of("{" + tensor("b", 1, 6) + "}", "abcdef")), "bytes [0, 1) of the data section belong to no tensor");
  EXPECT_CONTAINS(parse_error(file_of("{" + tensor("a", 0, 4) + "}", "abcdef")),
                  "t.safetensors: the data section's last 2 bytes (from byte 4 of 6) belong to no tensor");
  EXPECT_CONTAINS(parse_error(file_of("{}", "x")), "the data section's last 1 bytes (from byte 0 of 1) belong to no tensor");
}

TEST(Safetensors, RefusesRepeatedNamesAndBadMetadata) {
  const std::string x = R"("x":{"dtype":"U8","shape":[0],"data_offsets":[0,0]})";
  EXPECT_CONTAINS(parse_error(file_of("{" + x + "," + x + "}")), "t.safetensors: tensor \"x\" appears twice in the header");
  EXPECT_CONTAINS(parse_error(file_of(R"({"__metadata__":{"a":"1","b":2}})")),
                  "t.safetensors: \"__metadata__\": the value of \"b\" is a number; metadata values must be strings");
  EXPECT_CONTAINS(parse_error(file_of(R"({"__metadata__":{"a":{"b":"c"}}})")), "the value of \"a\" is an object; metadata values must be strings");
  EXPECT_CONTAINS(parse_error(file_of(R"({"__metadata__":["a"]})")), "\"__metadata__\": is an array, expected an object of strings");
  EXPECT_CONTAINS(parse_error(file_of(R"({"__metadata__":{"a":"1","a":"2"}})")), "\"__metadata__\": key \"a\" appears twice");
  EXPECT_CONTAINS(parse_error(file_of(R"({"__metadata__":{},"__metadata__":{}})")), "\"__metadata__\" appears twice in the header");
  const SafetensorsFile file = parse_safetensors(bytes_of(file_of(R"({"__metadata__":{"k":"v\u00e9\ud83d\ude00\t"},)" + x + "}")), "m");
  EXPECT_EQ(file.metadata().at("k"), "v\xc3\xa9\xf0\x9f\x98\x80\t");
}

TEST(Safetensors, ReadsOnlyRegularFiles) {
  test_support::TempDir dir;
  EXPECT_CONTAINS(error_of([&] { read_safetensors(dir.file("missing.safetensors")); }),
                  "missing.safetensors: cannot open (no such file)");
  EXPECT_CONTAINS(error_of([&] { read_safetensors(dir.path().string()); }), ": is a directory; expected a safetensors file");
  const std::string fifo = dir.file("pipe.safetensors");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_CONTAINS(error_of([&] { read_safetensors(fifo); }),
                  "pipe.safetensors: not a regular file (a pipe, a device or a socket); expected a safetensors file");
  EXPECT_CONTAINS(error_of([&] { read_safetensors("/dev/zero"); }), "/dev/zero: not a regular file");
  write_bytes(dir.file("short.safetensors"), "abc");
  EXPECT_CONTAINS(error_of([&] { read_safetensors(dir.file("short.safetensors")); }),
                  "short.safetensors: 3 bytes; a safetensors file starts with an 8-byte header length");
}

// The JSON reader alone: what the safetensors header does not exercise.
std::string json_error(std::string_view text, const std::function<void(JsonReader&)>& walk) {
  try {
    JsonReader json(text);
    walk(json);
    json.expect_end();
  } catch (const JsonError& e) {
    return e.what();
  }
  return "(no error)";
}

std::string string_of(std::string_view text) {
  JsonReader json(text);
  std::string out = json.read_string();
  json.expect_end();
  return out;
}

TEST(JsonReader, DecodesEscapesAndSurrogatePairs) {
  EXPECT_EQ(string_of(R"("a\"b\\c\/d\b\f\n\r\t")"), "a\"b\\c/d\b\f\n\r\t");
  EXPECT_EQ(string_of(R"("\u0041\u00e9\u20AC\ud83d\ude00")"), "A\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80");
  EXPECT_EQ(string_of("\"\xf4\x8f\xbf\xbf\""), "\xf4\x8f\xbf\xbf");  // U+10FFFF, the last code point
  EXPECT_EQ(string_of(R"("\u0000")"), std::string(1, '\0'));
  auto string_error = [](std::string_view text) { return json_error(text, [](JsonReader& j) { j.read_string(); }); };
  EXPECT_CONTAINS(string_error(R"("\ud83d")"), "high surrogate not followed by its low surrogate");
  EXPECT_CONTAINS(string_error(R"("\ud83d\u0041")"), "high surrogate not followed by its low surrogate");
  EXPECT_CONTAINS(string_error(R"("\ude00")"), "low surrogate without its high surrogate");
  EXPECT_CONTAINS(string_error(R"("\u12G4")"), "four hex digits, got 'G'");
  EXPECT_CONTAINS(string_error(R"("\u12")"), "four hex digits");
  EXPECT_CONTAINS(string_error(R"("\x41")"), "unknown escape \\ followed by 'x'");
  EXPECT_CONTAINS(string_error("\"a\nb\""), "byte 2: unescaped control character byte 0x0A");
  EXPECT_CONTAINS(string_error("\"abc"), "byte 0: unterminated string");
  EXPECT_CONTAINS(string_error("\"\xc0\xaf\""), "invalid UTF-8");      // overlong '/'
  EXPECT_CONTAINS(string_error("\"\xed\xa0\x80\""), "invalid UTF-8");  // an encoded surrogate
  EXPECT_CONTAINS(string_error("\"\xf4\x90\x80\x80\""), "invalid UTF-8");  // past U+10FFFF
  EXPECT_CONTAINS(string_error("\"\xe2\x82\""), "invalid UTF-8");      // cut short
  EXPECT_CONTAINS(string_error("\"\x80\""), "byte 0x80 starts no character");
}

TEST(JsonReader, ReadsIntegersStrictly) {
  auto integer = [](std::string_view text) {
    JsonReader json(text);
    return json.read_integer();
  };
  EXPECT_EQ(integer("0"), 0);
  EXPECT_EQ(integer("-0"), 0);
  EXPECT_EQ(integer("9223372036854775807"), std::numeric_limits<std::int64_t>::max());
  EXPECT_EQ(integer("-9223372036854775808"), std::numeric_limits<std::int64_t>::min());
  auto integer_error = [](std::string_view text) { return json_error(text, [](JsonReader& j) { j.read_integer(); }); };
  EXPECT_CONTAINS(integer_error("9223372036854775808"), "does not fit in 64 bits");
  EXPECT_CONTAINS(integer_error("-9223372036854775809"), "does not fit in 64 bits");
  EXPECT_CONTAINS(integer_error("012"), "number 012 has a leading zero");
  EXPECT_CONTAINS(integer_error("-"), "'-' without digits");
  EXPECT_CONTAINS(integer_error("-x"), "'-' without digits");
  EXPECT_CONTAINS(integer_error("1.5"), "expected an integer, got 1.5");
  EXPECT_CONTAINS(integer_error("1E+2"), "expected an integer, got 1E+2");
  EXPECT_CONTAINS(integer_error("+1"), "unexpected '+' where a value was expected");
  EXPECT_CONTAINS(integer_error("true"), "expected a number, got a boolean");
  EXPECT_CONTAINS(integer_error("null"), "expected a number, got null");
  EXPECT_CONTAINS(integer_error("NaN"), "unexpected 'N' where a value was expected");
  EXPECT_CONTAINS(integer_error(""), "byte 0: the text ends where a value was expected");
}

TEST(JsonReader, WalksObjectsAndArraysAndBoundsTheDepth) {
  JsonReader json(R"( { "a" : [ 1 , 2 ] , "b" : { } , "c" : [ ] } )");
  std::string name;
  std::vector<std::string> names;
  std::vector<std::int64_t> values;
  json.begin_object();
  while (json.next_member(name)) {
    names.push_back(name);
    if (json.peek() == JsonKind::array) {
      json.begin_array();
      while (json.next_element()) values.push_back(json.read_integer());
    } else {
      json.begin_object();
      EXPECT_FALSE(json.next_member(name));
    }
  }
  json.expect_end();
  EXPECT_EQ(names, (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(values, (std::vector<std::int64_t>{1, 2}));

  auto object_error = [](std::string_view text) {
    return json_error(text, [](JsonReader& j) {
      std::string n;
      j.begin_object();
      while (j.next_member(n)) j.read_integer();
    });
  };
  EXPECT_CONTAINS(object_error(R"({"a":1,})"), "expected a member name (a string), got '}'");
  EXPECT_CONTAINS(object_error(R"({"a":1 "b":2})"), "expected ',' or '}' in an object, got '\"'");
  EXPECT_CONTAINS(object_error(R"({"a":1)"), "the text ends inside an object");
  EXPECT_CONTAINS(object_error(R"({a:1})"), "expected a member name (a string), got 'a'");
  EXPECT_CONTAINS(object_error(R"({"a":1}/**/)"), "unexpected '/' after the end of the document");

  const std::string deep = std::string(kMaxJsonDepth + 1, '[') + std::string(kMaxJsonDepth + 1, ']');
  EXPECT_CONTAINS(json_error(deep,
                             [](JsonReader& j) {
                               for (;;) {
                                 j.begin_array();
                                 if (!j.next_element()) return;
                               }
                             }),
                  "nested deeper than 64 levels");
}

}  // namespace
}  // namespace shapetune
