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

/// The manual page (roff, section 1): the command, its subcommands, and then each
/// subcommand with its usage and options.
pub fn man_page(out: &mut dyn Write) -> io::Result<()> {
    let command = Cli::command();
    let mut page = Vec::new();
    clap_mangen::Man::new(command.clone()).render(&mut page)?;
    for sub in command.get_subcommands().filter(|s| s.get_name() != "help") {
        let name = sub.get_name();
        let sub = sub.clone().bin_name(format!("pigeonhole {name}"));
        let man = clap_mangen::Man::new(sub.clone());
        let mut part = Vec::new();
        man.render_synopsis_section(&mut part)?;
        man.render_options_section(&mut part)?;
        let part = String::from_utf8_lossy(&part)
            .replace(".SH SYNOPSIS", ".SS Usage")
            .replace(".SH OPTIONS", ".SS Options");
        writeln!(page, ".SH \"PIGEONHOLE {}\"", name.to_uppercase())?;
        if let Some(about) = sub.get_long_about().or(sub.get_about()) {
            writeln!(page, "{}", escape(&about.to_string()))?;
        }
        page.extend_from_slice(part.as_bytes());
    }
    out.write_all(&page)
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
        for name in subcommands() {
            assert!(
                page.contains(&format!(".SH \"PIGEONHOLE {}\"", name.to_uppercase())),
                "no section for {name}"
            );
        }
        assert!(page.contains("\\-\\-scheduler\\-port"), "the options of serve");
        assert_eq!(page.matches(".SH SYNOPSIS").count(), 1);
    }
}
