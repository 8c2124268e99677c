#!/usr/bin/env bash
# Submits a sharded sweep to Slurm: a job array of N shards (sweep-array.sbatch, one GPU each) and
# a merge job (merge.sbatch) that runs once every task has succeeded (--dependency=afterok).
#
#   scripts/slurm/submit.sh SHAPES N RESULTS_DIR [--tasks LIST] [-- SBATCH_ARGS...]
#
#   SHAPES        the shape file; N the number of shards; RESULTS_DIR a shared directory (created)
#                 that receives shard-K-of-N.db, merged.db and logs/
#   --tasks LIST  submit only these array tasks (sbatch --array syntax: 3 | 2,5 | 1-64%8) instead
#                 of 1-N: how a failed or timed-out shard is resubmitted (it resumes from its
#                 database); a new merge job follows them
#   SBATCH_ARGS   sbatch options for the sweep tasks, overriding the #SBATCH defaults in
#                 sweep-array.sbatch, e.g. -- -p gpu --gres=gpu:h100:1 --time=02:00:00 -A proj
#
# Environment: SHAPETUNE (default shapetune; the path every node runs), SWEEP_ARGS (extra sweep
# options, e.g. "--strategy halving --budget 3600"), SHAPETUNE_SWEEP (replaces "$SHAPETUNE sweep";
# for the CPU test), LOCAL_DIR (node-local directory), MERGE_SBATCH_ARGS (sbatch options for the
# merge job alone, e.g. "-p cpu"). Options for both jobs can also go in sbatch's own input
# variables, e.g. SBATCH_ACCOUNT=proj SBATCH_PARTITION=gpu.
# The sweep's binary is asked for the plan of shard 1/N first (sweep --dry-run, no GPU) when it
# can be found here, so that a bad shape file fails now rather than in the queue; SUBMIT_NO_CHECK=1
# skips that.
set -euo pipefail

