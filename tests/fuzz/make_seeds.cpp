// Writes the fuzz targets' starting inputs under DIR: small databases (DIR/database: a full one,
// one of an older schema, one of a newer, one with a column of the wrong type, one in WAL mode),
// IDX files (DIR/idx: plain and gzipped), safetensors files (DIR/safetensors: several dtypes,
// metadata, escaped names, an empty file) and command lines (DIR/cli_args). The shape-file target
// starts from shapes/*.yaml. Databases use 512-byte pages so that each mutation touches a page
// that matters.
#include <sqlite3.h>
#include <zlib.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/records.hpp"
#include "db/store.hpp"
#include "models/safetensors.hpp"

namespace fs = std::filesystem;
using namespace shapetune;

namespace {

void sql(const fs::path& path, const std::string& text) {
  sqlite3* db = nullptr;
  if (sqlite3_open(path.c_str(), &db) != SQLITE_OK) throw std::runtime_error("cannot open " + path.string());
  char* error = nullptr;
  const int rc = sqlite3_exec(db, text.c_str(), nullptr, nullptr, &error);
  const std::string message = error ? error : "";
  sqlite3_free(error);
  sqlite3_close(db);
  if (rc != SQLITE_OK) throw std::runtime_error(path.string() + ": " + message + "\n" + text);
}

void full_database(const fs::path& path) {
  const DeviceFingerprint device{"NVIDIA H200", 90, 132, std::int64_t{60} << 20, std::int64_t{141} << 30,
                                 "580.95", "13.0", "13.1.0", "9.14.0"};
  {
    auto store = Store::open(path.string());
    store->upsert_device(device);
    const std::int64_t sweep =
        store->begin_sweep({device.key(), "shapetune sweep shapes/quick.yaml", "abc1234", "shapes/quick.yaml", "5f3c", "seed=1"});
    const Problem problem{"softmax", DType::f32, Shape({{"rows", 4096}, {"cols", 1000}})};
    CandidateRecord candidate;
    candidate.sweep_id = sweep;
    candidate.problem = problem;
    candidate.variant = "warp_per_row";
    candidate.config = Config({{"block_size", 256}});
    candidate.accuracy = AccuracyReport{1e-7, 2e-6, 0, 4096000, ""};
    TimingStats timing;
    timing.median_us = 12.5;
    timing.p10_us = 12.1;
    timing.p90_us = 13.0;
    timing.min_us = 11.9;
    timing.median_ci_rel = 0.004;
    timing.samples = 200;
    timing.stop_reason = "converged";
    candidate.timing = timing;
    candidate.tolerance = Tolerance{1e-5, 1e-5};
    store->record_candidate(candidate);
    CandidateRecord refused = candidate;
    refused.variant = "cudnn";
    refused.config = Config();
    refused.baseline = true;
    refused.status = CandidateStatus::unsupported;
    refused.reason = "cuDNN refused";
    refused.accuracy.reset();
    refused.timing.reset();
    store->record_candidate(refused);
    store->record_problem(sweep, problem.key(), "done", "");
    WinnerRecord winner;
    winner.device_key = device.key();
    winner.problem = problem;
    winner.variant = candidate.variant;
    winner.config = candidate.config;
    winner.timing = timing;
    winner.tolerance = candidate.tolerance;
    winner.best_baseline = "cudnn";
    winner.baseline_us = 20.0;
    winner.speedup_vs_baseline = 1.6;
    winner.runner_up_variant = "block_per_row";
    winner.runner_up_config = Config({{"block_size", 512}});
    winner.runner_up_us = 13.0;
    winner.margin_rel = 0.04;
    winner.cost = Cost{4096.0 * 1000 * 8, 4096.0 * 1000 * 5};
    winner.sweep_id = sweep;
    winner.git_sha = "abc1234";
    winner.measured_at = "2026-12-02T00:00:00Z";
    store->store_winner(winner);
    winner.problem = Problem{"gemm.nn", DType::bf16, Shape({{"m", 1}, {"n", 4097}, {"k", 3}})};
    winner.variant = "cublaslt";
    winner.baseline = true;
    winner.library_algo = "cublasLt=130100 algo_id=6 tile_id=20";
    store->store_winner(winner);
    store->store_ceiling({device.key(), "dram_copy_memcpy", 4.1e12, "B/s", "cudaMemcpy, 1 GiB", "abc1234",
                          "2026-12-02T00:00:00Z"});
    store->record_counters({sweep, problem.key(), candidate.variant, candidate.config.key(),
                            {{"dram__bytes_read.sum", 1.6e7}, {"gpu__time_duration.sum", 12000}}});
    store->set_counters_unavailable(sweep, "counters unavailable: no permission");
    store->finish_sweep(sweep, "complete");
  }
  sql(path, "PRAGMA journal_mode=DELETE; PRAGMA page_size=512; VACUUM;");
}

void write(const fs::path& path, const std::vector<std::uint8_t>& bytes) {
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()),
                                              static_cast<std::streamsize>(bytes.size()));
}

