#!/usr/bin/env node
// Cross-checks kvserve against the real llama.cpp (via node-llama-cpp, CPU):
//   A. `kvserve convert` of stories260K.bin -> GGUF: llama.cpp loads it, its tokenizer gives
//      greedy_reference.json's prompt ids, its greedy continuation equals the reference and
//      kvserve's own greedy output on the same GGUF.
//   B. `kvserve mkmodel --preset tiny` in f32/f16/bf16/q8_0 and with the llama SPM vocabulary,
//      and the DeepSeek presets deepseek-v2-tiny / deepseek-v3-tiny in f32 and q8_0:
//      llama.cpp loads each, metadata matches, tokenization matches `kvserve tokenize`, greedy
//      continuations of both engines agree.
//   C. The 2- to 6-bit weight types: tiny and smollm2-135m in q4_0, q4_k_m, q5_k_m, q6_k and
//      tiny-k (every row a multiple of 256, so no k-quant falls back) in the other types and
//      mixes, made by `kvserve mkmodel`; and, with --quantize, files made by llama.cpp's own
//      quantizer (llama_model_quantize) from a kvserve F16 file. Same checks as B.
//   D. Embedding models: the all-minilm-l6-v2 and bge-small-en-v1.5 presets (bert, f32) load in
//      llama.cpp with their pooling, tokenize 20 texts the same, and `kvserve embed` agrees with
//      llama.cpp's embeddings to cosine >= 0.9999.
// Greedy sequences may only part where kvserve's token is within a per-dtype tolerance of
// llama.cpp's top-1 logit, in llama.cpp's own logits (random weights give near-ties; the engines
// round differently: q8_0 activation scales, summation order).
// Prints one line per check and a JSON summary at the end. Exit: 0 all passed, 1 a check failed.
//
// Usage: node compat_check.mjs --kvserve BIN --assets DIR --workdir DIR [--n 16] [--qwen]
//          [--quantize LLAMACPP_QUANTIZE_BIN]
import {spawnSync} from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import process from "node:process";
import {embedModel, openLlama, runModel} from "./run_llamacpp.mjs";

const args = {kvserve: null, assets: null, workdir: null, n: 16, qwen: false, quantize: null};
for (let i = 2; i < process.argv.length; ++i) {
  const a = process.argv[i];
  if (a === "--kvserve") args.kvserve = process.argv[++i];
  else if (a === "--assets") args.assets = process.argv[++i];
  else if (a === "--workdir") args.workdir = process.argv[++i];
  else if (a === "--n") args.n = Number.parseInt(process.argv[++i], 10);
  else if (a === "--qwen") args.qwen = true;
  else if (a === "--quantize") args.quantize = process.argv[++i];
  else {
    process.stderr.write(`compat_check: unknown argument ${a}\n`);
    process.exit(1);
  }
}
if (!args.kvserve || !args.assets || !args.workdir) {
  process.stderr.write("compat_check: --kvserve, --assets and --workdir are required\n");
  process.exit(1);
}
fs.mkdirSync(args.workdir, {recursive: true});

// Largest top-1/top-2 logit margin (in llama.cpp) at which the engines may pick different tokens.
// The quantized weight types decode to the same weights in both engines; their activations are
// quantized differently (llama.cpp: q8_0/q8_1 blocks of 32 for the 32-value types, q8_K blocks of
// 256 for the k-quants; kvserve: blocks of 32 for all).
const kTieTolerance = {f32: 1e-3, f16: 5e-3, bf16: 2e-2, q8_0: 2e-2, q4_0: 2e-2, q4_1: 2e-2,
  q5_0: 2e-2, q5_1: 2e-2, kquant: 3e-2};
const tolerance = (dtype) => kTieTolerance[dtype] ?? kTieTolerance.kquant;
const summary = {llama_cpp: null, checks: []};
let failures = 0;

function check(name, ok, detail) {
  summary.checks.push({name, ok, ...detail});
  if (!ok) ++failures;
  process.stdout.write(`${ok ? "PASS" : "FAIL"} ${name}${detail.note ? ": " + detail.note : ""}\n`);
}

function kv(argv) {
  const r = spawnSync(args.kvserve, argv, {encoding: "utf8", maxBuffer: 64 << 20});
  if (r.status !== 0) {
    throw new Error(`kvserve ${argv.join(" ")} failed (${r.status}): ${r.stderr.slice(-2000)}`);
  }
  return r.stdout;
}

