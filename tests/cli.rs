//! The command line: --all in a private PID namespace, determinism across
//! worker counts, skipped processes, and error exits.

mod common;

use std::collections::BTreeSet;
use std::process::Command;

use common::*;

/// Runs a shell script inside `unshare -fp --mount-proc`, so /proc shows only
/// the processes the script starts.
fn in_pid_namespace(script: &str) -> std::process::Output {
    let out = Command::new("unshare")
        .args(["-fp", "--mount-proc", "sh", "-c", script])
        .output()
        .expect("run unshare");
    assert!(
        out.status.success(),
        "namespace script failed: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    out
}

// --all inside a private PID namespace snapshots exactly the namespace's
// processes (the shell and two mappers, not mmap2-synth itself), with FORK
// then COMM per thread, and the output is identical for -j 1, 2 and 3
// (all taken again if the kernel's BPF programs changed between them).
#[test]
#[ignore = "needs root and perf"]
fn all_in_pid_namespace_is_complete_and_deterministic() {
    needs_root("unshare -fp");
    needs_perf();
    let f = fixtures();
    let scratch = scratch("all");
    let outs = |dir: &std::path::Path| -> Vec<std::path::PathBuf> {
        (1..=3).map(|j| dir.join(format!("j{j}.data"))).collect()
    };
    let (run, dir) = take_while_the_kernel_holds(&scratch, |dir| {
        let outs = outs(dir);
        let script = format!(
            "{m} --wait forever --ready {r1} {a} {b} & \
             {m} --wait forever --threads 2 --ready {r2} {c} & \
             n=0; while [ ! -e {r1} ] || [ ! -e {r2} ]; do \
               n=$((n+1)); [ $n -lt 3000 ] || {{ echo 'mappers not ready in 30 s' >&2; exit 1; }}; sleep 0.01; done; \
             {bin} --all -j 1 -o {o1} && {bin} --all -j 2 -o {o2} && {bin} --all -j 3 -o {o3} && \
             {bin} -q --uid root -o {ou}",
            m = q(&f.mapper),
            r1 = q(&dir.join("r1")),
            r2 = q(&dir.join("r2")),
            a = q(&f.lib_sha1),
            b = q(&f.lib_hex8),
            c = q(&f.lib_md5),
            bin = bin(),
            o1 = q(&outs[0]),
            o2 = q(&outs[1]),
            o3 = q(&outs[2]),
            ou = q(&dir.join("uid.data")),
        );
        (in_pid_namespace(&script), vec![outs])
    });
    let (r1, r2, outs) = (dir.join("r1"), dir.join("r2"), outs(&dir));
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        stderr.contains(": 3 processes (0 kernel threads), 5 threads"),
        "{stderr}"
    );
    assert!(stderr.contains("skipped: none"), "{stderr}");

    let pid_of = |p: &std::path::Path| -> u32 {
        std::fs::read_to_string(p).unwrap().trim().parse().unwrap()
    };
    let (p1, p2) = (pid_of(&r1), pid_of(&r2));
    let script_out = perf(&[
        "script".as_ref(),
        "--show-task-events".as_ref(),
        "--show-mmap-events".as_ref(),
        "-i".as_ref(),
        outs[0].as_os_str(),
    ]);
    // Every COMM belongs to the namespace's processes.
    let comm_pids: BTreeSet<u32> = script_out
        .lines()
        .filter_map(|l| l.split_once("PERF_RECORD_COMM: ").map(|(_, r)| r))
        .map(|r| {
            let ids = r.rsplit_once(':').unwrap().1;
            ids.split('/').next().unwrap().parse().unwrap()
        })
        .collect();
    assert_eq!(comm_pids, BTreeSet::from([1, p1, p2]), "{script_out}");
    // --uid root selects the same processes (all are root's here), without FORKs.
    let by_uid = perf(&[
        "script".as_ref(),
        "--show-task-events".as_ref(),
        "-i".as_ref(),
        dir.join("uid.data").as_os_str(),
    ]);
    assert_eq!(by_uid.matches("PERF_RECORD_COMM").count(), 5, "{by_uid}");
    assert!(!by_uid.contains("PERF_RECORD_FORK"));
    // Per thread: FORK directly before its COMM.
    let kinds: Vec<&str> = script_out
        .lines()
        .filter_map(|l| {
            ["PERF_RECORD_FORK", "PERF_RECORD_COMM", "PERF_RECORD_MMAP2"]
                .into_iter()
                .find(|k| l.contains(k))
        })
        .collect();
    assert_eq!(
        kinds.iter().filter(|k| **k == "PERF_RECORD_FORK").count(),
        5
    );
    for (i, k) in kinds.iter().enumerate() {
        if *k == "PERF_RECORD_COMM" {
            assert_eq!(kinds[i - 1], "PERF_RECORD_FORK", "{script_out}");
        }
    }
    let maps = perf_script_mmaps(&script_out);
    let lib_pids = |lib: &std::path::Path| -> BTreeSet<u32> {
        maps.iter()
            .filter(|m| m.path == lib.to_str().unwrap())
            .map(|m| m.pid)
            .collect()
    };
    assert_eq!(lib_pids(&f.lib_sha1), BTreeSet::from([p1]));
    assert_eq!(lib_pids(&f.lib_md5), BTreeSet::from([p2]));

    // Same bytes whatever -j, except the CMDLINE feature that records -j.
    let files: Vec<Vec<u8>> = outs.iter().map(|o| std::fs::read(o).unwrap()).collect();
    for other in &files[1..] {
        assert_same_but_cmdline(&files[0], other);
    }
}

