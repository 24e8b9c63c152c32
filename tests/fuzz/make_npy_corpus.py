#!/usr/bin/env python3
"""Writes the seed corpus of tests/fuzz/fuzz_npy.cpp into tests/fuzz/npy_corpus/ (standard library
only: the .npy files are written as NumPy writes them). Each seed is a mode byte (bit 0: .npz,
bit 1: read as double) followed by the file.

  python3 tests/fuzz/make_npy_corpus.py
"""
import io
import os
import struct
import zipfile

here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "npy_corpus")


def npy(descr, shape, values, fortran=False, version=1):
    dims = "(" + "".join(f"{e}, " for e in shape)[:-2] + ("," if len(shape) == 1 else "") + ")"
    header = f"{{'descr': '{descr}', 'fortran_order': {fortran}, 'shape': {dims}, }}"
    lenbytes = 2 if version == 1 else 4
    pad = (64 - (6 + 2 + lenbytes + len(header) + 1) % 64) % 64
    header = (header + " " * pad + "\n").encode("latin1")
    fmt = ("<" if descr[0] != ">" else ">") + ("f" if descr[2] == "4" else "d") * len(values)
    return (b"\x93NUMPY" + bytes([version, 0]) +
            struct.pack("<H" if version == 1 else "<I", len(header)) + header +
            struct.pack(fmt, *values))


def npz(entries, comment=b""):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:
        for name, data in entries:  # (a fixed date: the same seeds on every run)
            z.writestr(zipfile.ZipInfo(name, (1980, 1, 1, 0, 0, 0)), data)
        z.comment = comment
    return buf.getvalue()


def overlapping(copies):
    """An .npz whose central directory has `copies` records (named a, b, ...) pointing at the same
    entry: a zip bomb the reader must refuse."""
    z = npz([("a.npy", npy("<f4", (200,), [1.0] * 200))])
    cd, eocd = z.find(b"PK\x01\x02"), z.find(b"PK\x05\x06")
    record = z[cd:eocd]
    central = b"".join(record.replace(b"a.npy", bytes([97 + i]) + b".npy") for i in range(copies))
    return (z[:cd] + central +
            b"PK\x05\x06" + struct.pack("<HHHHIIH", 0, 0, copies, copies, len(central), cd, 0))


seeds = {
    "npy_f4_2x3": b"\x00" + npy("<f4", (2, 3), [1, -2, 3.5, 0, 1e30, -0.0]),
    "npy_f8_4_as_double": b"\x02" + npy("<f8", (4,), [1, 2, 3, float("inf")]),
    "npy_big_endian_scalar": b"\x00" + npy(">f8", (), [0.25]),
    "npy_fortran_2x3x2": b"\x02" + npy("<f4", (2, 3, 2), list(range(12)), fortran=True),
    "npy_v2_empty_0x5": b"\x02" + npy("<f8", (0, 5), [], version=2),
    "npy_v3_3x1_big_endian": b"\x00" + npy(">f4", (3, 1), [1, 2, 3], version=3),
    "npy_int_dtype": b"\x00" + npy("<f4", (2,), [1, 2]).replace(b"'<f4'", b"'<i4'"),
    "npz_two_arrays": b"\x01" + npz([("w.npy", npy("<f4", (2, 2), [1, 2, 3, 4])),
                                     ("b.npy", npy("<f8", (2,), [5, 6]))]),
    "npz_dir_and_comment_as_double":
        b"\x03" + npz([("d/", b""), ("d/x.npy", npy("<f8", (1, 1, 1), [7]))], b"seed"),
    # What the fuzzer found (an io_error now; tests/test_nn.cpp has their regression tests).
    "npy_empty_huge_extents_regression":
        b"\x00" + npy("<f4", (0, 4611686018427387904, 4611686018427387904), []),
    "npz_overlapping_entries_regression": b"\x01" + overlapping(6),
}
os.makedirs(here, exist_ok=True)
for name, data in seeds.items():
    with open(os.path.join(here, name), "wb") as f:
        f.write(data)
