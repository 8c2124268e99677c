// Aligned plain-text tables for the CLI.
#pragma once

#include <string>
#include <vector>

namespace shapetune::cli {

class Table {
 public:
  explicit Table(std::vector<std::string> header) : header_(std::move(header)) {}
  void add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  bool empty() const { return rows_.empty(); }
  void clear() { rows_.clear(); }
  std::string render() const;  // header, a rule, the rows; columns padded to their widest cell

 private:
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
};

}  // namespace shapetune::cli
