# Sourced by bench/compare_peers.sh and bench/serve_peers.sh (run from the repository root): the
# peers' pinned commits and how they are exported and built.
#   checkout NAME REPO COMMIT        prints the tree of COMMIT exported into $PEERS_DIR/src
#   build_peer NAME TREE LEVEL TARGET  prints the path of TARGET (llama-bench, llama-server)
#                                    built at LEVEL (avx512, avx2) into $PEERS_DIR/NAME-LEVEL
# REPO is a git repository (a clone, or a bare mirror such as the tool library's `fetch`) or a
# URL to clone. Builds are cached: a target is built once per source tree and level, and
# ccache (when present) shares the objects between the targets of one build directory.

# Pinned peer commits (the snapshots the figures in docs/benchmarks.md were measured with).
LLAMA_COMMIT=c392e5094deaf2d1a7c18683214f007fad3fe42b   # llama.cpp, 2025-02-20
IK_COMMIT=8337e4cd3861406fc04e0854b1409cd1b027fbc9      # ik_llama.cpp, 2026-08-15
LLAMA_SRC=https://github.com/ggml-org/llama.cpp
IK_SRC=https://github.com/ikawrakow/ik_llama.cpp
PEERS_DIR=build/peers

checkout() {  # name repo commit
  local name=$1 repo=$2 commit=$3 dest="$PEERS_DIR/src/$1-${3:0:12}"
  if [[ ! -f "$dest/CMakeLists.txt" ]]; then
    rm -rf "$dest" "$dest.tmp"
    mkdir -p "$dest.tmp"
    if [[ -d "$repo" ]]; then
      local gitdir="$repo"
      [[ -d "$repo/.git" ]] && gitdir="$repo/.git"
      # Every file of the commit the repository holds: a snapshot mirror may lack its largest
      # blobs (test models, web assets), which no build of llama-bench reads; they are named.
      python3 - "$gitdir" "$commit" "$dest.tmp" <<'PY'
import os, subprocess, sys
gitdir, commit, dest = sys.argv[1:]
tree = subprocess.run(["git", "--git-dir", gitdir, "ls-tree", "-r", "-z", commit],
                      check=True, capture_output=True).stdout.split(b"\0")
cat = subprocess.Popen(["git", "--git-dir", gitdir, "cat-file", "--batch"],
                       stdin=subprocess.PIPE, stdout=subprocess.PIPE)
missing = []
for line in filter(None, tree):
    meta, path = line.split(b"\t", 1)
    mode, kind, sha = meta.split()
    if kind != b"blob":
        continue
    cat.stdin.write(sha + b"\n")
    cat.stdin.flush()
    header = cat.stdout.readline().split()
    if header[-1] == b"missing":
        missing.append(path.decode())
        continue
    data = cat.stdout.read(int(header[2]))
    cat.stdout.read(1)
    out = os.path.join(dest, path.decode())
    os.makedirs(os.path.dirname(out), exist_ok=True)
    if mode == b"120000":
        os.symlink(data.decode(), out)
        continue
    with open(out, "wb") as f:
        f.write(data)
    if mode == b"100755":
        os.chmod(out, 0o755)
cat.stdin.close()
cat.wait()
if missing:
    print(f"[peers] {len(missing)} file(s) absent from {gitdir}: "
          + ", ".join(missing[:4]) + (" ..." if len(missing) > 4 else ""), file=sys.stderr)
PY
    else
      git clone --quiet --filter=blob:none --no-checkout "$repo" "$dest.tmp" >&2
      git -C "$dest.tmp" checkout --quiet "$commit"
    fi
    mv "$dest.tmp" "$dest"
  fi
  echo "$dest"
}

build_peer() {  # name tree level target -> path of the target's binary
  local name=$1 src=$2 level=$3 target=$4 dir="$PEERS_DIR/$1-$3"
  # The server's folder is configured only for llama-server (a snapshot mirror may lack its web
  # assets); switching the option between targets reconfigures but recompiles nothing of ggml.
  local server=OFF
  [[ $target == llama-server ]] && server=ON
  local flags=(-DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF -DLLAMA_CURL=OFF
               -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=$server -DGGML_OPENMP=ON)
  if [[ $level == avx512 ]]; then
    flags+=(-DGGML_NATIVE=ON -DGGML_AVX512=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON)
  else
    flags+=(-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON
            -DGGML_AVX512=OFF -DGGML_AVX512_VNNI=OFF -DGGML_AVX512_BF16=OFF)
  fi
  command -v ccache >/dev/null && flags+=(-DCMAKE_C_COMPILER_LAUNCHER=ccache
                                          -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  # ($dir/source: what builds before llama-server was a target wrote for llama-bench.)
  local built
  built="$(cat "$dir/source-$target" 2>/dev/null ||
           { [[ $target == llama-bench ]] && cat "$dir/source" 2>/dev/null; } || true)"
  if [[ ! -x "$dir/bin/$target" || "$built" != "$src" ]]; then
    echo "[peers] building $name $target ($level) in $dir" >&2
    mkdir -p "$dir"
    cmake -S "$src" -B "$dir" -G Ninja "${flags[@]}" >"$dir.configure.log" 2>&1 ||
      { tail -20 "$dir.configure.log" >&2; return 1; }
    ninja -C "$dir" "$target" >"$dir.build-$target.log" 2>&1 ||
      { tail -20 "$dir.build-$target.log" >&2; return 1; }
    echo "$src" >"$dir/source-$target"
  fi
  echo "$dir/bin/$target"
}
