//! What `/metrics` serves besides callsync's own series: the `process_*` series every client
//! library's default collector exports (read from `/proc/self` at scrape time), and the
//! Prometheus text format (0.0.4) for a scraper that asks for it, converted from the
//! OpenMetrics text the client library writes.

use std::fmt::Write as _;

/// `process_*`, as Prometheus' client libraries name them, in OpenMetrics text (without the
/// closing `# EOF`); empty where `/proc/self` cannot be read.
pub(super) fn process_series() -> String {
    let mut out = String::new();
    let Some(stat) = ProcessStat::read() else {
        return out;
    };
    let mut family = |name: &str, kind: &str, unit: Option<&str>, help: &str, value: f64| {
        let _ = writeln!(out, "# HELP {name} {help}.");
        let _ = writeln!(out, "# TYPE {name} {kind}");
        if let Some(unit) = unit {
            let _ = writeln!(out, "# UNIT {name} {unit}");
        }
        let sample = if kind == "counter" {
            format!("{name}_total")
        } else {
            name.to_owned()
        };
        let _ = writeln!(out, "{sample} {value}");
    };
    family(
        "process_cpu_seconds",
        "counter",
        Some("seconds"),
        "Total user and system CPU time spent in seconds",
        stat.cpu_seconds,
    );
    family(
        "process_resident_memory_bytes",
        "gauge",
        Some("bytes"),
        "Resident memory size in bytes",
        stat.resident_bytes,
    );
    family(
        "process_virtual_memory_bytes",
        "gauge",
        Some("bytes"),
        "Virtual memory size in bytes",
        stat.virtual_bytes,
    );
    if let Some(start) = stat.start_time_seconds {
        family(
            "process_start_time_seconds",
            "gauge",
            Some("seconds"),
            "Start time of the process since unix epoch in seconds",
            start,
        );
    }
    if let Some(open) = open_fds() {
        family(
            "process_open_fds",
            "gauge",
            None,
            "Number of open file descriptors",
            open as f64,
        );
    }
    if let Some(max) = max_fds() {
        family(
            "process_max_fds",
            "gauge",
            None,
            "Maximum number of open file descriptors",
            max as f64,
        );
    }
    out
}

/// The figures of `/proc/self/stat` (proc(5)) the series need.
struct ProcessStat {
    cpu_seconds: f64,
    virtual_bytes: f64,
    resident_bytes: f64,
    start_time_seconds: Option<f64>,
}

impl ProcessStat {
    fn read() -> Option<Self> {
        let text = std::fs::read_to_string("/proc/self/stat").ok()?;
        let ticks = rustix::param::clock_ticks_per_second() as f64;
        let page = rustix::param::page_size() as f64;
        Self::parse(&text, ticks, page, boot_time())
    }

    /// Parses `stat` (the comm field, in parentheses, may hold spaces and parentheses: the
    /// fields are counted after its last `)`).
    fn parse(stat: &str, ticks_per_second: f64, page_size: f64, boot: Option<f64>) -> Option<Self> {
        let after_comm = &stat[stat.rfind(')')? + 1..];
        // Fields 3 (state) onwards: field n is at index n - 3.
        let fields: Vec<&str> = after_comm.split_whitespace().collect();
        let field = |n: usize| -> Option<f64> { fields.get(n - 3)?.parse().ok() };
        let ticks = ticks_per_second.max(1.0);
        Some(ProcessStat {
            cpu_seconds: (field(14)? + field(15)?) / ticks,
            virtual_bytes: field(23)?,
            resident_bytes: field(24)? * page_size,
            start_time_seconds: boot
                .zip(field(22))
                .map(|(boot, start)| boot + start / ticks),
        })
    }
}

/// When the machine booted (`btime` in `/proc/stat`), in seconds since the epoch.
fn boot_time() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    stat.lines()
        .find_map(|line| line.strip_prefix("btime "))
        .and_then(|secs| secs.trim().parse().ok())
}

fn open_fds() -> Option<usize> {
    Some(std::fs::read_dir("/proc/self/fd").ok()?.count())
}

/// The soft limit on open files (`RLIMIT_NOFILE`).
fn max_fds() -> Option<u64> {
    rustix::process::getrlimit(rustix::process::Resource::Nofile).current
}

/// The content type of each format `/metrics` serves.
pub(super) const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
pub(super) const TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Whether a scrape's `Accept` asks for OpenMetrics: only when it names it (with a q above
/// 0), as Prometheus does; anything else — `text/plain;version=0.0.4`, `*/*`, none — gets the
/// text format, as from Prometheus' own client libraries.
pub(super) fn wants_openmetrics(accept: Option<&str>) -> bool {
    accept.is_some_and(|accept| {
        accept.split(',').any(|range| {
            let mut parts = range.split(';').map(str::trim);
            let media = parts.next().unwrap_or_default();
            let refused = parts.any(|p| {
                p.strip_prefix("q=")
                    .and_then(|q| q.parse::<f64>().ok())
                    .is_some_and(|q| q <= 0.0)
            });
            media.eq_ignore_ascii_case("application/openmetrics-text") && !refused
        })
    })
}