function kvTokenize(model, text) {
  return kv(["tokenize", "-m", model, "--text", text]).trim().split(/\s+/).filter(Boolean).map(Number);
}

function kvGreedy(model, prompt, n) {
  const out = kv(["generate", "-m", model, "-p", prompt, "-n", String(n), "--temperature", "0",
    "--ignore-eos", "--output-format", "json", "--threads", "1"]);
  return JSON.parse(out);
}

// The prebuilt libllama that node-llama-cpp loads (for tests/llamacpp/llamacpp_quantize.c).
function libllamaPath() {
  const dir = path.join(path.dirname(new URL(import.meta.url).pathname), "node_modules",
    "@node-llama-cpp", "linux-x64", "bins", "linux-x64");
  const lib = fs.readdirSync(dir).find((f) => /^libllama(\.v[0-9.]+)?\.so$/.test(f));
  if (!lib) throw new Error(`no libllama*.so in ${dir}`);
  return path.join(dir, lib);
}

function sameIds(a, b) {
  return a.length === b.length && a.every((x, i) => x === b[i]);
}

// Compares two greedy sequences; a divergence is tolerated only where ours[i] is a near-tie in
// llama.cpp's logits (gaps[i] = llama.cpp logit of its top-1 minus that of ours[i]).
function compareGreedy(ours, theirs, gaps, tolerance) {
  const n = Math.min(ours.length, theirs.length);
  let i = 0;
  while (i < n && ours[i] === theirs[i]) ++i;
  if (i === n) return {ok: ours.length === theirs.length, equal_steps: n, total_steps: n};
  const gap = gaps ? gaps[i] : null;
  return {ok: typeof gap === "number" && gap < tolerance, equal_steps: i, total_steps: n,
    diverged_at: i, kvserve_token: ours[i], llamacpp_token: theirs[i], llamacpp_logit_gap: gap};
}

const handle = await openLlama();
summary.llama_cpp = handle.llama.llamaCppRelease;
process.stdout.write(`llama.cpp ${summary.llama_cpp.repo} ${summary.llama_cpp.release} ` +
  `(node-llama-cpp prebuilt, CPU)\n`);

// ---- A. stories260K via kvserve convert --------------------------------------------------------
{
  const storiesDir = path.join(args.assets, "models", "stories260K");
  const gguf = path.join(args.workdir, "stories260K.gguf");
  kv(["convert", "-m", path.join(storiesDir, "stories260K.bin"), "-o", gguf]);
  const ref = JSON.parse(fs.readFileSync(path.join(storiesDir, "greedy_reference.json"), "utf8"));
  // Reference: ids_after_bos = forced prompt tokens then greedy tokens (stops early at BOS).
  const expectedOf = (c) => c.ids_after_bos.slice(c.prompt_ids_with_bos.length - 1);
  const kvOut = ref.cases.map((c) => kvGreedy(gguf, c.prompt, expectedOf(c).length));
  const inputs = [...ref.cases.map((c) => ({prompt: c.prompt, n: 0})),
    ...ref.cases.map((c, k) => ({ids: c.prompt_ids_with_bos, n: expectedOf(c).length,
      compare: kvOut[k].output_token_ids}))];
  const tok = await runModel(handle, {model: gguf, inputs, n: 0, threads: 1, kvCache: "F32"});
  check("stories260K: llama.cpp loads kvserve-converted GGUF", !tok.error,
    {note: tok.error ?? JSON.stringify(tok.metadata), metadata: tok.metadata, error: tok.error});
  if (!tok.error) {
    const md = tok.metadata;
    check("stories260K: metadata", md.architecture === "llama" && md.n_vocab === 512 &&
      md.n_layer === 5 && md.n_embd === 64 && md.n_head === "8" && md.n_head_kv === "4" &&
      md.bos === 1 && md.eos === 2 && md.add_bos === true && md.vocab_type === "SPM", {note: ""});
    for (const [k, c] of ref.cases.entries()) {
      const ids = tok.cases[k].prompt_ids;
      check(`stories260K: tokenize ${JSON.stringify(c.prompt)}`, sameIds(ids, c.prompt_ids_with_bos),
        {note: `llama.cpp ${JSON.stringify(ids)} reference ${JSON.stringify(c.prompt_ids_with_bos)}`});
      const expected = expectedOf(c);
      const gen = tok.cases[ref.cases.length + k];
      const got = gen.greedy_ids;
      const cmp = compareGreedy(got, expected, null, 0);
      check(`stories260K: llama.cpp greedy vs reference ${JSON.stringify(c.prompt)}`, cmp.ok,
        {note: `${cmp.equal_steps}/${expected.length} steps equal`, ...cmp});
      const ours = kvOut[k];
      const cmp2 = compareGreedy(ours.output_token_ids, got, gen.compare_gaps, 1e-3);
      check(`stories260K: kvserve greedy vs llama.cpp ${JSON.stringify(c.prompt)}`,
        cmp2.ok && sameIds(ours.prompt_token_ids, c.prompt_ids_with_bos),
        {note: `${cmp2.equal_steps}/${cmp2.total_steps} steps equal`, ...cmp2});
    }
  }
}

