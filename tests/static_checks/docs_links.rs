//! The repository explains itself (issue 20): every link in README.md and docs/ points at a
//! file of the repository that exists, never outside it (no web address, no path that leaves
//! the repository), and the README stays short enough to read in five minutes (< 15 KB).

use std::path::{Component, Path, PathBuf};

/// The targets of the Markdown links and images of `text`, outside fenced code blocks.
fn link_targets(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let mut rest = line;
        while let Some(i) = rest.find("](") {
            let after = &rest[i + 2..];
            let end = after.find(')').unwrap_or(after.len());
            out.push(after[..end].trim().to_owned());
            rest = &after[end..];
        }
        // autolinks: <https://…>
        let mut rest = line;
        while let Some(i) = rest.find("<http") {
            let after = &rest[i + 1..];
            let end = after.find('>').unwrap_or(after.len());
            out.push(after[..end].to_owned());
            rest = &after[end..];
        }
    }
    out
}

/// `path` with `.` and `..` resolved, without touching the file system.
fn normalised(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            c => out.push(c),
        }
    }
    out
}

fn documents(root: &Path) -> Vec<PathBuf> {
    let mut files = vec![root.join("README.md")];
    for entry in std::fs::read_dir(root.join("docs")).expect("docs/") {
        let path = entry.expect("an entry").path();
        if path.extension().is_some_and(|e| e == "md") {
            files.push(path);
        }
    }
    files
}

#[test]
fn every_link_points_at_a_file_of_the_repository() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut wrong = Vec::new();
    let mut checked = 0;
    for file in documents(root) {
        let text = std::fs::read_to_string(&file).expect("readable");
        let name = file.strip_prefix(root).unwrap().display().to_string();
        for target in link_targets(&text) {
            checked += 1;
            let path = target.split('#').next().unwrap_or_default();
            if target.contains("://") || target.starts_with("mailto:") || target.starts_with("//") {
                wrong.push(format!("{name}: {target} points outside the repository"));
                continue;
            }
            if path.is_empty() {
                continue; // an anchor in the same file
            }
            let resolved = normalised(&file.parent().unwrap().join(path));
            if !resolved.starts_with(normalised(root)) {
                wrong.push(format!("{name}: {target} leaves the repository"));
            } else if !resolved.exists() {
                wrong.push(format!("{name}: {target} does not exist"));
            }
        }
    }
    assert!(checked > 20, "only {checked} links found: is the parser right?");
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn the_readme_reads_in_five_minutes() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let size = std::fs::metadata(root.join("README.md")).expect("README.md").len();
    assert!(size < 15 * 1024, "README.md has {size} bytes");
}

#[test]
fn the_parser_finds_links_and_skips_code() {
    let text = "a [x](docs/a.md) b ![i](p.png#top)\n```\n[no](link.md)\n```\n<https://example.org>";
    assert_eq!(
        link_targets(text),
        vec!["docs/a.md", "p.png#top", "https://example.org"]
    );
}
