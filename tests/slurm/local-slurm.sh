#!/usr/bin/env bash
# End-to-end test of scripts/slurm/ on a one-node Slurm cluster started here, on localhost:
# munged, slurmctld and slurmd with a generated configuration in a temporary directory (no
# systemd, no cgroups, no accounting database). It submits a sweep of N=3 shards with
# scripts/slurm/submit.sh, waits for the array and the dependent merge job, and checks the shard
# databases, their .ok markers and merged.db. Then shard 2 is resubmitted with a sweep that fails
# (its merge job must be cancelled and merged.db left alone) and resubmitted again as a user would
# (it must resume from its database, and the new merge job must run). Last, $CHECK_CMD if set; with
# the fixture sweep and no CHECK_CMD, merged.db's winners must equal an unsharded fixture run's.
# Prints one PASS, FAIL or SKIP line.
#
#   tests/slurm/local-slurm.sh [SHAPETUNE [FIXTURE_SWEEP [SHAPES]]]
#
#   SHAPETUNE      the shapetune binary (arg 1 or $SHAPETUNE): `merge`, `winners`, `sweep --dry-run`
#   FIXTURE_SWEEP  the CPU fixture_sweep binary (arg 2 or $SHAPETUNE_SWEEP): what each task runs in
#                  place of `shapetune sweep`. Without it the tasks run the real sweep (needs a GPU)
#   SHAPES         the shape file (arg 3 or $SHAPES; default shapes/quick.yaml)
#
# Environment: CHECK_CMD (run with bash -c after the jobs, with RESULTS_DIR, MERGED_DB, SHAPES,
# SHARDS, SHAPETUNE and SHAPETUNE_SWEEP exported; non-zero fails the test), LOCAL_SLURM_TIMEOUT
# (seconds to wait for the jobs, default 300), LOCAL_SLURM_KEEP=1 (keep the temporary directory),
# LOCAL_SLURM_TMP (where to make it, default /tmp; munge needs every directory above its socket to
# be searchable by all).
# Exit status: 0 PASS, 1 FAIL, 77 SKIP (Slurm is not installed and cannot be installed here).
# Installs slurmctld, slurmd, slurm-client and munge with apt-get when missing (needs root).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
started=$SECONDS
shards=3
timeout=${LOCAL_SLURM_TIMEOUT:-300}

SHAPETUNE=${1:-${SHAPETUNE:-}}
SHAPETUNE_SWEEP=${2:-${SHAPETUNE_SWEEP:-}}
SHAPES=${3:-${SHAPES:-$repo/shapes/quick.yaml}}

say() { echo "local-slurm: $*"; }
skip() {
  say "SKIP: $*"
  exit 77
}

# ---- the verdict, the diagnostics and the teardown ------------------------------------------

work=
pids=()        # daemons started here, last first when stopping
jobs_here=()   # job ids submitted here
verdict=       # set by pass/fail; the EXIT trap prints the line