// Files shared by many processes are reported once per worker (the memo
// of what a worker already handed on): the BUILD_ID table still lists
// every name a file is mapped under (a hard link in the middle of the pid
// range, a build id first seen late), the pipe output puts each id before
// the first map of its file, and both outputs are the same for -j 1 and 3
// (all taken again if the kernel's BPF programs changed between them).
#[test]
#[ignore = "needs root and perf"]
fn shared_files_are_reported_once_whatever_the_workers() {
    needs_root("unshare -fp");
    needs_perf();
    let f = fixtures();
    let scratch = scratch("shared");
    let link = scratch.join("linked-libsha1.so");
    std::fs::hard_link(&f.lib_sha1, &link).unwrap();
    let outs = |dir: &std::path::Path, ext: &str| -> Vec<std::path::PathBuf> {
        [1, 3]
            .iter()
            .map(|j| dir.join(format!("j{j}.{ext}")))
            .collect()
    };
    let ((), dir) = take_while_the_kernel_holds(&scratch, |dir| {
        let ready = dir.join("ready");
        std::fs::create_dir_all(&ready).unwrap();
        // 12 processes mapping libsha1 and libmd5; the 7th maps libsha1 only
        // under its hard link, the 10th adds libhex8
        let mut starts = String::new();
        for i in 1..=12 {
            let sha1 = if i == 7 { q(&link) } else { q(&f.lib_sha1) };
            let more = if i == 10 {
                q(&f.lib_hex8)
            } else {
                String::new()
            };
            starts += &format!(
                "{m} --wait forever --ready {r}/{i} {sha1} {md5} {more} & ",
                m = q(&f.mapper),
                r = q(&ready),
                md5 = q(&f.lib_md5),
            );
        }
        let script = format!(
            "{starts} n=0; while [ $(ls {r} | grep -vc tmp) -lt 12 ]; do \
               n=$((n+1)); [ $n -lt 3000 ] || {{ echo 'mappers not ready in 30 s' >&2; exit 1; }}; sleep 0.01; done; \
             for j in 1 3; do \
               {bin} -q --all -j $j -o {d}/j$j.data && {bin} -q --all -j $j -o - > {d}/j$j.pipe || exit 1; \
             done",
            r = q(&ready),
            bin = bin(),
            d = q(dir),
        );
        in_pid_namespace(&script);
        ((), vec![outs(dir, "data"), outs(dir, "pipe")])
    });
    let (data, pipes) = (outs(&dir, "data"), outs(&dir, "pipe"));
    let a = std::fs::read(&data[0]).unwrap();
    assert_same_but_cmdline(&a, &std::fs::read(&data[1]).unwrap());
    // the pipe's CMDLINE is a record: its dump (every record, in order)
    let piped = dump_file(&pipes[0]);
    let other = dump_file(&pipes[1]);
    assert!(
        piped == other,
        "pipe output differs between -j 1 and -j 3 (- -j 1, + -j 3):\n{}",
        dump_diff(&piped, &other)
    );
    let ids = perf(&["buildid-list".as_ref(), "-i".as_ref(), data[0].as_os_str()]);
    for lib in [&f.lib_sha1, &link, &f.lib_md5, &f.lib_hex8] {
        assert_eq!(
            ids.lines()
                .filter(|l| l.ends_with(lib.to_str().unwrap()))
                .count(),
            1,
            "{} once in the table:\n{ids}",
            lib.display()
        );
    }
    assert!(ids.lines().any(|l| l.ends_with(" [vdso]")), "{ids}");
    // pipe mode: each file's HEADER_BUILD_ID before its first MMAP2
    let dump = piped;
    for lib in [&f.lib_sha1, &link, &f.lib_md5, &f.lib_hex8] {
        let path = lib.to_str().unwrap();
        let first = |kind: &str| {
            dump.lines()
                .position(|l| l.starts_with(kind) && l.ends_with(&format!("path={path}")))
                .unwrap_or_else(|| panic!("no {kind} of {path}:\n{dump}"))
        };
        assert!(first("build_id") < first("mmap2"), "{path}:\n{dump}");
    }
}

