#!/usr/bin/env bash
# End-to-end test of `kvserve serve` (built-in default model) on 127.0.0.1:
#   1. the official `openai` npm package suite (tests/e2e/openai_client_test.mjs);
#   2. `curl -N` streaming (SSE lines, [DONE]) and a curl error case;
#   3. SIGTERM while a stream is in flight: the stream completes, the server exits 0;
#   4. structured outputs and tool calls (tests/e2e/structured_output_test.mjs, outputs checked
#      with ajv) on a second server with --enable-auto-tool-choice and a Qwen3 chat template;
#   5. /v1/embeddings through the openai package's embeddings.create
#      (tests/e2e/embeddings_test.mjs) on a third server with --embedding-model (an mkmodel
#      all-minilm-l6-v2) and --semantic-cache, and on a fourth that serves that model alone.
# Usage: run_e2e.sh KVSERVE_BINARY WORK_DIR
# The openai package is installed by scripts/setup_e2e.sh into tests/e2e/node_modules; when it
# is missing the test fails (set KVSERVE_SKIP_E2E=1 to skip instead, exit 77, except under
# KVSERVE_REQUIRE_ASSETS=1, as in CI, where a missing dependency always fails).
set -uo pipefail
BIN="$1"
WORK="$2"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
mkdir -p "$WORK"

source "$HERE/../test_dependency.sh"

if [[ ! -d "$HERE/node_modules/openai" || ! -d "$HERE/node_modules/ajv-formats" ]] || ! command -v node >/dev/null || ! command -v curl >/dev/null; then
  what="node, curl or tests/e2e/node_modules/{openai,ajv,ajv-formats} (run scripts/setup_e2e.sh)"
  [[ "${KVSERVE_SKIP_E2E:-0}" == 1 ]] && missing_dependency "$what; KVSERVE_SKIP_E2E=1"
  echo "FAIL: missing test dependency: $what"
  exit 1
fi

PORT="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
BASE="http://127.0.0.1:$PORT"
KEY="sk-e2e-test"
MODEL="e2e-model"
LOG="$WORK/serve.log"

start_server() {
  "$BIN" serve --port "$PORT" --api-key "$KEY" --served-model-name "$MODEL" --threads 2 \
    --max-num-seqs 8 "$@" >"$LOG" 2>&1 &
  SERVER_PID=$!
  for _ in $(seq 1 600); do
    if curl -sf "$BASE/health" >/dev/null 2>&1; then return 0; fi
    if ! kill -0 "$SERVER_PID" 2>/dev/null; then echo "FAIL: the server exited at start-up"; cat "$LOG"; exit 1; fi
    sleep 0.1
  done
  echo "FAIL: the server did not become healthy in 60 s"; cat "$LOG"; kill -9 "$SERVER_PID"; exit 1
}
stop_server_expect_0() {
  kill -TERM "$SERVER_PID"
  local rc=0
  wait "$SERVER_PID" || rc=$?
  if [[ $rc != 0 ]]; then echo "FAIL: the server exited with $rc after SIGTERM"; cat "$LOG"; exit 1; fi
}
trap 'kill -9 "${SERVER_PID:-0}" 2>/dev/null' EXIT

TEMPLATE="$HERE/../data/chat_templates/llama-2-chat.jinja"
start_server --chat-template "$TEMPLATE"
grep -q "listening on $BASE" "$LOG" || { echo "FAIL: no 'listening on' line in the banner"; cat "$LOG"; exit 1; }
grep -q "chat template: $TEMPLATE" "$LOG" || { echo "FAIL: --chat-template not in the banner"; cat "$LOG"; exit 1; }

echo "== chat template: the server renders what 'kvserve template' prints"
cat >"$WORK/messages.json" <<'JSON'
[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"},
 {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "Tell me more"}]
JSON
"$BIN" template --chat-template "$TEMPLATE" --messages "$WORK/messages.json" --add-generation-prompt \
  --bos-token "<|endoftext|>" --eos-token "<|endoftext|>" >"$WORK/rendered.txt"
want=$(python3 -c 'import json,sys; print(json.dumps({"prompt": open(sys.argv[1]).read(), "add_special_tokens": False}))' "$WORK/rendered.txt" |
  curl -s "$BASE/tokenize" -H "Authorization: Bearer $KEY" -H "Content-Type: application/json" -d @- |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["tokens"])')
got=$(python3 -c 'import json,sys; print(json.dumps({"messages": json.load(open(sys.argv[1]))}))' "$WORK/messages.json" |
  curl -s "$BASE/tokenize" -H "Authorization: Bearer $KEY" -H "Content-Type: application/json" -d @- |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["tokens"])')
if [[ -z "$want" || "$want" != "$got" ]]; then
  echo "FAIL: chat rendering differs: $want vs $got"; cat "$WORK/rendered.txt"; exit 1
fi
echo "ok: $(wc -c <"$WORK/rendered.txt") bytes of Llama 2 prompt, same tokens"
code=$(curl -s -o "$WORK/refused.json" -w '%{http_code}' "$BASE/v1/chat/completions" \
  -H "Authorization: Bearer $KEY" -H "Content-Type: application/json" \
  -d '{"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]}')
if [[ "$code" != 400 ]] || ! grep -q "roles must alternate" "$WORK/refused.json"; then
  echo "FAIL: the template's raise_exception should be a 400, got $code"; cat "$WORK/refused.json"; exit 1
fi
echo "ok: the template's refusal is a 400 with its message"

echo "== openai npm package suite"
if ! KVSERVE_BASE_URL="$BASE" KVSERVE_API_KEY="$KEY" KVSERVE_MODEL="$MODEL" \
    node --test --test-reporter=spec "$HERE/openai_client_test.mjs"; then
  echo "FAIL: openai client suite"; tail -20 "$LOG"; exit 1
