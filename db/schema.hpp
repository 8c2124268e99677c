// The database schema as an ordered list of migrations. Migration i (1-based) takes a database
// from user_version i-1 to i; the store applies the missing ones, each in its own transaction.
// Append new migrations; never edit one that has shipped, since databases already carry it.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

namespace shapetune {

// PRAGMA application_id of every shapetune database: 'SHPT'. Migration 1 sets it.
inline constexpr std::int32_t kApplicationId = 0x53485054;

struct Migration {
  int version;                   // the user_version once it is applied
  std::string_view description;  // for error messages
  std::string_view sql;          // one or more statements; no BEGIN/COMMIT, the store wraps them
};

std::span<const Migration> schema_migrations();

}  // namespace shapetune