// ---- B. kvserve mkmodel ------------------------------------------------------------------------
const texts = ["hello world", "Hello, World! 123", " leading space", "naïve café 😀 日本",
  "tabs\tand\nnewlines  double", "The quick brown fox jumps over the lazy dog."];
const prompts = ["hello world", "Once upon a time", "1 + 1 ="];
const spmVocab = path.join(args.assets, "tokenizers", "ggml-vocab-llama-spm.gguf");
const cases = [
  {name: "tiny f32", argv: ["--preset", "tiny", "--dtype", "f32"], dtype: "f32"},
  {name: "tiny f16", argv: ["--preset", "tiny", "--dtype", "f16"], dtype: "f16"},
  {name: "tiny bf16", argv: ["--preset", "tiny", "--dtype", "bf16"], dtype: "bf16"},
  {name: "tiny q8_0", argv: ["--preset", "tiny", "--dtype", "q8_0"], dtype: "q8_0"},
  {name: "tiny llama-spm vocab f32",
    argv: ["--preset", "tiny", "--dtype", "f32", "--vocab-from", spmVocab], dtype: "f32"},
  {name: "tiny llama-spm vocab q8_0",
    argv: ["--preset", "tiny", "--dtype", "q8_0", "--vocab-from", spmVocab], dtype: "q8_0"},
  // DeepSeek MLA + MoE (issue 14): V2's structure and V3's (q LoRA, sigmoid routing with a
  // selection bias, expert groups), as llama.cpp's MLA files store them (attn_k_b / attn_v_b).
  {name: "deepseek-v2-tiny f32", argv: ["--preset", "deepseek-v2-tiny", "--dtype", "f32"],
    dtype: "f32", arch: "deepseek2"},
  {name: "deepseek-v2-tiny q8_0", argv: ["--preset", "deepseek-v2-tiny", "--dtype", "q8_0"],
    dtype: "q8_0", arch: "deepseek2"},
  {name: "deepseek-v3-tiny f32", argv: ["--preset", "deepseek-v3-tiny", "--dtype", "f32"],
    dtype: "f32", arch: "deepseek2"},
  {name: "deepseek-v3-tiny q8_0", argv: ["--preset", "deepseek-v3-tiny", "--dtype", "q8_0"],
    dtype: "q8_0", arch: "deepseek2"},
];
// C. The 2- to 6-bit types (issue 22).
for (const preset of ["tiny", "smollm2-135m"]) {
  for (const dtype of ["q4_0", "q4_k_m", "q5_k_m", "q6_k"]) {
    cases.push({name: `${preset} ${dtype}`, argv: ["--preset", preset, "--dtype", dtype], dtype});
  }
}
for (const dtype of ["q4_1", "q5_1", "q2_k", "q3_k_s", "q3_k_m", "q4_k_s"]) {
  cases.push({name: `tiny-k ${dtype}`, argv: ["--preset", "tiny-k", "--dtype", dtype], dtype});
}
// Files made by llama.cpp's quantizer from kvserve's F16 (LLAMA_FTYPE ids). smollm2's rows of
// 576 make llama.cpp fall back from k-quants; its Q2_K/Q3_K fall back to IQ4_NL, which kvserve
// refuses by name, so those two are checked on tiny-k only.
if (args.quantize) {
  const ftypes = {q4_0: 2, q2_k: 10, q3_k_m: 12, q4_k_m: 15, q5_k_m: 17, q6_k: 18};
  const plan = [["smollm2-135m", ["q4_0", "q4_k_m", "q6_k"]],
    ["tiny-k", ["q2_k", "q3_k_m", "q4_k_m", "q5_k_m"]]];
  for (const [preset, dtypes] of plan) {
    for (const dtype of dtypes) {
      cases.push({name: `${preset} f16 -> llama.cpp ${dtype}`, dtype, preset,
        llamacppFtype: ftypes[dtype]});
    }
  }
}
if (args.qwen) {
  cases.push({name: "qwen2.5-0.5b q8_0", argv: ["--preset", "qwen2.5-0.5b", "--dtype", "q8_0"],
    dtype: "q8_0", arch: "qwen2"});
}
for (const c of cases) {
  const gguf = path.join(args.workdir, c.name.replace(/[^A-Za-z0-9_.]+/g, "-") + ".gguf");
  if (c.llamacppFtype !== undefined) {
    const f16 = path.join(args.workdir, `${c.preset}-f16.gguf`);
    if (!fs.existsSync(f16)) kv(["mkmodel", "--preset", c.preset, "--dtype", "f16", "-o", f16]);
    const r = spawnSync(args.quantize, [libllamaPath(), f16, gguf, String(c.llamacppFtype)],
      {encoding: "utf8", maxBuffer: 64 << 20});
    check(`${c.name}: llama.cpp quantizes`, r.status === 0,
      {note: r.status === 0 ? "" : (r.stderr ?? "").slice(-1000)});
    if (r.status !== 0) continue;
  } else {
    kv(["mkmodel", ...c.argv, "-o", gguf]);
  }
  const ours = prompts.map((p) => kvGreedy(gguf, p, args.n));
  const lc = await runModel(handle, {model: gguf, threads: 1, kvCache: "F32", inputs: [
    ...texts.map((t) => ({prompt: t, n: 0})),
    ...ours.map((o) => ({ids: o.prompt_token_ids, n: args.n, compare: o.output_token_ids}))]});
  check(`${c.name}: llama.cpp loads kvserve mkmodel GGUF`, !lc.error,
    {note: lc.error ?? JSON.stringify(lc.metadata), metadata: lc.metadata, error: lc.error,
      log_tail: lc.log_tail});
  if (lc.error) continue;
  if (c.arch) {
    check(`${c.name}: architecture`, lc.metadata.architecture === c.arch,
      {note: lc.metadata.architecture});
  }
  check(`${c.name}: parameter count`, ours[0].num_parameters === lc.metadata.n_params_insights,
    {note: `kvserve ${ours[0].num_parameters} llama.cpp ${lc.metadata.n_params_log}` +
      ` (${lc.metadata.n_params_insights})`});
  let tokOk = true;
  const tokDiffs = [];
  for (const [k, t] of texts.entries()) {
    const ids = kvTokenize(gguf, t);
    if (!sameIds(ids, lc.cases[k].prompt_ids)) {
      tokOk = false;
      tokDiffs.push({text: t, kvserve: ids, llamacpp: lc.cases[k].prompt_ids});
    }
  }
  check(`${c.name}: tokenize ${texts.length} strings`, tokOk,
    {note: tokOk ? "" : JSON.stringify(tokDiffs), diffs: tokDiffs});
  for (const [k, p] of prompts.entries()) {
    const gen = lc.cases[texts.length + k];
    const cmp = compareGreedy(ours[k].output_token_ids, gen.greedy_ids,
      gen.compare_gaps, tolerance(c.dtype));
    const minMargin = Math.min(...gen.top2_margins.slice(0, cmp.equal_steps + 1));
    check(`${c.name}: greedy ${JSON.stringify(p)}`, cmp.ok,
      {note: `${cmp.equal_steps}/${cmp.total_steps} steps equal` +
        (cmp.diverged_at !== undefined ? `, diverged at ${cmp.diverged_at} (kvserve ` +
          `${cmp.kvserve_token}, llama.cpp ${cmp.llamacpp_token}, llama.cpp logit gap ` +
          `${cmp.llamacpp_logit_gap?.toFixed(5)}, tolerance ${tolerance(c.dtype)})` : "") + `, min llama.cpp top2 margin ${minMargin.toFixed(5)}`,
        ...cmp});
  }
}

