//! What /proc says about a process: its mappings, threads, the system call each thread is parked
//! in, its uids, and the kernel's ptrace policy.

use std::io;
use std::path::{Path, PathBuf};

/// One line of /proc/PID/maps that maps a file.
#[derive(Debug, Clone)]
pub struct Mapping {
    pub start: u64,
    pub offset: u64,
    /// `major:minor` of the file's device, as one number (only compared, never decoded).
    pub dev: u64,
    pub inode: u64,
    pub path: PathBuf,
}

/// The file-backed mappings of the process (anonymous, `[heap]`-like and deleted files left
/// out).
pub fn file_mappings(pid: u32) -> io::Result<Vec<Mapping>> {
    Ok(regions(pid)?.into_iter().filter_map(Region::file).collect())
}

/// One line of /proc/PID/maps, anonymous mappings included.
#[derive(Debug, Clone)]
pub struct Region {
    pub start: u64,
    pub end: u64,
    /// `rwxp`-style permissions.
    pub perms: String,
    pub offset: u64,
    pub dev: u64,
    pub inode: u64,
    /// As printed: a path, `[stack]`-like names, or empty for an anonymous mapping.
    pub name: String,
}

impl Region {
    pub fn executable(&self) -> bool {
        self.perms.as_bytes().get(2) == Some(&b'x')
    }

    /// Anonymous memory, neither a file nor one of the kernel's named areas.
    pub fn anonymous(&self) -> bool {
        self.inode == 0 && self.name.is_empty()
    }

    /// The mapped file, when this maps one that still exists.
    fn file(self) -> Option<Mapping> {
        if self.inode == 0 || !self.name.starts_with('/') || self.name.ends_with(" (deleted)") {
            return None;
        }
        Some(Mapping {
            start: self.start,
            offset: self.offset,
            dev: self.dev,
            inode: self.inode,
            path: PathBuf::from(self.name),
        })
    }
}

/// Every mapping of the process.
pub fn regions(pid: u32) -> io::Result<Vec<Region>> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/maps"))?;
    Ok(text.lines().filter_map(parse_region).collect())
}

fn parse_region(line: &str) -> Option<Region> {
    // "start-end perms offset major:minor inode   path" (the path may hold spaces).
    let mut rest = line;
    let mut field = || {
        let t = rest.trim_start();
        let end = t.find(' ').unwrap_or(t.len());
        let (f, r) = t.split_at(end);
        rest = r;
        f
    };
    let range = field();
    let perms = field().to_string();
    let offset = u64::from_str_radix(field(), 16).ok()?;
    let (major, minor) = field().split_once(':')?;
    let inode: u64 = field().parse().ok()?;
    let name = rest.trim_start().to_string();
    let (start, end) = range.split_once('-')?;
    let dev = (u64::from_str_radix(major, 16).ok()? << 32) | u64::from_str_radix(minor, 16).ok()?;
    Some(Region {
        start: u64::from_str_radix(start, 16).ok()?,
        end: u64::from_str_radix(end, 16).ok()?,
        perms,
        offset,
        dev,
        inode,
        name,
    })
}

#[cfg(test)]
fn parse_maps_line(line: &str) -> Option<Mapping> {
    parse_region(line)?.file()
}

/// A mapped file as the target sees it, readable from here even across mount namespaces.
pub fn target_file(pid: u32, path: &Path) -> PathBuf {
    let mut p = PathBuf::from(format!("/proc/{pid}/root"));
    p.push(path.strip_prefix("/").unwrap_or(path));
    p
}

/// The fields of /proc/PID[/task/TID]/stat this crate reads.
#[derive(Debug, Clone)]
pub struct Stat {
    pub state: char,
    pub comm: String,
    pub start_time_ticks: u64,
}

pub fn stat(path: &str) -> io::Result<Stat> {
    let text = std::fs::read_to_string(path)?;
    parse_stat(&text).ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "unparsable stat"))
}

