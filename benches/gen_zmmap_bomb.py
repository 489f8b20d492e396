#!/usr/bin/env python3
"""A pipe-mode perf.data whose data is RECORDS COMPRESSED2 records (zstd, via
the zstd command), each expanding to MIB MiB of the same four MMAP2 records
(libc's four maps in one process, inode form, sample_id_all with TID|TIME)
repeated: zstd shrinks them ~10,000 times, so 3 x 60 MiB stay under the
decompression-bomb bound (1000 times the zstd bytes read, 256 MiB floor).
The process (pid 999999999) does not exist, so `archive --from` reads every
map and archives nothing. Deterministic. For benches/hostile.sh.

    gen_zmmap_bomb.py OUT [RECORDS [MIB]]       (default 3 x 60)
"""
import struct, subprocess, sys

out = sys.argv[1]
records = int(sys.argv[2]) if len(sys.argv) > 2 else 3
mib = int(sys.argv[3]) if len(sys.argv) > 3 else 60
PID, TID, TIME = 999999999, 1 << 1, 1 << 2
MMAP2, COMPRESSED2, HEADER_ATTR = 10, 83, 64
SAMPLE_ID_ALL = 1 << 18


def record(type_, misc, body):
    return struct.pack('<IHH', type_, misc, 8 + len(body)) + body


# perf_event_attr VER0 (64 bytes): type, size, config, sample_period,
# sample_type, read_format, flags, wakeup_events, bp_type, config1; one id
attr = struct.pack('<IIQQQQQIIQ', 1, 64, 0, 1, TID | TIME, 0, SAMPLE_ID_ALL, 0, 0, 0)
buf = bytearray(struct.pack('<8sQ', b'PERFILE2', 16))
buf += record(HEADER_ATTR, 0, attr + struct.pack('<Q', 1))

name = b'/usr/lib/x86_64-linux-gnu/libc.so.6\0'
name += b'\0' * (-len(name) % 8)
cycle = bytearray()
for i, (addr, length, pgoff, prot) in enumerate([
        (0x7f0000000000, 0x28000, 0, 1),
        (0x7f0000028000, 0x195000, 0x28000, 5),
        (0x7f00001bd000, 0x58000, 0x1bd000, 1),
        (0x7f0000215000, 0x6000, 0x214000, 3)]):
    body = struct.pack('<IIQQQIIQQII', PID, PID, addr, length, pgoff, 8, 1, 1234567,
                       0, prot, 2) + name + struct.pack('<IIQ', PID, PID, 1000 + i)
    cycle += record(MMAP2, 2, body)
plain = bytes(cycle) * ((mib << 20) // len(cycle))
frame = subprocess.run(['zstd', '-19', '-q', '-c'], input=plain, stdout=subprocess.PIPE,
                       check=True).stdout
assert len(frame) < 65000, len(frame)
pad = b'\0' * (-len(frame) % 8)
one = struct.pack('<IHHQ', COMPRESSED2, 0, 16 + len(frame) + len(pad), len(frame)) + frame + pad
buf += one * records
open(out, 'wb').write(buf)
