#include "models/safetensors.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <numeric>
#include <set>
#include <system_error>
#include <utility>

#include "core/json.hpp"
#include "core/json_reader.hpp"

namespace shapetune {
namespace {

constexpr std::pair<std::string_view, int> kDtypeBits[] = {
    {"BOOL", 8},     {"U8", 8},       {"I8", 8},       {"F8_E5M2", 8}, {"F8_E4M3", 8}, {"F8_E8M0", 8}, {"I16", 16},
    {"U16", 16},     {"F16", 16},     {"BF16", 16},    {"I32", 32},    {"U32", 32},    {"F32", 32},    {"F64", 64},
    {"I64", 64},     {"U64", 64},     {"C64", 64},     {"F4", 4},      {"F6_E2M3", 6}, {"F6_E3M2", 6}};

constexpr std::pair<std::string_view, DType> kShapetuneDtypes[] = {
    {"F32", DType::f32}, {"F16", DType::f16}, {"BF16", DType::bf16}, {"I32", DType::i32}};

constexpr std::int64_t kInt64Max = std::numeric_limits<std::int64_t>::max();

// A name as messages show it: JSON-quoted (control bytes escaped) and cut short, since names come
// from the file and may be anything.
std::string quoted(std::string_view name) {
  constexpr std::size_t kShown = 80;
  if (name.size() <= kShown) return json_string(name);
  return json_string(name.substr(0, kShown)) + "... (" + std::to_string(name.size()) + " bytes)";
}

std::string shape_text(const std::vector<std::int64_t>& shape) {
  constexpr std::size_t kShown = 8;
  std::string out = "[";
  for (std::size_t i = 0; i < shape.size() && i < kShown; ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  if (shape.size() > kShown) out += ", ... (" + std::to_string(shape.size()) + " extents)";
  return out + "]";
}

std::string all_dtype_names() {
  std::string out;
  for (const auto& [name, bits] : kDtypeBits) out += (out.empty() ? "" : ", ") + std::string(name);
  return out;
}

// Bytes of `elements` elements of `bits` bits each, or why that is not a byte count.
std::int64_t byte_length(const std::string& context, std::string_view dtype, const std::vector<std::int64_t>& shape) {
  const int bits = *safetensors_dtype_bits(dtype);
  std::int64_t elements = 1;
  for (const std::int64_t extent : shape) {
    if (extent != 0 && elements > kInt64Max / extent)
      throw DataError(context + ": shape " + shape_text(shape) + " has more than 2^63 elements");
    elements *= extent;
  }
  if (elements > kInt64Max / bits) throw DataError(context + ": shape " + shape_text(shape) + " of " + std::string(dtype) + " has more than 2^63 bits");
  if (elements * bits % 8 != 0)
    throw DataError(context + ": " + std::to_string(elements) + " elements of " + std::string(dtype) + " (" +
                    std::to_string(bits) + " bits each) are not a whole number of bytes");
  return elements * bits / 8;
}

struct Placed {
  SafetensorsTensor tensor;
  std::int64_t begin = 0, end = 0;
};

// A JsonError inside `walk` becomes a DataError saying where in the header and in what.
template <typename Walk>
void in_context(const std::string& context, Walk walk) {
  try {
    walk();
  } catch (const JsonError& e) {
    throw DataError(context + ": header " + e.what());
  }
}

Placed read_entry(JsonReader& json, const std::string& name, const std::string& context, std::int64_t data_bytes) {
  Placed out;
  out.tensor.name = name;
  bool have_dtype = false, have_shape = false, have_offsets = false;
  in_context(context, [&] {
    if (json.peek() != JsonKind::object)
      throw DataError(context + ": is " + std::string(json_kind_name(json.peek())) +
                      ", expected an object {\"dtype\", \"shape\", \"data_offsets\"}");
    json.begin_object();
    std::string key;
    while (json.next_member(key)) {
      bool* seen = key == "dtype" ? &have_dtype : key == "shape" ? &have_shape : key == "data_offsets" ? &have_offsets : nullptr;
      if (!seen)
        throw DataError(context + ": unexpected key " + quoted(key) + "; a tensor has exactly \"dtype\", \"shape\" and \"data_offsets\"");
      if (*seen) throw DataError(context + ": key " + quoted(key) + " appears twice");
      *seen = true;
      if (key == "dtype") {
        out.tensor.dtype = json.read_string();
        if (!safetensors_dtype_bits(out.tensor.dtype))
          throw DataError(context + ": unknown dtype " + quoted(out.tensor.dtype) + "; the format defines " + all_dtype_names());
      } else if (key == "shape") {
        json.begin_array();
        while (json.next_element()) {
          const std::int64_t extent = json.read_integer();
          if (extent < 0) throw DataError(context + ": shape extent " + std::to_string(extent) + " is negative");
          out.tensor.shape.push_back(extent);
        }
      } else {
        std::vector<std::int64_t> offsets;
        json.begin_array();
        while (json.next_element()) {
          if (offsets.size() == 2) throw DataError(context + ": data_offsets has more than two integers; expected [begin, end]");
          offsets.push_back(json.read_integer());
        }
        if (offsets.size() != 2)
          throw DataError(context + ": data_offsets has " + std::to_string(offsets.size()) + " integers; expected two, [begin, end]");
        out.begin = offsets[0];
        out.end = offsets[1];
        if (out.begin < 0 || out.end < 0) throw DataError(context + ": data_offsets [" + std::to_string(out.begin) + ", " + std::to_string(out.end) + "] has a negative offset");
        if (out.begin > out.end)
          throw DataError(context + ": data_offsets [" + std::to_string(out.begin) + ", " + std::to_string(out.end) + "] ends before it begins");
      }
    }
  });
  for (const auto& [have, key] : {std::pair{have_dtype, "dtype"}, std::pair{have_shape, "shape"}, std::pair{have_offsets, "data_offsets"}})
    if (!have) throw DataError(context + ": no \"" + key + "\"; a tensor has \"dtype\", \"shape\" and \"data_offsets\"");
  if (out.end > data_bytes)
    throw DataError(context + ": data_offsets [" + std::to_string(out.begin) + ", " + std::to_string(out.end) +
                    "] end past the data section, which is " + std::to_string(data_bytes) + " bytes");
  const std::int64_t expected = byte_length(context, out.tensor.dtype, out.tensor.shape);
  if (out.end - out.begin != expected)
    throw DataError(context + ": " + out.tensor.dtype + " of shape " + shape_text(out.tensor.shape) + " is " + std::to_string(expected) +
                    " bytes, but data_offsets [" + std::to_string(out.begin) + ", " + std::to_string(out.end) + "] hold " +
                    std::to_string(out.end - out.begin));
  return out;
}

void read_metadata(JsonReader& json, const std::string& context, std::map<std::string, std::string>& metadata) {
  in_context(context, [&] {
    if (json.peek() != JsonKind::object)
      throw DataError(context + ": is " + std::string(json_kind_name(json.peek())) + ", expected an object of strings");
    json.begin_object();
    std::string key;
    while (json.next_member(key)) {
      if (json.peek() != JsonKind::string)
        throw DataError(context + ": the value of " + quoted(key) + " is " + std::string(json_kind_name(json.peek())) +
                        "; metadata values must be strings");
      std::string value = json.read_string();
      if (!metadata.emplace(key, std::move(value)).second) throw DataError(context + ": key " + quoted(key) + " appears twice");
    }
  });
}

// The format forbids holes and overlaps: in offset order, each tensor starts where the previous
// ended, the first at 0 and the last ending at the end of the data section.
void check_coverage(const std::string& source, const std::vector<Placed>& placed, std::int64_t data_bytes) {
  std::vector<std::size_t> order(placed.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return std::pair(placed[a].begin, placed[a].end) < std::pair(placed[b].begin, placed[b].end);
  });
  auto range = [](const Placed& p) { return "[" + std::to_string(p.begin) + ", " + std::to_string(p.end) + ")"; };
  std::int64_t covered = 0;
  const Placed* previous = nullptr;
  for (const std::size_t i : order) {
    const Placed& p = placed[i];
    if (p.begin > covered)
      throw DataError(source + ": bytes [" + std::to_string(covered) + ", " + std::to_string(p.begin) +
                      ") of the data section belong to no tensor (a gap before tensor " + quoted(p.tensor.name) +
                      "); the format requires the tensors to cover the data section exactly");
    if (p.begin < covered)
      throw DataError(source + ": tensor " + quoted(p.tensor.name) + " at " + range(p) + " overlaps tensor " +
                      quoted(previous->tensor.name) + " at " + range(*previous) + " in the data section");
    covered = p.end;
    previous = &p;
  }
  if (covered != data_bytes)
    throw DataError(source + ": the data section's last " + std::to_string(data_bytes - covered) + " bytes (from byte " +
                    std::to_string(covered) + " of " + std::to_string(data_bytes) +
                    ") belong to no tensor; the format requires the tensors to cover the data section exactly");
}

std::uint64_t read_le64(const std::byte* p) {
  std::uint64_t value = 0;
  for (int i = 7; i >= 0; --i) value = (value << 8) | static_cast<std::uint8_t>(p[i]);
  return value;
}

class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  ~FileDescriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

void write_all(int fd, const void* data, std::size_t size) {
  const auto* bytes = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t written = ::write(fd, bytes, size);
    if (written < 0) {
      if (errno == EINTR) continue;
      throw std::system_error(errno, std::generic_category());
    }
    bytes += written;
    size -= static_cast<std::size_t>(written);
  }
}

}  // namespace

