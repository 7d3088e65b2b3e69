#!/usr/bin/env bash
# Installs what mlaps needs to build and test, from Debian's archive only. Idempotent:
# packages already present are left alone and `apt-get update` runs only when something
# is missing. Usage: tools/setup.sh [--with-hipcc] [--with-fuzz]
set -euo pipefail

packages=(g++ bazel-bootstrap bazel-bootstrap-source libabsl-dev libgtest-dev libgmock-dev
  libbenchmark-dev libprotobuf-dev protobuf-compiler
  python3-numpy python3-pytest python3-setuptools python3-wheel python3-venv
  python-is-python3  # Bazel 4.2's py_test stub starts with `#!/usr/bin/env python`
  xz-utils)  # tools/sm90_variant_ab_test: packed GPU bundles (tar -J)
for arg in "$@"; do
  case "$arg" in
    --with-hipcc) packages+=(hipcc) ;;  # Debian's HIP 5.2 (clang 15): AMD compile checks
    --with-fuzz) packages+=(clang libclang-rt-14-dev) ;;
    *) echo "setup.sh: unknown option '$arg' (known: --with-hipcc, --with-fuzz)" >&2; exit 2 ;;
  esac
done

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages present"
else
  echo "setup: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  if ! $sudo apt-get install -y -q --no-install-recommends "${missing[@]}" >/tmp/mlaps-setup.log 2>&1; then
    echo "setup: apt-get update (package lists are stale or missing)"
    $sudo apt-get update -q >>/tmp/mlaps-setup.log 2>&1 || true
    if ! $sudo apt-get install -y -q --no-install-recommends "${missing[@]}" >>/tmp/mlaps-setup.log 2>&1; then
      echo "setup: could not install: ${missing[*]}" >&2
      tail -n 15 /tmp/mlaps-setup.log >&2
      echo "setup: full log in /tmp/mlaps-setup.log" >&2
      exit 1
    fi
  fi
  echo "setup: installed ${#missing[@]} package(s)"
fi

if [ -x /usr/local/cuda/bin/nvcc ]; then
  echo "setup: CUDA found: $(/usr/local/cuda/bin/nvcc --version | tail -n 2 | head -n 1)"
else
  echo "setup: no /usr/local/cuda/bin/nvcc: GPU (--config=cuda) builds are skipped"
fi
