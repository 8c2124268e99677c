// libFuzzer target: `shapetune merge` of any bytes into a database. The input either merges or
// raises StoreError (nothing else: no crash, no other exception); it is never modified and no
// side file is left beside it; after a merge the output reads back whole; and merging the same
// input again changes nothing (rows or winners).
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "db/store.hpp"
#include "tuner/merge.hpp"

namespace fs = std::filesystem;

namespace {

const fs::path& work_dir() {
  static const fs::path dir = [] {
    fs::path d = fs::temp_directory_path() / ("shapetune-fuzz-merge-" + std::to_string(getpid()));
    fs::create_directories(d);
    return d;
  }();
  return dir;
}

std::string read_all(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// An empty database of this build's schema, made once; its bytes are written out for every input.
// Written through a stream, not fs::copy_file: libFuzzer's timer signal can interrupt the
// latter's sendfile, which then throws EINTR out of the harness (a crash that is not the input's).
const std::string& empty_output_bytes() {
  static const std::string bytes = [] {
    const fs::path p = work_dir() / "empty.db";
    fs::remove(p);
    shapetune::Store::open(p.string());
    return read_all(p);
  }();
  return bytes;
}

void remove_db(const fs::path& db) {
  for (const char* suffix : {"", "-wal", "-shm", "-journal"}) fs::remove(db.string() + suffix);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace shapetune;
  const fs::path input = work_dir() / "input.db";
  const fs::path output = work_dir() / "out.db";
  remove_db(input);
  remove_db(output);
  const std::string& empty = empty_output_bytes();
  std::ofstream(output, std::ios::binary).write(empty.data(), static_cast<std::streamsize>(empty.size()));
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  std::ofstream(input, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));

  bool merged = false;
  try {
    const auto store = Store::open(output.string());
    (void)store->merge_from(input.string());
    (void)recompute_winners(*store);
    merged = true;
    const MergeCounts again = store->merge_from(input.string());
    const WinnerRefresh refresh = recompute_winners(*store);
    if (again.changed() || refresh.changed) std::abort();  // a second merge changed something
  } catch (const StoreError&) {
    if (merged) std::abort();  // the first merge went through, so the second must too
  }
  if (merged) {
    // What was merged reads back through the typed readers, row by row.
    const auto store = Store::open(output.string(), OpenMode::read_only);
    (void)store->winners();
    (void)store->ceilings();
    (void)store->devices();
    for (const auto& sweep : store->sweeps()) {
      (void)store->candidates(sweep.id);
      (void)store->counter_records(sweep.id);
    }
  }
  if (read_all(input) != bytes) std::abort();  // merge wrote to its input
  for (const char* suffix : {"-wal", "-shm", "-journal"})
    if (fs::exists(input.string() + suffix)) std::abort();  // or left side files beside it
  return 0;
}