std::optional<int> safetensors_dtype_bits(std::string_view dtype) {
  for (const auto& [name, bits] : kDtypeBits)
    if (name == dtype) return bits;
  return std::nullopt;
}

std::string_view safetensors_dtype(DType dtype) {
  if (dtype == DType::tf32) return "F32";
  for (const auto& [name, type] : kShapetuneDtypes)
    if (type == dtype) return name;
  return "?";
}

std::optional<DType> SafetensorsTensor::shapetune_dtype() const {
  for (const auto& [name, type] : kShapetuneDtypes)
    if (name == dtype) return type;
  return std::nullopt;
}

const SafetensorsTensor* SafetensorsFile::find(std::string_view name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

const SafetensorsTensor& SafetensorsFile::tensor(std::string_view name) const {
  if (const SafetensorsTensor* found = find(name)) return *found;
  constexpr std::size_t kListed = 10;
  std::string present;
  for (std::size_t i = 0; i < tensors_.size() && i < kListed; ++i) present += (i ? ", " : "") + quoted(tensors_[i].name);
  if (tensors_.size() > kListed) present += ", and " + std::to_string(tensors_.size() - kListed) + " more";
  throw DataError(source_ + ": no tensor " + quoted(name) + "; the file has " +
                  (tensors_.empty() ? std::string("no tensors") : present + " (" + std::to_string(tensors_.size()) + " tensors)"));
}

SafetensorsFile SafetensorsFile::parse(std::vector<std::byte> bytes, std::string source) {
  SafetensorsFile file;
  file.source_ = std::move(source);
  file.bytes_ = std::move(bytes);
  const std::string& src = file.source_;
  const std::span<const std::byte> all(file.bytes_);
  if (all.size() < 8)
    throw DataError(src + ": " + std::to_string(all.size()) + " bytes; a safetensors file starts with an 8-byte header length");
  const std::uint64_t header_bytes = read_le64(all.data());
  const std::uint64_t after_length = all.size() - 8;
  if (header_bytes == 0) throw DataError(src + ": header length is 0; expected a JSON object");
  if (header_bytes > kMaxSafetensorsHeaderBytes)
    throw DataError(src + ": header length " + std::to_string(header_bytes) + " is over the format's bound of " +
                    std::to_string(kMaxSafetensorsHeaderBytes) + " bytes (not a safetensors file?)");
  if (header_bytes > after_length)
    throw DataError(src + ": header length " + std::to_string(header_bytes) + " is more than the " + std::to_string(after_length) +
                    " bytes that follow it (truncated, or not a safetensors file)");
  const std::string_view header(reinterpret_cast<const char*>(all.data() + 8), static_cast<std::size_t>(header_bytes));
  const std::span<const std::byte> data = all.subspan(8 + static_cast<std::size_t>(header_bytes));
  const auto data_bytes = static_cast<std::int64_t>(data.size());
  if (header.front() != '{') throw DataError(src + ": the header must start with '{' (a JSON object)");

  JsonReader json(header);
  std::vector<Placed> placed;
  bool have_metadata = false;
  in_context(src, [&] {
    json.begin_object();
    std::string name;
    while (json.next_member(name)) {
      if (name == "__metadata__") {
        if (have_metadata) throw DataError(src + ": \"__metadata__\" appears twice in the header");
        have_metadata = true;
        read_metadata(json, src + ": \"__metadata__\"", file.metadata_);
        continue;
      }
      if (!file.index_.emplace(name, placed.size()).second)
        throw DataError(src + ": tensor " + quoted(name) + " appears twice in the header");
      placed.push_back(read_entry(json, name, src + ": tensor " + quoted(name), data_bytes));
    }
    json.expect_end();
  });
  check_coverage(src, placed, data_bytes);
  file.tensors_.reserve(placed.size());
  for (Placed& p : placed) {
    p.tensor.bytes = data.subspan(static_cast<std::size_t>(p.begin), static_cast<std::size_t>(p.end - p.begin));
    file.tensors_.push_back(std::move(p.tensor));
  }
  return file;
}

SafetensorsFile parse_safetensors(std::span<const std::byte> bytes, std::string_view name_for_errors) {
  return SafetensorsFile::parse(std::vector<std::byte>(bytes.begin(), bytes.end()), std::string(name_for_errors));
}

SafetensorsFile read_safetensors(const std::string& path) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer before fstat could
  // refuse it.
  FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (fd.get() < 0)
    throw DataError(path + ": cannot open (" + (errno == ENOENT ? std::string("no such file") : std::strerror(errno)) + ")");
  struct stat info {};
  if (::fstat(fd.get(), &info) != 0) throw DataError(path + ": cannot read: " + std::strerror(errno));
  if (S_ISDIR(info.st_mode)) throw DataError(path + ": is a directory; expected a safetensors file");
  if (!S_ISREG(info.st_mode))
    throw DataError(path + ": not a regular file (a pipe, a device or a socket); expected a safetensors file");
  // A regular file's size is what it holds: the buffer is that, never what its header claims.
  std::vector<std::byte> bytes(static_cast<std::size_t>(info.st_size));
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t got = ::read(fd.get(), bytes.data() + done, bytes.size() - done);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) throw DataError(path + ": cannot read: " + std::strerror(errno));
    if (got == 0)
      throw DataError(path + ": shrank while being read (" + std::to_string(info.st_size) + " bytes at the start, " +
                      std::to_string(done) + " at the end)");
    done += static_cast<std::size_t>(got);
  }
  return SafetensorsFile::parse(std::move(bytes), path);
}

