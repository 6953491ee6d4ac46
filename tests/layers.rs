//! Dependencies point one way (docs/architecture.md): a module may use modules of a lower
//! layer only, never one of its own layer (but itself) or of a layer above. This test reads
//! every `crate::…` path in src/ and fails on any that points sideways or up, and on a
//! module that has no layer yet.

use std::collections::BTreeMap;
use std::path::Path;

/// The layers, lowest first. `lib` is the crate root (`launch`).
const LAYERS: &[&[&str]] = &[
    // what the data is and its rules; knows nothing else of the crate
    &["domain"],
    // persistence of the domain (the only code that knows sled), settings, the workers' clock,
    // process-wide helpers, the metrics registry (recorded into by the layers above)
    &["store", "config", "memory", "datadir", "clock", "metrics"],
    // plumbing: HTTP serving, e-mail, outgoing HTTP, the workers' table
    &["http", "mail", "outbound", "workers"],
    // what both services share: accounts and logins, payments
    &["auth", "payments"],
    // what the services and the workers share, made once by launch
    &["context"],
    // the two HTTP services and the background workers
    &["inbox", "scheduler", "loopers"],
    // the local control socket (online backup) and restore
    &["control"],
    // wiring everything together; the command-line client (an HTTP client of the services);
    // moving in from Intray and Tickler (reads their SQLite files, writes through the store)
    // shell completions and the man page (from the command-line definition in config)
    &["lib", "launch", "client", "moving_in", "manual"],
];

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|l| l.contains(&module))
}

/// The top-level module a source file belongs to (`src/store/inbox.rs` → `store`).
fn module_of(file: &Path, src: &Path) -> String {
    let rel = file.strip_prefix(src).expect("a file under src");
    let first = rel.components().next().expect("a path").as_os_str().to_string_lossy();
    first.trim_end_matches(".rs").to_owned()
}

/// The top-level modules named by `crate::` paths in `code` (comments removed).
fn used_modules(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in code.lines() {
        let line = line.trim_start();
        if line.starts_with("//") {
            continue;
        }
        let mut rest = line;
        while let Some(i) = rest.find("crate::") {
            let after = &rest[i + "crate::".len()..];
            if let Some(group) = after.strip_prefix('{') {
                // crate::{a, b::c, d::{e, f}}: the first segment of each top-level entry
                let mut depth = 0;
                let mut entry_start = true;
                for (j, c) in group.char_indices() {
                    match c {
                        '{' => depth += 1,
                        '}' if depth == 0 => {
                            rest = &group[j..];
                            break;
                        }
                        '}' => depth -= 1,
                        ',' if depth == 0 => entry_start = true,
                        c if entry_start && (c.is_alphanumeric() || c == '_') => {
                            let name: String = group[j..]
                                .chars()
                                .take_while(|c| c.is_alphanumeric() || *c == '_')
                                .collect();
                            out.push(name);
                            entry_start = false;
                        }
                        _ => {}
                    }
                }
                if !rest.starts_with('}') {
                    break; // a group over several lines: the rest is read line by line
                }
            } else {
                let name: String = after.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                out.push(name);
                rest = after;
            }
        }
    }
    out
}

fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read src") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn no_module_uses_one_of_its_own_layer_or_above() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut problems = Vec::new();
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for file in &files {
        let module = module_of(file, &src);
        if module == "main" {
            continue; // the binary: only `pigeonhole::` paths
        }
        let Some(own) = layer_of(&module) else {
            problems.push(format!(
                "{}: module `{module}` has no layer in tests/layers.rs",
                file.display()
            ));
            continue;
        };
        *seen.entry(module.clone()).or_default() += 1;
        let code = std::fs::read_to_string(file).expect("read a source file");
        // multi-line `use crate::{…}` groups: join them so the scanner sees each whole
        let joined = code.replace("crate::{\n", "crate::{");
        let mut joined_groups = String::new();
        let mut in_group = false;
        for line in joined.lines() {
            if in_group {
                joined_groups.push_str(line.trim());
                joined_groups.push(' ');
                if line.trim_start().starts_with("};") {
                    in_group = false;
                    joined_groups.push('\n');
                }
                continue;
            }
            joined_groups.push_str(line);
            if line.trim_end().ends_with("crate::{") {
                in_group = true;
            } else {
                joined_groups.push('\n');
            }
        }
        for used in used_modules(&joined_groups) {
            if used == module {
                continue;
            }
            match layer_of(&used) {
                Some(l) if l < own => {}
                Some(l) => problems.push(format!(
                    "{}: `{module}` (layer {own}) uses `{used}` (layer {l})",
                    file.display()
                )),
                None => problems.push(format!(
                    "{}: `{module}` uses `{used}`, which has no layer",
                    file.display()
                )),
            }
        }
    }
    assert!(seen.contains_key("domain") && seen.contains_key("store"), "{seen:?}");
    assert!(
        problems.is_empty(),
        "dependencies that do not point down:\n{}",
        problems.join("\n")
    );
}

#[test]
fn the_scanner_reads_paths_and_groups() {
    let code = "use crate::store::Store;\nuse crate::{domain::wire, http::{ApiError, Reply}, config};\n\
                // crate::loopers in a comment\nlet x = crate::payments::pricing(&s);\n";
    assert_eq!(used_modules(code), ["store", "domain", "http", "config", "payments"]);
}
