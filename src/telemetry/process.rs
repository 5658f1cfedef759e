//! Process metrics under the names every Prometheus client library uses (`process_*`), read
//! from /proc at each scrape and rendered as Prometheus text beside the recorder's (the
//! `metrics` facade's counters are integers; CPU seconds are not), with the heap the
//! process's allocations hold (`deltaship_heap_allocated_bytes`, from glibc's malloc).
//! Elsewhere than Linux, or where /proc cannot be read, the metrics are left out.

use std::fmt::Write;

/// The kernel reports CPU times and start time in USER_HZ ticks, 100 a second on every
/// architecture deltaship builds for (the Prometheus Go client assumes the same).
const TICKS_PER_SECOND: f64 = 100.0;

/// The process metrics as Prometheus text, for what /proc could tell.
pub fn render() -> String {
    let read = |path: &str| std::fs::read_to_string(path).ok();
    let mut out = String::new();
    let mut metric = |name: &str, kind: &str, help: &str, value: f64| {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}");
    };
    if let Some(stat) = read("/proc/self/stat").as_deref().and_then(Stat::parse) {
        metric(
            "process_cpu_seconds_total",
            "counter",
            "User and system CPU time of the process, all threads, in seconds.",
            stat.cpu_ticks as f64 / TICKS_PER_SECOND,
        );
        metric("process_threads", "gauge", "Threads of the process.", stat.threads as f64);
        metric("process_virtual_memory_bytes", "gauge", "Virtual memory of the process, in bytes.", stat.virtual_bytes as f64);
        if let Some(boot) = read("/proc/stat").as_deref().and_then(boot_time) {
            metric(
                "process_start_time_seconds",
                "gauge",
                "Unix time the process started, in seconds.",
                boot as f64 + stat.start_ticks as f64 / TICKS_PER_SECOND,
            );
        }
    }
    if let Some(bytes) = resident_bytes() {
        metric("process_resident_memory_bytes", "gauge", "Resident memory of the process, in bytes.", bytes as f64);
    }
    if let Some(bytes) = heap_allocated_bytes() {
        metric(
            "deltaship_heap_allocated_bytes",
            "gauge",
            "Heap memory in use by the process's allocations (glibc's malloc), in bytes; resident memory above it is code, stacks and free memory the allocator keeps.",
            bytes as f64,
        );
    }
    if let Ok(fds) = std::fs::read_dir("/proc/self/fd") {
        metric("process_open_fds", "gauge", "Open file descriptors.", fds.count() as f64);
    }
    if let Some(limit) = read("/proc/self/limits").as_deref().and_then(max_open_files) {
        metric("process_max_fds", "gauge", "The limit of open file descriptors (the soft limit).", limit as f64);
    }
    out
}

/// What /proc/self/stat says of the process.
#[derive(Debug, PartialEq)]
struct Stat {
    /// User plus system time, in ticks.
    cpu_ticks: u64,
    threads: u64,
    /// Since boot, in ticks.
    start_ticks: u64,
    virtual_bytes: u64,
}

impl Stat {
    /// Parses the fields after the command name, which is in parentheses and may hold
    /// spaces and parentheses itself (`proc(5)`: utime is field 14, stime 15, num_threads
    /// 20, starttime 22, vsize 23).
    fn parse(text: &str) -> Option<Stat> {
        let after_name = &text[text.rfind(')')? + 1..];
        // Field 3 (state) is the first after the name.
        let fields: Vec<&str> = after_name.split_whitespace().collect();
        let at = |n: usize| fields.get(n - 3)?.parse::<u64>().ok();
        Some(Stat { cpu_ticks: at(14)? + at(15)?, threads: at(20)?, start_ticks: at(22)?, virtual_bytes: at(23)? })
    }
}

/// The process's resident memory (`VmRSS`), in bytes.
pub fn resident_bytes() -> Option<u64> {
    std::fs::read_to_string("/proc/self/status").ok().as_deref().and_then(|s| field(s, "VmRSS:")).map(|kib| kib * 1024)
}