// The BPF task iterator gives the same snapshot as /proc (comms with
// spaces and parentheses, 15-byte names, named threads, a zombie leader)
// at pid-namespace levels 1 and 2 (all taken again if the kernel's BPF
// programs changed between them); it refuses --uid rather than guess.
#[test]
#[ignore = "needs root and BPF"]
fn task_iterator_snapshot_is_the_proc_snapshot() {
    needs_root("unshare -fp and BPF");
    let f = fixtures();
    let scratch = scratch("tasks");
    for level in 1..=2 {
        let base = scratch.join(format!("level{level}"));
        std::fs::create_dir(&base).unwrap();
        let ((), dir) = take_while_the_kernel_holds(&base, |dir| {
            let script = dir.join("tasks.sh");
            let body = format!(
                "set -e\n\
                 r={d}/ready$1; mkdir -p $r\n\
                 {m} --wait forever --threads 3 --ready $r/1 {lib} >/dev/null &\n\
                 {m} --wait forever --threads 2 --ready $r/2 {lib} >/dev/null &\n\
                 {m} --wait zombie-leader --threads 2 --ready $r/3 {lib} >/dev/null &\n\
                 ( printf 'a b) (c' > /proc/self/comm; : > $r/4; sleep 1000; : ) &\n\
                 ( printf 'fifteen-chars-x' > /proc/self/comm; : > $r/5; sleep 1000; : ) &\n\
                 n=0; while [ $(ls $r | grep -vc tmp) -lt 5 ]; do \
                   n=$((n+1)); [ $n -lt 3000 ] || {{ echo 'not ready in 30 s' >&2; exit 1; }}; sleep 0.01; done\n\
                 for s in bpf proc; do {bin} --all --no-watch --task-source $s -o {d}/$s$1.data 2> {d}/$s$1.err; done\n\
                 if {bin} -q --uid 0 --no-watch --task-source bpf -o {d}/uid.data 2> {d}/uid.err; then exit 1; fi\n",
                d = q(dir),
                m = q(&f.mapper),
                lib = q(&f.lib_sha1),
                bin = bin(),
            );
            std::fs::write(&script, body).unwrap();
            let nest = if level == 2 {
                "unshare -fp --mount-proc "
            } else {
                ""
            };
            in_pid_namespace(&format!("{nest}sh {} {level}", q(&script)));
            let pair = ["bpf", "proc"].map(|s| dir.join(format!("{s}{level}.data")));
            ((), vec![pair.to_vec()])
        });
        let err = std::fs::read_to_string(dir.join("uid.err")).unwrap();
        assert!(err.contains("task iterator"), "level {level}: {err}");
        let read = |s: &str| std::fs::read(dir.join(format!("{s}{level}.data"))).unwrap();
        assert_same_but_cmdline(&read("bpf"), &read("proc"));
        let dump = dump_file(&dir.join(format!("bpf{level}.data")));
        for comm in [
            "a b) (c",
            "fifteen-chars-x",
            "worker-0",
            "worker-2",
            "mapper",
        ] {
            assert!(
                dump.contains(&format!("comm={comm}\n")),
                "level {level}, {comm}:\n{dump}"
            );
        }
        // three mappers' leaders and their 3 + 2 + 2 threads
        let mapper_comms = dump
            .lines()
            .filter(|l| {
                l.starts_with("comm ") && (l.ends_with("comm=mapper") || l.contains("comm=worker-"))
            })
            .count();
        assert_eq!(mapper_comms, 3 + 7, "level {level}:\n{dump}");
        // every process's head came from the iterator: none fell back
        let said = |s: &str| std::fs::read_to_string(dir.join(format!("{s}{level}.err"))).unwrap();
        let processes = dump
            .lines()
            .filter(|l| {
                l.starts_with("fork ") && {
                    let f: Vec<&str> = l.split(' ').collect();
                    f[1].strip_prefix("pid=") == f[3].strip_prefix("tid=")
                }
            })
            .count();
        let line =
            format!("comm, parent and threads of {processes} processes from the BPF task iterator");
        assert!(
            said("bpf").contains(&line),
            "level {level}, want {line:?}:\n{}",
            said("bpf")
        );
        assert!(!said("proc").contains("task iterator"), "{}", said("proc"));
    }
}

/// The COMM line of process `pid`'s leader in a dump.
fn leader_comm<'d>(dump: &'d str, pid: &str) -> &'d str {
    let comm = format!("comm pid={pid} tid={pid} ");
    dump.lines()
        .find(|l| l.starts_with(&comm))
        .unwrap_or_else(|| panic!("no {comm:?}:\n{dump}"))
}