std::vector<std::uint8_t> idx(const std::vector<std::uint32_t>& dims) {
  std::vector<std::uint8_t> bytes = {0, 0, 0x08, static_cast<std::uint8_t>(dims.size())};
  std::size_t elements = 1;
  for (const std::uint32_t d : dims) {
    for (int shift = 24; shift >= 0; shift -= 8) bytes.push_back(static_cast<std::uint8_t>(d >> shift));
    elements *= d;
  }
  for (std::size_t i = 0; i < elements; ++i) bytes.push_back(static_cast<std::uint8_t>(i * 37));
  return bytes;
}

void write_gzip(const fs::path& path, const std::vector<std::uint8_t>& bytes) {
  gzFile out = gzopen(path.c_str(), "wb9");
  if (!out) throw std::runtime_error("cannot write " + path.string());
  gzwrite(out, bytes.data(), static_cast<unsigned>(bytes.size()));
  gzclose(out);
}

void write_args(const fs::path& path, const std::vector<std::string>& args) {
  std::string bytes;
  for (std::size_t i = 0; i < args.size(); ++i) bytes += (i ? std::string(1, '\0') : "") + args[i];
  std::ofstream(path, std::ios::binary) << bytes;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: make_seeds DIR\n";
    return 2;
  }
  const fs::path dir = argv[1];
  for (const char* target : {"database", "idx", "safetensors", "cli_args"}) fs::create_directories(dir / target);

  const fs::path db = dir / "database";
  full_database(db / "full.db");
  fs::copy_file(db / "full.db", db / "older.db", fs::copy_options::overwrite_existing);
  sql(db / "older.db", "PRAGMA user_version = 3;");
  fs::copy_file(db / "full.db", db / "newer.db", fs::copy_options::overwrite_existing);
  sql(db / "newer.db", "PRAGMA user_version = 99;");
  fs::copy_file(db / "full.db", db / "wrong-type.db", fs::copy_options::overwrite_existing);
  sql(db / "wrong-type.db", "UPDATE winners SET median_us = 'fast', variant = x'ff00fe';");
  fs::copy_file(db / "full.db", db / "wal.db", fs::copy_options::overwrite_existing);
  sql(db / "wal.db", "PRAGMA journal_mode=WAL; PRAGMA wal_checkpoint(TRUNCATE);");
  fs::remove(db / "wal.db-wal");
  fs::remove(db / "wal.db-shm");

  write(dir / "idx" / "images.idx", idx({3, 4, 5}));
  write(dir / "idx" / "labels.idx", idx({7}));
  write_gzip(dir / "idx" / "images.idx.gz", idx({2, 28, 28}));
  write_gzip(dir / "idx" / "labels.idx.gz", idx({10}));

  const fs::path safetensors = dir / "safetensors";
  std::vector<std::byte> bytes(64);
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<std::byte>(i * 37);
  const std::span<const std::byte> all(bytes);
  write_safetensors((safetensors / "weights.safetensors").string(),
                    std::vector<SafetensorsTensor>{{"fc1.weight", "F32", {2, 4}, all.first(32)},
                                                   {"fc1.bias", "BF16", {4}, all.subspan(32, 8)},
                                                   {"labels", "I32", {}, all.subspan(40, 4)},
                                                   {"mask", "BOOL", {0, 3}, {}},
                                                   {"scales", "F4", {2, 2}, all.subspan(44, 2)},
                                                   {"emb\u00e9\n\"x\"", "F8_E4M3", {2, 9}, all.subspan(46, 18)}},
                    {{"format", "pt"}, {"note", "tab\there \u00e9"}});
  write_safetensors((safetensors / "empty.safetensors").string(), {});
  write(safetensors / "escapes.safetensors",
        [] {
          const std::string header = R"({ "__metadata__" : { "k\ud83d\ude00" : "\u0041\/\b" } , "a\u00e9" : )"
                                     R"({ "dtype" : "U16", "shape" : [ 1 , 2 ], "data_offsets" : [ 0 , 4 ] } }  )";
          std::vector<std::uint8_t> out;
          for (int i = 0; i < 8; ++i) out.push_back(static_cast<std::uint8_t>(header.size() >> (8 * i)));
          out.insert(out.end(), header.begin(), header.end());
          for (std::uint8_t b : {1, 2, 3, 4}) out.push_back(b);
          return out;
        }());

  const fs::path cli = dir / "cli_args";
  write_args(cli / "sweep", {"shapes/quick.yaml", "--db", "x.db", "--budget", "40", "--variant", "a,b", "-n"});
  write_args(cli / "numbers", {"--time-cap=0.5", "--target-ci", "1e-3", "--min-samples", "10", "--max-samples", "100000",
                               "--seed", "9223372036854775807", "-d", "3", "--search", "random"});
  write_args(cli / "bad", {"--budget", "nan", "--device", "-1", "--help", "x", "y", "z"});
  std::cout << "make_seeds: wrote seeds under " << dir.string() << "\n";
  return 0;
}
