// A variant's tunable parameters: named axes of allowed values and a constraint between them.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/types.hpp"

namespace shapetune {

struct ParamAxis {
  std::string name;
  std::vector<std::int64_t> values;
  std::string description;  // one line, shown by `shapetune list`
};

class ParamSpace {
 public:
  using Constraint = std::function<bool(const Config&)>;

  ParamSpace() = default;
  ParamSpace(std::vector<ParamAxis> axes, Constraint constraint = {}, std::string constraint_text = {})
      : axes_(std::move(axes)), constraint_(std::move(constraint)), constraint_text_(std::move(constraint_text)) {}

  const std::vector<ParamAxis>& axes() const { return axes_; }
  const std::string& constraint_text() const { return constraint_text_; }

  // Every point of the cartesian product that passes the constraint, in lexicographic order
  // of the axes as declared. A space with no axes has exactly one point: the empty config.
  std::vector<Config> enumerate() const;
  // Size of the cartesian product before the constraint (what a blind search would face).
  std::int64_t raw_size() const;
  // Whether a config names exactly this space's axes, with allowed values, passing the constraint.
  bool contains(const Config&) const;

 private:
  std::vector<ParamAxis> axes_;
  Constraint constraint_;
  std::string constraint_text_;
};

}  // namespace shapetune
