#!/usr/bin/env bash
# Builds lanes with the real CUDA device (build tag cuda).
#
#   CUDA_HOME=/usr/local/cuda scripts/build-cuda.sh          # build ./...
#   scripts/build-cuda.sh vet                                # go vet -tags cuda ./...
#   scripts/build-cuda.sh test-binaries DIR                  # driver.test, embedder.test, callhost.test, lanedemo and lanehost (cuda) into DIR
#
# CUDA_HOME needs include/cuda.h and lib64/stubs/libcuda.so (or lib64/libcuda.so);
# the binaries then need the driver's libcuda.so.1 at run time. Every cgo
# compile force-includes cuda/driver/compat.h (CUDA 12+/13 headers vs
# gorgonia.org/cu).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
if [ ! -f "$CUDA_HOME/include/cuda.h" ] && [ -f "$HOME/.cache/cuda/include/cuda.h" ]; then
  CUDA_HOME=$HOME/.cache/cuda
fi
if [ ! -f "$CUDA_HOME/include/cuda.h" ]; then
  echo "no $CUDA_HOME/include/cuda.h: set CUDA_HOME to a CUDA toolkit" >&2; exit 2
fi
export CGO_ENABLED=1
export CGO_CFLAGS="-I$CUDA_HOME/include -include $root/cuda/driver/compat.h"
export CGO_LDFLAGS="-L$CUDA_HOME/lib64/stubs -L$CUDA_HOME/lib64"
case "${1:-build}" in
  build) go build -tags cuda ./... ;;
  vet) go vet -tags cuda ./... && (cd examples/embedder && go vet -tags cuda ./...) ;;
  test-binaries)
    out=${2:?usage: build-cuda.sh test-binaries DIR}
    mkdir -p "$out"
    out=$(cd "$out" && pwd)
    go test -c -tags cuda -o "$out/driver.test" ./cuda/driver
    (cd examples/embedder && go test -c -tags cuda -o "$out/embedder.test" .)
    go build -tags cuda -o "$out/lanedemo" ./cmd/lanedemo
    go build -tags cuda -o "$out/lanehost" ./cmd/lanehost
    go test -c -tags cuda -o "$out/callhost.test" ./examples/callhost
    ;;
  *) echo "unknown step $1" >&2; exit 2 ;;
esac
