#!/usr/bin/env python3
"""Reference reader for kvroute's preprocessed-image handoff (the "mm_kwargs" descriptor).

kvroute's frontend, with --mm-transfer shm|net, preprocesses each image (Qwen-VL pixel_values and
image_grid_thw) and adds to the image's content part:

    "mm_kwargs": {"kind": "shm", "name": "kvroute_mm_<pid>_<12 hex>", "length": N, "dtype": "float32",
                  "shape": [rows, cols], "grid_thw": [1, gh, gw], "mm_hash": "<16 hex>",
                  "checksum": "<16 hex>"}
    "mm_kwargs": {"kind": "net", "addr": "host:port", "buffer": B, "token": "<32 hex>", ...same fields}

This module is the worker-side contract in code: it reads the item a descriptor names (a file under
/dev/shm, or one pull from the frontend's transfer agent), checks it against the descriptor and returns
pixel_values and image_grid_thw. Every failure raises Unavailable: the worker must then process the
image from its URL, as if no descriptor were there. It uses the standard library only; the payload
checksum (XXH3-64) needs the xxhash module (Debian: python3-xxhash), without which read_item refuses
to return unverified data unless verify_checksum=False is passed.

No released engine reads the descriptor: vLLM, SGLang and TensorRT-LLM ignore the member and fetch the
URL. A worker wrapper that builds the engine's inputs itself (as Dynamo's vLLM worker does with
inject_into_mm_cache) can call read_content_part() on each image part and hand the result to the
engine. Run as a script it reads one descriptor (JSON) from stdin and prints a summary.
"""

import hashlib
import json
import os
import re
import socket
import struct
import sys
from array import array

HEADER_SIZE = 64
MAGIC = b"KVMM"
FORMAT_VERSION = 1
DTYPE_FLOAT32 = 1
PULL_MAGIC = b"KVRP"
PULL_VERSION = 1
TOKEN_LEN = 16
STATUS_OK = 0
ACK = b"\x06"
DEFAULT_SHM_DIR = "/dev/shm"
DEFAULT_MAX_BYTES = 512 << 20
SHM_NAME_RE = re.compile(r"^kvroute_mm_([0-9]{1,10})_[0-9a-f]{12}$")
HEX16_RE = re.compile(r"^[0-9a-fA-F]{16}$")

try:
    import xxhash  # Debian: python3-xxhash
except ImportError:  # pragma: no cover - depends on the host
    xxhash = None


class Unavailable(Exception):
    """The item cannot be used: fall back to the image URL."""


class Item:
    """One verified preprocessed image."""

    def __init__(self, rows, cols, grid_thw, mm_hash, payload, verified):
        self.rows = rows
        self.cols = cols
        self.grid_thw = grid_thw
        self.mm_hash = mm_hash  # 16 hex digits
        self.payload = payload  # bytes: row-major little-endian float32
        self.checksum_verified = verified

    def pixel_values(self):
        """pixel_values as a flat array('f') of rows*cols values (numpy: reshape((rows, cols)))."""
        a = array("f")
        a.frombytes(self.payload)
        if sys.byteorder != "little":
            a.byteswap()
        return a


def validate(desc):
    """Checks the descriptor fields a reader relies on before any I/O; raises Unavailable."""
    if not isinstance(desc, dict):
        raise Unavailable("descriptor is not an object")
    kind = desc.get("kind")
    if kind == "shm":
        if not isinstance(desc.get("name"), str) or not SHM_NAME_RE.match(desc["name"]):
            raise Unavailable("bad segment name")
    elif kind == "net":
        tok = desc.get("token")
        if not isinstance(desc.get("addr"), str) or not isinstance(tok, str) or len(tok) != 2 * TOKEN_LEN:
            raise Unavailable("net descriptor needs addr and a 32-hex-digit token")
    else:
        raise Unavailable("unknown kind %r" % (kind,))
    shape = desc.get("shape")
    grid = desc.get("grid_thw")
    length = desc.get("length")
    if (desc.get("dtype") != "float32" or not _ints(shape, 2) or not _ints(grid, 3) or not isinstance(length, int)
            or shape[0] <= 0 or shape[1] <= 0 or length != HEADER_SIZE + 4 * shape[0] * shape[1]):
        raise Unavailable("dtype, shape or length")
    if not isinstance(desc.get("checksum"), str) or not HEX16_RE.match(desc["checksum"]):
        raise Unavailable("checksum")
    mm = desc.get("mm_hash", "")
    if mm and (not isinstance(mm, str) or not HEX16_RE.match(mm[:16]) or len(mm) < 16):
        raise Unavailable("mm_hash")


def _ints(v, n):
    return isinstance(v, list) and len(v) == n and all(isinstance(x, int) and not isinstance(x, bool) for x in v)


