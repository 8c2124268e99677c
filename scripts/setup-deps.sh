#!/usr/bin/env bash
# Installs what shapetune needs from Debian's packages, if missing. Safe to run again.
# The CUDA toolkit and cuDNN come from NVIDIA's repository; this script checks for them and
# says what to install, but does not add that repository itself.
set -euo pipefail

packages=(cmake ninja-build g++ pkg-config libyaml-cpp-dev libsqlite3-dev libgtest-dev libbenchmark-dev zlib1g-dev)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]})); then
  if ! command -v apt-get >/dev/null; then
    echo "setup-deps: missing ${missing[*]} and no apt-get here; install them another way" >&2
    exit 1
  fi
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "setup-deps: installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Optional: gnuplot renders `shapetune report`'s plots. The report works without it (it writes
# the .gp scripts and data, and says how to render them), so failing to install it is no error.
if ! command -v gnuplot >/dev/null; then
  if command -v apt-get >/dev/null; then
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    echo "setup-deps: installing gnuplot-nox (optional, for report plots)"
    { $sudo apt-get update -qq &&
      DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends gnuplot-nox >/dev/null; } ||
      echo "setup-deps: could not install gnuplot-nox; \`shapetune report\` will write plot scripts without rendering them" >&2
  else
    echo "setup-deps: gnuplot not found (optional, renders \`shapetune report\` plots)" >&2
  fi
fi

# Optional: Fashion-MNIST for `shapetune train mlp` (31 MB; the tests that need it skip without it).
[ -d /usr/share/datasets/fashion-mnist ] ||
  echo "setup-deps: optional: apt-get install dataset-fashion-mnist for \`shapetune train mlp\` (or its --data DIR)" >&2

# Optional: the Jargon File (0.6 MB gzipped), the default text of `shapetune train lstm|gru`; the test that reads it skips without it.
[ -f /usr/share/doc/jargon-text/jargon.txt.gz ] ||
  echo "setup-deps: optional: apt-get install jargon-text for \`shapetune train lstm|gru\` (or its --data FILE)" >&2

nvcc_path=$(command -v nvcc || true)
[ -n "$nvcc_path" ] || [ ! -x /usr/local/cuda/bin/nvcc ] || nvcc_path=/usr/local/cuda/bin/nvcc
if [ -z "$nvcc_path" ]; then
  echo "setup-deps: nvcc not found. Install the CUDA Toolkit 12 or 13 (NVIDIA's cuda-toolkit-13-0 package)," >&2
  echo "            or put its bin/ on PATH." >&2
  exit 1
fi
cudnn_header=""
for d in "$(dirname "$(dirname "$nvcc_path")")/include" /usr/include /usr/include/x86_64-linux-gnu /usr/local/include; do
  [ -f "$d/cudnn.h" ] && cudnn_header="$d/cudnn.h" && break
done
if [ -z "$cudnn_header" ]; then
  echo "setup-deps: cuDNN 9 not found (cudnn.h). Install NVIDIA's cudnn9-cuda-13 package." >&2
  exit 1
fi
echo "setup-deps: ok (nvcc: $nvcc_path, cuDNN: $cudnn_header)"
