//! The iterator program: this kernel's struct offsets as its BTF gives
//! them ([`Layout`]), a small BPF assembler, and [`program`], which writes
//! one [`RECORD`] per task. Pure: nothing here touches the kernel.

use super::super::btf::Btf;

/// What the program needs to know of this kernel's structs: byte offsets,
/// and the BTF id of the iterator's target function.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// BTF id of `bpf_iter_task`, the target the program attaches to.
    pub iter_func: u32,
    /// `bpf_iter_meta.seq`.
    pub meta_seq: u32,
    /// `task_struct.{thread_pid, group_leader, real_parent, flags,
    /// start_boottime, comm, mm}`.
    pub thread_pid: u32,
    pub group_leader: u32,
    pub real_parent: u32,
    pub flags: u32,
    pub start_boottime: u32,
    pub comm: u32,
    pub mm: u32,
    /// `pid.level` and `pid.numbers`, `sizeof(struct upid)`, `upid.nr`.
    pub pid_level: u32,
    pub pid_numbers: u32,
    pub upid_size: u32,
    pub upid_nr: u32,
    /// `mm_struct.{start_code, exe_file, context.vdso}`, `file.f_inode`,
    /// `inode.{i_ino, i_sb}`, `super_block.s_dev`: the executable image's
    /// identity, checked against the maps the scan reads.
    pub start_code: u32,
    pub vdso: u32,
    pub exe_file: u32,
    pub f_inode: u32,
    pub i_ino: u32,
    pub i_sb: u32,
    pub s_dev: u32,
}

impl Layout {
    /// Finds every offset in `btf` and checks each field has the width the
    /// program reads it with; what is missing or of another width
    /// otherwise.
    pub fn from_btf(btf: &Btf<'_>) -> Result<Layout, String> {
        const NAMES: [&str; 8] = [
            "task_struct",
            "pid",
            "upid",
            "bpf_iter_meta",
            "mm_struct",
            "file",
            "inode",
            "super_block",
        ];
        let mut wanted: Vec<(&str, bool)> = NAMES.iter().map(|&n| (n, false)).collect();
        wanted.push(("bpf_iter_task", true));
        let found = btf.find_all(&wanted);
        let id = |i: usize| found[i].ok_or(format!("struct {}", NAMES[i]));
        let (task, pid, upid) = (id(0)?, id(1)?, id(2)?);
        let (meta, mm, file, inode, sb) = (id(3)?, id(4)?, id(5)?, id(6)?, id(7)?);
        let iter_func = found[8].ok_or("function bpf_iter_task")?;
        const PTR: u32 = 8;
        // the offset of `s.name`, which must be `width` bytes wide
        let field = |s: u32, name: &str, width: u32| {
            let m = btf.member(s, name);
            match m.and_then(|m| btf.size_of(m.type_id)) {
                Some(w) if w == width => Ok(m.map_or(0, |m| m.offset)),
                _ => Err(format!("{}.{name} of {width} bytes", btf_name(btf, s))),
            }
        };
        let comm = btf.member(task, "comm").ok_or("task_struct.comm")?;
        // the program copies comm as two 8-byte words
        if btf.array(comm.type_id).map(|a| a.0) != Some(16) {
            return Err("task_struct.comm of 16 bytes".into());
        }
        if std::mem::size_of::<usize>() as u32 != PTR {
            return Err("a 64-bit kernel".into());
        }
        Ok(Layout {
            iter_func,
            meta_seq: field(meta, "seq", PTR)?,
            thread_pid: field(task, "thread_pid", PTR)?,
            group_leader: field(task, "group_leader", PTR)?,
            real_parent: field(task, "real_parent", PTR)?,
            flags: field(task, "flags", 4)?,
            start_boottime: field(task, "start_boottime", 8)?,
            comm: comm.offset,
            mm: field(task, "mm", PTR)?,
            pid_level: field(pid, "level", 4)?,
            pid_numbers: btf.member(pid, "numbers").ok_or("pid.numbers")?.offset,
            upid_size: btf.size_of(upid).ok_or("sizeof(struct upid)")?,
            upid_nr: field(upid, "nr", 4)?,
            start_code: field(mm, "start_code", 8)?,
            vdso: {
                let context = btf.member(mm, "context").ok_or("mm_struct.context")?;
                context.offset + field(context.type_id, "vdso", PTR)?
            },
            exe_file: field(mm, "exe_file", PTR)?,
            f_inode: field(file, "f_inode", PTR)?,
            i_ino: field(inode, "i_ino", 8)?,
            i_sb: field(inode, "i_sb", PTR)?,
            s_dev: field(sb, "s_dev", 4)?,
        })
    }
}

