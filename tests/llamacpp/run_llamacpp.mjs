#!/usr/bin/env node
// Runs the real llama.cpp (prebuilt CPU binaries shipped by node-llama-cpp) on a GGUF file and
// prints one JSON object on stdout:
//   llama_cpp: {repo, release}       the llama.cpp release node-llama-cpp was built from
//   metadata:  what llama.cpp's loader reports (architecture, n_params, n_vocab, n_ctx_train, ...)
//   cases:     per prompt: prompt_ids (llama.cpp's tokenizer, BOS added when the model asks),
//              greedy_ids (N tokens, pure argmax of the logits, step by step, no sampler, no
//              penalties, EOS does not stop), top2_margins (logit[top1] - logit[top2] per step).
// The KV cache is F32 by default (llama.cpp's own default is F16, which rounds K and V to half
// precision and makes near-ties of random-weight models flip); --kv-cache f16 restores it.
// Threads default to 1: llama.cpp's workers spin-wait, and on a busy 2-core machine 2 threads
// made a 256-token stories260K run take 12 s instead of 1.7 s.
//
// Usage:
//   node run_llamacpp.mjs --model M.gguf [--n 16] [--threads 1] [--tokenize-only]
//                         [--kv-cache f32|f16] [--prompt TEXT]... [--ids 1,2,3]...
// --ids feeds these token ids as the prompt (no tokenization, no BOS added).
// Exit status: 0 on success, 1 on bad usage, 2 when llama.cpp refuses the model (the error text
// is in the JSON as "error").
import process from "node:process";
import {pathToFileURL} from "node:url";

function parseArgs(argv) {
  const args = {model: null, n: 16, threads: 1, tokenizeOnly: false, kvCache: "F32", inputs: []};
  for (let i = 0; i < argv.length; ++i) {
    const a = argv[i];
    const value = () => {
      if (i + 1 >= argv.length) throw new Error(`missing value after ${a}`);
      return argv[++i];
    };
    if (a === "--model") args.model = value();
    else if (a === "--n") args.n = Number.parseInt(value(), 10);
    else if (a === "--threads") args.threads = Number.parseInt(value(), 10);
    else if (a === "--kv-cache") args.kvCache = value().toUpperCase();
    else if (a === "--tokenize-only") args.tokenizeOnly = true;
    else if (a === "--prompt") args.inputs.push({prompt: value()});
    else if (a === "--ids") {
      const text = value();
      const ids = text === "" ? [] : text.split(",").map((s) => Number.parseInt(s, 10));
      if (ids.some((t) => !Number.isInteger(t) || t < 0)) throw new Error(`bad --ids ${text}`);
      args.inputs.push({ids});
    } else throw new Error(`unknown argument ${a}`);
  }
  if (!args.model) throw new Error("--model is required");
  if (!Number.isInteger(args.n) || args.n < 0) throw new Error("--n must be >= 0");
  return args;
}

// Pulls "key = value" pairs out of llama.cpp's print_info / load_tensors log lines.
function parseLoaderLog(chunks) {
  const info = {};
  for (const line of chunks.join("\n").split("\n")) {
    const m = /^\s*(?:print_info|llm_load_print_meta):\s*(.+?)\s*=\s*(.+?)\s*$/.exec(line);
    if (m) info[m[1]] = m[2];
  }
  return info;
}