dump_logs() {
  [[ -n $work && -d $work ]] || return 0
  local f
  for f in "$work"/results/logs/*.out "$work"/log/*.stderr "$work"/log/jobcomp.txt \
    "$work"/log/munged.log "$work"/log/slurmctld.log "$work"/log/slurmd.log; do
    [[ -s $f ]] || continue
    echo "----- $f (last 30 lines)"
    grep -v -i -E 'pmix|mpi:' -- "$f" | tail -n 30
  done
}

# shellcheck disable=SC2317  # run by the trap
teardown() {
  local status=$?
  trap - EXIT INT TERM
  if [[ -z $verdict ]]; then
    if ((status == 77)); then
      verdict=skip
    else
      verdict="FAIL: exited with status $status before the checks finished"
      dump_logs
    fi
  fi
  if ((${#jobs_here[@]})); then
    scancel "${jobs_here[@]}" >/dev/null 2>&1 || true
    for _ in $(seq 50); do # the jobs' processes end before the daemons do
      [[ -n $(squeue -h -o %i 2>/dev/null) ]] || break
      sleep 0.1
    done
  fi
  local i pid
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
    pid=${pids[i]}
    kill -TERM "$pid" 2>/dev/null || continue
    for _ in $(seq 50); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  if [[ -n $work && -d $work ]]; then
    if [[ ${LOCAL_SLURM_KEEP:-0} == 1 ]]; then
      say "kept $work"
    else
      rm -rf -- "$work"
    fi
  fi
  case $verdict in
    skip) exit 77 ;;
    PASS*)
      say "$verdict"
      exit 0
      ;;
    *)
      say "$verdict"
      exit 1
      ;;
  esac
}
trap teardown EXIT
trap 'verdict="FAIL: interrupted"; exit 1' INT TERM

fail() {
  say "error: $*" >&2
  dump_logs >&2
  verdict="FAIL: $*"
  exit 1
}

# ---- Slurm and munge, installed when missing ----------------------------------------------------

needed=(munged munge mungekey slurmctld slurmd sbatch squeue sinfo scontrol scancel)
have_all() {
  local c
  for c in "${needed[@]}"; do command -v "$c" >/dev/null || return 1; done
}
if ! have_all; then
  [[ $(id -u) == 0 ]] || skip "Slurm and munge are not installed, and installing them needs root"
  command -v apt-get >/dev/null || skip "Slurm and munge are not installed, and there is no apt-get"
  say "installing slurmctld slurmd slurm-client munge with apt-get"
  install_log=$(mktemp)
  packages=(slurmctld slurmd slurm-client munge)
  apt_install() { apt-get install -y -qq --no-install-recommends -o DPkg::Lock::Timeout=120 "${packages[@]}"; }
  export DEBIAN_FRONTEND=noninteractive
  if ! apt_install >"$install_log" 2>&1; then
    if ! { apt-get update -qq && apt_install; } >>"$install_log" 2>&1; then
      tail -n 15 "$install_log" >&2
      rm -f "$install_log"
      skip "could not install ${packages[*]} with apt-get (output above)"
    fi
  fi
  rm -f "$install_log"
  have_all || skip "installed the packages, but one of ${needed[*]} is still missing"
fi

# ---- the binaries under test ------------------------------------------------------------------

[[ -n $SHAPETUNE ]] || fail "no shapetune binary: pass it as argument 1 or set SHAPETUNE"
[[ -x $SHAPETUNE ]] || fail "shapetune binary $SHAPETUNE is not an executable file"
SHAPETUNE=$(cd "$(dirname "$SHAPETUNE")" && pwd)/$(basename "$SHAPETUNE")
if [[ -n $SHAPETUNE_SWEEP ]]; then
  [[ -x $SHAPETUNE_SWEEP ]] || fail "fixture sweep binary $SHAPETUNE_SWEEP is not an executable file"
  SHAPETUNE_SWEEP=$(cd "$(dirname "$SHAPETUNE_SWEEP")" && pwd)/$(basename "$SHAPETUNE_SWEEP")
else
  say "note: no fixture sweep given, the tasks run the real \`shapetune sweep\` (a GPU is needed)"
fi
[[ -r $SHAPES ]] || fail "cannot read the shape file $SHAPES"
SHAPES=$(cd "$(dirname "$SHAPES")" && pwd)/$(basename "$SHAPES")

# Nothing from a surrounding Slurm job or a user's sbatch defaults may leak into this cluster.
while read -r name; do unset "$name"; done < <(compgen -v | grep -E '^(SLURM|SBATCH|SALLOC|SRUN)_' || true)

# ---- a one-node cluster in a temporary directory ------------------------------------------------

work=$(mktemp -d "${LOCAL_SLURM_TMP:-/tmp}/local-slurm.XXXXXX")
chmod 755 "$work" # munged refuses a socket in a directory that not everyone can search
mkdir -p "$work"/{log,state,spool,dev,munge,munge-key,results}
chmod 755 "$work/munge"
chmod 700 "$work/munge-key"

user=$(id -un)
node=$(hostname -s 2>/dev/null || uname -n)
node=${node%%.*}
cpus=$(nproc)
gpus=$shards # fake GPUs: one per shard, so that the --gres=gpu:1 default is exercised

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
ports=()
for ((p = 20000 + RANDOM % 20000; ${#ports[@]} < 2 && p < 65000; p++)); do
  if port_free "$p"; then ports+=("$p"); fi
done
((${#ports[@]} == 2)) || fail "found no two free TCP ports on 127.0.0.1"

# File-less GPUs are dropped by slurmd, so each fake GPU is an empty file: slurmd logs that it is
# no device file and counts it all the same.
for ((g = 0; g < gpus; g++)); do : >"$work/dev/fakegpu$g"; done
cat >"$work/gres.conf" <<EOF
NodeName=$node Name=gpu File=$work/dev/fakegpu[0-$((gpus - 1))]
EOF
cat >"$work/slurm.conf" <<EOF
# Generated by tests/slurm/local-slurm.sh: one node on localhost, no cgroups, no accounting.
ClusterName=localtest
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=${ports[0]}
SlurmdPort=${ports[1]}
SlurmUser=$user
SlurmdUser=$user
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$work/munge/munge.socket
StateSaveLocation=$work/state
SlurmdSpoolDir=$work/spool
SlurmctldPidFile=$work/slurmctld.pid
SlurmdPidFile=$work/slurmd.pid
SlurmctldLogFile=$work/log/slurmctld.log
SlurmdLogFile=$work/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$work/log/jobcomp.txt
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
MpiDefault=none
ReturnToService=2
MinJobAge=600
GresTypes=gpu
NodeName=$node NodeAddr=127.0.0.1 CPUs=$cpus Gres=gpu:$gpus State=UNKNOWN
PartitionName=local Nodes=$node Default=YES MaxTime=INFINITE State=UP
EOF
export SLURM_CONF=$work/slurm.conf

say "starting munged, slurmctld and slurmd ($work, ports ${ports[*]})"
mungekey --create --keyfile="$work/munge-key/munge.key" >/dev/null 2>&1 ||
  { dd if=/dev/urandom of="$work/munge-key/munge.key" bs=1024 count=1 status=none && chmod 600 "$work/munge-key/munge.key"; }
munged -F --key-file="$work/munge-key/munge.key" --socket="$work/munge/munge.socket" \
  --pid-file="$work/munge/munged.pid" --seed-file="$work/munge-key/munged.seed" \
  --log-file="$work/log/munged.log" >"$work/log/munged.stderr" 2>&1 &
pids+=($!)
for _ in $(seq 50); do
  if munge -S "$work/munge/munge.socket" -n 2>/dev/null | unmunge -S "$work/munge/munge.socket" >/dev/null 2>&1; then break; fi
  kill -0 "${pids[0]}" 2>/dev/null || fail "munged exited at start"
  sleep 0.1
done
munge -S "$work/munge/munge.socket" -n 2>/dev/null | unmunge -S "$work/munge/munge.socket" >/dev/null 2>&1 ||
  fail "munged does not answer on $work/munge/munge.socket"

slurmctld -D -i >"$work/log/slurmctld.stderr" 2>&1 &
pids+=($!)
slurmd -D -N "$node" >"$work/log/slurmd.stderr" 2>&1 &
pids+=($!)

state=
for ((i = 0; i < 300; i++)); do
  state=$(sinfo -h -N -n "$node" -o %t 2>/dev/null || true)
  [[ $state == idle ]] && break
  for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null || fail "a daemon exited at start (pid $pid)"; done
  case $state in inval* | drain* | down*) if ((i > 50)); then break; fi ;; esac
  sleep 0.1
done
[[ $state == idle ]] ||
  fail "the node $node is not idle after $((i / 10)) s (sinfo: '${state:-no answer}'; $(scontrol show node "$node" 2>/dev/null | grep -o 'Reason=.*' || true))"
say "node $node idle after $((SECONDS - started)) s: $cpus CPUs, $gpus fake GPUs"

# ---- the sweep, as a cluster user submits it ---------------------------------------------------

results=$work/results
export SHAPETUNE
# The tasks' node-local directories (sweep-array.sbatch uses $TMPDIR) stay inside $work: job ids
# start at 1 on every such cluster, so two of these tests at once would otherwise share them.
mkdir -p "$work/node-tmp"
export TMPDIR=$work/node-tmp
if [[ -n $SHAPETUNE_SWEEP ]]; then export SHAPETUNE_SWEEP; fi

# Submits, records the two job ids in array_id and merge_id.
submit() {
  local out
  if ! out=$("$repo/scripts/slurm/submit.sh" "$SHAPES" "$shards" "$results" "$@" 2>&1); then
    printf '%s\n' "$out" >&2
    fail "scripts/slurm/submit.sh $* failed"
  fi
  printf '%s\n' "$out" | sed 's/^/  | /'
  array_id=$(printf '%s\n' "$out" | sed -n 's/^sweep array: \([0-9][0-9]*\).*/\1/p')
  merge_id=$(printf '%s\n' "$out" | sed -n 's/^merge job: *\([0-9][0-9]*\).*/\1/p')
  [[ -n $array_id && -n $merge_id ]] || fail "no job ids in submit.sh's output"
  jobs_here+=("$array_id" "$merge_id")
}

