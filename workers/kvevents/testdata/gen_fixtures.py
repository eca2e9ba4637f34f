#!/usr/bin/env python3
"""Writes the golden KV event payloads (*.hex) from spec/vllm-kv-events.md §4, assembled byte by byte.

Independent of the Go encoder on purpose: the Go tests check that AppendBatch reproduces these bytes and that
Decode reads them back. Run from this directory: python3 gen_fixtures.py
"""
import struct


def s(text):  # str: fixstr or str8
    b = text.encode()
    return bytes([0xA0 | len(b)]) + b if len(b) < 32 else bytes([0xD9, len(b)]) + b


TS = bytes([0xCB]) + struct.pack(">d", 1700000000.5)
H = bytes.fromhex("cf dab89baa7b5857c0")  # 15760518052499183552

fixtures = {
    # §4.1: one BlockStored, current map layout (188 bytes).
    "stored_map": bytes.fromhex("""
93 cb 41 d9 54 fc 40 20 00 00 91 8b a4 74 79 70 65 ab 42 6c 6f 63 6b 53 74 6f 72 65 64 ac 62 6c
6f 63 6b 5f 68 61 73 68 65 73 91 cf da b8 9b aa 7b 58 57 c0 b1 70 61 72 65 6e 74 5f 62 6c 6f 63
6b 5f 68 61 73 68 c0 a9 74 6f 6b 65 6e 5f 69 64 73 94 01 02 03 04 aa 62 6c 6f 63 6b 5f 73 69 7a
65 04 a7 6c 6f 72 61 5f 69 64 c0 a6 6d 65 64 69 75 6d a3 47 50 55 a9 6c 6f 72 61 5f 6e 61 6d 65
c0 aa 65 78 74 72 61 5f 6b 65 79 73 91 c0 a9 67 72 6f 75 70 5f 69 64 78 00 b2 6b 76 5f 63 61 63
68 65 5f 73 70 65 63 5f 6b 69 6e 64 ae 66 75 6c 6c 5f 61 74 74 65 6e 74 69 6f 6e 00
"""),
    # §4.2: the same event, legacy array layout (66 bytes).
    "stored_array": b"\x93" + TS + b"\x91\x9b" + s("BlockStored") + b"\x91" + H + b"\xc0\x94\x01\x02\x03\x04\x04\xc0"
    + s("GPU") + b"\xc0\x91\xc0\x00" + s("full_attention") + b"\x00",
    # §4.2: the v0.9.0 shape: 2-element batch, 6-element event (decode only: the encoder always writes medium).
    "stored_v09": b"\x92" + TS + b"\x91\x96" + s("BlockStored") + b"\x91" + H + b"\xc0\x94\x01\x02\x03\x04\x04\xc0",
    # §4.3: BlockRemoved, map layout, in a batch with dp_rank 0.
    "removed_map": b"\x93" + TS + b"\x91\x84" + s("type") + s("BlockRemoved") + s("block_hashes") + b"\x91" + H
    + s("medium") + s("GPU") + s("group_idx") + b"\x00" + b"\x00",
    # §4.3: AllBlocksCleared, map and legacy layouts.
    "cleared_map": b"\x93" + TS + b"\x91\x81" + s("type") + s("AllBlocksCleared") + b"\x00",
    "cleared_array": b"\x93" + TS + b"\x91\x91" + s("AllBlocksCleared") + b"\x00",
}

# §4.3: two image blocks of one image, extra_keys [[(id, 0)], [(id, -4)]], block size 4, map layout, dp rank 1.
MM = "2f97f006c0e2eb2e" + "0" * 48  # a Dynamo-style 64-hex uuid
IMG = b"\xce" + struct.pack(">I", 151655)
fixtures["stored_mm_map"] = (
    b"\x93" + TS + b"\x91\x8b" + s("type") + s("BlockStored")
    + s("block_hashes") + b"\x92\x01\xcc\xc8"  # hashes 1, 200
    + s("parent_block_hash") + b"\xcf" + bytes.fromhex("ffffffffffffffff")
    + s("token_ids") + b"\x98" + b"\x0a\x14" + IMG * 6
    + s("block_size") + b"\x04" + s("lora_id") + b"\xc0" + s("medium") + s("GPU") + s("lora_name") + b"\xc0"
    + s("extra_keys") + b"\x92\x91\x92" + s(MM) + b"\x02" + b"\x91\x92" + s(MM) + b"\xfe"
    + s("group_idx") + b"\x00" + s("kv_cache_spec_kind") + s("full_attention")
    + b"\x01"
)

