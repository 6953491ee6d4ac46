//! Dependencies point one way (docs/architecture.md): a module may use modules of a lower
//! layer only, never one of its own layer (but itself) or of a layer above. This test reads
//! every `crate::…` path in src/ and fails on any that points sideways or up, and on a
//! module that has no layer yet.

use std::collections::BTreeMap;
use std::path::Path;

/// The layers, lowest first. `lib` is the crate root (`launch`).
const LAYERS: &[&[&str]] = &[
    // what the data is and its rules; knows nothing else of the crate; and files written
    // whole or not at all
    &["domain", "files"],
    // persistence of the domain (the only code that knows sled), settings, the workers' clock,
    // process-wide helpers, the metrics registry (recorded into by the layers above)
    &["store", "config", "memory", "datadir", "clock", "metrics"],
    // plumbing: HTTP serving, e-mail, outgoing HTTP, the workers' table
    &["http", "mail", "outbound", "webpush", "workers"],
    // what both services share: accounts and logins, payments
    &["auth", "payments"],
    // what the services and the workers share, made once by launch
    &["context"],
    // the service shell: what both HTTP services are made of, and the routes they share
    &["shell"],
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

/// The module path of a source file (`src/store/inbox.rs` → `[store, inbox]`,
/// `src/store/mod.rs` → `[store]`, `src/lib.rs` → `[]`).
fn module_path(file: &Path, src: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).expect("a file under src");
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().trim_end_matches(".rs").to_owned())
        .collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib" | "main")) {
        parts.pop();
    }
    parts
}

/// `code` without its line comments (a `//` at the start of a line or after a space: not
/// the `//` of a URL in a string).
fn without_comments(code: &str) -> String {
    code.lines()
        .map(|line| {
            let cut = line
                .match_indices("//")
                .find(|(i, _)| *i == 0 || line[..*i].ends_with(char::is_whitespace))
                .map_or(line.len(), |(i, _)| i);
            &line[..cut]
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The first segment of each path at the start of `text`: an identifier, or the entries of
/// a `{…}` group (over any number of lines, nested groups included).
fn first_segments(text: &str) -> Vec<String> {
    let text = text.trim_start();
    let Some(group) = text.strip_prefix('{') else {
        let name: String = text.chars().take_while(|c| is_ident(*c)).collect();
        return if name.is_empty() { vec![] } else { vec![name] };
    };
    let mut out = Vec::new();
    let (mut depth, mut entry_start) = (0, true);
    for (j, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => break,
            '}' => depth -= 1,
            ',' if depth == 0 => entry_start = true,
            c if entry_start && depth == 0 && is_ident(c) => {
                out.push(group[j..].chars().take_while(|c| is_ident(*c)).collect());
                entry_start = false;
            }
            _ => {}
        }
    }
    out
}

/// For each line of `code` (formatted by rustfmt), how many inline modules (`mod name {`
/// … `}` at the same indentation) enclose it.
fn inline_depths(code: &str) -> Vec<usize> {
    let mut open: Vec<usize> = Vec::new();
    let mut out = Vec::new();
    for line in code.lines() {
        let indent = line.len() - line.trim_start().len();
        let t = line.trim();
        if t == "}" && open.last() == Some(&indent) {
            open.pop();
            out.push(open.len() + 1);
            continue;
        }
        out.push(open.len());
        let declared = t.strip_prefix("pub(crate) ").or(t.strip_prefix("pub ")).unwrap_or(t);
        if declared.starts_with("mod ") && declared.ends_with('{') {
            open.push(indent);
        }
    }
    out
}

/// The top-level modules that the code of the module `path` names: `crate::` paths and
/// `super::` chains that climb to the crate root (inline modules such as `mod tests`
/// counted; comments removed).
fn used_modules_of(code: &str, path: &[String]) -> Vec<String> {
    let depths = inline_depths(code);
    let code = without_comments(code);
    let mut out = Vec::new();
    let starts = |i: usize| i == 0 || !code[..i].ends_with(|c: char| is_ident(c) || c == ':' || c == '$');
    for (i, _) in code.match_indices("crate::") {
        if starts(i) {
            out.extend(first_segments(&code[i + "crate::".len()..]));
        }
    }
    let mut i = 0;
    while let Some(found) = code[i..].find("super::") {
        let at = i + found;
        let mut end = at;
        let mut ups = 0;
        while code[end..].starts_with("super::") {
            ups += 1;
            end += "super::".len();
        }
        let line = code[..at].matches('\n').count();
        let depth = path.len() + depths.get(line).copied().unwrap_or(0);
        if starts(at) && ups >= depth {
            out.extend(first_segments(&code[end..]));
        }
        i = end;
    }
    out
}

/// [`used_modules_of`] for code of a top-level module file.
#[cfg(test)]
fn used_modules(code: &str) -> Vec<String> {
    used_modules_of(code, &["x".to_owned(), "y".to_owned()])
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
        for used in used_modules_of(&code, &module_path(file, &src)) {
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

#[test]
fn the_scanner_reads_rustfmt_wrapped_groups_and_super_chains() {
    // as rustfmt wraps a long group: every entry counts, not only the first
    let wrapped = "use crate::{\n    domain::{\n        wire,\n        account::Account,\n    },\n    http::ApiError,\n    launch,\n};\n";
    assert_eq!(used_modules(wrapped), ["domain", "http", "launch"]);
    // `super::` chains that climb to the crate root name a top-level module
    let path = ["inbox".to_owned(), "handlers".to_owned()];
    let code = "use super::routes;\nuse super::super::scheduler::Thing;\nuse super::super::{launch, store};\n";
    assert_eq!(used_modules_of(code, &path), ["scheduler", "launch", "store"]);
    // from a top-level file, one `super::` is the root; a URL in a string is no comment
    let code = "let u = \"http://x\"; use super::client;\n";
    assert_eq!(used_modules_of(code, &["launch".to_owned()]), ["client"]);
    assert_eq!(module_path(Path::new("src/store/mod.rs"), Path::new("src")), ["store"]);
    // inside `mod tests` one more `super::` is needed to leave the file's module
    let code = "use super::x;\n#[cfg(test)]\nmod tests {\n    use super::super::store;\n    use super::super::super::launch;\n}\nuse super::super::client;\n";
    assert_eq!(used_modules_of(code, &path), ["launch", "client"]);
}