# Waits until neither job is pending or running, at most until the deadline.
wait_jobs() {
  local deadline=$((started + timeout))
  while [[ -n $(squeue -h -o %i -j "$array_id,$merge_id" 2>/dev/null) ]]; do
    ((SECONDS < deadline)) || fail "jobs $array_id and $merge_id still queued or running after ${timeout} s"
    sleep 0.5
  done
}

# The job's records (one per array task), from `scontrol show job` or, once purged, the job
# completion log.
job_records() {
  local id=$1 records
  records=$(scontrol -o show job "$id" 2>/dev/null || true)
  if [[ -z $records ]]; then records=$(grep -E "(JobId|ArrayJobId)=$id " "$work/log/jobcomp.txt" || true); fi
  printf '%s' "$records"
}
summary() { grep -o -E '\<(JobId|ArrayTaskId|JobState|Reason|ExitCode)=[^ ]*' | paste -sd' ' -; }

# Every record of the job is in this state with this exit code.
expect_job() {
  local id=$1 what=$2 state=$3 exit_code=$4 records bad
  records=$(job_records "$id")
  [[ -n $records ]] || fail "no record of $what (job $id)"
  bad=$(printf '%s\n' "$records" | grep -v -E "JobState=$state .*ExitCode=$exit_code( |$)" || true)
  [[ -z $bad ]] || fail "$what (job $id) is not $state with exit code $exit_code: $(printf '%s\n' "$bad" | summary)"
}

