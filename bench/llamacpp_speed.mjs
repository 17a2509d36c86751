#!/usr/bin/env node
// Prefill and decode speed of the real llama.cpp (node-llama-cpp's prebuilt CPU binaries, the
// same engine tests/llamacpp cross-checks against) on one GGUF file, as llama-bench measures
// them: a prompt of random token ids evaluated in 512-token batches, then greedy tokens one at
// a time. Prints one JSON line: {llama_cpp, runs: [{prefill_tokens_per_s, decode_tokens_per_s}]}.
//
// Usage: node bench/llamacpp_speed.mjs --model M.gguf [--threads 2] [--prompt-tokens 512]
//          [--gen-tokens 128] [--runs 1] [--kv-cache f16]
// Needs tests/llamacpp/node_modules (scripts/setup_llamacpp.sh).
import {createRequire} from "node:module";
import path from "node:path";
import process from "node:process";
import {fileURLToPath, pathToFileURL} from "node:url";

const args = {model: null, threads: 2, promptTokens: 512, genTokens: 128, runs: 1, kvCache: "F16"};
for (let i = 2; i < process.argv.length; ++i) {
  const a = process.argv[i];
  const v = () => process.argv[++i];
  if (a === "--model") args.model = v();
  else if (a === "--threads") args.threads = Number(v());
  else if (a === "--prompt-tokens") args.promptTokens = Number(v());
  else if (a === "--gen-tokens") args.genTokens = Number(v());
  else if (a === "--runs") args.runs = Number(v());
  else if (a === "--kv-cache") args.kvCache = v().toUpperCase();
  else {
    process.stderr.write(`llamacpp_speed: unknown argument ${a}\n`);
    process.exit(2);
  }
}
if (!args.model) {
  process.stderr.write("llamacpp_speed: --model is required\n");
  process.exit(2);
}

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(path.join(here, "..", "tests", "llamacpp", "package.json"));
const {getLlama, LlamaLogLevel} = await import(pathToFileURL(require.resolve("node-llama-cpp")).href);
const llama = await getLlama({gpu: false, build: "never", logLevel: LlamaLogLevel.error});
const model = await llama.loadModel({modelPath: args.model, gpuLayers: 0});
const context = await model.createContext({
  contextSize: args.promptTokens + args.genTokens + 16,
  batchSize: 512,
  threads: args.threads,
  flashAttention: false,
  experimentalKvCacheKeyType: args.kvCache,
  experimentalKvCacheValueType: args.kvCache,
});
const sequence = context.getSequence();
// The prompt: ordinary text tokenized by the model, repeated to --prompt-tokens ids.
const text = "Once upon a time there was a little girl who lived in a small house near the " +
  "forest. Every morning she went outside to play with her dog, and they ran through the " +
  "green grass until the sun was high in the sky. ";
const ids = Array.from(model.tokenize(text, false));
const prompt = [];
while (prompt.length < args.promptTokens) prompt.push(ids[prompt.length % ids.length]);
const runs = [];
for (let r = 0; r < args.runs; ++r) {
  await sequence.clearHistory();
  const t0 = performance.now();
  let first = 0;
  let n = 0;
  for await (const token of sequence.evaluate(prompt, {temperature: 0})) {
    void token;
    ++n;
    if (n === 1) first = performance.now();
    if (n > args.genTokens) break;
  }
  const end = performance.now();
  runs.push({prefill_tokens_per_s: args.promptTokens / ((first - t0) / 1000),
             decode_tokens_per_s: args.genTokens / ((end - first) / 1000)});
  process.stderr.write(`[llama.cpp] run ${r + 1}/${args.runs}: ` +
    `prefill ${runs.at(-1).prefill_tokens_per_s.toFixed(1)} tok/s, ` +
    `decode ${runs.at(-1).decode_tokens_per_s.toFixed(2)} tok/s\n`);
}
await context.dispose();
await model.dispose();
await llama.dispose();
process.stdout.write(JSON.stringify({llama_cpp: llama.llamaCppRelease, threads: args.threads,
  prompt_tokens: args.promptTokens, gen_tokens: args.genTokens, runs}) + "\n");
