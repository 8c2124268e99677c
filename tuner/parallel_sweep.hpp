// One sweep spread over several GPUs of a host (`shapetune sweep FILE --devices all|0,2,3`).
//
// The file's problems are cut into more shards than there are GPUs (--shard's split, by
// expected time) and queued; one worker per listed GPU takes the next shard when it is free, so
// a fast GPU takes more. Each worker is a `shapetune sweep --shard K/M --device D` process of its
// own writing its own database (DB.parts/shard-K-of-M.db): no two writers ever share a file, a
// crashed worker's database stays intact and resumable, and the parts are combined at the end by
// the same merge a Slurm array uses. A worker that dies is reported and its shard goes back to
// the front of the queue (resuming from what it stored); a GPU whose workers die twice in a row
// takes no more shards. Rerunning the same command resumes every unfinished shard.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

#include "tuner/progress.hpp"

namespace shapetune {

struct ParallelSweepOptions {
  std::string shape_file;
  std::string db_path;             // the merged database; the parts go to db_path + ".parts/"
  std::vector<int> devices;        // one worker per entry; an ordinal may repeat (workers share a GPU)
  int shard_count = 0;             // total shards; 0: 4 per worker, at most one per problem
  std::size_t problem_count = 0;   // the selected problems, to bound shard_count
  std::vector<std::string> sweep_args;  // passed to every worker after FILE (--seed, --budget, ...)
  std::string executable;          // the `shapetune` to run; empty: this executable
  int max_attempts = 3;            // per shard
  // The cost model's seconds of each shard (expected_shard_s with shard_count), for the whole
  // sweep's expected work before every shard has started; empty: what started shards report.
  std::vector<double> shard_expected_s;
  // The progress line (the workers' own are turned off: this one covers them all) and
  // --json-progress, as for one sweep (SweepOptions).
  ProgressStyle progress = ProgressStyle::none;
  double progress_interval_s = ProgressLine::kDefaultPlainIntervalS;
  std::size_t progress_columns = 0;
  std::string json_progress;
};

// Runs the workers, forwards their progress prefixed by worker, merges the parts into db_path.
// Each worker writes tuner/progress_events.hpp's events on a pipe of its own (its fd 3); the
// whole sweep's progress (its line, its ETA, and the "progress" events of --json-progress) is
// counted from them in the cost model's seconds, so it moves within long shards. The workers'
// other events (each shard's sweep_start and sweep_end, candidates, problems) pass through to
// --json-progress as they are.
// Exit codes as `sweep`: 0 every shard done and merged; 1 a shard could not be finished (the
// others are merged; rerun to resume); 2 could not start; 130 interrupted (rerun to resume).
int run_parallel_sweep(const ParallelSweepOptions&, std::ostream& out, std::ostream& err);

}  // namespace shapetune
