#!/usr/bin/env python3
"""Writes the small GGUF files used by the GGUF reader's tests and fuzzer.

  tests/data/gguf/            valid files (a small one whose every prefix must fail to parse,
                              and one with every metadata type)
  tests/data/gguf_malformed/  one malformed file per check of the reader; the expected error
                              substrings live in src/model/gguf_malformed_test.cc
  fuzz/corpus/gguf/           the fuzzer's seed corpus (the valid files and a few malformed ones)

Usage: python3 scripts/make_malformed_gguf.py [REPO_ROOT]   (stdlib only; deterministic)
"""

import os
import struct
import sys

# GGUF value types.
U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
# GGML tensor types.
GGML_F32, GGML_F16, GGML_Q4_0, GGML_Q8_0, GGML_Q4_K, GGML_BF16 = 0, 1, 2, 8, 12, 30
GGML_Q6_K, GGML_Q8_K, GGML_IQ2_XXS = 14, 15, 16
# The 2- to 6-bit weight types kvserve loads: ggml type id -> (name, values per block,
# bytes per block), as ggml-common.h lays the blocks out.
QUANT_TYPES = {
    2: ("q4_0", 32, 18), 3: ("q4_1", 32, 20), 6: ("q5_0", 32, 22), 7: ("q5_1", 32, 24),
    10: ("q2_k", 256, 84), 11: ("q3_k", 256, 110), 12: ("q4_k", 256, 144),
    13: ("q5_k", 256, 176), 14: ("q6_k", 256, 210),
}

SCALAR_FMT = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f",
              BOOL: "<B", U64: "<Q", I64: "<q", F64: "<d"}


def u32(x):
    return struct.pack("<I", x)


def u64(x):
    return struct.pack("<Q", x)


def gstr(s):
    b = s.encode() if isinstance(s, str) else s
    return u64(len(b)) + b


def header(n_tensors, n_kv, version=3, magic=b"GGUF"):
    return magic + u32(version) + u64(n_tensors) + u64(n_kv)


def value(vtype, v):
    """Encodes a value (no type tag). Arrays are (elem_type, [items])."""
    if vtype == STR:
        return gstr(v)
    if vtype == ARR:
        elem_type, items = v
        return u32(elem_type) + u64(len(items)) + b"".join(value(elem_type, x) for x in items)
    return struct.pack(SCALAR_FMT[vtype], v)


def kv(key, vtype, v):
    return gstr(key) + u32(vtype) + value(vtype, v)


def tinfo(name, ne, ggml_type, offset):
    """`ne` lists dimensions innermost first, as GGUF stores them."""
    return gstr(name) + u32(len(ne)) + b"".join(u64(d) for d in ne) + u32(ggml_type) + u64(offset)


def pad(b, alignment=32):
    return b + b"\0" * ((-len(b)) % alignment)


def build(kvs, tensors, data=b"", version=3, alignment=32, pad_infos=True):
    """kvs: list of encoded kv(); tensors: list of encoded tinfo()."""
    out = header(len(tensors), len(kvs), version) + b"".join(kvs) + b"".join(tensors)
    if pad_infos:
        out = pad(out, alignment)
    return out + data


def small_valid():
    """Three tensors (f32, f16, q8_0); the last one ends exactly at the end of the file, so
    every strict prefix of this file is invalid."""
    kvs = [
        kv("general.architecture", STR, "llama"),
        kv("general.name", STR, "small valid"),
        kv("llama.block_count", U32, 1),
        kv("llama.rope.freq_base", F32, 10000.0),
        kv("tokenizer.ggml.tokens", ARR, (STR, ["<unk>", "a", "b"])),
    ]
    a = struct.pack("<4f", 1.0, 2.0, 3.0, 4.0)                      # [4] f32, 16 bytes
    b = struct.pack("<6e", 0.5, 1.5, -2.0, 3.0, 0.25, 8.0)           # [2, 3] f16, 12 bytes
    q = struct.pack("<e", 0.5) + bytes(range(32))                   # [32] q8_0, 34 bytes
    tensors = [tinfo("a", [4], GGML_F32, 0), tinfo("b", [3, 2], GGML_F16, 32),
               tinfo("q", [32], GGML_Q8_0, 64)]
    data = pad(a) + pad(b) + q
    return build(kvs, tensors, data)


def all_types():
    kvs = [
        kv("t.u8", U8, 200), kv("t.i8", I8, -100), kv("t.u16", U16, 60000),
        kv("t.i16", I16, -30000), kv("t.u32", U32, 4000000000), kv("t.i32", I32, -2000000000),
        kv("t.f32", F32, 1.5), kv("t.bool", BOOL, 1), kv("t.str", STR, "hello"),
        kv("t.u64", U64, 2**64 - 1), kv("t.i64", I64, -2**63), kv("t.f64", F64, -0.125),
        kv("t.arr_i32", ARR, (I32, [1, -2, 3])),
        kv("t.arr_f32", ARR, (F32, [0.5, -1.0])),
        kv("t.arr_str", ARR, (STR, ["x", "", "yz"])),
        kv("t.arr_arr", ARR, (ARR, [(U8, [1, 2]), (STR, ["n"])])),
        kv("general.alignment", U32, 64),
    ]
    bf = struct.pack("<4H", 0x3F80, 0x4000, 0xC040, 0x0000)         # bf16 1, 2, -3, 0
    tensors = [tinfo("w", [2, 2], GGML_BF16, 0)]
    return build(kvs, tensors, bf, alignment=64)


