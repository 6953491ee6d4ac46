//! The report of a benchmark: a table of measures with goals, printed plain and written as
//! Markdown into its own section of docs/performance.md, with the machine and its load.

use super::R;
use std::path::Path;
use std::process::Command;

pub const MIB: f64 = 1024.0 * 1024.0;

#[derive(Clone, Copy)]
pub enum Goal {
    AtLeast(f64),
    AtMost(f64),
    Below(f64),
    Info,
}

/// One line of the table: a measure, its value, what it is compared with (a ceiling, or a
/// peer's value) and their ratio, and the goal; the goal is checked on the ratio unless
/// [`Row::checked_on`] names another number (an absolute bound such as µs per write).
pub struct Row {
    pub measure: String,
    pub value: String,
    pub reference: String,
    pub ratio: f64,
    pub goal: Goal,
    pub goal_text: String,
    pub checked: Option<f64>,
}

impl Row {
    pub fn new(
        measure: impl Into<String>,
        value: String,
        reference: String,
        ratio: f64,
        goal: Goal,
        text: &str,
    ) -> Row {
        Row {
            measure: measure.into(),
            value,
            reference,
            ratio,
            goal,
            goal_text: text.into(),
            checked: None,
        }
    }

    /// The goal is checked on `x` instead of the ratio.
    pub fn checked_on(mut self, x: f64) -> Row {
        self.checked = Some(x);
        self
    }

    pub fn met(&self) -> &'static str {
        let x = self.checked.unwrap_or(self.ratio);
        let ok = match self.goal {
            Goal::AtLeast(g) => x >= g,
            Goal::AtMost(g) => x <= g,
            Goal::Below(g) => x < g,
            Goal::Info => return "n/a",
        };
        if x.is_nan() {
            "no (not measured)"
        } else if ok {
            "yes"
        } else {
            "**no**"
        }
    }

    pub fn ratio_text(&self) -> String {
        if self.ratio.is_nan() {
            "—".into()
        } else if self.ratio < 0.1 {
            format!("{:.4}", self.ratio)
        } else {
            format!("{:.2}", self.ratio)
        }
    }
}

pub fn ms(x: f64) -> String {
    if x < 1.0 {
        format!("{x:.3} ms")
    } else if x < 100.0 {
        format!("{x:.2} ms")
    } else {
        format!("{x:.0} ms")
    }
}

pub fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / MIB)
}

pub fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The rows as a Markdown table; `columns` names the value and the reference columns.
pub fn markdown_table(rows: &[Row], columns: [&str; 2]) -> String {
    let [value, reference] = columns;
    let mut t = format!("| measure | {value} | {reference} | ratio | goal | met? |\n|---|---:|---:|---:|---|---|\n");
    for r in rows {
        t.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} |\n",
            r.measure,
            r.value,
            r.reference,
            r.ratio_text(),
            r.goal_text,
            r.met()
        ));
    }
    t
}

pub fn plain_table(rows: &[Row], columns: [&str; 2]) -> String {
    let strip = |s: &str| s.replace("**", "").replace('`', "");
    let cells: Vec<[String; 6]> = rows
        .iter()
        .map(|r| {
            [
                strip(&r.measure),
                strip(&r.value),
                strip(&r.reference),
                r.ratio_text(),
                strip(&r.goal_text),
                strip(r.met()),
            ]
        })
        .collect();
    let header = ["measure", columns[0], columns[1], "ratio", "goal", "met?"].map(String::from);
    let mut widths = header.clone().map(|h| h.chars().count());
    for row in &cells {
        for (w, c) in widths.iter_mut().zip(row) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |row: &[String; 6]| {
        row.iter()
            .zip(widths)
            .map(|(c, w)| format!("{c}{}", " ".repeat(w - c.chars().count())))
            .collect::<Vec<_>>()
            .join("  ")
    };
    let mut out = line(&header) + "\n";
    out.push_str(&widths.map(|w| "-".repeat(w)).join("  "));
    out.push('\n');
    for row in &cells {
        out.push_str(&line(row));
        out.push('\n');
    }
    out
}

pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

pub fn machine() -> String {
    let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0);
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let mem_kb: u64 = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0);
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map(|l| l.trim_start_matches([' ', '\t', ':']).trim().to_owned())
        .unwrap_or_else(|| "unknown CPU".into());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let rustc = Command::new("rustc")
        .arg("--version")
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default();
    format!(
        "{cpus} cores (`nproc` = {cpus}), {model}; {:.1} GiB memory; Linux {}; {rustc}",
        mem_kb as f64 / 1024.0 / 1024.0,
        kernel.trim()
    )
}

