#include "tuner/progress_events.hpp"

#include <ostream>

#include "core/json.hpp"
#include "core/json_reader.hpp"
#include "tuner/search.hpp"

namespace shapetune {
namespace {

std::string count(std::size_t n) { return json_integer(static_cast<std::int64_t>(n)); }

// A member that may be null: nullopt for null, else what `read` reads.
template <typename Read>
auto or_null(JsonReader& reader, Read read) -> std::optional<decltype(read())> {
  if (reader.peek() == JsonKind::null) {
    reader.read_null();
    return std::nullopt;
  }
  return read();
}

}  // namespace

std::string sweep_start_event(const SweepStartEvent& e) {
  JsonObject o;
  o.add("event", json_string("sweep_start"))
      .add("sweep", json_integer(e.sweep_id))
      .add("resumed", json_bool(e.resumed))
      .add("shape_file", json_string(e.shape_file))
      .add("device", json_string(e.device_key))
      .add("shard", json_string(e.shard))
      .add("problems", count(e.problems))
      .add("expected_s", json_number(e.expected_s));
  return o.inline_text();
}

std::string candidate_event(const CandidateRecord& r, std::size_t index) {
  JsonObject o;
  o.add("event", json_string("candidate"))
      .add("problem", json_string(r.problem.key()))
      .add("index", count(index))
      .add("variant", json_string(r.variant))
      .add("config", json_string(r.config.key()))
      .add("baseline", json_bool(r.baseline))
      .add("status", json_string(candidate_status_name(r.status)))
      .add("median_us", r.timing ? json_number(r.timing->median_us) : "null")
      .add("race", json_bool(r.timing && is_race_stop_reason(r.timing->stop_reason)))
      .add("reason", json_string(r.reason));
  return o.inline_text();
}

std::string progress_event(const ProgressSnapshot& p) {
  JsonObject o;
  o.add("event", json_string("progress"))
      .add("problems_done", count(p.problems_done))
      .add("problems", count(p.problems))
      .add("expected_s", json_number(p.expected_total_s))
      .add("done_s", json_number(p.expected_done_s))
      .add("elapsed_s", json_number(p.elapsed_s))
      .add("eta_s", json_number(p.seconds_left()));
  return o.inline_text();
}

std::string problem_done_event(const ProblemDoneEvent& e) {
  JsonObject o;
  o.add("event", json_string("problem_done"))
      .add("problem", json_string(e.problem))
      .add("index", count(e.index))
      .add("problems", count(e.problems))
      .add("outcome", json_string(e.outcome));
  if (!e.reason.empty()) o.add("reason", json_string(e.reason));
  const WinnerRecord* w = e.winner ? &*e.winner : nullptr;
  const bool has_baseline = w && !w->best_baseline.empty();
  o.add("winner", w ? json_string(w->variant) : "null")
      .add("config", w ? json_string(w->config.key()) : "null")
      .add("median_us", w ? json_number(w->timing.median_us) : "null")
      .add("baseline", has_baseline ? json_string(w->best_baseline) : "null")
      .add("baseline_us", has_baseline ? json_number(w->baseline_us) : "null")
      .add("speedup", has_baseline ? json_number(w->speedup_vs_baseline) : "null");
  std::vector<std::string> missing;
  for (const auto& f : e.missing_baselines) {
    JsonObject m;
    m.add("variant", json_string(f.variant)).add("reason", json_string(f.reason));
    missing.push_back(m.inline_text());
  }
  std::string array = "[";
  for (std::size_t i = 0; i < missing.size(); ++i) array += (i ? ", " : "") + missing[i];
  o.add("missing_baselines", array + "]").add("seconds", json_number(e.seconds));
  if (e.table_keeps) {
    JsonObject kept;
    kept.add("variant", json_string(e.table_keeps->variant))
        .add("config", json_string(e.table_keeps->config.key()))
        .add("median_us", json_number(e.table_keeps->timing.median_us))
        .add("sweep", json_integer(e.table_keeps->sweep_id));
    o.add("table_keeps", kept.inline_text());
  }
  return o.inline_text();
}

std::string sweep_end_event(const SweepEndEvent& e) {
  JsonObject o;
  o.add("event", json_string("sweep_end"))
      .add("status", json_string(e.status))
      .add("exit_code", json_integer(e.exit_code))
      .add("problems_done", count(e.problems_done))
      .add("problems", count(e.problems))
      .add("without_winner", count(e.without_winner))
      .add("without_baseline", count(e.without_baseline))
      .add("elapsed_s", json_number(e.elapsed_s));
  return o.inline_text();
}

void JsonProgress::write(const std::string& event) {
  // One write of the whole line: a reader on a pipe never sees it cut.
  stream_ << (event + "\n") << std::flush;
}

void JsonProgress::progress(const ProgressSnapshot& snapshot, double now_s, bool force) {
  if (force) throttle_.release();
  if (throttle_.due(now_s)) write(progress_event(snapshot));
}

std::optional<ReadEvent> read_progress_event(std::string_view line) {
  if (line.empty() || line.front() != '{') return std::nullopt;
  try {
    JsonReader reader(line);
    ReadEvent e;
    reader.begin_object();
    std::string name;
    auto number = [&] { return or_null(reader, [&] { return reader.read_number(); }); };
    auto integer = [&] { return or_null(reader, [&] { return reader.read_integer(); }); };
    auto text = [&] { return or_null(reader, [&] { return reader.read_string(); }); };
    while (reader.next_member(name)) {
      if (name == "event") e.event = reader.read_string();
      else if (name == "expected_s") e.expected_s = number();
      else if (name == "done_s") e.done_s = number();
      else if (name == "elapsed_s") e.elapsed_s = number();
      else if (name == "eta_s") e.eta_s = number();
      else if (name == "problems_done") e.problems_done = integer();
      else if (name == "problems") e.problems = integer();
      else if (name == "without_winner") e.without_winner = integer();
      else if (name == "without_baseline") e.without_baseline = integer();
      else if (name == "exit_code") e.exit_code = integer();
      else if (name == "problem") e.problem = text();
      else if (name == "status") e.status = text();
      else reader.skip_value();
    }
    reader.expect_end();
    if (e.event.empty()) return std::nullopt;
    return e;
  } catch (const JsonError&) {
    return std::nullopt;
  }
}

}  // namespace shapetune
