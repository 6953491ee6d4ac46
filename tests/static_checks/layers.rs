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

/// Where a path may start in `code`: not inside an identifier or after `::` (or `$`).
fn starts_path(code: &str, i: usize) -> bool {
    i == 0 || !code[..i].ends_with(|c: char| is_ident(c) || c == ':' || c == '$')
}

/// The paths of `code` (comments removed) that begin `prefix` (`crate::`, `crate::store::`):
/// the first segments after it.
fn after_prefix(code: &str, prefix: &str) -> Vec<String> {
    code.match_indices(prefix)
        .filter(|(i, _)| starts_path(code, *i))
        .flat_map(|(i, _)| first_segments(&code[i + prefix.len()..]))
        .collect()
}

/// Each relative path of `code` (comments removed; `depths` from [`inline_depths`]): a chain
/// of `super::` (or one `self::`, zero modules up) that starts a path, as (where the path
/// after it starts, how many modules it climbs, how many inline modules enclose it).
fn relative_paths(code: &str, depths: &[usize]) -> Vec<(usize, usize, usize)> {
    let mut out = Vec::new();
    for prefix in ["super::", "self::"] {
        let mut i = 0;
        while let Some(found) = code[i..].find(prefix) {
            let at = i + found;
            let mut end = at;
            let mut ups = 0;
            while code[end..].starts_with("super::") {
                ups += 1;
                end += "super::".len();
            }
            if ups == 0 {
                end += "self::".len();
            }
            i = end;
            if starts_path(code, at) {
                let line = code[..at].matches('\n').count();
                out.push((end, ups, depths.get(line).copied().unwrap_or(0)));
            }
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
    let mut out = after_prefix(&code, "crate::");
    for (end, ups, inline) in relative_paths(&code, &depths) {
        if ups > 0 && ups >= path.len() + inline {
            out.extend(first_segments(&code[end..]));
        }
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
                "{}: module `{module}` has no layer in tests/static_checks/layers.rs",
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

/// The store's engines: each a module of `store/`, with its own directory.
const ENGINES: &[&str] = &["sled", "postgres"];

/// The one file of the store's neutral layer that may name an engine's module: where the
/// store is assembled (it opens each engine, holds sled's own parts, re-exports what only
/// sled has: its format, moving in, backup and copy ends).
const ASSEMBLY: &str = "store/mod.rs";

/// The modules of `store` that the code of the module `path` names (`crate::store::x`,
/// `super::`/`self::` chains that resolve into `store`, groups included): `[sled, api]` for
/// `use crate::store::{sled::writer, api::Feed}`.
fn store_modules_of(code: &str, path: &[String]) -> Vec<String> {
    let depths = inline_depths(code);
    let code = without_comments(code);
    let mut out = after_prefix(&code, "crate::store::");
    // resolved from the file's module (an inline module such as `mod tests` takes one
    // `super::` to leave)
    for (end, ups, inline) in relative_paths(&code, &depths) {
        let Some(keep) = ups.checked_sub(inline).and_then(|up| path.len().checked_sub(up)) else {
            continue;
        };
        match &path[..keep] {
            [store] if store == "store" => out.extend(first_segments(&code[end..])),
            [] => out.extend(
                code[end..]
                    .strip_prefix("store::")
                    .map(first_segments)
                    .unwrap_or_default(),
            ),
            _ => {}
        }
    }
    out
}

/// The names [`ASSEMBLY`] (`code`) brings in from an engine (`use self::sled::{format,
/// moving_in};` → `format` and `moving_in` are sled's): naming them through the store is
/// naming the engine.
fn engine_exports(code: &str) -> BTreeMap<String, String> {
    let code = without_comments(code);
    let mut out = BTreeMap::new();
    for engine in ENGINES {
        let head = format!("use self::{engine}::");
        for (i, _) in code.match_indices(&head) {
            let statement = &code[i + head.len()..];
            let statement = &statement[..statement.find(';').unwrap_or(statement.len())];
            for (start, c) in statement.char_indices() {
                if !is_ident(c) || statement[..start].ends_with(is_ident) {
                    continue;
                }
                let name: String = statement[start..].chars().take_while(|c| is_ident(*c)).collect();
                // a leaf of the path: not followed by `::`
                if !statement[start + name.len()..].trim_start().starts_with("::") && name != "self" {
                    out.insert(name, engine.to_string());
                }
            }
        }
    }
    out
}

/// Inside the store, dependencies point one way too: an engine (`store/sled/`,
/// `store/postgres/`) names no other engine; the neutral layer (every other file of
/// `store/`) names no engine's module, but [`ASSEMBLY`]; neither does so through what
/// [`ASSEMBLY`] re-exports of an engine; and the orchestration of
/// `migrate-store` (`launch::migrate`, which opens two stores) is named by nothing in the
/// library but `launch.rs`, which declares it (the binary calls it): the store's copy
/// modules know nothing of it.
#[test]
fn inside_the_store_engines_are_apart_and_the_neutral_layer_names_none() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut problems = Vec::new();
    let mut engine_files = BTreeMap::new();
    let exports = engine_exports(&std::fs::read_to_string(src.join(ASSEMBLY)).expect("read the assembly"));
    for file in &files {
        let rel = file
            .strip_prefix(&src)
            .expect("under src")
            .to_string_lossy()
            .replace('\\', "/");
        let code = std::fs::read_to_string(file).expect("read a source file");
        let path = module_path(file, &src);
        if rel != "main.rs" && rel != "launch.rs" {
            let bare = without_comments(&code);
            let own = rel.starts_with("launch/");
            if bare.contains("launch::migrate") || (own && rel != "launch/migrate.rs" && bare.contains("migrate::")) {
                problems.push(format!("{rel}: names the migrate orchestration (launch::migrate)"));
            }
        }
        if path.first().map(String::as_str) != Some("store") {
            continue;
        }
        // a file under an engine's directory, or of the neutral layer
        let engine = ENGINES.iter().find(|e| rel.starts_with(&format!("store/{e}/")));
        if let Some(engine) = engine {
            *engine_files.entry(*engine).or_insert(0) += 1;
        }
        for used in store_modules_of(&code, &path) {
            // an engine's module, or what the assembly re-exports of it
            let used = match exports.get(&used) {
                Some(engine) if rel != ASSEMBLY => engine.clone(),
                _ => used,
            };
            if !ENGINES.contains(&used.as_str()) {
                continue;
            }
            match engine {
                Some(own) if **own == used => {}
                Some(own) => problems.push(format!("{rel}: the engine `{own}` names the engine `{used}`")),
                None if rel == ASSEMBLY => {}
                None => problems.push(format!(
                    "{rel}: the store's neutral layer names the engine `{used}` (only {ASSEMBLY} may)"
                )),
            }
        }
    }
    assert!(
        ENGINES.iter().all(|e| engine_files.get(*e).is_some_and(|n| *n > 3)),
        "the engines' files were found: {engine_files:?}"
    );
    assert!(problems.is_empty(), "inside the store:\n{}", problems.join("\n"));
}

#[test]
fn the_store_scanner_resolves_paths_into_the_store() {
    let path = |p: &[&str]| p.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    // from a neutral file: crate:: paths, groups and `super::` into the store
    let code = "use crate::store::{sled::writer, api::Feed};\nuse super::postgres::PgError;\nuse super::Result;\n";
    assert_eq!(
        store_modules_of(code, &path(&["store", "copy"])),
        ["sled", "api", "postgres", "Result"]
    );
    // from an engine's file: `super::` stays in the engine, `super::super::` is the store
    let code = "use super::writer::Batch;\nuse super::super::postgres::x;\nuse crate::store::sled::keys;\n";
    assert_eq!(
        store_modules_of(code, &path(&["store", "sled", "inbox"])),
        ["sled", "postgres"]
    );
    // store/mod.rs: `self::` chains; inside `mod tests`, one more `super::` to leave it
    let code =
        "use self::sled::open;\n#[cfg(test)]\nmod tests {\n    use super::postgres::x;\n    use super::api;\n}\n";
    assert_eq!(store_modules_of(code, &path(&["store"])), ["postgres", "api", "sled"]);
    // what the assembly re-exports of an engine counts as that engine
    let code = "pub use self::sled::{format, moving_in};\npub use self::sled::backup::{restore, verify};\n\
                use self::postgres::PgStore;\npub use api::Feed;\n";
    let names: Vec<_> = engine_exports(code).into_iter().collect();
    let pair = |n: &str, e: &str| (n.to_owned(), e.to_owned());
    assert_eq!(
        names,
        [
            pair("PgStore", "postgres"),
            pair("format", "sled"),
            pair("moving_in", "sled"),
            pair("restore", "sled"),
            pair("verify", "sled")
        ]
    );
    let code = "mod tests {\n    use super::super::postgres::x;\n}\n";
    assert_eq!(store_modules_of(code, &path(&["store", "api"])), ["postgres"]);
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