pub fn now_utc_text() -> String {
    let t = time::OffsetDateTime::now_utc();
    format!(
        "{:04}-{:02}-{:02} {:02}:{:02} UTC",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute()
    )
}

/// Writes `section` (which starts with the marker `start` and ends with `end`) into the doc at
/// `path`: in place of the text between the markers when they are there, else right after the
/// line holding the marker `after` when given and found, else before the first `## ` heading.
pub fn write_doc(path: &Path, (start, end): (&str, &str), after: Option<&str>, section: &str) -> R<()> {
    // read again right before writing: others may have changed the file meanwhile
    let text = std::fs::read_to_string(path).unwrap_or_else(|_| "# Performance\n".into());
    let after_line = after
        .and_then(|marker| text.find(marker).map(|at| at + marker.len()))
        .map(|at| text[at..].find('\n').map_or(text.len(), |n| at + n + 1));
    let new = match (text.find(start), text.find(end)) {
        (Some(a), Some(b)) if a < b => format!("{}{}{}", &text[..a], section, &text[b + end.len()..]),
        _ => match after_line.or_else(|| text.find("\n## ").map(|at| at + 1)) {
            Some(at) => format!(
                "{}\n\n{}\n\n{}",
                text[..at].trim_end(),
                section,
                text[at..].trim_start()
            ),
            None => format!("{}\n{}\n", text.trim_end(), section),
        },
    };
    let tmp = path.with_extension("md.bench-tmp");
    std::fs::write(&tmp, new).map_err(|e| e.to_string())?;
    std::fs::rename(&tmp, path).map_err(|e| e.to_string())
}

/// A benchmark's run: on what machine, under what load, since when.
pub struct Run {
    pub machine: String,
    pub load_start: String,
    started: std::time::Instant,
}

/// The section of docs/performance.md a benchmark writes (see [`write_doc`]).
pub struct Doc<'a> {
    pub markers: (&'a str, &'a str),
    pub after: Option<&'a str>,
    /// The benchmark's name: `cargo bench --bench NAME`, `benches/NAME.rs`.
    pub bench: &'a str,
    pub title: &'a str,
    /// What it measures and how, after the command that reproduces it.
    pub about: String,
    /// Said after "absolute figures are noisy".
    pub caveat: &'a str,
}

impl Run {
    /// Starts the run; prints `what`, the machine and its load.
    pub fn start(what: &str) -> Run {
        let run = Run {
            machine: machine(),
            load_start: load_average(),
            started: std::time::Instant::now(),
        };
        println!("{what}");
        println!("machine: {}", run.machine);
        println!("load average at start: {}", run.load_start);
        run
    }

    /// Prints the table, the notes and the load at the end; writes `doc` when given.
    pub fn finish(&self, rows: &[Row], columns: [&str; 2], notes: &[String], doc: Option<Doc>) -> R<()> {
        let load_end = load_average();
        let took = self.started.elapsed().as_secs_f64();
        println!();
        print!("{}", plain_table(rows, columns));
        for n in notes {
            println!("- {}", n.replace('`', ""));
        }
        println!("load average at end: {load_end}; took {took:.0} s");
        let Some(doc) = doc else {
            return Ok(());
        };
        let (start, end) = doc.markers;
        let section = format!(
            "{start}\n## {} (`benches/{}.rs`)\n\n\
             Generated by `benches/{}.rs`; re-running it replaces this section. Reproduce with:\n\n\
             ```sh\ncargo bench --bench {}\n```\n\n{}\n\n\
             Run of {} ({took:.0} s in all): {}. Load average (1, 5, 15 min) at start {}, at end \
             {load_end}: other work shared the machine, so absolute figures are noisy{}.\n\n{}\n{}\n{end}",
            doc.title,
            doc.bench,
            doc.bench,
            doc.bench,
            doc.about,
            now_utc_text(),
            self.machine,
            self.load_start,
            doc.caveat,
            markdown_table(rows, columns),
            notes.iter().map(|n| format!("- {n}\n")).collect::<String>(),
        );
        let path = super::manifest_dir().join("docs").join("performance.md");
        write_doc(&path, doc.markers, doc.after, &section)?;
        println!("wrote {}", path.display());
        Ok(())
    }
}