# Every shard has its database; the shards named have their .ok marker; no temporary copy is left.
expect_shard_files() {
  local k
  for ((k = 1; k <= shards; k++)); do
    [[ -s $results/shard-$k-of-$shards.db ]] || fail "no shard database $results/shard-$k-of-$shards.db"
  done
  for k in "$@"; do
    [[ -f $results/shard-$k-of-$shards.ok ]] || fail "no .ok marker for shard $k"
  done
  if compgen -G "$results/.*.tmp*" >/dev/null; then fail "temporary copies left in $results: $(ls -A "$results")"; fi
}

# 1. The sweep as a cluster user submits it: an array of 3 and a merge job that waits for it.
say "submitting $shards shards of $SHAPES"
submit
wait_jobs
expect_job "$array_id" "the sweep array" COMPLETED 0:0
expect_job "$merge_id" "the merge job" COMPLETED 0:0
expect_shard_files 1 2 3
[[ -s $results/merged.db ]] || fail "no $results/merged.db after the merge job"
first_array=$array_id first_merge=$merge_id
say "array $array_id and merge $merge_id done after $((SECONDS - started)) s"

# 2. Shard 2 resubmitted with a sweep that fails after sweeping: the task fails, its database is
# still copied back, its .ok marker is gone, and the merge job is cancelled, not left waiting.
flaky=$work/flaky-sweep
# shellcheck disable=SC2016  # the script is written as it is
printf '%s\n' '#!/usr/bin/env bash' \
  '# The sweep, then a failure for shard 2 (made by tests/slurm/local-slurm.sh).' \
  'status=0' \
  'read -r -a sweep <<<"$REAL_SWEEP"' \
  '"${sweep[@]}" "$@" || status=$?' \
  'for arg in "$@"; do' \
  '  if [[ $arg == 2/* ]]; then echo "flaky-sweep: failing shard $arg on purpose" >&2; exit 1; fi' \
  'done' \
  'exit "$status"' >"$flaky"
