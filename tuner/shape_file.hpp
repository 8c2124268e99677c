// YAML shape matrices (shapes/*.yaml): which problems a sweep visits.
#pragma once

#include <map>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "core/types.hpp"
#include "tuner/search.hpp"

namespace shapetune {

class Catalogue;

// "path:line:column: what was wrong; what was expected" (line and column 1-based).
class ShapeFileError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// One problem to tune, with what the file said about it.
struct PlannedProblem {
  Problem problem;
  Tolerance tolerance;                // the primitive's default unless the file overrides it
  bool tolerance_overridden = false;
  std::vector<std::string> variants;  // empty: every variant of the primitive
  SearchOptions search;               // the matrix's `search:`; exhaustive without one
  int source_line = 0;                // line of the matrix entry it came from
};

struct ShapeFile {
  std::string path;
  std::string sha256;       // of the file's bytes
  std::string name;         // optional `name:` field
  std::string description;  // optional `description:` field
  // Expanded problems in file order (matrix by matrix; shapes in expansion order, dtypes
  // inner). A problem listed twice is kept once, at its first place.
  std::vector<PlannedProblem> problems;
};

ShapeFile load_shape_file(const std::string& path, const Catalogue&);
ShapeFile parse_shape_text(std::string_view text, const std::string& path_for_messages, const Catalogue&);

}  // namespace shapetune