// The loader's log lines arrive asynchronously after loadModel resolves (on a loaded machine,
// after a fixed 10 ms wait they were sometimes missing: n_layer came back null). Waits until the
// parsed log holds every one of `keys`, at most 5 s, and returns the parsed log. The model's
// lines (n_layer, model params) come before the vocabulary's (vocab type, n_vocab), so waiting
// for n_layer alone once returned a log without the vocabulary (CI, 2026-12-08).
const kLoaderLogKeys = ["n_layer", "model params", "n_vocab", "vocab type"];
async function loaderLogWith(logLines, keys) {
  for (let waited_ms = 0; ; waited_ms += 10) {
    const log = parseLoaderLog(logLines);
    if (keys.every((k) => log[k] !== undefined) || waited_ms >= 5000) return log;
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

// Starts llama.cpp (CPU only, prebuilt binaries, never compiles). Its log text is collected in
// the returned object's logLines (raw chunks, not printed).
export async function openLlama() {
  const {getLlama, LlamaLogLevel} = await import("node-llama-cpp");
  const logLines = [];
  const llama = await getLlama({
    gpu: false,
    build: "never",
    logLevel: LlamaLogLevel.info,
    logger: (level, message) => {
      logLines.push(String(message));
    },
  });
  return {llama, logLines};
}

// Loads args.model, tokenizes / generates as described at the top of this file and returns the
// JSON-able result ("error" set when llama.cpp refuses the model). An input may carry its own n
// (number of greedy tokens; 0 = tokenize only) and, for --ids inputs, `compare`: another engine's
// greedy tokens, whose logit gap to llama.cpp's top-1 is returned per step (compare_gaps).
export async function runModel({llama, logLines}, args) {
  logLines.length = 0;
  const out = {llama_cpp: llama.llamaCppRelease, model_path: args.model};
  let model;
  try {
    model = await llama.loadModel({modelPath: args.model, gpuLayers: 0});
  } catch (e) {
    out.error = String(e && e.message ? e.message : e);
    out.log_tail = logLines.join("\n").split("\n").filter((l) => /error|fail|invalid|unknown|wrong/i.test(l)).slice(-20);
    return out;
  }
  const log = await loaderLogWith(logLines, kLoaderLogKeys);
  out.metadata = {
    architecture: model.fileInfo.metadata?.general?.architecture ?? null,
    description: model.typeDescription,
    n_params_log: log["model params"] ?? null,         // llama.cpp's own count, e.g. "4.62 M"
    n_params_insights: model.fileInsights.totalParameters,
    file_type: log["file type"] ?? null,
    n_vocab: log["n_vocab"] !== undefined ? Number(log["n_vocab"]) : null,
    vocab_type: log["vocab type"] ?? null,
    n_ctx_train: model.trainContextSize,
    n_embd: model.embeddingVectorSize,
    n_layer: log["n_layer"] !== undefined ? Number(log["n_layer"]) : null,
    n_head: log["n_head"] ?? null,
    n_head_kv: log["n_head_kv"] ?? null,
    n_embd_head_k: log["n_embd_head_k"] ?? null,
    rope_freq_base: log["freq_base_train"] ?? null,
    f_norm_rms_eps: log["f_norm_rms_eps"] ?? null,
    bos: model.tokens.bos,
    eos: model.tokens.eos,
    add_bos: model.tokens.shouldPrependBosToken,
  };

  const prompts = args.inputs.map((input) => {
    if (input.ids) return {ids: input.ids, compare: input.compare, n: args.tokenizeOnly ? 0 : (input.n ?? args.n)};
    const ids = Array.from(model.tokenize(input.prompt, false));
    if (model.tokens.shouldPrependBosToken && model.tokens.bos !== null) ids.unshift(model.tokens.bos);
    return {prompt: input.prompt, ids, n: args.tokenizeOnly ? 0 : (input.n ?? args.n)};
  });

  out.cases = [];
  const maxLength = Math.max(0, ...prompts.map((p) => (p.n > 0 ? p.ids.length + p.n : 0)));
  let context = null;
  let sequence = null;
  if (maxLength > 0) {
    context = await model.createContext({
      contextSize: Math.min(model.trainContextSize, maxLength + 8),
      batchSize: 512,
      threads: args.threads,
      flashAttention: false,
      experimentalKvCacheKeyType: args.kvCache,
      experimentalKvCacheValueType: args.kvCache,
    });
    sequence = context.getSequence();
  }
  {
    for (const p of prompts) {
      if (p.n === 0) {
        out.cases.push({prompt: p.prompt, prompt_ids: p.ids});
        continue;
      }
      const record = {prompt: p.prompt, prompt_ids: p.ids, greedy_ids: [], top2_margins: []};
      if (p.ids.length === 0) {
        record.error = "empty prompt";
        out.cases.push(record);
        continue;
      }
      await sequence.clearHistory();
      // compare: another engine's tokens; its logit gap to llama.cpp's top-1 is recorded per step.
      const compare = p.compare ?? [];
      if (compare.length > 0) record.compare_gaps = [];
      const wantFor = (step) => ({generateNext: {logits: {filter: {
        tokens: step < compare.length ? [compare[step]] : [], includeTop: 2}}}});
      let input = p.ids.map((t, i) => (i === p.ids.length - 1 ? [t, wantFor(0)] : t));
      for (let step = 0; step < p.n; ++step) {
        const results = await sequence.controlledEvaluate(input);
        const logits = results[input.length - 1]?.next?.logits;
        if (!logits || logits.size === 0) throw new Error("llama.cpp returned no logits");
        const top = Array.from(logits.entries()).sort((a, b) => b[1] - a[1] || a[0] - b[0]);
        record.greedy_ids.push(top[0][0]);
        record.top2_margins.push(top.length > 1 ? top[0][1] - top[1][1] : null);
        if (step < compare.length) record.compare_gaps.push(top[0][1] - logits.get(compare[step]));
        input = [[top[0][0], wantFor(step + 1)]];
      }
      out.cases.push(record);
    }
    if (context) await context.dispose();
  }
  await model.dispose();
  return out;
}

async function main() {
  let args;
  try {
    args = parseArgs(process.argv.slice(2));
  } catch (e) {
    process.stderr.write(`run_llamacpp: ${e.message}\n`);
    process.exit(1);
  }
  const handle = await openLlama();
  const out = await runModel(handle, args);
  await handle.llama.dispose();
  process.stdout.write(JSON.stringify(out) + "\n");
  process.exit(out.error ? 2 : 0);
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  main().catch((e) => {
    process.stderr.write(`run_llamacpp: ${e && e.stack ? e.stack : e}\n`);
    process.exit(1);
  });
}

// Loads an embedding model (architecture bert) and returns, per text, llama.cpp's token ids
// ([CLS] ... [SEP] as its embedding context prepares them) and its pooled embedding (raw, not
// normalised: what libllama returns). Flash attention off, 1 thread.
export async function embedModel({llama, logLines}, {model: modelPath, texts, threads = 1}) {
  logLines.length = 0;
  const out = {model_path: modelPath};
  let model;
  try {
    model = await llama.loadModel({modelPath, gpuLayers: 0, defaultContextFlashAttention: false});
  } catch (e) {
    out.error = String(e && e.message ? e.message : e);
    out.log_tail = logLines.join("\n").split("\n").filter((l) => /error|fail|invalid|unknown|wrong/i.test(l)).slice(-20);
    return out;
  }
  const log = await loaderLogWith(logLines, kLoaderLogKeys);
  out.metadata = {
    architecture: model.fileInfo.metadata?.general?.architecture ?? null,
    n_embd: model.embeddingVectorSize,
    n_layer: log["n_layer"] !== undefined ? Number(log["n_layer"]) : null,
    pooling_type: log["pooling type"] ?? null,
    causal_attn: log["causal attn"] ?? null,
    vocab_type: log["vocab type"] ?? null,
  };
  const context = await model.createEmbeddingContext({contextSize: model.trainContextSize, batchSize: 512, threads});
  out.cases = [];
  for (const text of texts) {
    const ids = Array.from(model.tokenize(text, false));
    context._prepareInput(ids);  // [CLS] ... [SEP], as getEmbeddingFor does
    const embedding = await context.getEmbeddingFor(text);
    out.cases.push({text, ids, vector: Array.from(embedding.vector)});
  }
  await context.dispose();
  await model.dispose();
  return out;
}
