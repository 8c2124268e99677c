// libFuzzer target: database files, read the way the read-only verbs read them (winners, export
// in every format, report). Any bytes either read or raise StoreError/ReportError; nothing else
// (no crash, no other exception), and the file is never modified (the input is compared after).
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "db/export.hpp"
#include "db/report.hpp"
#include "db/store.hpp"

namespace fs = std::filesystem;

namespace {

const fs::path& work_dir() {
  static const fs::path dir = [] {
    fs::path d = fs::temp_directory_path() / ("shapetune-fuzz-db-" + std::to_string(getpid()));
    fs::create_directories(d);
    return d;
  }();
  return dir;
}

std::string read_all(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void read_everything(const std::string& path) {
  using namespace shapetune;
  const auto store = Store::open(path, OpenMode::read_only);
  const auto devices = store->devices();
  for (const auto& d : devices) (void)store->device(d.key());
  const auto winners = store->winners();
  (void)export_json(devices, winners);
  (void)export_csv(winners);
  (void)export_header(winners, HeaderExportSource{"shapetune export --format header", store->schema_version(), path});
  (void)store->ceilings();
  for (const auto& sweep : store->sweeps()) {
    (void)store->candidates(sweep.id);
    (void)store->counter_records(sweep.id);
    (void)store->counters_unavailable(sweep.id);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const fs::path db = work_dir() / "input.db";
  for (const char* suffix : {"", "-wal", "-shm", "-journal"}) fs::remove(db.string() + suffix);
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  std::ofstream(db, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));

  try {
    read_everything(db.string());
  } catch (const shapetune::StoreError&) {
  }
  const fs::path out = work_dir() / "report";
  fs::remove_all(out);
  try {
    shapetune::ReportOptions options;
    options.db_path = db.string();
    options.out_dir = out.string();
    options.gnuplot = "";  // plots are scripts and data here; gnuplot is not what is fuzzed
    (void)shapetune::write_report(options);
  } catch (const shapetune::ReportError&) {
  }
  if (read_all(db) != bytes) {
    // A read-only verb wrote to the database.
    std::abort();
  }
  for (const char* suffix : {"-wal", "-shm", "-journal"})
    if (fs::exists(db.string() + suffix)) std::abort();  // and left its side files behind
  return 0;
}