def lcg_bytes(n, seed):
    """n deterministic pseudo-random bytes."""
    out = bytearray()
    x = seed
    for _ in range(n):
        x = (x * 6364136223846793005 + 1442695040888963407) % 2**64
        out.append(x >> 56)
    return bytes(out)


def quant_types():
    """One [2, block] tensor of each 2- to 6-bit type, named after it ("q4_k"), with
    pseudo-random block bytes (seeded by the type id): what the reader must load in place."""
    kvs = [kv("general.architecture", STR, "llama")]
    tensors, data = [], b""
    for ggml_type, (name, elems, nbytes) in QUANT_TYPES.items():
        tensors.append(tinfo(name, [elems, 2], ggml_type, len(data)))
        data += pad(lcg_bytes(2 * nbytes, ggml_type))
    return build(kvs, tensors, data)


def nested_array(depth):
    v = (U8, [7])
    for _ in range(depth - 1):
        v = (ARR, [v])
    return v


def malformed():
    files = {}
    valid = small_valid()
    one_kv = [kv("general.architecture", STR, "llama")]
    f32x4 = struct.pack("<4f", 1, 2, 3, 4)

    def one_tensor(ne, ggml_type=GGML_F32, offset=0, name="a", data=None, kvs=one_kv,
                   alignment=32):
        if data is None:
            data = f32x4
        return build(kvs, [tinfo(name, ne, ggml_type, offset)], data, alignment=alignment)

    files["empty.gguf"] = b""
    files["bad_magic.gguf"] = b"GGML" + valid[4:]
    files["version1.gguf"] = b"GGUF" + u32(1) + u32(0) + u32(0)
    files["version4.gguf"] = b"GGUF" + u32(4) + valid[8:]
    files["big_endian.gguf"] = b"GGUF" + struct.pack(">I", 3) + valid[8:]
    files["truncated_header.gguf"] = valid[:12]
    files["absurd_tensor_count.gguf"] = header(2**40, 0) + b"\0" * 64
    files["tensor_count_too_big_for_file.gguf"] = header(1000, 0) + b"\0" * 64
    files["absurd_metadata_count.gguf"] = header(0, 2**62) + b"\0" * 64
    files["metadata_count_too_big_for_file.gguf"] = header(0, 500) + b"\0" * 64
    files["huge_key_length.gguf"] = header(0, 1) + u64(2**40) + b"general.name" + b"\0" * 16
    files["huge_string_length.gguf"] = (header(0, 1) + gstr("general.name") + u32(STR) +
                                        u64(2**63) + b"abc")
    files["huge_array_length.gguf"] = (header(0, 1) + gstr("tokenizer.ggml.scores") +
                                       u32(ARR) + u32(F32) + u64(2**40) + b"\0" * 16)
    files["array_too_long_for_file.gguf"] = (header(0, 1) + gstr("tokenizer.ggml.token_type") +
                                             u32(ARR) + u32(I32) + u64(1000) + b"\0" * 16)
    files["string_array_too_long_for_file.gguf"] = (
        header(0, 1) + gstr("tokenizer.ggml.tokens") + u32(ARR) + u32(STR) + u64(5) +
        gstr("a") + gstr("b") + b"\0" * 8)
    files["nested_array_too_deep.gguf"] = build([kv("deep", ARR, nested_array(5))], [])
    files["unknown_value_type.gguf"] = header(0, 1) + gstr("general.name") + u32(13) + b"\0" * 8
    files["unknown_array_element_type.gguf"] = (header(0, 1) + gstr("general.tags") + u32(ARR) +
                                                u32(99) + u64(1) + b"\0" * 8)
    files["bad_bool.gguf"] = build([kv("general.flag", U8, 2)], []).replace(
        u32(U8) + b"\x02", u32(BOOL) + b"\x02")
    files["empty_key.gguf"] = build([kv("", U32, 1)], [])
    files["duplicate_key.gguf"] = build([kv("general.name", STR, "a"),
                                         kv("general.name", STR, "b")], [])
    files["bad_alignment_not_pow2.gguf"] = one_tensor([4], kvs=[kv("general.alignment", U32, 48)],
                                                      alignment=48)
    files["bad_alignment_zero.gguf"] = build([kv("general.alignment", U32, 0)], [])
    files["bad_alignment_huge.gguf"] = build([kv("general.alignment", U64, 2**40)], [])
    files["bad_alignment_type.gguf"] = build([kv("general.alignment", STR, "32")], [])
    files["tensor_offset_past_end.gguf"] = one_tensor([4], offset=4096)
    files["tensor_data_past_end.gguf"] = one_tensor([8])  # 32 bytes needed, 16 present
    files["misaligned_offset.gguf"] = one_tensor([4], offset=16, data=b"\0" * 32)
    files["misaligned_element.gguf"] = build(
        [kv("general.alignment", U32, 1)], [tinfo("a", [4], GGML_F32, 1)], b"\0" * 17,
        alignment=1)
    # With alignment 1 the data section starts right after the infos; make that odd.
    files["zero_dim.gguf"] = one_tensor([4, 0])
    files["negative_dim.gguf"] = one_tensor([4, 2**64 - 2])
    files["overflowing_dims.gguf"] = one_tensor([2**32, 2**32])
    files["overflowing_bytes.gguf"] = one_tensor([2**62])
    files["too_many_dims.gguf"] = one_tensor([1, 1, 1, 1, 4])
    files["zero_dims.gguf"] = one_tensor([])
    files["duplicate_tensor_name.gguf"] = build(
        one_kv, [tinfo("a", [4], GGML_F32, 0), tinfo("a", [4], GGML_F32, 32)], pad(f32x4) + f32x4)
    files["overlapping_tensors.gguf"] = build(
        one_kv, [tinfo("a", [4], GGML_F32, 0), tinfo("b", [16], GGML_F32, 32),
                 tinfo("c", [4], GGML_F32, 64)], b"\0" * 96)
    files["too_many_nested_arrays.gguf"] = build(
        [kv("n", ARR, (ARR, [(U8, [])] * 2000))], [])
    files["unsupported_type_iq2_xxs.gguf"] = one_tensor(
        [256], GGML_IQ2_XXS, name="blk.0.ffn_up.weight", data=b"\0" * 66)
    files["unsupported_type_q8_k.gguf"] = one_tensor([256], GGML_Q8_K, name="output.weight",
                                                     data=b"\0" * 292)
    # A [256, 2] Q4_K tensor needs 288 bytes; the file ends after 200.
    files["truncated_q4_k.gguf"] = one_tensor([256, 2], GGML_Q4_K, name="blk.0.attn_q.weight",
                                              data=lcg_bytes(200, 12))
    # Rows of 576 values (SmolLM2's hidden size) are not whole 256-value Q6_K blocks.
    files["q6_k_inner_not_multiple.gguf"] = one_tensor(
        [576, 2], GGML_Q6_K, name="output.weight", data=b"\0" * 1024)
    files["unknown_tensor_type.gguf"] = one_tensor([4], 99)
    files["q8_0_inner_not_multiple.gguf"] = one_tensor([33, 2], GGML_Q8_0, data=b"\0" * 68)
    files["tensor_name_too_long.gguf"] = one_tensor([4], name="x" * 65)
    files["empty_tensor_name.gguf"] = one_tensor([4], name="")
    # Cut inside the value of the third metadata entry / inside the second tensor info.
    meta_only = build([kv("general.architecture", STR, "llama"),
                       kv("general.name", STR, "small valid"), kv("llama.block_count", U32, 1),
                       kv("llama.context_length", U32, 2048), kv("x", U8, 1)], [])
    third_kv = meta_only.find(b"llama.block_count")
    files["truncated_metadata.gguf"] = meta_only[:third_kv + 17 + 4 + 2]  # inside the value
    second_info = valid.find(gstr("b") + u32(2))
    files["truncated_tensor_info.gguf"] = valid[:second_info + 12]
    files["data_section_past_end.gguf"] = build(one_kv, [tinfo("a", [4], GGML_F32, 0)],
                                                pad_infos=False)
    return files