fn parse_stat(text: &str) -> Option<Stat> {
    // "pid (comm) S ppid ..." where comm may contain spaces and parentheses.
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let comm = text.get(open + 1..close)?.to_string();
    let fields: Vec<&str> = text.get(close + 1..)?.split_whitespace().collect();
    // fields[0] is the state (field 3); starttime is field 22.
    let state = fields.first()?.chars().next()?;
    let start_time_ticks = fields.get(19)?.parse().ok()?;
    Some(Stat {
        state,
        comm,
        start_time_ticks,
    })
}

/// Real and effective uid of a process (from its status file).
pub fn uids(pid: u32) -> io::Result<(u32, u32)> {
    uids_in(&format!("/proc/{pid}/status"))
}

/// The process a thread id belongs to (its thread group id: the id itself for a process).
pub fn tgid(pid: u32) -> io::Result<u32> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    text.lines()
        .find_map(|l| l.strip_prefix("Tgid:"))
        .and_then(|t| t.trim().parse().ok())
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "no Tgid line"))
}

/// Our own real and effective uid.
pub fn own_uids() -> io::Result<(u32, u32)> {
    uids_in("/proc/self/status")
}

fn uids_in(status: &str) -> io::Result<(u32, u32)> {
    let text = std::fs::read_to_string(status)?;
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "no Uid line"))?;
    let mut ids = line.split_whitespace().map(str::parse::<u32>);
    match (ids.next(), ids.next()) {
        (Some(Ok(r)), Some(Ok(e))) => Ok((r, e)),
        _ => Err(io::Error::new(io::ErrorKind::InvalidData, "bad Uid line")),
    }
}

/// The command line, arguments joined by spaces (the comm name when it is empty, as for kernel
/// threads).
pub fn command(pid: u32, comm: &str) -> String {
    let joined = std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| {
            b.split(|&c| c == 0)
                .filter(|s| !s.is_empty())
                .map(|s| String::from_utf8_lossy(s).into_owned())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default();
    if joined.is_empty() {
        comm.to_string()
    } else {
        joined
    }
}

/// The thread ids of the process.
pub fn threads(pid: u32) -> io::Result<Vec<u32>> {
    let mut tids: Vec<u32> = std::fs::read_dir(format!("/proc/{pid}/task"))?
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect();
    tids.sort_unstable();
    Ok(tids)
}

/// The system call a thread is blocked in, from /proc/PID/task/TID/syscall (`None` when it runs
/// or is not in one).
pub fn blocked_syscall(pid: u32, tid: u32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/syscall")).ok()?;
    text.split_whitespace().next()?.parse().ok()
}

/// The process tracing a thread (its `TracerPid`), when one does.
pub fn tracer(pid: u32, tid: u32) -> Option<u32> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/status")).ok()?;
    let tracer: u32 = text
        .lines()
        .find_map(|l| l.strip_prefix("TracerPid:"))?
        .trim()
        .parse()
        .ok()?;
    (tracer != 0).then_some(tracer)
}

/// What a thread's status file says about its signals, and whether it runs with a shadow
/// stack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThreadSignals {
    /// The thread's blocked mask (`SigBlk`): bit `n - 1` for signal `n`.
    pub blocked: u64,
    /// The process's signals with a handler (`SigCgt`).
    pub caught: u64,
    /// The process's signals set to `SIG_IGN` (`SigIgn`).
    pub ignored: u64,
    /// x86 user shadow stack (CET) enabled (`x86_Thread_features: shstk`).
    pub shadow_stack: bool,
}

pub fn thread_signals(pid: u32, tid: u32) -> io::Result<ThreadSignals> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/status"))?;
    parse_thread_signals(&text)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "no signal masks in status"))
}

fn parse_thread_signals(text: &str) -> Option<ThreadSignals> {
    let mask = |key: &str| -> Option<u64> {
        let hex = text.lines().find_map(|l| l.strip_prefix(key))?.trim();
        u64::from_str_radix(hex, 16).ok()
    };
    let shadow_stack = text
        .lines()
        .find_map(|l| l.strip_prefix("x86_Thread_features:"))
        .is_some_and(|f| f.split_whitespace().any(|w| w == "shstk"));
    Some(ThreadSignals {
        blocked: mask("SigBlk:")?,
        caught: mask("SigCgt:")?,
        ignored: mask("SigIgn:")?,
        shadow_stack,
    })
}

