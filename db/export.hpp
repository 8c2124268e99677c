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

}  // namespace shapetune