/// How many processes' heads came from the task iterator, as a summary
/// (the tool's stderr) says.
fn iterator_heads(said: &str) -> usize {
    said.split_once("comm, parent and threads of ")
        .and_then(|(_, r)| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no task iterator line: {said}"))
}

/// Shell lines that start a snapshot of the namespace with heads from the
/// task iterator into `$d/NAME.data` (stderr `$d/NAME.err`), held just after
/// the heads were read, and wait until it holds; [`HELD_SCAN_END`] lets it go
/// on and waits for it.
fn held_scan_start(name: &str) -> String {
    format!(
        "MMAP2_SYNTH_TEST_HOLD_AFTER_HEADS=$d/hold {bin} --all --no-watch --task-source bpf \
           -o $d/{name}.data 2> $d/{name}.err &\n\
         t=$!\n\
         {wh}",
        bin = bin(),
        wh = sh_poll("the hold", "[ ! -e $d/hold ]"),
    )
}

/// Releases the snapshot [`held_scan_start`] started, and waits for it.
const HELD_SCAN_END: &str = "rm $d/hold\nwait $t\n";

// By default a scan of 200+ processes takes their heads from the task
// iterator (as root, without seccomp), and auto writes what /proc gives
// (both taken again if the kernel's BPF programs changed between them).
#[test]
#[ignore = "needs root and BPF"]
fn default_scan_of_many_processes_uses_the_iterator() {
    needs_root("unshare -fp and BPF");
    let scratch = scratch("auto-heads");
    let ((), dir) = take_while_the_kernel_holds(&scratch, |dir| {
        let script = dir.join("auto.sh");
        let body = format!(
            "set -e\n\
             d={d}\n\
             for i in $(seq 1 210); do sleep 1000 & done\n\
             {ws}\
             {bin} --all --no-watch -o $d/default.data 2> $d/default.err\n\
             for s in auto proc; do {bin} --all --no-watch --task-source $s -o $d/$s.data 2> $d/$s.err; done\n",
            d = q(dir),
            bin = bin(),
            ws = sh_poll("the sleeps", "[ $(ls -d /proc/[0-9]* | wc -l) -lt 211 ]"),
        );
        std::fs::write(&script, body).unwrap();
        in_pid_namespace(&format!("sh {}", q(&script)));
        ((), vec![vec![dir.join("auto.data"), dir.join("proc.data")]])
    });
    let read = |s: &str| std::fs::read(dir.join(s)).unwrap();
    assert_same_but_cmdline(&read("auto.data"), &read("proc.data"));
    let said = String::from_utf8(read("default.err")).unwrap();
    let from_iter = iterator_heads(&said);
    assert!(from_iter >= 210, "{said}");
    let said = String::from_utf8(read("proc.err")).unwrap();
    assert!(!said.contains("task iterator"), "{said}");
}

// A process that execs after the task iterator read its head, before its
// maps are read, is written with the comm it has then (its head read again
// from /proc), not the one the iterator saw; the summary does not count it.
#[test]
#[ignore = "needs root and BPF"]
fn exec_after_the_iterator_gets_its_new_comm() {
    needs_root("unshare -fp and BPF");
    let dir = scratch("exec-heads");
    let script = dir.join("exec.sh");
    let body = format!(
        "set -e\n\
         d={d}; mkfifo $d/fifo\n\
         sh -c \"read x < $d/fifo; exec sleep 1000\" &\n\
         p=$!; echo $p > $d/pid\n\
         {held}\
         echo go > $d/fifo\n\
         {we}\
         {end}",
        d = q(&dir),
        held = held_scan_start("exec"),
        end = HELD_SCAN_END,
        we = sh_poll("the exec", "[ \"$(cat /proc/$p/comm)\" != sleep ]"),
    );
    std::fs::write(&script, body).unwrap();
    in_pid_namespace(&format!("sh {}", q(&script)));
    let pid = std::fs::read_to_string(dir.join("pid")).unwrap();
    let dump = dump_file(&dir.join("exec.data"));
    let line = leader_comm(&dump, pid.trim());
    assert!(line.ends_with(" comm=sleep"), "{line}");
    // written processes, and those whose head the iterator gave
    let err = std::fs::read_to_string(dir.join("exec.err")).unwrap();
    let written: usize = err
        .split_once("mmap2-synth: ")
        .and_then(|(_, r)| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{err}"));
    let from_iter = iterator_heads(&err);
    assert!(from_iter >= 1 && from_iter < written, "{err}");
}

// A process whose leader exits after the task iterator ran, leaving a
// thread the iterator never saw, is still written, with that thread's maps
// and its head read again from /proc (it was skipped as vanished).
#[test]
#[ignore = "needs root and BPF"]
fn leader_exiting_after_the_iterator_keeps_its_process() {
    needs_root("unshare -fp and BPF");
    let f = fixtures();
    let dir = scratch("late-zombie");
    let script = dir.join("late.sh");
    let body = format!(
        "set -e\n\
         d={d}\n\
         ( {wg}) | {m} --wait late-zombie --ready $d/ready {lib} >/dev/null &\n\
         {wr}\
         p=$(cat $d/ready)\n\
         {held}\
         : > $d/go\n\
         {wz}\
         echo $p > $d/pid\n\
         {end}",
        d = q(&dir),
        m = q(&f.mapper),
        lib = q(&f.lib_sha1),
        held = held_scan_start("late"),
        end = HELD_SCAN_END,
        wg = sh_poll("go", "[ ! -e $d/go ]"),
        wr = sh_poll("the mapper", "[ ! -e $d/ready ]"),
        wz = sh_poll(
            "the zombie leader",
            "[ $(ls /proc/$p/task | wc -l) != 2 ] || ! grep -q ') Z' /proc/$p/stat"
        ),
    );
    std::fs::write(&script, body).unwrap();
    in_pid_namespace(&format!("sh {}", q(&script)));
    let pid = std::fs::read_to_string(dir.join("pid")).unwrap();
    let pid = pid.trim();
    let err = std::fs::read_to_string(dir.join("late.err")).unwrap();
    assert!(!err.contains(&format!("skipped pid {pid} ")), "{err}");
    let dump = dump_file(&dir.join("late.data"));
    let lib = f.lib_sha1.to_str().unwrap();
    assert!(
        dump.lines()
            .any(|l| l.starts_with(&format!("mmap2 pid={pid} ")) && l.contains(lib)),
        "no map of {lib} for {pid}:\n{dump}"
    );
    assert!(
        dump.lines()
            .any(|l| l.starts_with(&format!("comm pid={pid} ")) && l.ends_with(" comm=late")),
        "no thread 'late' in {pid}:\n{dump}"
    );
}

/// Runs `prog` (a mapper build; `wrap` before it, say `setarch -R`) in a
/// pid namespace; after the task iterator ran it execs itself through a
/// link named `renamed`, before its maps are read. The COMM line of the
/// process in the snapshot.
fn comm_after_self_exec(dir: &std::path::Path, wrap: &str, prog: &std::path::Path) -> String {
    std::os::unix::fs::symlink(prog, dir.join("renamed")).unwrap();
    let script = dir.join("self-exec.sh");
    let body = format!(
        "set -e\n\
         d={d}\n\
         ( {wg}) | {wrap} {prog} --wait stdin --reexec $d/renamed --ready $d/ready >/dev/null &\n\
         {wr}\
         p=$(cat $d/ready)\n\
         {held}\
         : > $d/go\n\
         {we}\
         echo $p > $d/pid\n\
         {end}",
        d = q(dir),
        prog = q(prog),
        held = held_scan_start("out"),
        end = HELD_SCAN_END,
        wg = sh_poll("go", "[ ! -e $d/go ]"),
        wr = sh_poll("the program", "[ ! -e $d/ready ]"),
        we = sh_poll("the exec", "[ \"$(cat /proc/$p/comm)\" != renamed ]"),
    );
    std::fs::write(&script, body).unwrap();
    in_pid_namespace(&format!("sh {}", q(&script)));
    let pid = std::fs::read_to_string(dir.join("pid")).unwrap();
    let dump = dump_file(&dir.join("out.data"));
    leader_comm(&dump, pid.trim()).to_string()
}

// A fixed-address (non-PIE) program that execs itself under another name
// after the task iterator ran maps its code at the same place, but its
// vDSO elsewhere: its head is read again, and it gets its new comm.
#[test]
#[ignore = "needs root and BPF"]
fn fixed_address_program_exec_gets_its_new_comm() {
    needs_root("unshare -fp and BPF");
    let dir = scratch("fixed-exec");
    let fixed = dir.join("fixed");
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/mapper.c");
    cc(&[
        "-O1".as_ref(),
        "-no-pie".as_ref(),
        "-o".as_ref(),
        fixed.as_os_str(),
        src.as_os_str(),
        "-ldl".as_ref(),
        "-lpthread".as_ref(),
    ]);
    let line = comm_after_self_exec(&dir, "", &fixed);
    assert!(line.ends_with(" comm=renamed"), "{line}");
}

// A program run without address randomization (setarch -R) that execs
// itself after the task iterator ran maps everything at the same places:
// its head is never taken from the iterator, and it gets its new comm.
#[test]
#[ignore = "needs root and BPF"]
fn unrandomized_program_exec_gets_its_new_comm() {
    needs_root("unshare -fp and BPF");
    let f = fixtures();
    let dir = scratch("setarch-exec");
    let prog = dir.join("prog");
    std::fs::copy(&f.mapper, &prog).unwrap();
    let line = comm_after_self_exec(&dir, "setarch -R", &prog);
    assert!(line.ends_with(" comm=renamed"), "{line}");
}

// A pid that goes to another process of the same program after the task
// iterator ran is written with the new process's parent, not the old one's:
// its code is elsewhere (address randomization), so its head is read again.
#[test]
#[ignore = "needs root and BPF"]
fn pid_reused_after_the_iterator_gets_the_new_parent() {
    needs_root("unshare -fp, ns_last_pid and BPF");
    let aslr = std::fs::read_to_string("/proc/sys/kernel/randomize_va_space").unwrap();
    assert_ne!(aslr.trim(), "0", "this test needs address randomization");
    let dir = scratch("reuse-heads");
    let script = dir.join("reuse.sh");
    let body = format!(
        "set -e\n\
         d={d}\n\
         ( sleep 1000 & echo $! > $d/a; wait ) &\n\
         {wa}\
         p=$(cat $d/a)\n\
         {held}\
         kill $p\n\
         {wg}\
         echo $((p-1)) > /proc/sys/kernel/ns_last_pid\n\
         sleep 2000 &\n\
         b=$!\n\
         [ $b = $p ] || {{ echo \"new pid $b, not $p\" >&2; exit 1; }}\n\
         echo $p $$ > $d/pids\n\
         {end}\
         kill $b\n",
        d = q(&dir),
        held = held_scan_start("reuse"),
        end = HELD_SCAN_END,
        wa = sh_poll("the first sleep", "[ ! -s $d/a ]"),
        wg = sh_poll("the end of the first sleep", "[ -e /proc/$p ]"),
    );
    std::fs::write(&script, body).unwrap();
    in_pid_namespace(&format!("sh {}", q(&script)));
    let pids = std::fs::read_to_string(dir.join("pids")).unwrap();
    let (pid, parent) = pids.trim().split_once(' ').unwrap();
    let dump = dump_file(&dir.join("reuse.data"));
    let fork = format!("fork pid={pid} ");
    let line = dump
        .lines()
        .find(|l| l.starts_with(&fork))
        .unwrap_or_else(|| panic!("no {fork:?}:\n{dump}"));
    assert!(
        line.starts_with(&format!("fork pid={pid} ppid={parent} ")),
        "{line}"
    );
}

fn dead_pid() -> u32 {
    let mut c = Command::new("true").spawn().unwrap();
    let pid = c.id();
    c.wait().unwrap();
    pid
}

// A pid that does not exist is counted as not found (not as vanished mid-
// scan) and is not fatal; the live one is written. Named with -p, it fails
// --strict (exit 3: "any process skipped"; it exited 0 before).
#[test]
fn missing_pid_is_not_found_and_fails_strict() {
    let m = Mapper::start(&[]);
    let dir = scratch("vanished");
    let out = dir.join("v.data");
    let pids = format!("{},{}", m.pid, dead_pid());
    let o = synth(["-p", pids.as_str(), "-o", out.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(
        err.contains("1 processes") && err.contains("skipped: 1 not found"),
        "{err}"
    );
    assert!(out.exists());
    let o = synth(["--strict", "-p", pids.as_str(), "-o", out.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(err.contains("--strict: 1 processes were skipped"), "{err}");
}

// A process the caller may not read (root's, read by nobody) is counted as
// denied and the run still succeeds; --strict turns it into exit code 3.
#[test]
#[ignore = "needs root"]
fn denied_process_is_counted_not_fatal() {
    needs_root("setpriv to drop to nobody");
    let m = Mapper::start(&[]);
    let dir = scratch("denied");
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let out = dir.join("d.data");
    let pid = m.pid.to_string();
    let o = synth_as_nobody(["-p".as_ref(), pid.as_ref(), "-o".as_ref(), out.as_os_str()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(err.contains("skipped: 1 denied"), "{err}");
    assert!(
        err.contains(&format!("skipped pid {} (denied)", m.pid)),
        "{err}"
    );
    let o = synth_as_nobody([
        "--strict".as_ref(),
        "-q".as_ref(),
        "-p".as_ref(),
        pid.as_ref(),
        "-o".as_ref(),
        out.as_os_str(),
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(
        err.contains("error: --strict: 1 processes were skipped"),
        "{err}"
    );
}

// Usage errors exit 2; an output in a missing directory exits 2 too (bad
// input, as a directory removed after -o was checked is) naming the path,
// and leaves no temporary file.
#[test]
fn error_exits() {
    let o = synth(["-o", "x.data"]);
    assert_eq!(o.status.code(), Some(2));
    let o = synth(["-u", "no-such-user-xyz", "-o", "x.data"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).starts_with("error: no such user"));
    let o = synth(["-p", "1", "-j", "0"]);
    assert_eq!(o.status.code(), Some(2));
    let dir = scratch("errors");
    let bad = dir.join("missing-dir").join("x.data");
    let m = Mapper::start(&[]);
    let o = synth(["-q", "-p", &m.pid.to_string(), "-o", bad.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.starts_with("error: writing ") && err.contains("missing-dir/x.data"),
        "{err}"
    );
    // an existing output is replaced whole, and no temporary file remains
    let good = dir.join("x.data");
    std::fs::write(&good, b"old").unwrap();
    synth_ok(["-q", "-p", &m.pid.to_string(), "-o", good.to_str().unwrap()]);
    assert_eq!(&std::fs::read(&good).unwrap()[..8], b"PERFILE2");
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
    // a rewrite's usage and input faults exit 2: --force without
    // --in-place, an output named as a directory, a dangling link as the
    // output (its target could be swapped after the look), an input path
    // that loops
    let rec = pin("rec-file.data");
    let dangling = dir.join("dangling");
    std::os::unix::fs::symlink(dir.join("nowhere"), &dangling).unwrap();
    let looped = dir.join("loop");
    std::os::unix::fs::symlink(&looped, &looped).unwrap();
    let new_dir = format!("{}/", dir.join("new").display());
    let rec_s = rec.to_str().unwrap();
    for (args, what) in [
        (vec!["merge", rec_s, "-o", "y.data", "--force"], "--force"),
        (vec!["merge", rec_s, "-o", &new_dir], "directory"),
        (
            vec!["merge", rec_s, "-o", dangling.to_str().unwrap()],
            "dangling symlink",
        ),
        (vec!["dump", looped.to_str().unwrap()], "symbolic links"),
    ] {
        let o = Command::new(bin()).args(&args).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(what), "{args:?}: {err}");
    }
    assert!(!dir.join("nowhere").exists() && !dir.join("new").exists());
}

// Without CAP_SYS_ADMIN (/proc/PID/map_files closed) the text source still
// finds build ids, through /proc/PID/root/PATH, for the caller's own process.
#[test]
#[ignore = "needs root and perf"]
fn unprivileged_text_source_reads_build_ids_through_root_path() {
    needs_root("setpriv to drop to nobody");
    needs_perf();
    let f = fixtures();
    let dir = scratch("unpriv");
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let ready = dir.join("ready");
    let mut mapper = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(&f.mapper)
        .args(["--wait", "forever", "--ready"])
        .arg(&ready)
        .arg(&f.lib_hex8)
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    wait_until("the unprivileged mapper's ready file", || ready.exists());
    let pid = std::fs::read_to_string(&ready).unwrap().trim().to_string();
    let out = dir.join("u.data");
    let o = synth_as_nobody([
        "--source".as_ref(),
        "text".as_ref(),
        "-p".as_ref(),
        pid.as_ref(),
        "-o".as_ref(),
        out.as_os_str(),
    ]);
    let _ = mapper.kill();
    let _ = mapper.wait();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("skipped: none"), "{err}");
    let list = perf_buildid_list(&perf(&[
        "buildid-list".as_ref(),
        "-f".as_ref(),
        "-i".as_ref(),
        out.as_os_str(),
    ]));
    assert_eq!(
        list.get(f.lib_hex8.to_str().unwrap()).map(String::as_str),
        Some("0123456789abcdef"),
        "{list:?}"
    );
    assert!(
        list.contains_key("/usr/lib/x86_64-linux-gnu/libc.so.6"),
        "{list:?}"
    );
}

// Processes that start and exit all the time (a fork loop in the namespace)
// never make --all fail: those that vanish mid-scan are only counted (at
// least 30 scans, more until one has met a vanished process).
#[test]
#[ignore = "needs root"]
fn all_survives_process_churn() {
    needs_root("unshare -fp");
    let dir = scratch("churn");
    let script = format!(
        "(while :; do /bin/true; done) & (while :; do /bin/true; done) & \
         n=0; v=0; while [ $n -lt 30 ] || [ $v -eq 0 -a $n -lt 600 ]; do \
           {bin} --all -j 2 -o {out} 2>{err} || exit 1; \
           grep -q vanished {err} && v=$((v+1)); n=$((n+1)); \
         done; echo vanished-runs=$v",
        bin = bin(),
        out = q(&dir.join("c.data")),
        err = q(&dir.join("err.txt")),
    );
    let out = in_pid_namespace(&script);
    let text = String::from_utf8_lossy(&out.stdout);
    let runs: u32 = text
        .trim()
        .strip_prefix("vanished-runs=")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{text}"));
    // the churn really made processes vanish mid-scan (30 of 30 runs here
    // when idle; with both cores busy elsewhere none of 30 did once in CI,
    // so the runs go on, up to 600, until one does)
    assert!(runs >= 1, "no run saw a vanished process: {text}");
}

// A process whose thread-group leader has exited (a zombie leader with live
// threads: /proc/PID/maps is empty) still gets its maps, from a live thread,
// and, with either source, every build id (read through the live thread's
// task/TID/ paths, the leader's fail).
#[test]
fn zombie_leader_maps_come_from_a_live_thread() {
    let f = fixtures();
    let m = Mapper::start(&[
        "--threads".as_ref(),
        "2".as_ref(),
        "--wait".as_ref(),
        "zombie-leader".as_ref(),
        f.lib_hex8.as_os_str(),
    ]);
    // wait until the leader is a zombie
    let status = format!("/proc/{}/status", m.pid);
    wait_until("the leader to be a zombie", || {
        std::fs::read_to_string(&status)
            .unwrap()
            .contains("State:\tZ")
    });
    assert!(std::fs::read_to_string(format!("/proc/{}/maps", m.pid))
        .unwrap()
        .is_empty());
    let dir = scratch("zombie");
    let out = dir.join("z.data");
    for source in ["auto", "text"] {
        let o = synth_ok([
            "-p",
            &m.pid.to_string(),
            "--source",
            source,
            "-o",
            out.to_str().unwrap(),
        ]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains("1 processes") && err.contains("skipped: none"),
            "{err}"
        );
        let vmas: usize = err
            .split_once("threads, ")
            .unwrap()
            .1
            .split(' ')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        assert!(vmas >= 4, "{source}: {err}");
        assert!(err.contains(" found, 0 missing"), "{source}: {err}");
        let bytes = std::fs::read(&out).unwrap();
        let hex8 = f.lib_hex8.to_str().unwrap().as_bytes();
        assert!(
            bytes.windows(hex8.len()).any(|w| w == hex8),
            "{source}: no map of libhex8.so"
        );
    }
}

// An input nobody may read (a root file of mode 0600, read as nobody) is
// bad input, exit 2 as a missing one is, for every command that reads a
// recording (it was exit 1, a system failure).
#[test]
#[ignore = "needs root"]
fn unreadable_input_exits_2() {
    needs_root("setpriv to drop to nobody");
    use std::os::unix::fs::PermissionsExt;
    let dir = scratch("unreadable");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let rec = dir.join("rec.data");
    std::fs::copy(pin("rec-file.data"), &rec).unwrap();
    std::fs::set_permissions(&rec, std::fs::Permissions::from_mode(0o600)).unwrap();
    let (r, out) = (rec.to_str().unwrap(), dir.join("out"));
    let o = out.to_str().unwrap();
    for args in [
        vec!["dump", r],
        vec!["pprof", r, "-o", o],
        vec!["convert", r, "--to", "pipe", "-o", o],
        vec!["merge", r, "-o", o],
        vec!["archive", "--from", r, "-o", o],
    ] {
        let out = synth_as_nobody(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains("Permission denied"), "{args:?}: {err}");
    }
}

// A reader of stdout that is gone (`| head -1` having exited) is a quiet
// stop for every command writing to stdout, or to any stream `-o` names
// (`/dev/stdout`, a FIFO: it was exit 1): exit 0 as ripgrep's, nothing
// on stderr (it was "error: writing the dump: Broken pipe", exit 1); a
// full stdout is still an error, naming stdout for the snapshot's --json
// (it said "the dump").
#[test]
fn stdout_reader_gone_is_a_quiet_stop() {
    let rec = pin("rec-file.data");
    let r = rec.to_str().unwrap();
    let me = std::process::id().to_string();
    for args in [
        vec!["dump", r],
        vec!["dump", "--json", "--sort", r],
        vec!["-q", "-p", &me, "--json"],
        vec!["-q", "-p", &me, "-o", "-"],
        vec!["pprof", "-q", "--no-symbolize", r, "-o", "-"],
        // and every other stream output (a FIFO, a device, stdout named)
        vec!["-q", "-p", &me, "-o", "/dev/stdout"],
        vec!["pprof", "-q", "--no-symbolize", r, "-o", "/dev/stdout"],
        vec!["convert", "-q", "--to", "pipe", r, "-o", "/dev/stdout"],
    ] {
        // the pipe's only reader closed before the command writes
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let o = Command::new(bin())
            .args(&args)
            .stdout(writer)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(0), "{args:?}: {err}");
        assert!(err.is_empty(), "{args:?}: {err}");
    }
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let o = Command::new(bin())
        .args(["-q", "-p", &me, "--json"])
        .stdout(full)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("error: writing stdout: No space left"),
        "{err}"
    );
}

/// The long options (and the short forms beside them) that `--help` of
/// `args` lists, but `--help` itself.
fn help_options(args: &[&str]) -> Vec<(Option<String>, String)> {
    let o = Command::new(bin())
        .args(args)
        .arg("--help")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    let mut out = Vec::new();
    for l in text.lines().map(str::trim_start) {
        let (short, rest) = match l.strip_prefix('-').filter(|r| !r.starts_with('-')) {
            Some(r) => (
                r.get(..1).map(|c| format!("-{c}")),
                r.get(3..).unwrap_or(""),
            ),
            None => (None, l),
        };
        if let Some(long) = rest.strip_prefix("--") {
            let name: String = long
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                .collect();
            if name != "help" {
                out.push((short, format!("--{name}")));
            }
        }
    }
    out
}

/// The synopsis line of `README.md` that begins with `start`.
fn readme_synopsis(start: &str) -> String {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let line = readme.lines().find(|l| l.starts_with(start));
    line.unwrap_or_else(|| panic!("no README line begins with {start:?}"))
        .to_string()
}

// archive writes no records: it has no -d/--data nor --no-buildid (they
// were listed and did nothing) and refuses them; the README synopses of
// record and archive list every option their --help lists (-d,
// --no-buildid, --task-source and --strict were missing).
#[test]
fn options_are_offered_where_they_mean_something_and_documented() {
    for opt in ["-d", "--data", "--no-buildid"] {
        let o = Command::new(bin())
            .args(["archive", opt, "-p", "1", "-o"])
            .arg(scratch("archive-opt").join("c"))
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{opt}: {err}");
        assert!(err.contains("unexpected argument"), "{opt}: {err}");
    }
    let archive = help_options(&["archive"]);
    assert!(
        archive
            .iter()
            .all(|(_, l)| l != "--data" && l != "--no-buildid"),
        "{archive:?}"
    );
    for (cmd, synopsis) in [
        ("record", "mmap2-synth record ["),
        ("archive", "mmap2-synth archive -o"),
    ] {
        let line = readme_synopsis(synopsis);
        let words: Vec<&str> = line
            .split(|c: char| c.is_whitespace() || "[]()|".contains(c))
            .collect();
        for (short, long) in help_options(&[cmd]) {
            let listed = words.contains(&long.as_str())
                || short.as_deref().is_some_and(|s| words.contains(&s));
            assert!(listed, "{cmd}: {long} is not in the README's {line:?}");
        }
    }
}

// An output path that cannot be used as given exits 2 in every command,
// whether a directory on it is missing or may not be written in (as
// nobody, in root's directory: it was exit 1 there, 2 for a missing one);
// a write that fails (a full device) is exit 1.
#[test]
#[ignore = "needs root (setpriv to nobody)"]
fn unusable_output_paths_exit_2_and_failed_writes_1() {
    needs_root("setpriv to drop to nobody");
    use std::os::unix::fs::PermissionsExt;
    let dir = scratch("unusable");
    // root's, 0755: nobody may enter it and read in it, not write
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let rec = dir.join("rec.data");
    std::fs::copy(pin("rec-file.data"), &rec).unwrap();
    let r = rec.to_str().unwrap();
    let existing = dir.join("cache");
    std::fs::create_dir(&existing).unwrap();
    let nowhere = dir.join("missing/sub");
    let me = std::process::id().to_string();
    let commands = |o: &str| -> Vec<Vec<String>> {
        let v = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        vec![
            v(&["-q", "-p", &me, "-o", o]),
            v(&["merge", r, "-q", "-o", o]),
            v(&["convert", r, "-q", "--to", "pipe", "-o", o]),
            v(&["pprof", r, "-q", "--no-symbolize", "-o", o]),
            // refused before perf starts (no perf run)
            v(&["record", "-q", "--", "-o", o, "--", "true"]),
        ]
    };
    let missing = nowhere.join("o.data");
    let denied = dir.join("o.data");
    for (what, o, nobody) in [
        ("missing", &missing, false),
        ("not writable", &denied, true),
    ] {
        let mut runs = commands(o.to_str().unwrap());
        if nobody {
            // archive makes a missing directory; it may not write in one
            for c in [&existing, &dir.join("new")] {
                runs.push(vec![
                    "archive".into(),
                    "-q".into(),
                    "-p".into(),
                    me.clone(),
                    "-o".into(),
                    c.to_str().unwrap().into(),
                ]);
            }
        }
        for args in runs {
            let out = match nobody {
                true => synth_as_nobody(&args),
                false => synth(&args),
            };
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{what}: {args:?}: {err}");
            assert!(err.contains("error: "), "{what}: {args:?}: {err}");
        }
    }
    assert!(!dir.join("new").exists() && !denied.exists());
    // a device that takes no bytes: the write fails, exit 1
    for args in [
        vec!["-q", "-p", &me, "-o", "/dev/full"],
        vec!["pprof", r, "-q", "--no-symbolize", "-o", "/dev/full"],
    ] {
        let out = synth(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains("No space left"), "{args:?}: {err}");
    }
}