usage() {
  sed -n '5,13p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}
die() {
  echo "submit: error: $*" >&2
  exit 2
}

(($# >= 3)) || usage
shapes_arg=$1 shards=$2 results_arg=$3
shift 3
tasks=
sbatch_args=()
while (($#)); do
  case $1 in
    --tasks)
      (($# >= 2)) || usage
      tasks=$2
      shift 2
      ;;
    --tasks=*)
      tasks=${1#--tasks=}
      shift
      ;;
    --)
      shift
      sbatch_args=("$@")
      break
      ;;
    *) usage ;;
  esac
done

[[ $shards =~ ^[1-9][0-9]*$ ]] || die "N must be a positive integer, not '$shards'"
[[ -r $shapes_arg ]] || die "cannot read the shape file $shapes_arg"
command -v sbatch >/dev/null || die "sbatch is not on PATH (run this on a Slurm login node)"
tasks=${tasks:-1-$shards}

script_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
absolute() { # a path made absolute, without resolving links (the nodes must see the same path)
  case $1 in /*) printf '%s\n' "$1" ;; *) printf '%s\n' "$PWD/$1" ;; esac
}
SHAPES=$(absolute "$shapes_arg")
mkdir -p -- "$results_arg/logs"
RESULTS_DIR=$(cd "$results_arg" && pwd)
SHARDS=$shards
SHAPETUNE=${SHAPETUNE:-shapetune}
if [[ $SHAPETUNE == */* ]]; then SHAPETUNE=$(absolute "$SHAPETUNE"); fi
SHAPETUNE_SLURM_DIR=$script_dir # where the jobs' messages say submit.sh is
export SHAPES RESULTS_DIR SHARDS SHAPETUNE SHAPETUNE_SLURM_DIR
# Passed by name: sbatch then takes the value from this environment, so values may hold commas.
exports=ALL,SHAPES,RESULTS_DIR,SHARDS,SHAPETUNE,SHAPETUNE_SLURM_DIR
if [[ -n ${SHAPETUNE_SWEEP:-} ]]; then
  if [[ $SHAPETUNE_SWEEP == */* && -e $SHAPETUNE_SWEEP ]]; then SHAPETUNE_SWEEP=$(absolute "$SHAPETUNE_SWEEP"); fi
  export SHAPETUNE_SWEEP
  exports+=,SHAPETUNE_SWEEP
fi
for name in SWEEP_ARGS LOCAL_DIR; do
  if [[ -n ${!name:-} ]]; then
    export "${name?}"
    exports+=,$name
  fi
done

# A bad shape file or shard count fails here, not after waiting in the queue.
if [[ ${SUBMIT_NO_CHECK:-0} != 1 ]] && command -v "$SHAPETUNE" >/dev/null; then
  if ! plan=$("$SHAPETUNE" sweep "$SHAPES" --dry-run --shard "1/$SHARDS" 2>&1); then
    printf '%s\n' "$plan" >&2
    die "$SHAPETUNE sweep $SHAPES --dry-run --shard 1/$SHARDS failed; nothing submitted"
  fi
fi

array_out=$(sbatch --parsable --array="$tasks" --export="$exports" \
  --output="$RESULTS_DIR/logs/sweep-%A_%a.out" \
  "${sbatch_args[@]}" "$script_dir/sweep-array.sbatch") || die "sbatch refused the sweep array; nothing submitted"
array_id=${array_out%%;*}

merge_args=()
if [[ -n ${MERGE_SBATCH_ARGS:-} ]]; then read -r -a merge_args <<<"$MERGE_SBATCH_ARGS"; fi
# --kill-on-invalid-dep: if a task fails, the merge job is cancelled instead of waiting forever.
if ! merge_out=$(sbatch --parsable --dependency="afterok:$array_id" --kill-on-invalid-dep=yes \
  --export="$exports" --output="$RESULTS_DIR/logs/merge-%j.out" \
  "${merge_args[@]}" "$script_dir/merge.sbatch"); then
  echo "submit: error: sbatch refused the merge job; the sweep array $array_id is queued. Options the" >&2
  echo "submit: merge job needs (partition, account) go in MERGE_SBATCH_ARGS or SBATCH_ACCOUNT/SBATCH_PARTITION." >&2
  echo "submit: once it has finished, merge with: sbatch --export=$exports $script_dir/merge.sbatch" >&2
  exit 1
fi
merge_id=${merge_out%%;*}

first_task=${tasks%%[!0-9]*}
shown_sbatch_args=
if ((${#sbatch_args[@]})); then shown_sbatch_args=" --$(printf ' %q' "${sbatch_args[@]}")"; fi
# The by-hand commands set the variables in front of sbatch, which exports them by name.
env_prefix=
IFS=, read -r -a names <<<"${exports#ALL,}"
submit_prefix=
for name in "${names[@]}"; do
  env_prefix+="$name=$(printf '%q' "${!name}") "
  case $name in SHAPES | RESULTS_DIR | SHARDS | SHAPETUNE_SLURM_DIR) ;; *) submit_prefix+="$name=$(printf '%q' "${!name}") " ;; esac
done
cat <<EOF
sweep array: $array_id (tasks $tasks of $SHARDS shards of $SHAPES)
merge job:   $merge_id (runs after every task has succeeded)
results:     $RESULTS_DIR (shard-K-of-$SHARDS.db, merged.db; logs in $RESULTS_DIR/logs)

watch:       squeue -j $array_id,$merge_id
             tail -f $RESULTS_DIR/logs/sweep-${array_id}_${first_task}.out
if a task fails or times out, the merge job is cancelled; resubmit that task (it resumes from its
copied database) and a new merge job with:
             ${submit_prefix}$script_dir/submit.sh $(printf '%q %q %q' "$SHAPES" "$SHARDS" "$RESULTS_DIR") --tasks K$shown_sbatch_args
or by hand:  ${env_prefix}sbatch --array=K --export=$exports [SBATCH_ARGS] $script_dir/sweep-array.sbatch
             ${env_prefix}sbatch --dependency=afterok:JOBID --export=$exports $script_dir/merge.sbatch
then:        shapetune winners --db $RESULTS_DIR/merged.db
EOF
