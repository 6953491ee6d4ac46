use clap::{CommandFactory, FromArgMatches};
use pigeonhole::config::{Cli, Command, LogFormat, Settings};
use std::io::{IsTerminal, Write};
use std::net::SocketAddr;
use std::process::ExitCode;
use tokio::net::TcpListener;

/// jemalloc for every allocation of the process's Rust code (issue 31): glibc's malloc spent
/// about a fifth of a durable write's CPU in its slow paths (sled's page reads and node
/// copies), which jemalloc's thread caches serve. Its settings, [`MALLOC_CONF`], keep what
/// it holds small. Measured in docs/performance.md.
#[cfg(all(target_os = "linux", not(target_env = "musl")))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's settings, read once at its start (`malloc_conf`, under the prefix of
/// tikv-jemalloc-sys): two arenas (jemalloc's default is four per core; with one, which
/// the writer and the request threads contend for, a write cost 1.13 times the CPU, for
/// 1.7 MiB less); thread caches only for sizes up to 1 KiB; freed pages handed back to the
/// kernel by a background thread after 500 ms (`dirty_decay_ms`), at once past that
/// (`muzzy_decay_ms:0`). jemalloc's defaults held 15–20 MiB more.
#[cfg(all(target_os = "linux", not(target_env = "musl")))]
#[allow(unsafe_code, reason = "jemalloc reads its settings from a symbol of this name")]
// SAFETY: the symbol is jemalloc's `const char *malloc_conf`: a thin pointer to a
// NUL-terminated string that lives as long as the process, and nothing writes to it.
#[unsafe(export_name = "_rjem_malloc_conf")]
pub static MALLOC_CONF: &[u8; 85] =
    b"narenas:2,tcache_max:1024,background_thread:true,dirty_decay_ms:500,muzzy_decay_ms:0\0";

/// Writes what `write` makes to standard output; a closed pipe ends quietly.
fn print_with(write: impl FnOnce(&mut dyn std::io::Write) -> std::io::Result<()>) -> ExitCode {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    match write(&mut out).and_then(|()| out.flush()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("pigeonhole: cannot write to standard output: {e}");
            ExitCode::FAILURE
        }
    }
}

fn main() -> ExitCode {
    let matches = Cli::command().get_matches();
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    // `serve`'s settings come from its matches, which say which flags were given
    let serve_matches = match cli.command {
        Command::Serve(_) => matches.subcommand_matches("serve").cloned().unwrap_or_default(),
        Command::ImportIntray(args) => return move_in(pigeonhole::moving_in::Origin::Intray, args),
        Command::ImportTickler(args) => return move_in(pigeonhole::moving_in::Origin::Tickler, args),
        Command::Backup(args) => return report(pigeonhole::control::backup(args)),
        Command::Restore(args) => return report(pigeonhole::control::restore(args)),
        Command::MigrateStore(args) => return report(pigeonhole::launch::migrate::migrate_store(args)),
        Command::Completions(args) => return print_with(|out| pigeonhole::manual::completions(args.shell, out)),
        Command::Man => return print_with(pigeonhole::manual::man_page),
        client => return run_client(client),
    };
    let settings = match Settings::resolve(&serve_matches) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("pigeonhole: {e}");
            return ExitCode::from(2);
        }
    };
    let filter = tracing_subscriber::EnvFilter::new(format!("pigeonhole={},warn", settings.log_level.as_str()));
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match settings.log_format {
        // one JSON object per line for log collectors: the event's fields flattened next
        // to `timestamp`, `level` and `target`
        LogFormat::Json => logs.json().flatten_event(true).with_current_span(false).init(),
        // colour codes only for a person watching: never in files or the journal
        LogFormat::Text => logs.with_ansi(std::io::stderr().is_terminal()).init(),
    }
    // one line: what runs, in which version, with which settings (never a secret)
    tracing::info!(
        version = env!("CARGO_PKG_VERSION"),
        settings = %settings.summary(),
        "pigeonhole {} starting",
        env!("CARGO_PKG_VERSION")
    );
    pigeonhole::memory::limit_arenas();
    pigeonhole::datadir::private_umask();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("pigeonhole: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(serve(settings)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e}");
            eprintln!("pigeonhole: {e}");
            ExitCode::FAILURE
        }
    }
}

/// A command on the data directory: its line on stdout, or one line on stderr and status 1.
fn report(done: Result<String, String>) -> ExitCode {
    match done {
        Ok(line) => {
            println!("{line}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("pigeonhole: {e}");
            ExitCode::FAILURE
        }
    }
}

/// A command of the command-line client: one line on stderr and status 1 when it fails.
fn run_client(command: Command) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("pigeonhole: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(pigeonhole::client::run(command)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("pigeonhole: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `import-intray` / `import-tickler`: what moved in on stdout, else one line on stderr and
/// status 1 (nothing was written then).
fn move_in(origin: pigeonhole::moving_in::Origin, args: pigeonhole::config::MoveInArgs) -> ExitCode {
    pigeonhole::datadir::private_umask();
    match pigeonhole::moving_in::run(origin, &args) {
        Ok(report) => {
            println!("{report}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("pigeonhole: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn bind(host: std::net::IpAddr, port: u16, name: &str) -> Result<TcpListener, String> {
    let addr = SocketAddr::new(host, port);
    TcpListener::bind(addr)
        .await
        .map_err(|e| format!("cannot listen for the {name} service on {addr}: {e}"))
}

async fn serve(settings: Settings) -> Result<(), String> {
    let listeners = pigeonhole::Listeners {
        inbox: match settings.run_inbox {
            true => Some(bind(settings.host, settings.inbox_port, "inbox").await?),
            false => None,
        },
        scheduler: match settings.run_scheduler {
            true => Some(bind(settings.host, settings.scheduler_port, "scheduler").await?),
            false => None,
        },
    };
    let (stop, stopped) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        wait_for_signal().await;
        tracing::info!("shutting down");
        let _ = stop.send(true);
    });
    pigeonhole::launch(settings, listeners, stopped).await
}

async fn wait_for_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) else {
        // Without signal handlers the process can still be stopped by SIGKILL.
        std::future::pending::<()>().await;
        return;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}
