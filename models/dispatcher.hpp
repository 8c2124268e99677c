// What a model runner calls: the dispatch table of this device, resolved against the
// catalogue, and a launch through whichever variant it names.
#pragma once

#include <cuda_runtime_api.h>

#include <map>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "core/types.hpp"
#include "db/dispatch.hpp"
#include "variants/catalogue.hpp"

namespace shapetune {

class Dispatcher {
 public:
  // Loads the winners of the device with `device_key` (DeviceFingerprint::key()) from the
  // database at `db_path`, read-only. Throws StoreError for an unusable file.
  Dispatcher(const std::string& db_path, const std::string& device_key, DeviceLimits limits);
  // No database: every lookup falls back to the primitive's default variant.
  explicit Dispatcher(DeviceLimits limits);

  DispatchChoice lookup(const Problem&) const;
  std::size_t tuned_problems() const { return table_.size(); }
  const DispatchTable& table() const { return table_; }
  const DeviceLimits& limits() const { return limits_; }
  const Variant& variant_of(const Problem&, const DispatchChoice&) const;
  // The other devices (their names) this database has winners of the problem's primitive and
  // dtype for: where a lookup fell back to the default, the table was tuned elsewhere.
  std::vector<std::string> tuned_elsewhere(const Problem&) const;

 private:
  DispatchTable table_;
  DeviceLimits limits_;
  std::map<std::string, std::set<std::string>> elsewhere_;  // "primitive/dtype" -> device names
};

}  // namespace shapetune
