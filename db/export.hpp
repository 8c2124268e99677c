// The dispatch table as files other tools read.
#pragma once

#include <string>
#include <vector>

#include "core/records.hpp"
#include "db/store.hpp"

namespace shapetune {

// {"schema": "shapetune-dispatch/1", "devices": [...], "winners": [...]} — stable key order.
std::string export_json(const std::vector<DeviceFingerprint>& devices, const std::vector<WinnerRecord>& winners);
// One header line, then one line per winner; RFC 4180 quoting.
std::string export_csv(const std::vector<WinnerRecord>& winners);

// Where a header export came from; written into its top comment.
struct HeaderExportSource {
  std::string command_line;  // the generating command, e.g. "shapetune export --db x.db --format header"
  int schema_version = 0;    // the database's schema (user_version)
  std::string db_path;
};

// A self-contained C++17 header (no library to link, no SQLite) for model runners: namespace
// shapetune_dispatch, struct Entry, kWinners[] (one entry per winner, in the given order),
// kWinnerCount and a constexpr find(device_key, primitive, dtype, shape). Non-finite times and
// speedups are written as -1; an empty table is a single sentinel entry with kWinnerCount == 0.
std::string export_header(const std::vector<WinnerRecord>& winners, const HeaderExportSource& source);

}  // namespace shapetune