/// The name of struct `id`, for messages.
fn btf_name(btf: &Btf<'_>, id: u32) -> String {
    String::from_utf8_lossy(btf.name_of(id)).into_owned()
}

/// BPF instruction building: opcodes, registers and labels.
pub(super) mod asm {
    pub const R0: u8 = 0;
    pub const R1: u8 = 1;
    pub const R2: u8 = 2;
    pub const R3: u8 = 3;
    pub const R4: u8 = 4;
    pub const R6: u8 = 6;
    pub const R7: u8 = 7;
    pub const R8: u8 = 8;
    pub const R9: u8 = 9;
    pub const FP: u8 = 10;

    pub const LDX_W: u8 = 0x61;
    pub const LDX_DW: u8 = 0x79;
    pub const STX_W: u8 = 0x63;
    pub const STX_DW: u8 = 0x7b;
    pub const ST_W: u8 = 0x62;
    pub const MOV_K: u8 = 0xb7;
    pub const MOV_X: u8 = 0xbf;
    pub const ADD_K: u8 = 0x07;
    pub const ADD_X: u8 = 0x0f;
    pub const MUL_K: u8 = 0x27;
    pub const JEQ_K: u8 = 0x15;
    pub const JLT_X: u8 = 0xad;
    pub const CALL: u8 = 0x85;
    pub const EXIT: u8 = 0x95;

    /// Helpers: `bpf_get_current_task`, `bpf_probe_read_kernel`,
    /// `bpf_seq_write`.
    pub const CURRENT_TASK: i32 = 35;
    pub const PROBE_READ_KERNEL: i32 = 113;
    pub const SEQ_WRITE: i32 = 127;

    /// A program being written: jumps name a label, resolved by `finish`.
    #[derive(Default)]
    pub struct Asm {
        insns: Vec<(u8, u8, u8, i16, i32)>,
        jumps: Vec<(usize, usize)>,
        labels: Vec<Option<usize>>,
    }

    impl Asm {
        pub fn op(&mut self, code: u8, dst: u8, src: u8, off: i16, imm: i32) {
            self.insns.push((code, dst, src, off, imm));
        }
        pub fn label(&mut self) -> usize {
            self.labels.push(None);
            self.labels.len() - 1
        }
        pub fn here(&mut self, label: usize) {
            self.labels[label] = Some(self.insns.len());
        }
        pub fn jump(&mut self, code: u8, dst: u8, src: u8, imm: i32, label: usize) {
            self.jumps.push((self.insns.len(), label));
            self.op(code, dst, src, 0, imm);
        }
        /// The instructions as the kernel reads them (native byte order,
        /// register nibbles in the order of the C bitfields).
        pub fn finish(mut self) -> Vec<u64> {
            for &(at, label) in &self.jumps {
                let to = self.labels[label].expect("every label is placed");
                self.insns[at].3 = (to as isize - at as isize - 1) as i16;
            }
            self.insns
                .iter()
                .map(|&(code, dst, src, off, imm)| {
                    let regs = if cfg!(target_endian = "little") {
                        dst | (src << 4)
                    } else {
                        (dst << 4) | src
                    };
                    let mut b = [0u8; 8];
                    b[0] = code;
                    b[1] = regs;
                    b[2..4].copy_from_slice(&off.to_ne_bytes());
                    b[4..8].copy_from_slice(&imm.to_ne_bytes());
                    u64::from_ne_bytes(b)
                })
                .collect()
        }
    }
}

