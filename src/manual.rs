//! Shell completions and the manual page, generated from the command-line definition
//! ([`crate::config::Cli`]) so that they can never drift from it (issue 20).

use crate::config::Cli;
use clap::CommandFactory;
use std::io::{self, Write};

/// The completions of `pigeonhole` for `shell`.
pub fn completions(shell: clap_complete::Shell, out: &mut dyn Write) -> io::Result<()> {
    let mut command = Cli::command();
    clap_complete::generate(shell, &mut command, "pigeonhole", out);
    Ok(())
}

/// The manual page (roff, section 1), one page for everything: the command, its
/// subcommands listed with the section of this page that describes each (no other pages are
/// referred to: none are shipped), and then each subcommand, nested ones (`trigger add
/// email`) included, with its usage and options.
pub fn man_page(out: &mut dyn Write) -> io::Result<()> {
    let command = Cli::command();
    let man = clap_mangen::Man::new(command.clone());
    let mut page = Vec::new();
    man.render_title(&mut page)?;
    man.render_name_section(&mut page)?;
    man.render_synopsis_section(&mut page)?;
    man.render_description_section(&mut page)?;
    man.render_options_section(&mut page)?;
    writeln!(page, ".SH SUBCOMMANDS")?;
    let mut sections = Vec::new();
    subcommands(&command, "pigeonhole", &mut sections);
    for (name, sub) in &sections {
        writeln!(page, ".TP\n\\fB{}\\fR", escape(name))?;
        let about = sub.get_about().map(|a| a.to_string()).unwrap_or_default();
        writeln!(
            page,
            "{} (section {} below)",
            escape(about.trim_end_matches('.')),
            escape(&name.to_uppercase())
        )?;
    }
    man.render_version_section(&mut page)?;
    for (name, sub) in &sections {
        let sub = sub.clone().bin_name(name.clone());
        let man = clap_mangen::Man::new(sub.clone());
        let mut part = Vec::new();
        man.render_synopsis_section(&mut part)?;
        man.render_options_section(&mut part)?;
        let part = String::from_utf8_lossy(&part)
            .replace(".SH SYNOPSIS", ".SS Usage")
            .replace(".SH OPTIONS", ".SS Options");
        writeln!(page, ".SH \"{}\"", name.to_uppercase())?;
        if let Some(about) = sub.get_long_about().or(sub.get_about()) {
            writeln!(page, "{}", escape(&about.to_string()))?;
        }
        page.extend_from_slice(part.as_bytes());
    }
    out.write_all(&page)
}

/// Every subcommand under `command` (named `path`), depth first, but `help`: its full name
/// (`pigeonhole trigger add email`) and its definition.
fn subcommands(command: &clap::Command, path: &str, into: &mut Vec<(String, clap::Command)>) {
    for sub in command.get_subcommands().filter(|s| s.get_name() != "help") {
        let name = format!("{path} {}", sub.get_name());
        into.push((name.clone(), sub.clone()));
        subcommands(sub, &name, into);
    }
}

/// Text for a roff paragraph: a leading `.` or `'` would be read as a request.
fn escape(text: &str) -> String {
    text.lines()
        .map(|l| match l.starts_with(['.', '\'']) {
            true => format!("\\&{l}"),
            false => l.replace('\\', "\\\\"),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(write: impl FnOnce(&mut dyn Write) -> io::Result<()>) -> String {
        let mut out = Vec::new();
        write(&mut out).expect("written");
        String::from_utf8(out).expect("UTF-8")
    }

    /// Every subcommand of the definition, as typed.
    fn subcommands() -> Vec<String> {
        Cli::command()
            .get_subcommands()
            .map(|s| s.get_name().to_owned())
            .filter(|n| n != "help")
            .collect()
    }

    /// Every subcommand, nested ones too, by its full name.
    fn all_subcommands() -> Vec<String> {
        let mut all = Vec::new();
        super::subcommands(&Cli::command(), "pigeonhole", &mut all);
        all.into_iter().map(|(name, _)| name).collect()
    }

    #[test]
    fn completions_know_every_subcommand_in_every_shell() {
        let bash = text(|o| completions(clap_complete::Shell::Bash, o));
        let zsh = text(|o| completions(clap_complete::Shell::Zsh, o));
        let fish = text(|o| completions(clap_complete::Shell::Fish, o));
        assert!(bash.contains("complete -F _pigeonhole"), "{bash}");
        assert!(zsh.starts_with("#compdef pigeonhole"), "{zsh}");
        assert!(fish.contains("complete -c pigeonhole"), "{fish}");
        for name in subcommands() {
            for (shell, said) in [("bash", &bash), ("zsh", &zsh), ("fish", &fish)] {
                assert!(said.contains(&name), "{shell} completions lack {name}");
            }
        }
        // an option of a subcommand, too
        assert!(bash.contains("--data-dir") && fish.contains("data-dir"));
    }

    #[test]
    fn the_manual_page_has_every_subcommand_with_its_options() {
        let page = text(man_page);
        assert!(
            page.starts_with(".ie \\n(.g .ds Aq") || page.contains(".TH pigeonhole 1"),
            "{page}"
        );
        assert!(page.contains(".TH pigeonhole 1"));
        for name in all_subcommands() {
            let section = name.to_uppercase();
            assert!(page.contains(&format!(".SH \"{section}\"")), "no section for {name}");
            assert!(
                page.contains(&format!("(section {section} below)")),
                "{name} is not listed"
            );
        }
        assert!(all_subcommands().contains(&"pigeonhole trigger add email".to_string()));
        assert!(page.contains(".SH \"PIGEONHOLE TRIGGER ADD NTFY\""));
        assert!(page.contains("\\-\\-scheduler\\-port"), "the options of serve");
        assert_eq!(page.matches(".SH SYNOPSIS").count(), 1);
        // no other page is referred to: none is shipped
        assert!(!page.contains("(1)"), "a reference to another page");
        assert!(!page.contains("pigeonhole\\-"), "a reference to another page");
    }
}
