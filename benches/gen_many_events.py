#!/usr/bin/env python3
"""A pipe-mode perf.data of N events (HEADER_ATTR, one id each), then one
sample of each, all on the same stack (ip, pid, tid): the shape that made
pprof quadratic. For benches/hostile.sh.

    gen_many_events.py N OUT
"""
import struct, sys
n, out = int(sys.argv[1]), sys.argv[2]
IDENT, IP, TID, PERIOD = 1 << 16, 1, 2, 1 << 8
st = IDENT | IP | TID | PERIOD
buf = bytearray(struct.pack('<8sQ', b'PERFILE2', 16))
for i in range(n):
    # perf_event_attr VER0 (64 bytes): type, size, config, sample_period,
    # sample_type, read_format, flags, wakeup_events, bp_type, config1
    attr = struct.pack('<IIQQQQQIIQ', 1, 64, 0, 1, st, 0, 0, 0, 0, 0)
    body = attr + struct.pack('<Q', 1000 + i)
    buf += struct.pack('<IHH', 64, 0, 8 + len(body)) + body
for i in range(n):
    body = struct.pack('<QQIIQ', 1000 + i, 0x401000, 42, 42, 1)
    buf += struct.pack('<IHH', 9, 2, 8 + len(body)) + body
open(out, 'wb').write(buf)