def read_item(desc, shm_dir=DEFAULT_SHM_DIR, max_bytes=DEFAULT_MAX_BYTES, timeout=30.0, verify_checksum=True):
    """Reads and verifies the item desc names. Raises Unavailable on any failure."""
    validate(desc)
    if desc["length"] > max_bytes:
        raise Unavailable("item of %d bytes exceeds %d" % (desc["length"], max_bytes))
    if verify_checksum and xxhash is None:
        raise Unavailable("no xxhash module to verify the checksum (install python3-xxhash)")
    if desc["kind"] == "shm":
        return _read_shm(desc, shm_dir, verify_checksum)
    return _pull(desc, timeout, verify_checksum)


def read_content_part(part, **kw):
    """The Item of an image_url content part's "mm_kwargs", or None when it has none."""
    desc = part.get("mm_kwargs") if isinstance(part, dict) else None
    if desc is None:
        return None
    return read_item(desc, **kw)


def _read_shm(desc, shm_dir, verify):
    path = os.path.join(shm_dir, desc["name"])  # the name matched SHM_NAME_RE: no separators
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError as e:
        raise Unavailable("open segment: %s" % e) from None
    try:
        with os.fdopen(fd, "rb", closefd=True) as f:
            return _read_stream(f.read, desc, verify)
    except OSError as e:
        raise Unavailable("read segment: %s" % e) from None


def _pull(desc, timeout, verify):
    host, _, port = desc["addr"].rpartition(":")
    try:
        token = bytes.fromhex(desc["token"])
        buffer_id = int(desc.get("buffer", 0))
        conn = socket.create_connection((host.strip("[]"), int(port)), timeout=min(timeout, 2.0))
    except (ValueError, OSError) as e:
        raise Unavailable("dial agent: %s" % e) from None
    with conn:
        conn.settimeout(timeout)
        try:
            conn.sendall(PULL_MAGIC + bytes([PULL_VERSION]) + struct.pack("<I", buffer_id) + token)
            f = conn.makefile("rb")
            reply = _read_exact(f.read, 9)
            if reply[0] != STATUS_OK:
                raise Unavailable("agent refused buffer %d" % buffer_id)
            (n,) = struct.unpack_from("<Q", reply, 1)
            if n != desc["length"]:
                raise Unavailable("agent sends %d bytes, descriptor says %d" % (n, desc["length"]))
            item = _read_stream(f.read, desc, verify)
            conn.sendall(ACK)  # only after verification: the agent frees the buffer at once
            return item
        except OSError as e:
            raise Unavailable("pull: %s" % e) from None


def _read_exact(read, n):
    b = read(n)
    if b is None or len(b) != n:
        raise Unavailable("short read: %d of %d bytes" % (0 if b is None else len(b), n))
    return b


def _read_stream(read, desc, verify):
    hdr = _read_exact(read, HEADER_SIZE)
    if hdr[0:4] != MAGIC or struct.unpack_from("<H", hdr, 4)[0] != FORMAT_VERSION or hdr[6] != DTYPE_FLOAT32 or hdr[7] != 2:
        raise Unavailable("bad magic, version or dtype")
    rows, cols = struct.unpack_from("<QQ", hdr, 8)
    grid = list(struct.unpack_from("<III", hdr, 24))
    mm_hash, checksum, n = struct.unpack_from("<QQQ", hdr, 40)
    if n != rows * cols * 4 or HEADER_SIZE + n != desc["length"]:
        raise Unavailable("payload length")
    if [rows, cols] != desc["shape"] or grid != desc["grid_thw"] or "%016x" % checksum != desc["checksum"].lower():
        raise Unavailable("item does not match descriptor")
    if desc.get("mm_hash") and "%016x" % mm_hash != desc["mm_hash"][:16].lower():
        raise Unavailable("mm_hash differs")
    payload = _read_exact(read, n)
    verified = False
    if verify:
        if xxhash.xxh3_64_intdigest(payload) != checksum:
            raise Unavailable("checksum mismatch")
        verified = True
    return Item(rows, cols, grid, "%016x" % mm_hash, payload, verified)


def main():
    desc = json.load(sys.stdin)
    shm_dir = sys.argv[1] if len(sys.argv) > 1 else DEFAULT_SHM_DIR
    try:
        item = read_item(desc, shm_dir=shm_dir)
    except Unavailable as e:
        json.dump({"error": str(e)}, sys.stdout)
        return 2
    json.dump({"rows": item.rows, "cols": item.cols, "grid_thw": item.grid_thw, "mm_hash": item.mm_hash,
               "checksum_verified": item.checksum_verified, "sha256": hashlib.sha256(item.payload).hexdigest(),
               "first": item.pixel_values()[0]}, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