fi

echo "== curl -N streaming"
curl -sN "$BASE/v1/chat/completions" -H "Authorization: Bearer $KEY" -H "Content-Type: application/json" \
  -d "{\"model\": \"$MODEL\", \"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"max_tokens\": 5, \"stream\": true, \"ignore_eos\": true}" \
  >"$WORK/curl_stream.txt"
data_lines=$(grep -c '^data: ' "$WORK/curl_stream.txt")
if [[ "$(grep '^data: ' "$WORK/curl_stream.txt" | tail -1)" != "data: [DONE]" || $data_lines -lt 4 ]]; then
  echo "FAIL: curl stream"; cat "$WORK/curl_stream.txt"; exit 1
fi
if grep -v '^data: ' "$WORK/curl_stream.txt" | grep -q .; then
  echo "FAIL: a stream line that is not 'data: ...' or blank"; cat "$WORK/curl_stream.txt"; exit 1
fi
echo "ok: $data_lines SSE data lines ending in [DONE]"
code=$(curl -s -o "$WORK/curl_err.json" -w '%{http_code}' "$BASE/v1/completions" \
  -H "Authorization: Bearer $KEY" -H "Content-Type: application/json" -d '{"prompt": "x", "temperature": "hot"}')
if [[ "$code" != 400 ]] || ! grep -q '"param":"temperature"' "$WORK/curl_err.json"; then
  echo "FAIL: expected 400 naming temperature, got $code"; cat "$WORK/curl_err.json"; exit 1
fi
echo "ok: 400 with an OpenAI error object"

echo "== SIGTERM with a stream in flight"
curl -sN "$BASE/v1/completions" -H "Authorization: Bearer $KEY" -H "Content-Type: application/json" \
  -d '{"prompt": "x", "max_tokens": 300, "stream": true, "ignore_eos": true}' >"$WORK/curl_drain.txt" &
CURL_PID=$!
for _ in $(seq 1 200); do
  grep -q '^data: ' "$WORK/curl_drain.txt" 2>/dev/null && break
  sleep 0.05
done
stop_server_expect_0
wait "$CURL_PID"
if [[ "$(grep '^data: ' "$WORK/curl_drain.txt" | tail -1)" != "data: [DONE]" ]]; then
  echo "FAIL: the in-flight stream did not complete during the drain"; tail -3 "$WORK/curl_drain.txt"; exit 1
fi
grep -q "SIGTERM received" "$LOG" || { echo "FAIL: no SIGTERM line in the log"; cat "$LOG"; exit 1; }
echo "ok: in-flight stream finished, exit status 0"

echo "== structured outputs and tool calls (openai + ajv)"
start_server --chat-template "$HERE/../data/chat_templates/Qwen-Qwen3-0.6B.jinja" \
  --enable-auto-tool-choice
grep -q "tool_choice auto: hermes parser (from the chat template)" "$LOG" ||
  { echo "FAIL: the tool-call parser is not in the banner"; cat "$LOG"; exit 1; }
if ! KVSERVE_BASE_URL="$BASE" KVSERVE_API_KEY="$KEY" KVSERVE_MODEL="$MODEL" \
    node --test --test-reporter=spec "$HERE/structured_output_test.mjs"; then
  echo "FAIL: structured output suite"; tail -20 "$LOG"; exit 1
fi
stop_server_expect_0

echo "== embeddings (openai embeddings.create)"
EMBEDDER="$WORK/all-minilm-l6-v2-f16.gguf"
"$BIN" mkmodel --preset all-minilm-l6-v2 --dtype f16 -o "$EMBEDDER" >"$WORK/mkmodel.log" 2>&1 ||
  { echo "FAIL: mkmodel all-minilm-l6-v2"; cat "$WORK/mkmodel.log"; exit 1; }
EMBEDDING_MODEL="e2e-embedder"
start_server --embedding-model "$EMBEDDER" --embedding-model-name "$EMBEDDING_MODEL" --semantic-cache
grep -q "embedding model '$EMBEDDING_MODEL' (/v1/embeddings): 384 dims, mean pooling" "$LOG" ||
  { echo "FAIL: the embedding model is not in the banner"; cat "$LOG"; exit 1; }
grep -q "and similar requests (cosine >= 0.96 by '$EMBEDDING_MODEL')" "$LOG" ||
  { echo "FAIL: the semantic cache does not name its embedding model"; cat "$LOG"; exit 1; }
if ! KVSERVE_BASE_URL="$BASE" KVSERVE_API_KEY="$KEY" KVSERVE_MODEL="$MODEL"     KVSERVE_EMBEDDING_MODEL="$EMBEDDING_MODEL" node --test --test-reporter=spec "$HERE/embeddings_test.mjs"; then
  echo "FAIL: embeddings suite (beside a generator)"; tail -20 "$LOG"; exit 1
fi
stop_server_expect_0
start_server --model "$EMBEDDER"
MODEL_ALONE="$MODEL"  # --served-model-name names the embedding model when it is served alone
grep -q "embedding model '$MODEL_ALONE' (/v1/embeddings only)" "$LOG" ||
  { echo "FAIL: no embeddings-only banner"; cat "$LOG"; exit 1; }
if ! KVSERVE_BASE_URL="$BASE" KVSERVE_API_KEY="$KEY" KVSERVE_MODEL="$MODEL"     KVSERVE_EMBEDDING_MODEL="$MODEL_ALONE" KVSERVE_EMBEDDINGS_ONLY=1     node --test --test-reporter=spec "$HERE/embeddings_test.mjs"; then
  echo "FAIL: embeddings suite (embedding model alone)"; tail -20 "$LOG"; exit 1
fi
stop_server_expect_0
echo "PASS"