// ---- D. Embedding models (issue 15): bert presets ----------------------------------------------
// `kvserve mkmodel` writes all-MiniLM-L6-v2 (mean pooling) and bge-small-en-v1.5 (CLS pooling)
// with a synthetic WordPiece vocabulary; llama.cpp loads each, tokenizes 20 texts the same and
// its embeddings agree with `kvserve embed` to cosine >= 0.9999 (f32). Guard: different texts
// must not embed alike, else agreement would prove nothing.
{
  const texts = ["hello world", "Hello, World! 123", "the refund window for EU orders",
    "the refund window for US orders", "naïve café", "once upon a time there was a cat",
    "what is the weather in paris?", "numbers 3.14 and 42", "a", "tabs\tand   spaces",
    "UPPER case TEXT", "punctuation!!! ??? ...", "don't stop believing", "co-operate re-enter",
    "日本語 text", "emoji 😀 here", "[CLS] as plain text", "the the the the the the",
    "question answer story token model cache user city", Array(60).fill("long text").join(" ")];
  const cosine = (a, b) => {
    let dot = 0, na = 0, nb = 0;
    for (let i = 0; i < a.length; ++i) { dot += a[i] * b[i]; na += a[i] * a[i]; nb += b[i] * b[i]; }
    return dot / Math.sqrt(na * nb);
  };
  // One text per line of --texts-file: no text may hold a newline.
  const textsFile = path.join(args.workdir, "embed_texts.txt");
  fs.writeFileSync(textsFile, texts.join("\n") + "\n");
  for (const [preset, pooling, layers] of [["all-minilm-l6-v2", "1", 6], ["bge-small-en-v1.5", "2", 12]]) {
    const name = `${preset} f32`;
    const gguf = path.join(args.workdir, `${preset}.gguf`);
    kv(["mkmodel", "--preset", preset, "--dtype", "f32", "--seed", "5", "-o", gguf]);
    const lc = await embedModel(handle, {model: gguf, texts});
    check(`${name}: llama.cpp loads it`, !lc.error, {note: lc.error ?? JSON.stringify(lc.metadata)});
    if (lc.error) continue;
    const md = lc.metadata;
    check(`${name}: metadata`, md.architecture === "bert" && md.n_embd === 384 && md.n_layer === layers &&
      md.pooling_type === pooling && md.causal_attn === "0", {note: JSON.stringify(md)});
    const ours = JSON.parse(kv(["embed", "-m", gguf, "--texts-file", textsFile, "--output-format", "json",
      "--threads", "1"]));
    let tokOk = true, worst = 1, worstText = "";
    const tokDiffs = [];
    for (const [k, c] of lc.cases.entries()) {
      const mine = ours.data[k];
      if (!sameIds(mine.tokens, c.ids)) {
        tokOk = false;
        tokDiffs.push({text: c.text, kvserve: mine.tokens, llamacpp: c.ids});
        continue;
      }
      const cs = cosine(mine.embedding, c.vector);
      if (cs < worst) { worst = cs; worstText = c.text; }
    }
    check(`${name}: tokenize ${texts.length} texts`, tokOk, {note: tokOk ? "" : JSON.stringify(tokDiffs.slice(0, 3))});
    check(`${name}: embeddings agree with llama.cpp (cosine >= 0.9999)`, tokOk && worst >= 0.9999,
      {note: `worst cosine ${worst.toFixed(7)} (${JSON.stringify(worstText)})`, worst_cosine: worst});
    // Guard: llama.cpp's own embeddings of different texts are not all alike, and each of ours
    // is closest to llama.cpp's embedding of the same text.
    let maxOther = -1, ownClosest = true;
    for (let i = 0; i < lc.cases.length; ++i) {
      const own = cosine(ours.data[i].embedding, lc.cases[i].vector);
      for (let j = 0; j < lc.cases.length; ++j) {
        if (i === j) continue;
        maxOther = Math.max(maxOther, cosine(lc.cases[i].vector, lc.cases[j].vector));
        if (cosine(ours.data[i].embedding, lc.cases[j].vector) >= own) ownClosest = false;
      }
    }
    check(`${name}: different texts embed differently`, maxOther < 0.9999 && ownClosest,
      {note: `max cosine between different texts ${maxOther.toFixed(6)}, each closest to itself: ${ownClosest}`});
  }
}

await handle.llama.dispose();
process.stdout.write(`SUMMARY ${JSON.stringify(summary)}\n`);
process.stdout.write(failures === 0 ? "llama.cpp compat: all checks passed\n" :
  `llama.cpp compat: ${failures} check(s) FAILED\n`);
process.exit(failures === 0 ? 0 : 1);
