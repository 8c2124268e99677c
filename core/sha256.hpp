// SHA-256 of a byte string as 64 lowercase hex digits (FIPS 180-4). Used to identify
// shape files and sweeps; not for anything secret.
#pragma once

#include <string>
#include <string_view>

namespace shapetune {
std::string sha256_hex(std::string_view bytes);
}