/// Bytes per task the program writes: tid, tgid, ppid, flags (u32 each),
/// start_boottime (u64), comm (16), the reader's namespace level (u32), 0,
/// then its executable: `mm->start_code` (u64), the exe's inode number
/// (u64) and device (u32, the kernel's encoding), 0, and where its vDSO
/// was mapped (`mm->context.vdso`, u64).
pub const RECORD: usize = 80;

/// Where the record is built on the program's stack, and two scratch
/// slots below it.
const REC: i16 = -(RECORD as i16);
const SPILL: i16 = REC - 8;
const TMP: i16 = REC - 16;

/// *(dst on the stack) = `size` bytes at register `src` + `src_off`,
/// with `bpf_probe_read_kernel` (zeros if the read faults).
fn probe(a: &mut asm::Asm, dst: i16, size: i32, src: u8, src_off: i32) {
    use asm::*;
    a.op(MOV_X, R3, src, 0, 0);
    if src_off != 0 {
        a.op(ADD_K, R3, 0, 0, src_off);
    }
    a.op(MOV_X, R1, FP, 0, 0);
    a.op(ADD_K, R1, 0, 0, dst as i32);
    a.op(MOV_K, R2, 0, 0, size);
    a.op(CALL, 0, 0, 0, PROBE_READ_KERNEL);
}

/// Register `dst` = the pointer at register `src` + `off`.
fn follow(a: &mut asm::Asm, dst: u8, src: u8, off: u32) {
    use asm::*;
    probe(a, TMP, 8, src, off as i32);
    a.op(LDX_DW, dst, FP, TMP, 0);
}

/// The record's executable part for the task at r7 (r8 scratch): zeros
/// unless it has an mm (with an exe file, for the file's identity).
fn executable(a: &mut asm::Asm, l: &Layout) {
    use asm::*;
    let i = |x: u32| x as i32;
    for at in (48..80).step_by(4) {
        a.op(ST_W, FP, 0, REC + at, 0);
    }
    let no_exe = a.label();
    follow(a, R8, R7, l.mm);
    a.jump(JEQ_K, R8, 0, 0, no_exe);
    probe(a, REC + 48, 8, R8, i(l.start_code));
    probe(a, REC + 72, 8, R8, i(l.vdso));
    follow(a, R8, R8, l.exe_file);
    a.jump(JEQ_K, R8, 0, 0, no_exe);
    follow(a, R8, R8, l.f_inode);
    a.jump(JEQ_K, R8, 0, 0, no_exe);
    probe(a, REC + 56, 8, R8, i(l.i_ino));
    follow(a, R8, R8, l.i_sb);
    a.jump(JEQ_K, R8, 0, 0, no_exe);
    probe(a, REC + 64, 4, R8, i(l.s_dev));
    a.here(no_exe);
}