/// The bytes the heap's allocations hold now (glibc's malloc, `mallinfo2`): in its arenas
/// (`uordblks`) and in chunks it mapped on their own (`hblkhd`). It walks each arena's free
/// lists under the arena's lock, which a look every few seconds does not notice. `None`
/// with other C libraries.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
pub fn heap_allocated_bytes() -> Option<u64> {
    // SAFETY: mallinfo2 only reads glibc's own bookkeeping, taking each arena's lock as
    // malloc does, and returns a plain struct.
    let info = unsafe { libc::mallinfo2() };
    u64::try_from(info.uordblks + info.hblkhd).ok()
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn heap_allocated_bytes() -> Option<u64> {
    None
}

/// The number after `name` in a `name value` line (e.g. `VmRSS:  1234 kB`).
fn field(text: &str, name: &str) -> Option<u64> {
    text.lines().find_map(|l| l.strip_prefix(name))?.split_whitespace().next()?.parse().ok()
}

/// The boot time, Unix seconds, from /proc/stat's `btime` line.
fn boot_time(stat: &str) -> Option<u64> {
    field(stat, "btime ")
}

/// The soft limit of `Max open files` in /proc/self/limits.
fn max_open_files(limits: &str) -> Option<u64> {
    field(limits, "Max open files")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stat_line_is_read_after_a_command_name_with_spaces_and_parentheses() {
        let line = "4242 (tokio (rt) x) S 1 4242 4242 0 -1 4194560 2797 0 0 0 150 25 0 0 20 0 7 0 1234 98304 2000 18446744073709551615";
        assert_eq!(Stat::parse(line), Some(Stat { cpu_ticks: 175, threads: 7, start_ticks: 1234, virtual_bytes: 98304 }));
    }

    #[test]
    fn a_truncated_stat_line_is_not_read() {
        assert_eq!(Stat::parse("4242 (x) S 1 2 3"), None);
    }

    #[test]
    fn status_limits_and_boot_time_are_read_by_their_line() {
        assert_eq!(field("Name:\tx\nVmRSS:\t   5120 kB\nThreads:\t3\n", "VmRSS:"), Some(5120));
        let limits = "Limit                     Soft Limit           Hard Limit           Units\nMax open files            1024                 524288               files\n";
        assert_eq!(max_open_files(limits), Some(1024));
        assert_eq!(boot_time("cpu  1 2 3\nbtime 1763950000\nprocesses 10\n"), Some(1763950000));
    }

    #[test]
    fn this_process_renders_every_metric_once_with_its_type() {
        let text = render();
        for (name, kind) in [
            ("process_cpu_seconds_total", "counter"),
            ("process_threads", "gauge"),
            ("process_virtual_memory_bytes", "gauge"),
            ("process_start_time_seconds", "gauge"),
            ("process_resident_memory_bytes", "gauge"),
            ("process_open_fds", "gauge"),
            ("process_max_fds", "gauge"),
            #[cfg(all(target_os = "linux", target_env = "gnu"))]
            ("deltaship_heap_allocated_bytes", "gauge"),
        ] {
            assert!(text.contains(&format!("# TYPE {name} {kind}\n")), "{name}: {text}");
            let value = text.lines().find_map(|l| l.strip_prefix(&format!("{name} "))).unwrap_or_else(|| panic!("{name}: {text}"));
            assert!(value.parse::<f64>().unwrap() > 0.0 || name == "process_cpu_seconds_total", "{name} {value}");
        }
    }

    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn the_heap_allocated_follows_allocations_and_frees() {
        // Other tests allocate and free meanwhile (the figure is the whole process's): 64 MB
        // dwarfs them, and one of five tries free of their noise is enough, while a figure
        // that does not follow allocations fails all five.
        const BLOCK: u64 = 64 << 20;
        let allocated = || heap_allocated_bytes().unwrap();
        let mut seen = Vec::new();
        for _ in 0..5 {
            let before = allocated();
            let block = vec![1u8; BLOCK as usize];
            let during = allocated();
            drop(block);
            let after = allocated();
            if during >= before + BLOCK - (16 << 20) && after + BLOCK - (16 << 20) <= during {
                return;
            }
            seen.push((before, during, after));
        }
        panic!("the heap allocated did not follow 64 MB allocated then freed in five tries (before, during, after): {seen:?}");
    }
}