/// `kernel.yama.ptrace_scope`, when the Yama module is there.
pub fn yama_ptrace_scope() -> Option<u32> {
    std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope")
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Whether this process holds CAP_SYS_PTRACE in its effective set.
pub fn have_cap_sys_ptrace() -> bool {
    const CAP_SYS_PTRACE: u32 = 19;
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            let hex = s
                .lines()
                .find_map(|l| l.strip_prefix("CapEff:"))?
                .trim()
                .to_string();
            u64::from_str_radix(&hex, 16).ok()
        })
        .is_some_and(|caps| caps & (1 << CAP_SYS_PTRACE) != 0)
}

/// The ELF machine of the process's executable (`e_machine`), with whether it is 64-bit.
pub fn exe_machine(pid: u32) -> io::Result<(bool, u16)> {
    use std::io::Read;
    let mut header = [0u8; 20];
    std::fs::File::open(format!("/proc/{pid}/exe"))?.read_exact(&mut header)?;
    if header.get(..4) != Some(b"\x7fELF".as_slice()) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "not an ELF executable",
        ));
    }
    Ok((header[4] == 2, u16::from_le_bytes([header[18], header[19]])))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_lines_parse_with_spaces_in_paths_and_skip_anonymous_ones() {
        let m = parse_maps_line(
            "7f1c2a000000-7f1c2a028000 r--p 00001000 fd:01 1234    /opt/my lib/libx.so",
        )
        .unwrap();
        assert_eq!(m.start, 0x7f1c_2a00_0000);
        assert_eq!(m.offset, 0x1000);
        assert_eq!(m.dev, (0xfd << 32) | 1);
        assert_eq!(m.inode, 1234);
        assert_eq!(m.path, PathBuf::from("/opt/my lib/libx.so"));
        assert!(parse_maps_line("7ffd-7ffe rw-p 00000000 00:00 0  [stack]").is_none());
        assert!(parse_maps_line("7ffd-7ffe rw-p 00000000 00:00 0").is_none());
        assert!(parse_maps_line("7ffd-7ffe r--p 00000000 fd:01 9 /tmp/x.so (deleted)").is_none());
    }

    #[test]
    fn regions_keep_anonymous_mappings_and_their_permissions() {
        let r = parse_region("7f00aa000000-7f00aa001000 r-xp 00000000 00:00 0 ").unwrap();
        assert_eq!((r.start, r.end), (0x7f00_aa00_0000, 0x7f00_aa00_1000));
        assert!(r.executable() && r.anonymous());
        let s = parse_region("7ffd-7ffe rw-p 00000000 00:00 0  [stack]").unwrap();
        assert!(!s.executable() && !s.anonymous());
    }

    #[test]
    fn thread_signals_parse_from_a_status_file() {
        let text = "Name:\tpython3\nSigQ:\t0/1\nSigPnd:\t0000000000000000\nShdPnd:\t0000000000000000\n\
                    SigBlk:\t0000000000000002\nSigIgn:\t0000000001001000\nSigCgt:\t0000000100000002\n\
                    x86_Thread_features:\tshstk wrss\n";
        let s = parse_thread_signals(text).unwrap();
        assert_eq!(s.blocked, 2);
        assert_eq!(s.ignored, 0x0100_1000);
        assert_eq!(s.caught, 0x1_0000_0002);
        assert!(s.shadow_stack);
        // Rust's runtime sets SIGPIPE to SIG_IGN at start.
        let mine = thread_signals(std::process::id(), std::process::id()).unwrap();
        assert_ne!(mine.ignored & (1 << (libc::SIGPIPE - 1)), 0, "{mine:?}");
    }

    #[test]
    fn stat_parses_a_comm_with_parentheses() {
        let mut text = String::from("42 (a (b) c) S 1");
        for i in 5..=22 {
            text.push_str(&format!(" {i}"));
        }
        let s = parse_stat(&text).unwrap();
        assert_eq!(s.comm, "a (b) c");
        assert_eq!(s.state, 'S');
        assert_eq!(s.start_time_ticks, 22);
    }
}