/// OpenMetrics text as the Prometheus text format 0.0.4: no `# EOF` nor `# UNIT`; a counter's
/// family named with its `_total` (and its `_created` samples dropped); `info` a `gauge` named
/// `_info`; `unknown` `untyped`; `stateset` a `gauge`; exemplars dropped.
pub(super) fn to_text_format(openmetrics: &str) -> String {
    let mut kinds = std::collections::HashMap::new();
    for line in openmetrics.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ")
            && let Some((name, kind)) = rest.split_once(' ')
        {
            kinds.insert(name, kind);
        }
    }
    let mut out = String::with_capacity(openmetrics.len());
    for line in openmetrics.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').unwrap_or((rest, ""));
            let name = text_name(name, kinds.get(name).copied());
            let _ = writeln!(out, "# HELP {name} {help}");
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, "unknown"));
            let text_kind = match kind {
                "counter" | "gauge" | "histogram" | "summary" => kind,
                "info" | "stateset" => "gauge",
                "gaugehistogram" => "histogram",
                _ => "untyped",
            };
            let _ = writeln!(out, "# TYPE {} {text_kind}", text_name(name, Some(kind)));
        } else if line.starts_with('#') {
            // `# UNIT`, `# EOF`: the text format has neither.
        } else if !line.is_empty() && !is_created_of_a_counter(line, &kinds) {
            // An exemplar follows the value after ` # `; the text format has none.
            let sample = line.split_once(" # ").map_or(line, |(sample, _)| sample);
            let _ = writeln!(out, "{sample}");
        }
    }
    out
}

/// A family's name in the text format, which names counters and infos by their samples.
fn text_name(name: &str, kind: Option<&str>) -> String {
    match kind {
        Some("counter") => format!("{name}_total"),
        Some("info") => format!("{name}_info"),
        _ => name.to_owned(),
    }
}

fn is_created_of_a_counter(sample: &str, kinds: &std::collections::HashMap<&str, &str>) -> bool {
    let name = sample.split(['{', ' ']).next().unwrap_or_default();
    name.strip_suffix("_created")
        .is_some_and(|family| kinds.get(family) == Some(&"counter"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openmetrics_becomes_the_text_format_family_by_family() {
        let openmetrics = "\
# HELP callsync_build The running callsync's version (always 1).
# TYPE callsync_build info
callsync_build_info{version=\"0.1.0\",revision=\"abc\"} 1
# HELP callsync_passes Passes by kind and result.
# TYPE callsync_passes counter
callsync_passes_total{kind=\"incremental\",result=\"completed\"} 3
callsync_passes_created{kind=\"incremental\",result=\"completed\"} 1700000000.0
# HELP callsync_throttled_seconds Time waited.
# TYPE callsync_throttled_seconds counter
# UNIT callsync_throttled_seconds seconds
callsync_throttled_seconds_total 1.5 # {trace_id=\"x\"} 1.0
# HELP callsync_lag_seconds Lag.
# TYPE callsync_lag_seconds gauge
# UNIT callsync_lag_seconds seconds
callsync_lag_seconds{schedule=\"a\"} -2.5
# HELP callsync_pass_duration_seconds How long.
# TYPE callsync_pass_duration_seconds histogram
callsync_pass_duration_seconds_sum 0.5
callsync_pass_duration_seconds_count 1
callsync_pass_duration_seconds_bucket{le=\"+Inf\"} 1
# HELP odd Something.
# TYPE odd unknown
odd 1
# EOF
";
        assert_eq!(
            to_text_format(openmetrics),
            "\
# HELP callsync_build_info The running callsync's version (always 1).
# TYPE callsync_build_info gauge
callsync_build_info{version=\"0.1.0\",revision=\"abc\"} 1
# HELP callsync_passes_total Passes by kind and result.
# TYPE callsync_passes_total counter
callsync_passes_total{kind=\"incremental\",result=\"completed\"} 3
# HELP callsync_throttled_seconds_total Time waited.
# TYPE callsync_throttled_seconds_total counter
callsync_throttled_seconds_total 1.5
# HELP callsync_lag_seconds Lag.
# TYPE callsync_lag_seconds gauge
callsync_lag_seconds{schedule=\"a\"} -2.5
# HELP callsync_pass_duration_seconds How long.
# TYPE callsync_pass_duration_seconds histogram
callsync_pass_duration_seconds_sum 0.5
callsync_pass_duration_seconds_count 1
callsync_pass_duration_seconds_bucket{le=\"+Inf\"} 1
# HELP odd Something.
# TYPE odd untyped
odd 1
"
        );
    }

    #[test]
    fn openmetrics_only_when_the_scraper_names_it() {
        let prometheus = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert!(wants_openmetrics(Some(prometheus)));
        assert!(wants_openmetrics(Some(
            "Application/OpenMetrics-Text; version=1.0.0"
        )));
        for text in [
            None,
            Some("text/plain;version=0.0.4"),
            Some("*/*"),
            Some("application/openmetrics-text;q=0, text/plain"),
        ] {
            assert!(!wants_openmetrics(text), "{text:?}");
        }
    }

    #[test]
    fn process_figures_come_from_proc_self_stat() {
        // A comm with a space and a parenthesis; utime 250, stime 50 ticks; starttime 1000
        // ticks after boot; vsize 8 MiB; rss 256 pages.
        let stat = "4242 (call sync)) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 8 0 1000 8388608 256 18446744073709551615";
        let parsed = ProcessStat::parse(stat, 100.0, 4096.0, Some(1_700_000_000.0)).unwrap();
        assert_eq!(parsed.cpu_seconds, 3.0);
        assert_eq!(parsed.virtual_bytes, 8_388_608.0);
        assert_eq!(parsed.resident_bytes, 1_048_576.0);
        assert_eq!(parsed.start_time_seconds, Some(1_700_000_010.0));
        // This process's own, read for real.
        let series = process_series();
        for name in [
            "process_cpu_seconds_total ",
            "process_resident_memory_bytes ",
            "process_virtual_memory_bytes ",
            "process_start_time_seconds ",
            "process_open_fds ",
            "process_max_fds ",
        ] {
            assert!(series.contains(&format!("\n{name}")), "{name} in {series}");
        }
    }
}
