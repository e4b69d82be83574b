//! What the node asks of the operating system: memory figures, thread
//! priorities, the allocator's mapping threshold and a stable default node
//! id. Every function here is best effort and Linux-first; none depends on
//! any other part of the server.

/// Nice value of background threads (defragmentation, migrations, index
/// population). Under CFS a nice-10 thread gets about a tenth of a core
/// that a nice-0 event loop also wants, and all of an idle one. (Not
/// `SCHED_IDLE` like scans: defragmentation must keep up with overwrites
/// on a saturated node, or writes stop.)
pub const BACKGROUND_NICE: i32 = 10;

/// Allocations at least this large get pages of their own from the kernel
/// (glibc's default threshold), returned when freed.
const MMAP_THRESHOLD_BYTES: i32 = 128 * 1024;

/// Sets the calling thread's nice value (Linux: per thread). Best effort.
pub fn set_thread_nice(nice: i32) {
    #[expect(unsafe_code, reason = "libc calls on the current thread")]
    // SAFETY: gettid has no preconditions; setpriority only reads its
    // arguments and changes this thread's scheduling weight. Lowering
    // priority needs no privilege.
    unsafe {
        let thread = libc::gettid();
        let _ = libc::setpriority(libc::PRIO_PROCESS, thread as libc::id_t, nice);
    }
}

/// Puts the calling thread in `SCHED_IDLE`: it runs only when nothing else
/// on its CPU wants to. Best effort; an unprivileged thread cannot leave it.
pub fn set_thread_idle() {
    #[expect(unsafe_code, reason = "libc call on the current thread")]
    // SAFETY: sched_setscheduler(0, ..) changes only the calling thread and
    // reads only `param`, which lives across the call.
    unsafe {
        let param = libc::sched_param { sched_priority: 0 };
        let _ = libc::sched_setscheduler(0, libc::SCHED_IDLE, &param);
    }
}

/// Keeps glibc's threshold for serving an allocation with its own mapping
/// at its default, 128 KiB, instead of letting it rise (up to 32 MiB) each
/// time such an allocation is freed. Otherwise, once a large frame's buffer
/// is freed, the next ones come from the heap, whose freed middle is not
/// given back to the kernel: the resident memory of a node under hostile
/// clients would drift above what the buffer budget charges. Best effort;
/// other allocators ignore it.
pub fn keep_large_allocations_mapped() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        #[expect(unsafe_code, reason = "libc call setting an allocator option")]
        // SAFETY: mallopt only sets a tuning parameter of glibc's malloc;
        // it is called at startup, and is thread-safe in any case.
        unsafe {
            let _ = libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES);
        }
    }
}

/// Resident set size of this process in bytes (Linux).
pub fn process_rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

/// (total, available) system memory in bytes (Linux).
pub fn system_memory_bytes() -> (u64, u64) {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let field = |name: &str| -> u64 {
        meminfo
            .lines()
            .find(|line| line.starts_with(name))
            .and_then(|line| line.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
            * 1024
    };
    (field("MemTotal:"), field("MemAvailable:"))
}

/// A node id from the host name and port, like the real server's MAC+port:
/// stable across restarts, distinct for nodes on one host. Kept below 2^60
/// so the name has at most 15 hex digits.
pub fn default_node_id(port: u16) -> u64 {
    let host = std::fs::read_to_string("/etc/hostname").unwrap_or_default();
    // FNV-1a: stable across builds, unlike std's hasher.
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in host.trim().bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    ((hash & 0x0000_0fff_ffff_ffff) << 16 | u64::from(port)) & 0x0fff_ffff_ffff_ffff
        | 0x0100_0000_0000_0000
}