/// The iterator program for `l`: for each task, its pids in the reader's
/// pid namespace (0 where not visible there), flags, start time, comm and
/// executable, as one [`RECORD`] written to the iterator's output.
///
/// Every field is read with `bpf_probe_read_kernel` from the task's
/// address as a plain number, not by dereferencing the typed pointer the
/// iterator passes: the verifier checks each typed pointer it follows
/// against lists it finds by a linear search of the kernel's BTF (loading
/// took 62 ms that way here, 0.5 ms this way). A read that
/// faults yields zeros.
pub fn program(l: &Layout) -> Vec<u64> {
    use asm::*;
    let mut a = Asm::default();
    let out = a.label();
    let i = |x: u32| x as i32;
    a.op(LDX_DW, R6, R1, 0, 0); // meta
    a.op(LDX_DW, R7, R1, 8, 0); // task, or NULL at the end
    a.jump(JEQ_K, R7, 0, 0, out);
    a.op(LDX_DW, R6, R6, l.meta_seq as i16, 0); // the seq_file to write to
                                                // r7: the task's address as a number (through a copy on the stack)
    a.op(STX_DW, FP, R7, SPILL, 0);
    probe(&mut a, TMP, 8, FP, SPILL as i32);
    a.op(LDX_DW, R7, FP, TMP, 0);
    // r9: the level of the reader's pid namespace
    a.op(CALL, 0, 0, 0, CURRENT_TASK);
    follow(&mut a, R8, R0, l.thread_pid);
    probe(&mut a, TMP, 4, R8, i(l.pid_level));
    a.op(LDX_W, R9, FP, TMP, 0);
    // the number at level r9 of the pid of the task at r8, into REC + at
    let ns_pid = |a: &mut Asm, at: i16| {
        let done = a.label();
        a.op(ST_W, FP, 0, REC + at, 0);
        follow(a, R8, R8, l.thread_pid);
        a.jump(JEQ_K, R8, 0, 0, done);
        probe(a, TMP, 4, R8, i(l.pid_level));
        a.op(LDX_W, R2, FP, TMP, 0);
        a.jump(JLT_X, R2, R9, 0, done); // not visible in the reader's namespace
        a.op(MOV_X, R4, R9, 0, 0);
        a.op(MUL_K, R4, 0, 0, i(l.upid_size));
        a.op(ADD_X, R4, R8, 0, 0);
        probe(a, REC + at, 4, R4, i(l.pid_numbers + l.upid_nr));
        a.here(done);
    };
    a.op(MOV_X, R8, R7, 0, 0);
    ns_pid(&mut a, 0);
    follow(&mut a, R8, R7, l.group_leader);
    ns_pid(&mut a, 4);
    follow(&mut a, R8, R7, l.real_parent);
    follow(&mut a, R8, R8, l.group_leader);
    ns_pid(&mut a, 8);
    probe(&mut a, REC + 12, 4, R7, i(l.flags));
    probe(&mut a, REC + 16, 8, R7, i(l.start_boottime));
    probe(&mut a, REC + 24, 16, R7, i(l.comm));
    a.op(STX_W, FP, R9, REC + 40, 0);
    a.op(ST_W, FP, 0, REC + 44, 0);
    executable(&mut a, l);
    a.op(MOV_X, R1, R6, 0, 0);
    a.op(MOV_X, R2, FP, 0, 0);
    a.op(ADD_K, R2, 0, 0, REC as i32);
    a.op(MOV_K, R3, 0, 0, RECORD as i32);
    a.op(CALL, 0, 0, 0, SEQ_WRITE);
    a.here(out);
    a.op(MOV_K, R0, 0, 0, 0);
    a.op(EXIT, 0, 0, 0, 0);
    a.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    // Jumps land inside the program and it ends with `exit`, for layouts
    // with small and large offsets.
    #[test]
    fn program_jumps_stay_inside() {
        let l = Layout {
            iter_func: 1,
            meta_seq: 0,
            thread_pid: 1368,
            group_leader: 1328,
            real_parent: 1280,
            flags: 44,
            start_boottime: 1560,
            comm: 1752,
            mm: 1200,
            pid_level: 4,
            pid_numbers: 144,
            upid_size: 16,
            upid_nr: 0,
            start_code: 256,
            vdso: 900,
            exe_file: 880,
            f_inode: 32,
            i_ino: 64,
            i_sb: 40,
            s_dev: 16,
        };
        let p = program(&l);
        assert_eq!(p.last().unwrap().to_ne_bytes()[0], 0x95);
        for (at, insn) in p.iter().enumerate() {
            let b = insn.to_ne_bytes();
            if b[0] & 0x07 == 0x05 && b[0] != 0x85 && b[0] != 0x95 {
                let off = i16::from_ne_bytes([b[2], b[3]]) as isize;
                let to = at as isize + 1 + off;
                assert!(to > at as isize && (to as usize) < p.len(), "jump at {at}");
            }
        }
    }
}