void write_safetensors(const std::string& path, std::span<const SafetensorsTensor> tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::string header = "{";
  if (!metadata.empty()) {
    header += "\"__metadata__\":{";
    bool first = true;
    for (const auto& [key, value] : metadata) {
      header += first ? "" : ",";
      header += json_string(key) + ":" + json_string(value);
      first = false;
    }
    header += "}";
  }
  std::set<std::string_view> names;
  std::int64_t offset = 0;
  for (const SafetensorsTensor& t : tensors) {
    const std::string context = path + ": tensor " + quoted(t.name);
    if (t.name == "__metadata__") throw DataError(context + ": the name is the format's key for metadata");
    if (!names.insert(t.name).second) throw DataError(context + ": the name is given twice");
    if (!safetensors_dtype_bits(t.dtype))
      throw DataError(context + ": unknown dtype " + quoted(t.dtype) + "; the format defines " + all_dtype_names());
    for (const std::int64_t extent : t.shape)
      if (extent < 0) throw DataError(context + ": shape " + shape_text(t.shape) + " has a negative extent");
    const std::int64_t length = byte_length(context, t.dtype, t.shape);
    if (static_cast<std::int64_t>(t.bytes.size()) != length)
      throw DataError(context + ": " + t.dtype + " of shape " + shape_text(t.shape) + " is " + std::to_string(length) +
                      " bytes, but " + std::to_string(t.bytes.size()) + " were given");
    std::string shape;
    for (const std::int64_t extent : t.shape) {
      shape += shape.empty() ? "" : ",";
      shape += json_integer(extent);
    }
    header += header.size() > 1 ? "," : "";
    header += json_string(t.name) + ":{\"dtype\":" + json_string(t.dtype) + ",\"shape\":[" + shape +
              "],\"data_offsets\":[" + json_integer(offset) + "," + json_integer(offset + length) + "]}";
    offset += length;
  }
  header += "}";
  header.append((8 - header.size() % 8) % 8, ' ');
  if (header.size() > kMaxSafetensorsHeaderBytes)
    throw DataError(path + ": the header would be " + std::to_string(header.size()) + " bytes, over the format's bound of " +
                    std::to_string(kMaxSafetensorsHeaderBytes));

  std::string temporary = path + ".tmp-XXXXXX";
  FileDescriptor fd(::mkstemp(temporary.data()));
  if (fd.get() < 0) throw DataError(path + ": cannot write: cannot create " + temporary + ": " + std::strerror(errno));
  try {
    std::byte length_field[8];
    for (int i = 0; i < 8; ++i) length_field[i] = static_cast<std::byte>(static_cast<std::uint64_t>(header.size()) >> (8 * i));
    write_all(fd.get(), length_field, sizeof length_field);
    write_all(fd.get(), header.data(), header.size());
    for (const SafetensorsTensor& t : tensors) write_all(fd.get(), t.bytes.data(), t.bytes.size());
    // mkstemp makes 0600; a file for PyTorch scripts to read gets what files usually get.
    if (::fchmod(fd.get(), 0644) != 0 || ::fsync(fd.get()) != 0) throw std::system_error(errno, std::generic_category());
    if (::close(fd.release()) != 0) throw std::system_error(errno, std::generic_category());
    if (::rename(temporary.c_str(), path.c_str()) != 0) throw std::system_error(errno, std::generic_category());
  } catch (const std::system_error& e) {
    ::unlink(temporary.c_str());
    throw DataError(path + ": cannot write: " + e.code().message());
  }
}

}  // namespace shapetune