# Decode-only oddities: a negative i64 hash (d3), a bin hash (32-byte digest), lora/salt/bin extra keys,
# a removal before a store and a clear, legacy arrays with extra trailing elements.
DIGEST = bytes(range(32))
fixtures["mixed_array"] = (
    b"\x93" + TS + b"\x93"
    + b"\x93" + s("BlockRemoved") + b"\x91\xd3" + struct.pack(">q", -2) + s("GPU")
    + b"\x9d" + s("BlockStored") + b"\x91\xc4\x20" + DIGEST + b"\xc0" + b"\x92\x05\x06" + b"\x02" + b"\x07"
    + s("CPU") + s("my-lora") + b"\x91\x93" + s("my-lora") + s("salt-1") + b"\xc4\x02\xab\xcd" + b"\xc0\xc0\xc0"
    + s("rack-1")  # locality, after three explicit None
    + b"\x91" + s("AllBlocksCleared")
    + b"\x00"
)

# Dialects (spec §3.2, §10): what other publishers send.
H2 = b"\x2a"  # a second block hash, 42
# llm-d-inference-sim, positional layout: fields up to lora_name, 0 for "no parent"; a chain of two stores
# (the second continues the first) and a removal.
fixtures["dialect_sim_array"] = (
    b"\x93" + TS + b"\x93"
    + b"\x98" + s("BlockStored") + b"\x91" + H + b"\x00" + b"\x94\x01\x02\x03\x04" + b"\x04\xc0" + s("GPU") + b"\xc0"
    + b"\x98" + s("BlockStored") + b"\x91" + H2 + H + b"\x94\x05\x06\x07\x08" + b"\x04\xc0" + s("GPU") + b"\xc0"
    + b"\x93" + s("BlockRemoved") + b"\x91" + H2 + s("GPU")
    + b"\x00"
)
# SGLang: array events up to medium, batch [ts, events, attn_dp_rank] with rank 1.
fixtures["dialect_sglang_array"] = (
    b"\x93" + TS + b"\x92"
    + b"\x97" + s("BlockStored") + b"\x91" + H + b"\xc0" + b"\x94\x01\x02\x03\x04" + b"\x04\xc0" + s("GPU")
    + b"\x93" + s("BlockRemoved") + b"\x91" + H + s("GPU")
    + b"\x01"
)
# SGLang after its map PR: tagged-map events with its own field set (up to medium), positional batch.
fixtures["dialect_sglang_map"] = (
    b"\x93" + TS + b"\x91\x87" + s("type") + s("BlockStored") + s("block_hashes") + b"\x91" + H
    + s("parent_block_hash") + b"\xc0" + s("token_ids") + b"\x94\x01\x02\x03\x04" + s("block_size") + b"\x04"
    + s("lora_id") + b"\xc0" + s("medium") + s("GPU")
    + b"\x00"
)
# vLLM v0.11-ish array (medium and lora_name, nothing newer), offloaded to CPU: an event of another tier.
fixtures["dialect_vllm_cpu_array"] = (
    b"\x93" + TS + b"\x91"
    + b"\x98" + s("BlockStored") + b"\x91" + H + b"\xc0" + b"\x94\x01\x02\x03\x04" + b"\x04\xc0" + s("CPU") + b"\xc0"
    + b"\x00"
)
# A map-shaped batch (a PR-branch state, spec §3.1), dp rank under its vLLM name.
fixtures["batch_map"] = (
    b"\x83" + s("ts") + TS + s("events") + b"\x91\x81" + s("type") + s("AllBlocksCleared")
    + s("data_parallel_rank") + b"\x02"
)

for name, data in fixtures.items():
    with open(name + ".hex", "w") as f:
        h = data.hex()
        lines = [" ".join(h[i:i + 2] for i in range(j, min(j + 64, len(h)), 2)) for j in range(0, len(h), 64)]
        f.write("\n".join(lines) + "\n")
    print(name, len(data))