def write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
    valid = {"small_valid.gguf": small_valid(), "all_types.gguf": all_types(),
             "quant_types.gguf": quant_types()}
    bad = malformed()
    for name, data in valid.items():
        write(os.path.join(root, "tests/data/gguf", name), data)
    mal_dir = os.path.join(root, "tests/data/gguf_malformed")
    for old in os.listdir(mal_dir) if os.path.isdir(mal_dir) else []:
        if old.endswith(".gguf") and old not in bad:
            os.remove(os.path.join(mal_dir, old))
    for name, data in bad.items():
        write(os.path.join(mal_dir, name), data)
    seeds = dict(valid)
    for name in ["nested_array_too_deep.gguf", "q8_0_inner_not_multiple.gguf",
                 "duplicate_tensor_name.gguf", "misaligned_element.gguf",
                 "string_array_too_long_for_file.gguf", "truncated_tensor_info.gguf",
                 "truncated_q4_k.gguf", "q6_k_inner_not_multiple.gguf",
                 "unsupported_type_iq2_xxs.gguf"]:
        seeds[name] = bad[name]
    for name, data in seeds.items():
        write(os.path.join(root, "fuzz/corpus/gguf", name), data)
    print(f"wrote {len(valid)} valid, {len(bad)} malformed, {len(seeds)} seed files")


if __name__ == "__main__":
    main()
