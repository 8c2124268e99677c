#include "tuner/progress.hpp"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <ostream>
#include <sstream>

namespace shapetune {
namespace {

double non_negative(double x) { return std::isfinite(x) && x > 0 ? x : 0.0; }

}  // namespace

double estimate_seconds_left(double expected_total_s, double expected_done_s, double elapsed_s) {
  const double total = non_negative(expected_total_s), done = non_negative(expected_done_s);
  const double rest = std::max(0.0, total - done);
  if (rest == 0) return 0;
  // The measured rate from the first finished piece on: the nominal rates are often off by a
  // factor (the host's float64 references, a slower GPU), which one piece already shows.
  if (done == 0) return rest;
  // A rate that overflows says nothing usable either.
  const double left = rest * (non_negative(elapsed_s) / done);
  return std::isfinite(left) ? left : rest;
}

std::string format_duration(double seconds) {
  const double s = non_negative(seconds);
  std::ostringstream text;
  text << std::fixed;
  if (s < 90) text << std::setprecision(0) << s << " s";
  else if (s < 90 * 60) text << std::setprecision(1) << s / 60 << " min";
  else text << std::setprecision(1) << s / 3600 << " h";
  return text.str();
}

bool Throttle::due(double now_s) {
  if (!release_ && now_s < next_due_s_) return false;
  release_ = false;
  next_due_s_ = now_s + interval_s_;
  return true;
}

double ProgressSnapshot::seconds_left() const {
  const double left = estimate_seconds_left(expected_total_s, expected_done_s, elapsed_s);
  return budget_left_s ? std::min(left, non_negative(*budget_left_s)) : left;
}

std::optional<double> ProgressSnapshot::model_ratio() const {
  if (non_negative(expected_done_s) == 0) return std::nullopt;
  return non_negative(elapsed_s) / expected_done_s;
}

std::string progress_text(const ProgressSnapshot& p) {
  std::ostringstream text;
  text << p.problems_done << "/" << p.problems << " problems";
  const double total = non_negative(p.expected_total_s);
  if (total > 0) {
    const double share = std::clamp(non_negative(p.expected_done_s) / total, 0.0, 1.0);
    text << ", " << static_cast<int>(std::floor(share * 100)) << "% of the expected work";
  }
  text << " in " << format_duration(p.elapsed_s) << ", about " << format_duration(p.seconds_left()) << " left";
  if (const auto ratio = p.model_ratio())
    text << " (" << std::fixed << std::setprecision(2) << *ratio << "x the cost model)";
  else
    text << " (the cost model's guess)";
  if (p.budget_left_s && *p.budget_left_s < estimate_seconds_left(p.expected_total_s, p.expected_done_s, p.elapsed_s))
    text << ", capped by --budget";
  if (!p.current.empty()) text << " | " << p.current;
  return text.str();
}

ProgressLine::ProgressLine(std::ostream& stream, ProgressStyle style, double start_s, double plain_interval_s,
                           std::size_t columns)
    : stream_(stream),
      style_(style),
      columns_(columns),
      throttle_(style == ProgressStyle::plain ? Throttle(plain_interval_s, start_s + plain_interval_s)
                                              : Throttle(kRedrawIntervalS, start_s)) {}

void ProgressLine::update(const ProgressSnapshot& snapshot, double now_s) {
  if (style_ == ProgressStyle::none || !throttle_.due(now_s)) return;
  std::string text = progress_text(snapshot);
  if (style_ == ProgressStyle::plain) {
    stream_ << "progress: " << text << std::endl;
    return;
  }
  // The last column stays empty: a line that fills it makes some terminals wrap.
  if (columns_ > 1 && text.size() > columns_ - 1) text.resize(columns_ - 1);
  stream_ << "\r" << text << "\033[K" << std::flush;
  drawn_ = true;
}

void ProgressLine::clear() {
  if (!drawn_) return;
  stream_ << "\r\033[K" << std::flush;
  drawn_ = false;
  throttle_.release();
}

}  // namespace shapetune
