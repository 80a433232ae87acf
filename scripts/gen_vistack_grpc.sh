#!/bin/sh
# Regenerate vistack's gRPC stubs from transcoder.proto (grpcio-tools, mypy-protobuf: the dev
# extra). The generated modules are checked in; run this after editing the .proto.
set -eu
cd "$(dirname "$0")/../src"
PY="${PYTHON:-../.venv/bin/python}"
"$PY" -m grpc_tools.protoc -I . \
  --python_out=. --grpc_python_out=. --mypy_out=. --mypy_grpc_out=. \
  aigc_hub/pipelines/vistack/transcoder/transcoder.proto
"$PY" -c 'from importlib.metadata import version as v; print("generated with grpcio-tools", v("grpcio-tools"), "and mypy-protobuf", v("mypy-protobuf"))'