chmod +x "$flaky"
if [[ -n $SHAPETUNE_SWEEP ]]; then real_sweep=$SHAPETUNE_SWEEP; else real_sweep="$SHAPETUNE sweep"; fi
merged_before=$(cksum <"$results/merged.db")
say "resubmitting shard 2 with a sweep that fails"
REAL_SWEEP=$real_sweep SHAPETUNE_SWEEP=$flaky submit --tasks 2
wait_jobs
expect_job "$array_id" "the failing shard" FAILED 1:0
expect_job "$merge_id" "the merge job after a failed shard" CANCELLED 0:0
[[ ! -e $results/shard-2-of-$shards.ok ]] || fail "the failed shard 2 still has its .ok marker"
expect_shard_files 1 3
[[ $(cksum <"$results/merged.db") == "$merged_before" ]] || fail "merged.db changed although its merge job was cancelled"
grep -q 'failing shard 2/3 on purpose' "$results/logs/sweep-${array_id}_2.out" ||
  fail "the failing shard's log does not show the failure"

# 3. Shard 2 resubmitted as submit.sh says: it resumes from its database, and the new merge runs.
say "resubmitting shard 2 again (it resumes from its database) with a new merge job"
submit --tasks 2
wait_jobs
expect_job "$array_id" "the resubmitted shard" COMPLETED 0:0
expect_job "$merge_id" "the merge after the resubmitted shard" COMPLETED 0:0
expect_shard_files 1 2 3
[[ -s $results/merged.db ]] || fail "no $results/merged.db after the second merge"
grep -q 'resuming from' "$results/logs/sweep-${array_id}_2.out" ||
  fail "the resubmitted shard did not start from $results/shard-2-of-$shards.db"

# With the fixture sweep (deterministic synthetic timings), the merged table must be exactly the
# one an unsharded run of the same file gives.
if [[ -z ${CHECK_CMD:-} && -n ${SHAPETUNE_SWEEP:-} ]] && command -v python3 >/dev/null; then
  CHECK_CMD='"$SHAPETUNE_SWEEP" sweep "$SHAPES" --db "$TMPDIR/unsharded.db" >/dev/null &&
    python3 "'"$repo"'/bench/compare_winners.py" "$TMPDIR/unsharded.db" "$MERGED_DB" | tail -n 1 &&
    python3 "'"$repo"'/bench/compare_winners.py" "$TMPDIR/unsharded.db" "$MERGED_DB" >/dev/null'
fi
if [[ -n ${CHECK_CMD:-} ]]; then
  say "running CHECK_CMD: $CHECK_CMD"
  RESULTS_DIR=$results MERGED_DB=$results/merged.db SHARDS=$shards SHAPES=$SHAPES \
    bash -c "$CHECK_CMD" || fail "CHECK_CMD failed: $CHECK_CMD"
fi

verdict="PASS: $shards shards (array $first_array) and a dependent merge (job $first_merge); a failed shard cancelled its merge; resubmitted, it resumed and merged; $((SECONDS - started)) s"
